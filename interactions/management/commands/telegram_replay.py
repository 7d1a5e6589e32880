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

Asks on a progress message: `--progress <session_id>` points a `callback_query`'s `message`
(`message_id`, `chat.id`) at that session's progress message, so a tap on an ask button
(`--set callback_query.data=aq:<ask id>:<question>:<option>`, `as:<ask id>`,
`ao:<ask id>:<question>`) lands where Cardloop shows the ask; `--reply-to-prompt` makes a
`message` the reply (`reply_to_message`) to the latest "Other…" prompt Cardloop sent in the
message's chat (its id is Telegram's, or the dry run's, and only Cardloop knows it).

    python manage.py telegram_replay tests/fixtures/telegram/callback_query.json \\
        --bot 123456789 --progress s-1 --set callback_query.data=aq:ask_0123456789abcdef:0:1
    python manage.py telegram_replay tests/fixtures/telegram/message_command.json \\
        --bot 123456789 --reply-to-prompt --set 'message.text=MariaDB'
"""

from __future__ import annotations

import time

from django.core.management.base import CommandError

from botadmin.models import TelegramBot
from interactions.channels.telegram.ingress import SECRET_HEADER
from interactions.management.replay import ReplayCommand, apply_assignments, load_fixture
from interactions.models import ProgressSession, TelegramReplyPrompt


class Command(ReplayCommand):
    help = "Post a Telegram Update (fixture) with the bot's webhook secret to a running Cardloop."
    fixture_help = "JSON file with the Update."
    # its message has always named only the exception type
    error_detail = False

    def add_target_arguments(self, parser):
        parser.add_argument("--bot", required=True, type=int, help="The Telegram bot id.")

    def add_options(self, parser):
        parser.add_argument("--secret", default=None, help="Send this secret token instead.")
        parser.add_argument(
            "--progress",
            metavar="SESSION_ID",
            help="Tap on this session's progress message (a callback_query fixture).",
        )
        parser.add_argument(
            "--reply-to-prompt",
            action="store_true",
            help="Reply to the latest 'Other…' prompt in the message's chat (a message fixture).",
        )

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
        if options.get("progress"):
            on_progress_message(tg, update, options["progress"])
        if options.get("reply_to_prompt"):
            reply_to_prompt(tg, update)
        token = tg.secret("webhook_secret") if secret is None else secret
        target = f"{url.rstrip('/')}/telegram/{bot}/webhook"
        kind = next((k for k in update if k != "update_id"), "?")
        self.stdout.write(f"POST {target} ({kind}, update_id={update['update_id']})")
        self.post(target, timeout, json=update, headers={SECRET_HEADER: token} if token else {})


def _chat_id(value):
    """A chat id as Telegram sends it (a number) when it is one."""
    text = str(value)
    return int(text) if text.lstrip("-").isdigit() else value


def on_progress_message(tg: TelegramBot, update: dict, session_id: str) -> None:
    """Point `update`'s callback_query at the progress message of `session_id`. Raises
    CommandError when the fixture is no callback_query or the session has no message."""
    query = update.get("callback_query")
    if not isinstance(query, dict):
        raise CommandError("--progress needs a callback_query fixture.")
    session = (
        ProgressSession.objects.select_related("card")
        .filter(bot=tg.bot, session_id=session_id)
        .first()
    )
    address = (session.card.address if session and session.card else None) or {}
    if not address.get("message_id"):
        raise CommandError(f"Session {session_id} has no Telegram progress message.")
    message = query.setdefault("message", {})
    message["message_id"] = address["message_id"]
    message.setdefault("chat", {})["id"] = _chat_id(address["chat_id"])


def reply_to_prompt(tg: TelegramBot, update: dict) -> None:
    """Make `update`'s message a reply to the latest "Other…" prompt in its chat. Raises
    CommandError when the fixture is no message or no prompt was sent there."""
    message = update.get("message")
    chat = message.get("chat") if isinstance(message, dict) else None
    if not isinstance(chat, dict):
        raise CommandError("--reply-to-prompt needs a message fixture with a chat.")
    prompt = (
        TelegramReplyPrompt.objects.filter(bot=tg.bot, chat_id=str(chat.get("id")))
        .order_by("-created_at", "-id")
        .first()
    )
    if prompt is None:
        raise CommandError(f"No 'Other…' prompt was sent in chat {chat.get('id')}.")
    message["reply_to_message"] = {
        "message_id": prompt.message_id,
        "from": {"id": tg.bot_user_id, "is_bot": True, "first_name": tg.username or "bot"},
        "date": 0,
        "chat": chat,
        "text": "…",
    }
