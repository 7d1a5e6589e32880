"""`python manage.py slack_feedback_replay <delivery_id> <key> --user U… [--reason … --comment …] [--url …]`

Replay a signed Slack click on the feedback area of a Slack final answer, as Slack would send
it: `slack_replay` with `tests/fixtures/slack/block_actions.json` pointed at the delivery's
message (its channel and `ts`) and at button `fb_<key>`, whose value is the one Cardloop put
on that button for the delivery's current state (`rev` = its current revision). With
`--reason` and/or `--comment` it submits the negative follow-up form instead (`key` may be
left out; `rev` = the clicker's latest revision), the inputs in `state.values` as Slack sends
them. The clicker is `--user` (the payload's `user.id`); for a `requester` audience that is
the delivery's `requester_user_id`.

    python manage.py slack_feedback_replay del_… conclusive_usable --user U0DEMOREQUESTER
    python manage.py slack_feedback_replay del_… --reason wrong_facts --user U0DEMOREQUESTER

`--set path=value` (repeatable) is passed on to `slack_replay` after the click's own settings,
e.g. `--set response_url=…` to aim the ephemeral answer at a test receiver.
"""

from __future__ import annotations

import json

from django.core.management.base import BaseCommand, CommandError

from botadmin.models import SlackApp
from feedback import cards as feedback_cards
from feedback import slack_cards
from feedback.models import Delivery, Revision
from interactions.management.commands.slack_replay import replay_click
from interactions.models import CardEntity


def click_settings(delivery: Delivery, card: CardEntity, key: str, user: str, form: dict) -> list:
    """The `slack_replay --set` assignments of one feedback click on `delivery`'s message
    (`card.address`): a verdict button `key`, or the follow-up form when `form` holds
    `fb_reason` / `fb_comment`. Raises CommandError for a key the snapshot does not offer."""
    channel, ts = card.address["channel"], card.address["ts"]
    where = [
        f"container.message_ts={json.dumps(ts)}",
        f"container.channel_id={channel}",
        f"channel.id={channel}",
        f"message.ts={json.dumps(ts)}",
    ]
    if form:
        latest = (
            Revision.objects.filter(delivery=delivery, operator_open_id=user)
            .order_by("-revision")
            .first()
        )
        value = {
            "kind": "feedback_detail",
            "delivery": delivery.delivery_id,
            "rev": latest.revision_id if latest else "",
        }
        values = {}
        if form.get(feedback_cards.REASON_FIELD):
            values[slack_cards.DETAIL_REASON] = {
                feedback_cards.REASON_FIELD: {
                    "type": "static_select",
                    "selected_option": {"value": form[feedback_cards.REASON_FIELD]},
                }
            }
        if form.get(feedback_cards.COMMENT_FIELD):
            values[slack_cards.DETAIL_COMMENT] = {
                feedback_cards.COMMENT_FIELD: {
                    "type": "plain_text_input",
                    "value": form[feedback_cards.COMMENT_FIELD],
                }
            }
        action_id, block_id = slack_cards.DETAIL_SUBMIT, slack_cards.DETAIL_SUBMIT
        where.append(f"state.values={json.dumps(values, ensure_ascii=False)}")
    else:
        keys = [b.get("key") for b in (delivery.policy_snapshot or {}).get("buttons") or []]
        if key not in keys:
            raise CommandError(f"{delivery.delivery_id} offers the keys {', '.join(keys)}.")
        current = delivery.current_revision
        value = {
            "kind": "feedback",
            "delivery": delivery.delivery_id,
            "key": key,
            "rev": current.revision_id if current else "",
        }
        action_id, block_id = f"{slack_cards.RESERVED_PREFIX}{key}", slack_cards.BUTTONS
    # the button value is a string holding JSON (as Slack sends it back): a JSON string here
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return [
        *where,
        f"actions.0.action_id={action_id}",
        f"actions.0.block_id={block_id}",
        f"actions.0.value={json.dumps(text, ensure_ascii=False)}",
    ]


class Command(BaseCommand):
    help = "Replay a signed Slack click on the feedback area of a Slack final answer."
    requires_system_checks: list[str] = []

    def add_arguments(self, parser):
        parser.add_argument("delivery", help="The delivery id (del_…).")
        parser.add_argument(
            "key", nargs="?", default="", help="The button key (conclusive_usable, …)."
        )
        parser.add_argument("--user", required=True, help="The clicker's Slack user id (U…).")
        parser.add_argument("--reason", default="", help="Submit the follow-up with this reason.")
        parser.add_argument("--comment", default="", help="Submit the follow-up with this text.")
        parser.add_argument("--url", default="http://127.0.0.1:8000", help="Cardloop base URL.")
        parser.add_argument(
            "--set",
            action="append",
            default=[],
            metavar="PATH=VALUE",
            help="Passed on to slack_replay after the click's own settings (e.g. response_url).",
        )

    def handle(self, *args, delivery, key, user, reason, comment, url, set, **options):  # noqa: A002
        found = (
            Delivery.objects.select_related("bot", "current_revision")
            .filter(delivery_id=delivery, channel=Delivery.Channel.SLACK)
            .first()
        )
        if found is None:
            raise CommandError(f"No Slack delivery {delivery!r}.")
        app = SlackApp.objects.filter(bot=found.bot).first()
        card = CardEntity.objects.for_send(found.bot, found.delivery_id).first()
        if app is None or card is None or not (card.address or {}).get("ts"):
            raise CommandError(f"{delivery} has no Slack message recorded.")
        form = {feedback_cards.REASON_FIELD: reason, feedback_cards.COMMENT_FIELD: comment}
        assignments = [
            *click_settings(found, card, key, user, form if reason or comment else {}),
            *set,
        ]
        replay_click(app.app_id, user, url, assignments, stdout=self.stdout, stderr=self.stderr)
