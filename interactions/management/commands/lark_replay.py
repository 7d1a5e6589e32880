"""`python manage.py lark_replay <fixture.json> --app <app_id> [--url …] [--set path=value …] [--plain]`

Post a real-format Feishu payload to a running Cardloop exactly as Feishu would: the app's
Verification Token and app_id are put in, `header.event_id` is fresh (unless `--set`), the body
is encrypted with the app's Encrypt Key (unless `--plain` or the bot has none) and signed
(`X-Lark-Signature` = sha256(timestamp + nonce + encrypt_key + body)). Prints the status, the
milliseconds and the answer body. Exit status 1 when the answer is not 2xx.

    python manage.py lark_replay tests/fixtures/feishu/card_action_feedback_click.json \\
        --app cli_demo --set event.action.value.delivery=del_x

`--set` paths are dotted (`event.action.form_value.q1`); list items by index (`items.0`); the
value is parsed as JSON when it is JSON (`--set 'event.action.form_value.q1=["0","2"]'`),
otherwise it is a string.
"""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
from django.core.management.base import BaseCommand, CommandError

from botadmin.models import Bot
from interactions.lark.signing import seal
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


def prepare(payload: dict[str, Any], bot: Bot, assignments: list[tuple[str, Any]]) -> dict:
    """Put the bot's app_id, Verification Token and a fresh event_id in, then `assignments`."""
    token = bot.secret("verification_token")
    header = payload.get("header")
    if isinstance(header, dict):
        header["app_id"] = bot.app_id
        header["event_id"] = uuid.uuid4().hex
        if token:
            header["token"] = token
    elif payload.get("type") == "url_verification" and token:
        payload["token"] = token
    for path, value in assignments:
        set_path(payload, path, value)
    return payload


class Command(BaseCommand):
    help = "Encrypt, sign and post a Feishu payload (fixture) to a running Cardloop."
    # A client of a running server: the serving checks (e.g. cardloop.E001, no production
    # secret key outside DEBUG) guard that server, not this shell, so none run here.
    requires_system_checks: list[str] = []

    def add_arguments(self, parser):
        parser.add_argument("fixture", help="JSON file with the payload (plain, as decrypted).")
        parser.add_argument("--app", required=True, help="app_id of the bot to post as.")
        parser.add_argument("--url", default="http://127.0.0.1:8000", help="Cardloop base URL.")
        parser.add_argument(
            "--set", action="append", default=[], metavar="PATH=VALUE", help="Override a field."
        )
        parser.add_argument("--plain", action="store_true", help="Do not encrypt the body.")
        parser.add_argument("--timeout", type=float, default=10.0, help="Seconds to wait.")

    def handle(self, *args, fixture, app, url, set, plain, timeout, **options):  # noqa: A002
        bot = Bot.objects.filter(app_id=app).first()
        if bot is None:
            raise CommandError(f"No bot with app_id {app!r}.")
        try:
            payload = json.loads(Path(fixture).read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise CommandError(f"Cannot read {fixture}: {exc}") from None
        if not isinstance(payload, dict):
            raise CommandError(f"{fixture} does not hold a JSON object.")
        try:
            prepare(payload, bot, [parse_assignment(item) for item in set])
        except ValueError as exc:
            raise CommandError(str(exc)) from None
        encrypt_key = bot.secret("encrypt_key")
        body, headers = seal(payload, encrypt_key=encrypt_key, encrypt_body=not plain)
        target = f"{url.rstrip('/')}/lark/{app}/callback"
        header = payload.get("header") if isinstance(payload.get("header"), dict) else {}
        kind = header.get("event_type") or payload.get("type") or "?"
        mode = "encrypted" if encrypt_key and not plain else "plain"
        self.stdout.write(f"POST {target} ({kind}, event_id={header.get('event_id', '-')}, {mode})")
        started = time.perf_counter()
        try:
            response = httpx.post(target, content=body, headers=headers, timeout=timeout)
        except httpx.HTTPError as exc:
            raise CommandError(f"Request failed: {type(exc).__name__}: {exc}") from None
        elapsed = (time.perf_counter() - started) * 1000
        self.stdout.write(f"{response.status_code} in {elapsed:.1f} ms")
        try:
            shown = json.dumps(response.json(), ensure_ascii=False, indent=2)
        except ValueError:
            shown = response.text
        self.stdout.write(shown)
        if not 200 <= response.status_code < 300:
            raise CommandError(f"Cardloop answered {response.status_code}.", returncode=1)
