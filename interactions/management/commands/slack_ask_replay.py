"""`python manage.py slack_ask_replay <ask_id> --user U… [--answer I=CHOICE …] [--other I=TEXT …] [--set …] [--url …]`

Replay a signed Slack submit of an ask on its session's Slack progress message, as Slack would
send it: `slack_replay` with `tests/fixtures/slack/block_actions.json` pointed at the message
(its channel and `ts`) and at the ask's Submit button (`ask_<n>_submit`, the value Cardloop put
on it), with the form's inputs in `state.values` as Slack sends them (block_id → action_id →
state; https://api.slack.com/reference/interaction-payloads/block-actions). `--answer I=CHOICE`
picks options of question I (0-based): one option index for a single-select, indices separated
by commas for a multi-select; `--other I=TEXT` fills question I's "other" input. The clicker is
`--user` (the payload's `user.id`); only the ask's requester is answered. `--set path=value`
overrides a field afterwards, as in `slack_replay`.

    python manage.py slack_ask_replay ask_… --user U0DEMOREQUESTER --answer 0=1 --answer 1=0,2
"""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from botadmin.models import SlackApp
from interactions.channels.slack import blocks
from interactions.management.commands.slack_replay import replay_click
from interactions.models import Ask, ProgressSession
from interactions.render import progress_cards


def _indexed(items: list[str], flag: str) -> dict[int, str]:
    out: dict[int, str] = {}
    for item in items:
        index, sep, value = item.partition("=")
        if not sep or not index.isdigit():
            raise CommandError(f"{flag} expects I=VALUE with a question number, got {item!r}.")
        out[int(index)] = value
    return out


def state_values(ask: Ask, answers: dict[int, str], others: dict[int, str]) -> dict[str, Any]:
    """The `state.values` of the ask's form on the Slack message: per question its select
    (`static_select` / `multi_static_select`, option indices as values) and its "other"
    `plain_text_input`, named as the renderer names them (`progress_cards.field_names`)."""
    values: dict[str, Any] = {}
    for i, question in enumerate(ask.questions):
        select, other = progress_cards.field_names(ask.form_index, i)
        chosen = [c.strip() for c in answers.get(i, "").split(",") if c.strip()]
        if question.get("multiSelect"):
            state: dict[str, Any] = {
                "type": "multi_static_select",
                "selected_options": [{"value": c} for c in chosen],
            }
        else:
            state = {
                "type": "static_select",
                "selected_option": {"value": chosen[0]} if chosen else None,
            }
        values[select] = {blocks.field_action(select): state}
        values[other] = {
            blocks.field_action(other): {"type": "plain_text_input", "value": others.get(i)}
        }
    return values


class Command(BaseCommand):
    help = "Replay a signed Slack submit of an ask on its session's Slack progress message."
    requires_system_checks: list[str] = []

    def add_arguments(self, parser):
        parser.add_argument("ask", help="The ask's request id (ask_…).")
        parser.add_argument("--user", required=True, help="The clicker's Slack user id (U…).")
        parser.add_argument(
            "--answer", action="append", default=[], metavar="I=CHOICE", help="Options chosen."
        )
        parser.add_argument(
            "--other", action="append", default=[], metavar="I=TEXT", help="The 'other' text."
        )
        parser.add_argument("--url", default="http://127.0.0.1:8000", help="Cardloop base URL.")
        parser.add_argument(
            "--set",
            action="append",
            default=[],
            metavar="PATH=VALUE",
            help="Override a field after the ask's (passed on to slack_replay).",
        )

    def handle(self, *args, ask, user, answer, other, url, set, **options):  # noqa: A002
        found = Ask.objects.select_related("bot").filter(public_id=ask).first()
        if found is None:
            raise CommandError(f"No ask {ask!r}.")
        session = (
            ProgressSession.objects.select_related("card")
            .filter(bot=found.bot, session_id=found.session_id)
            .first()
        )
        card = session.card if session is not None else None
        app = SlackApp.objects.filter(bot=found.bot).first()
        if app is None or card is None or card.channel != "slack" or not card.address.get("ts"):
            raise CommandError(f"{ask} is not on a Slack progress message.")
        channel, ts = card.address["channel"], card.address["ts"]
        state = state_values(found, _indexed(answer, "--answer"), _indexed(other, "--other"))
        value = json.dumps(progress_cards.submit_value(found), separators=(",", ":"))
        assignments = [
            f"container.message_ts={json.dumps(ts)}",
            f"container.channel_id={channel}",
            f"channel.id={channel}",
            f"message.ts={json.dumps(ts)}",
            f"actions.0.action_id={progress_cards.submit_name(found.form_index)}",
            f"actions.0.block_id={progress_cards.form_name(found.form_index)}",
            # the button value is a string holding JSON (as Slack sends it back)
            f"actions.0.value={json.dumps(value)}",
            f"state.values={json.dumps(state, ensure_ascii=False)}",
            *set,
        ]
        replay_click(app.app_id, user, url, assignments, stdout=self.stdout, stderr=self.stderr)
