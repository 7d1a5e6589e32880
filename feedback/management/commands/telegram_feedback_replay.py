"""`python manage.py telegram_feedback_replay <delivery_id> [<key>] --user <id> [--reason <key> | --prompt | --comment <text>] [--url …]`

Replay a tap on the feedback keyboard of a Telegram final answer, as Telegram would send it:
`telegram_replay` with `tests/fixtures/telegram/callback_query.json` pointed at the delivery's
message (its chat and message id, as recorded at send) and `callback_query.data` set to what
Cardloop put on the button for the delivery's current state (`feedback.telegram_cards`): verdict
`key`, or with `--reason` that reason of the follow-up, or with `--prompt` "Add a comment"
(Cardloop then sends a `force_reply` prompt). `--comment` instead replays the person's reply
to their latest prompt (`tests/fixtures/telegram/message_command.json` with
`reply_to_message`). The tapper is `--user` (`from.id`); for a `requester` audience that is the
delivery's requester.

    python manage.py telegram_feedback_replay del_… conclusive_usable --user 4242
"""

from __future__ import annotations

import json

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError

from botadmin.models import TelegramBot
from feedback import telegram_cards
from feedback.models import Delivery, TelegramCommentPrompt
from interactions.models import CardEntity

FIXTURES = settings.BASE_DIR / "tests" / "fixtures" / "telegram"


def tap_data(delivery: Delivery, key: str, reason: str, prompt: bool) -> str:
    """The callback_data of the button for verdict `key` (or `reason`, or the comment prompt)
    on `delivery`'s current state. Raises CommandError for a key the snapshot does not offer."""
    snapshot = delivery.policy_snapshot or {}
    rev = telegram_cards.rev_code(
        delivery.current_revision.revision_id if delivery.current_revision else ""
    )
    if prompt:
        return telegram_cards.callback_data(telegram_cards.COMMENT, rev)
    if reason:
        reasons = [
            r.get("key") for r in (snapshot.get("negative_followup") or {}).get("reasons") or []
        ]
        if reason not in reasons:
            raise CommandError(f"{delivery.delivery_id} offers the reasons {', '.join(reasons)}.")
        return telegram_cards.callback_data(telegram_cards.REASON, reasons.index(reason), rev)
    keys = [b.get("key") for b in snapshot.get("buttons") or []]
    if key not in keys:
        raise CommandError(f"{delivery.delivery_id} offers the keys {', '.join(keys)}.")
    return telegram_cards.callback_data(telegram_cards.VERDICT, keys.index(key), rev)


class Command(BaseCommand):
    help = "Replay a tap on the feedback keyboard of a Telegram final answer (or a comment)."
    requires_system_checks: list[str] = []

    def add_arguments(self, parser):
        parser.add_argument("delivery", help="The delivery id (del_…).")
        parser.add_argument("key", nargs="?", default="", help="The verdict button's key.")
        parser.add_argument("--user", required=True, help="The tapper's Telegram user id.")
        parser.add_argument("--reason", default="", help="Tap this reason of the follow-up.")
        parser.add_argument("--prompt", action="store_true", help='Tap "Add a comment".')
        parser.add_argument("--comment", default="", help="Reply this text to the prompt.")
        parser.add_argument("--lang", default="en", help="The tapper's language_code.")
        parser.add_argument("--url", default="http://127.0.0.1:8000", help="Cardloop base URL.")

    def handle(self, *args, delivery, key, user, reason, prompt, comment, lang, url, **options):
        if not (user.isascii() and user.isdigit()):
            raise CommandError(f"--user must be a Telegram user id (digits), not {user!r}.")
        found = (
            Delivery.objects.select_related("bot", "current_revision")
            .filter(delivery_id=delivery, channel=Delivery.Channel.TELEGRAM)
            .first()
        )
        if found is None:
            raise CommandError(f"No Telegram delivery {delivery!r}.")
        tg = TelegramBot.objects.filter(bot=found.bot).first()
        card = CardEntity.objects.for_send(found.bot, found.delivery_id).first()
        address = (card.address or {}) if card is not None else {}
        if tg is None or "message_id" not in address:
            raise CommandError(f"{delivery} has no Telegram message recorded.")
        chat = json.dumps(address["chat_id"])
        person = [f"from.id={json.dumps(int(user))}", f"from.language_code={lang}"]
        if comment:
            asked = (
                TelegramCommentPrompt.objects.filter(
                    delivery=found, operator_open_id=user, message_id__isnull=False
                )
                .order_by("-pk")
                .first()
            )
            if asked is None:
                raise CommandError(f"No comment prompt for {user} on {delivery}: use --prompt.")
            reply_to = {"message_id": asked.message_id, "chat": {"id": address["chat_id"]}}
            fixture = FIXTURES / "message_command.json"
            assignments = [
                *(f"message.{item}" for item in person),
                f"message.chat.id={chat}",
                f"message.text={json.dumps(comment, ensure_ascii=False)}",
                f"message.reply_to_message={json.dumps(reply_to)}",
            ]
        else:
            fixture = FIXTURES / "callback_query.json"
            assignments = [
                *(f"callback_query.{item}" for item in person),
                f"callback_query.message.chat.id={chat}",
                f"callback_query.message.message_id={json.dumps(address['message_id'])}",
                f"callback_query.data={tap_data(found, key, reason, prompt)}",
            ]
        call_command(
            "telegram_replay",
            str(fixture),
            "--bot",
            str(tg.bot_user_id),
            "--url",
            url,
            *[arg for item in assignments for arg in ("--set", item)],
            stdout=self.stdout,
            stderr=self.stderr,
        )
