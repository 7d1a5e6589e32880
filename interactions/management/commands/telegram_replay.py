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

import time

from django.core.management.base import CommandError

from botadmin.models import TelegramBot
from interactions.channels.telegram.ingress import SECRET_HEADER
from interactions.management.replay import ReplayCommand, apply_assignments, load_fixture


class Command(ReplayCommand):
    help = "Post a Telegram Update (fixture) with the bot's webhook secret to a running Cardloop."
    fixture_help = "JSON file with the Update."
    # its message has always named only the exception type
    error_detail = False

    def add_target_arguments(self, parser):
        parser.add_argument("--bot", required=True, type=int, help="The Telegram bot id.")

    def add_options(self, parser):
        parser.add_argument("--secret", default=None, help="Send this secret token instead.")

    def handle(self, *args, fixture, bot, url, set, secret, timeout, **options):  # noqa: A002
        tg = TelegramBot.objects.filter(bot_user_id=bot).first()
        if tg is None:
            raise CommandError(f"No Telegram bot with id {bot}.")
        update = load_fixture(fixture)
        update = {k: v for k, v in update.items() if not k.startswith("_")}
        update["update_id"] = time.time_ns() // 1000 % 2_000_000_000
        try:
            apply_assignments(update, set)
        except ValueError as exc:
            raise CommandError(str(exc)) from None
        token = tg.secret("webhook_secret") if secret is None else secret
        target = f"{url.rstrip('/')}/telegram/{bot}/webhook"
        kind = next((k for k in update if k != "update_id"), "?")
        self.stdout.write(f"POST {target} ({kind}, update_id={update['update_id']})")
        self.post(target, timeout, json=update, headers={SECRET_HEADER: token} if token else {})
