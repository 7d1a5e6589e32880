"""What the `*_replay` commands share: post a real-format platform payload (a JSON fixture) to a
running Cardloop as the platform would, and print what it answered.

    class Command(ReplayCommand):
        def add_target_arguments(self, parser): ...   # --app / --bot …
        def handle(self, *args, fixture, url, set, timeout, **options):
            payload = load_fixture(fixture)
            apply_assignments(payload, set)           # --set path=value …
            self.post(target, timeout, content=body, headers=headers)

Arguments every replay takes, in this order: the fixture, the command's own target arguments
(`add_target_arguments`), `--url`, `--set PATH=VALUE` (repeatable), the command's own options
(`add_options`), `--timeout`. `post` prints `POST`'s status and milliseconds and the answer
body (JSON indented), and exits with status 1 (CommandError) when the answer is not 2xx.

`--set` paths are dotted (`event.action.form_value.q1`), list items by index (`items.0`);
the value is parsed as JSON when it is JSON (`--set 'a.b=["0","2"]'`), else it is a string.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import httpx
from django.core.management.base import BaseCommand, CommandError

from plumbing.parsers import ascii_int


def set_path(payload: Any, path: str, value: Any) -> None:
    """Set `value` at dotted `path` inside `payload`, creating objects on the way.
    Raises ValueError for a path that runs into a scalar or a missing list item."""
    parts = [p for p in path.split(".") if p]
    if not parts:
        raise ValueError("empty path")
    node = payload
    for index, part in enumerate(parts):
        last = index == len(parts) - 1
        if isinstance(node, list):
            position = ascii_int(part, max_digits=6)
            if position is None or position >= len(node):
                raise ValueError(f"{path}: no list item {part!r}")
            if last:
                node[position] = value
            else:
                node = node[position]
        elif isinstance(node, dict):
            if last:
                node[part] = value
            else:
                node = node.setdefault(part, {})
        else:
            raise ValueError(f"{path}: {'.'.join(parts[:index])} is not an object")


def parse_assignment(text: str) -> tuple[str, Any]:
    """`path=value` → (path, value parsed as JSON when possible, else the string)."""
    if "=" not in text:
        raise ValueError(f"--set expects path=value, got {text!r}")
    path, raw = text.split("=", 1)
    try:
        value = json.loads(raw)
    except ValueError:
        value = raw
    return path.strip(), value


def apply_assignments(payload: dict[str, Any], items: list[str]) -> None:
    """Apply `--set` items (`path=value` texts) to `payload` in order; raises ValueError for
    a malformed item or a path `set_path` refuses."""
    for item in items:
        set_path(payload, *parse_assignment(item))


def load_fixture(fixture: str) -> dict[str, Any]:
    """The JSON object in file `fixture`; CommandError naming the file when it cannot be read,
    is not JSON or holds something else than an object."""
    try:
        payload = json.loads(Path(fixture).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise CommandError(f"Cannot read {fixture}: {exc}") from None
    if not isinstance(payload, dict):
        raise CommandError(f"{fixture} does not hold a JSON object.")
    return payload


class ReplayCommand(BaseCommand):
    """Base of the replay commands (see the module docstring for the arguments)."""

    # A client of a running server: the serving checks (e.g. cardloop.E001, no production
    # secret key outside DEBUG) guard that server, not this shell, so none run here.
    requires_system_checks: list[str] = []
    #: the help of the positional `fixture` argument.
    fixture_help = "JSON file with the payload."
    #: whether a failed request's message says more than the exception's type.
    error_detail = True

    def add_arguments(self, parser):
        parser.add_argument("fixture", help=self.fixture_help)
        self.add_target_arguments(parser)
        parser.add_argument("--url", default="http://127.0.0.1:8000", help="Cardloop base URL.")
        parser.add_argument(
            "--set", action="append", default=[], metavar="PATH=VALUE", help="Override a field."
        )
        self.add_options(parser)
        parser.add_argument("--timeout", type=float, default=10.0, help="Seconds to wait.")

    def add_target_arguments(self, parser) -> None:
        """Arguments naming what to post as (after the fixture)."""

    def add_options(self, parser) -> None:
        """The command's own options (after `--set`)."""

    def post(self, target: str, timeout: float, **request: Any) -> httpx.Response:
        """POST to `target` (`request`: httpx's `content=`/`json=`, `headers=`), print the
        status, the milliseconds and the answer body; CommandError (exit status 1) when the
        request fails or the answer is not 2xx."""
        started = time.perf_counter()
        try:
            response = httpx.post(target, timeout=timeout, **request)
        except httpx.HTTPError as exc:
            detail = f": {exc}" if self.error_detail else ""
            raise CommandError(f"Request failed: {type(exc).__name__}{detail}") from None
        elapsed = (time.perf_counter() - started) * 1000
        self.stdout.write(f"{response.status_code} in {elapsed:.1f} ms")
        try:
            shown = json.dumps(response.json(), ensure_ascii=False, indent=2)
        except ValueError:
            shown = response.text
        self.stdout.write(shown)
        if not 200 <= response.status_code < 300:
            raise CommandError(f"Cardloop answered {response.status_code}.", returncode=1)
        return response
