"""The Slack channel: `SlackChannel` implements `interactions.channels.base.Channel`.

| interface | Slack |
|---|---|
| `render_interaction` | `blocks.interaction_message` (Block Kit `{"text", "blocks"}`) |
| `render_progress` | `progress.message`: the session's progress message, pending asks as input-block forms named like the Feishu form fields (`shows_progress`) |
| `render_feedback_area` | the feedback app's handed-over Block Kit area |
| `send` | `chat.postMessage` (`webapi.post_message`), recorded as a `CardEntity` (`channel="slack"`, `address={"channel", "ts"}`, `open_message_id` = the `ts`) |
| `update` | `interactions.cardqueue.service.enqueue_card` (the durable card-update queue) |
| `apply_update` | `chat.update` (`webapi.update_message`); HTTP 429 → `UpdateFailed(retry_after=…)` |
| `reply_text` | `chat.postMessage` in the typed command's thread |
| `parse_callback` | a verified `block_actions` payload → `CardAction` (`neutral_payload`) |
| `operator` | the verified payload's `user.id` |

Secrets come from the bot's `botadmin.models.SlackApp`; without a bot token every call is a
dry run (log lines, synthetic `ts`). The ingress is `interactions.channels.slack.ingress`.
"""

from __future__ import annotations

import hashlib
import json
import logging
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction

from interactions import kinds
from interactions.callbacks.registry import CardAction
from interactions.cardqueue import service as cards
from interactions.channels.base import Channel, ChannelSendError, Unsupported
from interactions.channels.slack import blocks, progress, webapi
from interactions.models import CardEntity

log = logging.getLogger(__name__)


def _token(bot) -> str:
    app = getattr(bot, "slack_app", None)
    return app.secret("bot_token") if app is not None else ""


def _base_url() -> str:
    return settings.CARDLOOP_SLACK_API_BASE_URL


def action_event_id(payload: dict[str, Any]) -> str:
    """The dedupe key of one click in a verified `block_actions` payload: the same click
    delivered twice (a replay, a proxy retry) gives the same key; another click (its own
    `action_ts`) another. ≤ 64 characters (`InboundEvent.event_id`)."""
    team = (payload.get("team") or {}).get("id", "")
    user = (payload.get("user") or {}).get("id", "")
    container = payload.get("container") or {}
    actions = payload.get("actions") or [{}]
    first = actions[0] if isinstance(actions[0], dict) else {}
    key = "|".join(
        str(x)
        for x in (
            team,
            user,
            container.get("channel_id", ""),
            container.get("message_ts", ""),
            first.get("action_id", ""),
            first.get("action_ts", ""),
        )
    )
    return "sl_" + hashlib.sha256(key.encode()).hexdigest()[:48]


def form_values(state: dict[str, Any]) -> dict[str, Any]:
    """`{block_id: value}` from a `block_actions` payload's `state.values` (Cardloop's input
    blocks hold one element each): a text input's `value`, a select's `selected_option.value`,
    the list of values of a multi-select's or checkboxes' `selected_options`; blocks without
    a value are left out
    (https://api.slack.com/reference/interaction-payloads/block-actions)."""
    out: dict[str, Any] = {}
    values = state.get("values") if isinstance(state, dict) else None
    for block_id, elements in (values or {}).items():
        if not isinstance(elements, dict):
            continue
        for element in elements.values():
            if not isinstance(element, dict):
                continue
            if isinstance(element.get("selected_options"), list):
                chosen = [
                    o.get("value") for o in element["selected_options"] if isinstance(o, dict)
                ]
                if chosen:
                    out[block_id] = [str(v) for v in chosen]
            elif isinstance(element.get("selected_option"), dict):
                out[block_id] = str(element["selected_option"].get("value", ""))
            elif element.get("value") not in (None, ""):
                out[block_id] = str(element["value"])
    return out


def neutral_payload(payload: dict[str, Any]) -> dict[str, Any]:
    """A verified Slack `block_actions` payload as the channel-neutral callback body the
    dispatcher and `CardAction.from_payload` read (event id, action value, form values,
    operator, message and chat; `header.channel` "slack"), so Slack clicks run the same
    handlers, dedupe and budget as Feishu's. The message is named by its `ts`
    (`open_message_id`), which `send` records on the message's `CardEntity`. Identity is the payload's `user.id` and `team.id`, never a button value."""
    actions = payload.get("actions") or []
    first = actions[0] if actions and isinstance(actions[0], dict) else {}
    raw = first.get("value")
    try:
        value = json.loads(raw) if isinstance(raw, str) else None
    except ValueError:
        value = None
    container = payload.get("container") or {}
    channel = (payload.get("channel") or {}).get("id") or container.get("channel_id", "")
    message = payload.get("message") or {}
    return {
        "schema": "2.0",
        "header": {
            "event_id": action_event_id(payload),
            "event_type": "card.action.trigger",
            "app_id": str(payload.get("api_app_id") or ""),
            "tenant_key": str((payload.get("team") or {}).get("id") or ""),
            "channel": kinds.SLACK,
        },
        "event": {
            "operator": {"open_id": str((payload.get("user") or {}).get("id") or "")},
            "action": {
                "value": value if isinstance(value, dict) else None,
                "tag": str(first.get("type") or ""),
                "name": str(first.get("action_id") or ""),
                "form_value": form_values(payload.get("state") or {}),
            },
            "context": {
                "open_message_id": str(container.get("message_ts") or message.get("ts") or ""),
                "open_chat_id": str(channel or ""),
            },
        },
    }


class SlackChannel(Channel):
    """Slack: Block Kit messages with buttons and input blocks, updated with `chat.update`."""

    name = kinds.SLACK
    capabilities = kinds.CAPABILITIES[kinds.SLACK]
    shows_progress = True
    #: chat.update is Tier 3 (~50 per minute per workspace,
    #: https://api.slack.com/docs/rate-limits); one per second per message keeps a burst of
    #: clicks on one message well inside it, and a 429's Retry-After is honoured on top.
    update_interval = timedelta(seconds=1)

    def render_interaction(self, ia) -> dict[str, Any]:
        return blocks.interaction_message(ia)

    def render_progress(self, session, asks) -> dict[str, Any]:
        """`progress.message`: the session's Block Kit message with its pending asks as
        input-block forms (pure)."""
        return progress.message(session, asks)

    _feedback_renderer = None

    def use_feedback_renderer(self, fn) -> None:
        """Render feedback areas with `fn(policy, delivery_id, choice)` (the feedback app's
        Block Kit area; it lives above this app, so it is handed over instead of imported)."""
        self._feedback_renderer = fn

    def render_feedback_area(self, policy: dict[str, Any], delivery_id: str, choice):
        """The feedback area's blocks (the handed-over renderer). Raises `Unsupported` when
        the feedback app handed none over."""
        if self._feedback_renderer is None:
            raise Unsupported("slack: no feedback-area renderer was handed over")
        return self._feedback_renderer(policy, delivery_id, choice)

    @property
    def send_errors(self) -> tuple[type[Exception], ...]:
        return (ChannelSendError,)

    def send(self, bot, message, *, receive_id, receive_id_type="chat_id", uuid=None, purpose=""):
        """Record, then `chat.postMessage` `message` (`{"text", "blocks"}`) to Slack channel
        `receive_id`; returns the `CardEntity` (`address={"channel", "ts"}`). A repeated
        `uuid` whose send was recorded returns that record without a second message; Slack has
        no idempotency key, so the message carries the `uuid` as metadata and a retry of a send
        interrupted between Slack's answer and the record first looks for it in the
        conversation's history (`webapi.find_sent`) instead of posting again. Raises `ChannelSendError` (`code` = Slack's error,
        `no_slack_app` for a bot without a Slack app, or `invalid_blocks` for a message
        breaking `blocks.problems`; nothing sent)."""
        if getattr(bot, "slack_app", None) is None:
            raise ChannelSendError("this bot has no Slack app", code="no_slack_app")
        problems = blocks.problems(message)
        if problems:
            raise ChannelSendError("; ".join(problems[:5]), code="invalid_blocks")
        uuid = uuid or None
        recorded, created = _recorded_send(bot, uuid, purpose) if uuid else (None, False)
        if recorded is not None and recorded.address.get("ts"):
            return recorded
        token = _token(bot)
        if recorded is not None and not created and token:
            found = _already_sent(token, receive_id, recorded)
            if found:
                return self._addressed(recorded, {"channel": receive_id, "ts": found})
        try:
            sent = webapi.post_message(
                token,
                receive_id,
                message["blocks"],
                message.get("text", ""),
                _base_url(),
                send_key=recorded.send_uuid if recorded is not None else "",
            )
        except webapi.SlackCallError as exc:
            raise ChannelSendError(exc.error, code=exc.error) from None
        address = {"channel": sent["channel"], "ts": sent["ts"]}
        if recorded is None:
            recorded = CardEntity.objects.create(
                bot=bot,
                channel=self.name,
                send_uuid=f"sl_{sent['channel']}_{sent['ts']}"[:50],
                address=address,
                purpose=purpose,
            )
            return _record_message_ts(recorded, sent["ts"])
        return self._addressed(recorded, address)

    @staticmethod
    def _addressed(recorded: CardEntity, address: dict[str, str]) -> CardEntity:
        """`recorded` with the sent message's `address` (and its `ts` as `open_message_id`)."""
        CardEntity.objects.filter(pk=recorded.pk).update(address=address)
        recorded.address = address
        return _record_message_ts(recorded, address["ts"])

    def update(self, sent, message, *, version=None):
        """`cards.enqueue_card`: the whole message replaced by `chat.update`, paced and retried
        by the card worker after the callback's answer."""
        return cards.enqueue_card(sent, message, version=version)

    def apply_update(self, card, update) -> None:
        """`chat.update` of `card.address` with `update.card_json` (`{"text", "blocks"}`).
        Raises `cards.UpdateFailed`: retryable for 429 (with its `Retry-After`), 5xx and
        transport errors; permanent for Slack's other errors (`message_not_found`, …)."""
        message = update.card_json
        if not isinstance(message, dict) or update.elements:
            raise cards.UpdateFailed("slack messages are replaced whole", retryable=False)
        address = card.address or {}
        if not address.get("channel") or not address.get("ts"):
            raise cards.UpdateFailed("slack message address missing", retryable=False)
        try:
            webapi.update_message(
                _token(card.bot),
                address["channel"],
                address["ts"],
                message.get("blocks") or [],
                message.get("text", ""),
                _base_url(),
            )
        except webapi.SlackCallError as exc:
            raise cards.UpdateFailed(
                exc.error,
                retryable=exc.retryable,
                rate_limited=exc.status == 429,
                retry_after=exc.retry_after,
                code=exc.status if exc.status != 200 else None,
            ) from None
        return None

    def reply_text(self, bot, reply_to: dict[str, Any], text: str, *, uuid: str = "") -> None:
        """Post `text` in the thread of message `reply_to["ts"]` in `reply_to["channel"]`.
        Raises `ChannelSendError`."""
        block = [{"type": "section", "text": blocks.mrkdwn(blocks.escape(text))}]
        try:
            webapi.post_message(
                _token(bot),
                str(reply_to["channel"]),
                block,
                text,
                _base_url(),
                thread_ts=str(reply_to.get("thread_ts") or reply_to.get("ts") or "") or None,
            )
        except webapi.SlackCallError as exc:
            raise ChannelSendError(exc.error, code=exc.error) from None

    def parse_callback(self, bot, payload: dict[str, Any]) -> CardAction:
        """The `CardAction` of a verified `block_actions` payload (`neutral_payload`)."""
        return CardAction.from_payload(bot, neutral_payload(payload))

    def operator(self, action: CardAction) -> str:
        return action.operator_open_id


def _record_message_ts(entity: CardEntity, ts: str) -> CardEntity:
    """Record the message's `ts` as the entity's `open_message_id`: a click's neutral payload
    names its message by `container.message_ts` (`neutral_payload`), so
    `CardEntity.objects.for_message` finds the entity a Slack click came from (the progress
    message of a session, `interactions.asks.progress.session_for_message`). A `ts` is unique
    within a conversation; should another message of the bot already hold it (two
    conversations, the same microsecond), the address alone keeps the entity and the click is
    refused as unknown rather than routed to the wrong message."""
    try:
        with transaction.atomic():
            CardEntity.objects.filter(pk=entity.pk).update(open_message_id=ts[:64])
    except IntegrityError:
        log.warning(
            "slack message ts of card %s is already another card's; not recorded", entity.pk
        )
        return entity
    entity.open_message_id = ts[:64]
    return entity


def _recorded_send(bot, uuid: str, purpose: str) -> tuple[CardEntity, bool]:
    """The row of send `uuid` of `bot`, written (and committed) before anything is sent, and
    whether this call wrote it (False: an earlier send of the same `uuid` did)."""
    uuid = uuid[: cards.UUID_MAX]
    found = CardEntity.objects.for_send(bot, uuid).first()
    if found is not None:
        return found, False
    try:
        with transaction.atomic():
            row = CardEntity.objects.create(
                bot=bot, channel=kinds.SLACK, send_uuid=uuid, purpose=purpose
            )
        return row, True
    except IntegrityError:  # a concurrent send of the same uuid recorded it first
        return CardEntity.objects.for_send(bot, uuid).get(), False


#: Seconds before a recorded send's row was written that its message may carry as `ts` (a
#: clock skew margin between this host and Slack).
FIND_SENT_MARGIN = 60


def _already_sent(token: str, channel: str, recorded: CardEntity) -> str | None:
    """The `ts` of the message an earlier, interrupted send of `recorded` posted (found by its
    send key in the conversation's history, `webapi.find_sent`), or None. A history Slack
    will not show (no `*:history` scope, a transport failure) counts as none: the message is
    then posted again, as before send keys."""
    oldest = recorded.created_at.timestamp() - FIND_SENT_MARGIN
    try:
        return webapi.find_sent(token, channel, recorded.send_uuid, oldest, _base_url())
    except webapi.SlackCallError as exc:
        log.info("slack send %s: history not searched (%s); sending", recorded.pk, exc.error)
        return None
