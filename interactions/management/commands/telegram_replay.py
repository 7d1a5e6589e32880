"""`python manage.py telegram_replay <fixture.json> --bot <bot_user_id> [--url …] [--set path=value …] [--secret …]`

Post a Telegram `Update` (https://core.telegram.org/bots/api#update) to a running Cardloop as
Telegram would: to `/telegram/<bot_user_id>/webhook` with the bot's webhook secret in
`X-Telegram-Bot-Api-Secret-Token` (`--secret` sends another one, e.g. to see the 401), and a
fresh `update_id` (unless `--set update_id=…`, e.g. to see a repeated update handled once).
Keys starting with "_" (a fixture's notes) are dropped. Prints the status, the milliseconds
and the answer body; exit status 1 when the answer is not 2xx.

    python manage.py telegram_replay tests/fixtures/telegram/callback_query.json \\
        --bot 123456789 --set callback_query.data=ia:ia_0123456789abcdef:0

`--set` paths and values work as in `lark_replay` (dotted paths, JSON values).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx
from django.core.management.base import BaseCommand, CommandError

from botadmin.models import TelegramBot
from interactions.channels.telegram.ingress import SECRET_HEADER
from interactions.management.commands.lark_replay import parse_assignment, set_path


class Command(BaseCommand):
    help = "Post a Telegram Update (fixture) with the bot's webhook secret to a running Cardloop."
    requires_system_checks: list[str] = []

    def add_arguments(self, parser):
        parser.add_argument("fixture", help="JSON file with the Update.")
        parser.add_argument("--bot", required=True, type=int, help="The Telegram bot id.")
        parser.add_argument("--url", default="http://127.0.0.1:8000", help="Cardloop base URL.")
        parser.add_argument(
            "--set", action="append", default=[], metavar="PATH=VALUE", help="Override a field."
        )
        parser.add_argument("--secret", default=None, help="Send this secret token instead.")
        parser.add_argument("--timeout", type=float, default=10.0, help="Seconds to wait.")

    def handle(self, *args, fixture, bot, url, set, secret, timeout, **options):  # noqa: A002
        tg = TelegramBot.objects.filter(bot_user_id=bot).first()
        if tg is None:
            raise CommandError(f"No Telegram bot with id {bot}.")
        try:
            update = json.loads(Path(fixture).read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise CommandError(f"Cannot read {fixture}: {exc}") from None
        if not isinstance(update, dict):
            raise CommandError(f"{fixture} does not hold a JSON object.")
        update = {k: v for k, v in update.items() if not k.startswith("_")}
        update["update_id"] = time.time_ns() // 1000 % 2_000_000_000
        try:
            for path, value in (parse_assignment(item) for item in set):
                set_path(update, path, value)
        except ValueError as exc:
            raise CommandError(str(exc)) from None
        token = tg.secret("webhook_secret") if secret is None else secret
        target = f"{url.rstrip('/')}/telegram/{bot}/webhook"
        kind = next((k for k in update if k != "update_id"), "?")
        self.stdout.write(f"POST {target} ({kind}, update_id={update['update_id']})")
        started = time.perf_counter()
        try:
            response = httpx.post(
                target,
                json=update,
                headers={SECRET_HEADER: token} if token else {},
                timeout=timeout,
            )
        except httpx.HTTPError as exc:
            raise CommandError(f"Request failed: {type(exc).__name__}") from None
        elapsed = (time.perf_counter() - started) * 1000
        self.stdout.write(f"{response.status_code} in {elapsed:.1f} ms")
        try:
            shown = json.dumps(response.json(), ensure_ascii=False, indent=2)
        except ValueError:
            shown = response.text
        self.stdout.write(shown)
        if not 200 <= response.status_code < 300:
            raise CommandError(f"Cardloop answered {response.status_code}.", returncode=1)
