"""`python manage.py send_card --bot <app_id> --chat <chat_id> --response-kind final|progress …`

Send an answer card from a shell through the same service as `POST /api/v1/deliveries`
(`feedback.deliveries.deliver`): policy resolution, feedback area, CardKit entity, retries.

    python manage.py send_card --bot cli_demo_bot --chat oc_demo_team_chat \\
        --response-kind final --requester ou_demo_requester --text "**Answer** …" \\
        --session s-1 --turn t-1

`--card file.json` sends a Card JSON 2.0 file instead of `--text` (a markdown body). Prints
the delivery id, message id and whether feedback is shown (and why not). Exit status 1 on a
refused request or a failed send.
"""

from __future__ import annotations

import json
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from botadmin.models import Bot
from feedback import deliveries


def markdown_card(text: str) -> dict:
    """A minimal Card JSON 2.0 answer with one markdown element."""
    return {
        "schema": "2.0",
        "config": {"update_multi": True},
        "body": {"elements": [{"tag": "markdown", "content": text}]},
    }


class Command(BaseCommand):
    help = "Send an answer card (final answers get the feedback area the policy asks for)."

    def add_arguments(self, parser):
        parser.add_argument("--bot", required=True, help="app_id of the bot")
        parser.add_argument("--chat", required=True, help="chat_id (oc_…)")
        parser.add_argument(
            "--response-kind",
            choices=["final", "progress"],
            default="progress",
            help="final gets feedback; progress never does (default)",
        )
        source = parser.add_mutually_exclusive_group(required=True)
        source.add_argument("--text", help="markdown body of a one-element card")
        source.add_argument("--card", type=Path, help="Card JSON 2.0 file")
        parser.add_argument("--requester", default="", help="requester open_id (ou_…)")
        parser.add_argument("--session", default="", help="session_id (with --turn)")
        parser.add_argument("--turn", default="", help="turn_id (with --session)")
        parser.add_argument("--attempt", type=int, default=0, help="dispatch_attempt")
        parser.add_argument("--model", default="")

    def handle(self, *args, **options):
        bot = Bot.objects.filter(app_id=options["bot"]).first()
        if bot is None:
            raise CommandError(f"no bot with app_id {options['bot']!r}")
        if bool(options["session"]) != bool(options["turn"]):
            raise CommandError("--session and --turn go together")
        if options["card"] is not None:
            try:
                card = json.loads(options["card"].read_text(encoding="utf-8"))
            except (OSError, ValueError) as exc:
                raise CommandError(f"--card: {exc}") from None
        else:
            card = markdown_card(options["text"])
        request = deliveries.DeliveryRequest(
            chat_id=options["chat"],
            card=card,
            response_kind=options["response_kind"],
            session_id=options["session"],
            turn_id=options["turn"],
            dispatch_attempt=options["attempt"],
            requester_open_id=options["requester"],
            metadata={"model": options["model"]},
        )
        try:
            result = deliveries.deliver(bot, request)
        except deliveries.InvalidDelivery as exc:
            raise CommandError(f"refused: {json.dumps(exc.errors, ensure_ascii=False)}") from None
        except deliveries.SendFailed as exc:
            raise CommandError(
                f"send failed ({exc.delivery.delivery_id}): Feishu {exc.code} {exc.msg} "
                f"log_id={exc.log_id}"
            ) from None
        d = result.delivery
        state = "created" if result.created else "exists (retry: nothing sent)"
        self.stdout.write(f"delivery {d.delivery_id}: {state}, status {d.status}")
        self.stdout.write(f"  message {d.platform_message_id}  card {d.card_id}")
        shown = "shown" if d.feedback_shown else "not shown"
        self.stdout.write(f"  feedback {shown} ({d.feedback_reason})")
