"""Final answers on Slack: the checks, composition and send of a delivery whose `channel` is
`slack` (called by `feedback.deliveries.deliver`, which owns every state change).

A Slack answer is the backend's Block Kit `blocks` (with a fallback `text` for notifications)
sent by the bot's Slack app (`botadmin.models.SlackApp`) with `chat.postMessage`
(https://api.slack.com/methods/chat.postMessage) to the conversation `chat_id` (`C…`, `G…`,
`D…`); the message's `ts` is the delivery's `platform_message_id`. Without a bot token the app
is in dry run (`interactions.channels.slack.webapi`: a log line and a synthetic `ts`). Neither
the blocks nor the text are stored; only their `content_hash`.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.utils.translation import gettext as _

from botadmin.models import SlackApp
from feedback import cards as feedback_cards
from feedback import slack_cards
from interactions.channels.slack import limits, webapi

#: Longest fallback `text` accepted (Slack truncates messages longer than 40,000 characters
#: and recommends at most 4,000: https://api.slack.com/methods/chat.postMessage#truncating).
TEXT_MAX = 4000


class BlocksRefused(ValueError):
    """The blocks break a rule; `errors` maps the request field to messages."""

    def __init__(self, errors: dict[str, list[str]]):
        self.errors = errors
        super().__init__("; ".join(f"{k}: {', '.join(v)}" for k, v in errors.items()))


class SlackSendError(Exception):
    """Slack refused the message or could not be reached: `error` is Slack's error code
    (`channel_not_found`, `invalid_blocks`, …) or `transport`."""

    def __init__(self, error: str):
        self.error = error
        super().__init__(error)


def slack_app(bot) -> SlackApp | None:
    """The Slack app of `bot`, or None."""
    return SlackApp.objects.filter(bot=bot).first()


def request_problems(bot, request) -> dict[str, list[str]]:
    """What keeps a Slack delivery `request` (a `feedback.deliveries.DeliveryRequest`) of
    `bot` from being sent, as `{field: [messages]}` (empty: none). The bot must have a Slack
    app (named under `request.channel_field`, the field that chose Slack); `blocks` is
    required and must keep Slack's limits without `fb_` ids; a Feishu `card` and a two-phase
    registration are refused."""
    problems: dict[str, list[str]] = {}
    if slack_app(bot) is None:
        problems[request.channel_field] = [
            _("This bot has no Slack app: add one under Slack apps in the admin first.")
        ]
    if request.card is not None:
        problems["card"] = [_("A Slack message takes blocks (and text), not a Feishu card.")]
    if request.registers:
        field = "platform_message_id" if request.platform_message_id else "card_id"
        problems[field] = [_("Registering a message you sent is not available on Slack.")]
    if request.blocks is None:
        problems["blocks"] = [_("This field is required.")]
    else:
        own = slack_cards.reserved_problems(request.blocks) or limits.problems(request.blocks)
        if own:
            problems["blocks"] = own[:20]
    return problems


def compose(
    blocks: list[dict[str, Any]], snapshot: dict[str, Any] | None, delivery_id: str
) -> list[dict[str, Any]]:
    """The blocks to send: the backend's `blocks` with the feedback area of `snapshot`
    appended (none when `snapshot` is None). Raises `BlocksRefused` (field `blocks`) when the
    area pushes the message over one of Slack's limits or the blocks use `fb_` ids."""
    area = slack_cards.feedback_area(snapshot, delivery_id, None) if snapshot else None
    try:
        composed = slack_cards.compose(blocks, area)
    except feedback_cards.ReservedIds as exc:
        raise BlocksRefused({"blocks": exc.problems[:20]}) from None
    problems = limits.problems(composed)
    if problems:
        raise BlocksRefused(
            {
                "blocks": [
                    _("With Cardloop's feedback area added: %(problem)s") % {"problem": p}
                    for p in problems[:20]
                ]
            }
        )
    return composed


def post(bot, channel: str, blocks: list[dict[str, Any]], text: str) -> str:
    """Send `blocks` with fallback `text` to conversation `channel` from `bot`'s Slack app;
    returns the message's `ts`. Network I/O: call outside any transaction. Raises
    `SlackSendError`."""
    app = slack_app(bot)
    if app is None:
        raise SlackSendError("no_slack_app")
    try:
        sent = webapi.post_message(
            app.secret("bot_token"),
            channel,
            blocks,
            text,
            base_url=settings.CARDLOOP_SLACK_API_BASE_URL,
        )
    except webapi.SlackCallError as exc:
        raise SlackSendError(exc.error) from None
    return sent["ts"]
