"""Encrypt and sign a callback body exactly as Feishu does (for `lark_replay` and the tests).

Feishu's scheme (Feishu's documentation of encrypted event subscriptions; the fixtures'
README in `tests/fixtures/feishu/README.md`):
- body `{"encrypt": base64(iv ‖ AES-256-CBC(PKCS7(json)))}` with key = SHA-256(encrypt key)
  and a random 16-byte IV;
- headers `X-Lark-Request-Timestamp` (seconds), `X-Lark-Request-Nonce` and
  `X-Lark-Signature` = lower-case hex SHA-256 of `timestamp + nonce + encrypt_key + raw body`.

Verification on the way in is done by lark-oapi (`interactions.channels.feishu.ingress`); this
module only produces what Feishu would send. Decryption uses lark-oapi's own `AESCipher` so the
two sides are checked against each other.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import secrets
import time
from typing import Any

from Crypto.Cipher import AES

TIMESTAMP_HEADER = "X-Lark-Request-Timestamp"
NONCE_HEADER = "X-Lark-Request-Nonce"
SIGNATURE_HEADER = "X-Lark-Signature"


def encrypt(plaintext: bytes, encrypt_key: str, *, iv: bytes | None = None) -> str:
    """`base64(iv ‖ AES-256-CBC(PKCS7(plaintext)))` with key SHA-256(`encrypt_key`)."""
    key = hashlib.sha256(encrypt_key.encode("utf-8")).digest()
    iv = iv if iv is not None else os.urandom(AES.block_size)
    pad = AES.block_size - len(plaintext) % AES.block_size
    cipher = AES.new(key, AES.MODE_CBC, iv)
    return base64.b64encode(iv + cipher.encrypt(plaintext + bytes([pad]) * pad)).decode("ascii")


def decrypt(ciphertext: str, encrypt_key: str) -> str:
    """Inverse of `encrypt`, through lark-oapi's `AESCipher` (raises ValueError when invalid)."""
    # imported here: lark-oapi takes seconds to import, and `encrypt` / `signature` need none
    from lark_oapi.core.utils import AESCipher

    return AESCipher(encrypt_key).decrypt_str(ciphertext)


def signature(timestamp: str, nonce: str, encrypt_key: str, body: bytes) -> str:
    """Lower-case hex SHA-256 over `timestamp + nonce + encrypt_key` (UTF-8) + raw `body`."""
    return hashlib.sha256((timestamp + nonce + encrypt_key).encode("utf-8") + body).hexdigest()


def seal(
    payload: dict[str, Any] | bytes,
    *,
    encrypt_key: str,
    encrypt_body: bool = True,
    timestamp: str | None = None,
    nonce: str | None = None,
) -> tuple[bytes, dict[str, str]]:
    """Return `(raw body, headers)` as Feishu would POST `payload` to an app with `encrypt_key`.

    With an empty `encrypt_key` (or `encrypt_body=False`) the body stays plain JSON. Signature
    headers are added whenever there is an encrypt key (Feishu signs plain bodies too), except
    for `url_verification`, which Feishu sends without them.
    """
    if isinstance(payload, bytes):
        raw = payload
    else:
        try:
            raw = json.dumps(payload, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate (a test of refusing one): \udXXX escape
            raw = json.dumps(payload).encode("ascii")
    body = raw
    if encrypt_key and encrypt_body:
        body = json.dumps({"encrypt": encrypt(raw, encrypt_key)}).encode("utf-8")
    headers = {"Content-Type": "application/json; charset=utf-8"}
    is_challenge = isinstance(payload, dict) and payload.get("type") == "url_verification"
    if encrypt_key and not is_challenge:
        timestamp = timestamp or str(int(time.time()))
        nonce = nonce or secrets.token_hex(8)
        headers[TIMESTAMP_HEADER] = timestamp
        headers[NONCE_HEADER] = nonce
        headers[SIGNATURE_HEADER] = signature(timestamp, nonce, encrypt_key, body)
    return body, headers
