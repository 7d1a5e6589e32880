"""Final answers on Slack: the checks, composition and send of a delivery whose `channel` is
`slack` (called by `feedback.deliveries.deliver`, which owns every state change).

A Slack answer is the backend's Block Kit `blocks` (with a fallback `text` for notifications)
sent by the bot's Slack app (`botadmin.models.SlackApp`) with `chat.postMessage`
(https://api.slack.com/methods/chat.postMessage) to the conversation `chat_id` (`C…`, `G…`,
`D…`); the message's `ts` is the delivery's `platform_message_id`. Without a bot token the app
is in dry run (`interactions.channels.slack.webapi`: a log line and a synthetic `ts`). Neither
the blocks nor the text are stored; only their `content_hash`.

After a click the area is repainted through the card-update queue, after the click's answer:
`queue_repaint` queues a render (`RENDERER`) of the delivery's message; when the card worker
applies it, `render_update` reads the message back from Slack (`webapi.read_message`:
`conversations.history` / `conversations.replies`), replaces only its `fb_` blocks with the
current area (`slack_cards.replace_area`) and hands the whole message to the Slack channel's
`chat.update` — in memory only, so the answer never reaches a queue row. In dry run nothing can
be read back: the update carries the area alone, which the dry run only logs.
"""

from __future__ import annotations

import logging
from typing import Any

from django.conf import settings
from django.utils.translation import gettext as _

from botadmin.models import SlackApp
from feedback import answer_channels, slack_cards
from feedback import cards as feedback_cards
from feedback.models import Delivery
from interactions import channels
from interactions.cardqueue import service as cards
from interactions.channels.slack import limits, webapi
from interactions.models import CardEntity

log = logging.getLogger(__name__)

#: The card-queue renderer of a Slack answer's message (registered in FeedbackConfig.ready()).
RENDERER = "slack_feedback"

#: Longest fallback `text` accepted (Slack truncates messages longer than 40,000 characters
#: and recommends at most 4,000: https://api.slack.com/methods/chat.postMessage#truncating).
TEXT_MAX = 4000


class BlocksRefused(answer_channels.MessageRefused):
    """The blocks break a rule; `errors` maps the request field to messages."""


class SlackSendError(answer_channels.AnswerSendError):
    """Slack refused the message or could not be reached: `error` is Slack's error code
    (`channel_not_found`, `invalid_blocks`, …) or `transport`."""


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
    if len(request.text) > TEXT_MAX:
        problems["text"] = [_("Slack takes at most 4000 characters here.")]
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


def post(bot, channel: str, blocks: list[dict[str, Any]], text: str, *, uuid: str) -> str:
    """Send `blocks` with fallback `text` to conversation `channel` from `bot`'s Slack app;
    returns the message's `ts`. Through the Slack channel (`interactions.channels`), which
    records the message as a `CardEntity` (`send_uuid` = `uuid`, the delivery id;
    `address` = `{"channel", "ts"}`) so its feedback area can be updated; until that channel
    is registered, straight through `webapi` (then nothing records it for updates). Network
    I/O: call outside any transaction. Raises `SlackSendError`."""
    app = slack_app(bot)
    if app is None:
        raise SlackSendError("no_slack_app")
    slack = channels.get("slack")
    if slack.name == "slack":
        try:
            entity = slack.send(
                bot,
                {"blocks": blocks, "text": text},
                receive_id=channel,
                uuid=uuid,
                purpose="feedback",
            )
        except slack.send_errors as exc:
            raise SlackSendError(str(getattr(exc, "code", "") or "unknown")) from None
        return str((entity.address or {}).get("ts") or "")
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


def queue_repaint(delivery: Delivery) -> None:
    """Queue the repaint of Slack `delivery`'s feedback area (its current revision) in the
    caller's transaction: a render of its message (`RENDERER`), applied by the card worker
    after the click's answer. A delivery whose message was never recorded is logged and left."""
    entity = CardEntity.objects.for_send(delivery.bot, delivery.delivery_id).first()
    if entity is None or not (entity.address or {}).get("ts"):
        log.warning("delivery %s: no Slack message to update", delivery.delivery_id)
        return
    cards.enqueue_render(entity, RENDERER)


def render_update(card: CardEntity) -> dict[str, Any] | None:
    """The whole new message of the Slack answer shown by `card` (`{"blocks", "text"}`): the
    message as Slack has it now with its feedback area replaced by the delivery's current
    state; None when there is nothing to update (no such delivery, no feedback, the message
    was deleted). The card worker calls it when it applies the update. Raises
    `webapi.SlackCallError` when Slack cannot be read (the worker retries)."""
    delivery = answer_channels.shown_delivery(card, Delivery.Channel.SLACK)
    if delivery is None:
        return None
    area = slack_cards.feedback_area(
        delivery.policy_snapshot,
        delivery.delivery_id,
        feedback_cards.Choice.of(delivery.current_revision),
    )
    app = slack_app(card.bot)
    token = app.secret("bot_token") if app is not None else ""
    if not token:  # dry run: nothing to read back; the dry-run chat.update only logs
        return {"blocks": area, "text": ""}
    address = card.address or {}
    message = webapi.read_message(
        token, address["channel"], address["ts"], base_url=settings.CARDLOOP_SLACK_API_BASE_URL
    )
    if message is None:
        log.info("delivery %s: its Slack message is gone; not updated", delivery.delivery_id)
        return None
    return {"blocks": slack_cards.replace_area(message["blocks"], area), "text": message["text"]}


class SlackAnswers(answer_channels.AnswerChannel):
    """Slack as an answer channel (`feedback.answer_channels`): the backend's `blocks` with
    the fallback `text`, sent by the bot's Slack app; registered in `FeedbackConfig.ready()`."""

    kind = Delivery.Channel.SLACK
    requester_field = "requester_user_id"

    def message(self, request) -> Any:
        return request.blocks

    def request_problems(self, bot, request) -> dict[str, list[str]]:
        return request_problems(bot, request)

    def compose(self, request, snapshot, delivery_id) -> list[dict[str, Any]]:
        return compose(request.blocks, snapshot, delivery_id)

    def content_hash(self, request) -> str:
        return feedback_cards.content_hash({"blocks": request.blocks, "text": request.text})

    def send(self, delivery, request, composed) -> str:
        return post(
            delivery.bot, request.chat_id, composed, request.text, uuid=delivery.delivery_id
        )

    def queue_repaint(self, delivery) -> None:
        queue_repaint(delivery)
