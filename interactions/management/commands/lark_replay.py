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

import uuid
from typing import Any

from django.core.management.base import CommandError

from botadmin.models import Bot
from interactions.lark.signing import seal
from interactions.management.replay import (
    ReplayCommand,
    load_fixture,
    parse_assignment,
    set_path,
)

__all__ = ["Command", "parse_assignment", "prepare", "set_path"]


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


class Command(ReplayCommand):
    help = "Encrypt, sign and post a Feishu payload (fixture) to a running Cardloop."
    fixture_help = "JSON file with the payload (plain, as decrypted)."

    def add_target_arguments(self, parser):
        parser.add_argument("--app", required=True, help="app_id of the bot to post as.")

    def add_options(self, parser):
        parser.add_argument("--plain", action="store_true", help="Do not encrypt the body.")

    def handle(self, *args, fixture, app, url, set, plain, timeout, **options):  # noqa: A002
        bot = Bot.objects.filter(app_id=app).first()
        if bot is None:
            raise CommandError(f"No bot with app_id {app!r}.")
        payload = load_fixture(fixture)
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
        self.post(target, timeout, content=body, headers=headers)
