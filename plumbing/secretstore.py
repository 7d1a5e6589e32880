"""Secret files under `CARDLOOP_SECRET_DIR`, referenced from models by an opaque `secret_ref`.

A secret is written atomically (temporary file in the same directory, `fsync`, `os.replace`)
with mode 0600 in a 0700 directory, so a crash never leaves a half-written secret and no other
user can read it. Refs are random (`sec_<32 hex>`), so they reveal nothing about the owner.
Values never go to the database, the audit log or logs.
"""

from __future__ import annotations

import os
import re
import secrets
import tempfile
from pathlib import Path

from django.conf import settings

_REF_RE = re.compile(r"^sec_[0-9a-f]{32}$")


class SecretStoreError(Exception):
    """A secret ref is malformed or the secret directory cannot be written."""


def secret_dir() -> Path:
    """The secret directory, created with mode 0700 if missing."""
    path = Path(settings.CARDLOOP_SECRET_DIR)
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    return path


def _path(ref: str, *, create_dir: bool = True) -> Path:
    if not _REF_RE.match(ref or ""):
        raise SecretStoreError("malformed secret ref")
    if not create_dir:  # reading: a missing directory is a missing secret
        return Path(settings.CARDLOOP_SECRET_DIR) / ref
    return secret_dir() / ref


def new_ref() -> str:
    """A fresh random ref (`sec_<32 hex>`)."""
    return f"sec_{secrets.token_hex(16)}"


def write_secret(value: str, ref: str | None = None) -> str:
    """Store `value` (str, non-empty) and return its ref; overwrites `ref` when given.

    Raises SecretStoreError for an empty value or a malformed ref.
    """
    if not isinstance(value, str) or value == "":
        raise SecretStoreError("empty secret")
    ref = ref or new_ref()
    target = _path(ref)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=target.parent)
    try:
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(value)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, target)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return ref


def read_secret(ref: str) -> str | None:
    """The value behind `ref`, or None when `ref` is empty or its file is missing."""
    if not ref:
        return None
    try:
        return _path(ref, create_dir=False).read_text(encoding="utf-8")
    except FileNotFoundError:
        return None


def delete_secret(ref: str) -> None:
    """Remove the file behind `ref` (no error when it is already gone)."""
    if ref:
        _path(ref).unlink(missing_ok=True)
