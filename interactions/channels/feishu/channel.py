"""The Feishu channel: `FeishuChannel` implements `interactions.channels.base.Channel` by
wrapping the code that does the work today.

| interface | Feishu |
|---|---|
| `render_interaction` | `interactions.render.interaction_cards.feishu_card` (Card JSON 2.0) |
| `render_progress` | `interactions.render.progress_cards.render` |
| `render_feedback_area` | the renderer the feedback app hands over (`use_feedback_renderer`) |
| `send` | `interactions.cardqueue.service.send_card` (CardKit entity, `uuid` deduplicated) |
| `update` | `interactions.cardqueue.service.enqueue_card` (the durable card-update queue) |
| `apply_update` | CardKit `card.update` / element updates with the next `sequence`, or a message PATCH |
| `reply_text` | a text reply to a message (`im.v1.message.reply`) |
| `parse_callback` | `CardAction.from_payload` of a verified `card.action.trigger` body |
| `operator` | `event.operator.open_id` of the verified callback |

The transport that verifies callbacks is `interactions.channels.feishu.ingress` (HTTP, through
`asgi`) and `ws` (long connection); both feed `interactions.callbacks.dispatcher`.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

from interactions import kinds
from interactions.callbacks.registry import CardAction
from interactions.cardqueue import service as cards
from interactions.channels.base import Channel, ChannelSendError
from interactions.render import interaction_cards, progress_cards


class FeishuChannel(Channel):
    """Feishu / Lark: interactive cards (Card JSON 2.0) with buttons and forms, updated in
    place through CardKit or a message PATCH."""

    name = kinds.FEISHU
    capabilities = kinds.CAPABILITIES[kinds.FEISHU]
    shows_progress = True

    def __init__(self) -> None:
        self._feedback_renderer: Callable[..., dict[str, Any]] | None = None

    def render_interaction(self, ia) -> dict[str, Any]:
        return interaction_cards.feishu_card(ia)

    def render_progress(self, session, asks) -> dict[str, Any]:
        return progress_cards.render(session, asks)

    def use_feedback_renderer(self, fn: Callable[..., dict[str, Any]]) -> None:
        """Render feedback areas with `fn(policy, delivery_id, choice)` (the feedback app's
        `feedback.cards.feedback_area`, which owns the area's rules; it lives above this app,
        so it is handed over instead of imported)."""
        self._feedback_renderer = fn

    def render_feedback_area(self, policy: dict[str, Any], delivery_id: str, choice):
        """`{element_id: component}` of the feedback area (appended to the answer's card)."""
        if self._feedback_renderer is None:
            raise LookupError("no feedback-area renderer was handed to the Feishu channel")
        return self._feedback_renderer(policy, delivery_id, choice)

    def send(self, bot, message, *, receive_id, receive_id_type="chat_id", uuid=None, purpose=""):
        """`cards.send_card`: a CardKit card entity, then the message referencing it. Raises
        `cards.InvalidCard` (nothing sent) and `interactions.lark.client.LarkApiError`."""
        return cards.send_card(
            bot,
            message,
            receive_id=receive_id,
            receive_id_type=receive_id_type,
            uuid=uuid,
            purpose=purpose,
        )

    def update(self, sent, message, *, version=None):
        """`cards.enqueue_card`: the whole card replaced (CardKit `card.update` for an entity,
        message PATCH otherwise), coalesced and paced by the card worker."""
        return cards.enqueue_card(sent, message, version=version)

    #: Feishu allows 5 updates per second per message.
    update_interval = timedelta(milliseconds=200)

    @property
    def send_errors(self) -> tuple[type[Exception], ...]:
        """`LarkApiError` (code, msg, log_id): Feishu refused or the call failed."""
        # imported here: lark-oapi takes seconds to import
        from interactions.lark.client import LarkApiError

        return (LarkApiError, ChannelSendError)

    def apply_update(self, card, update) -> int | None:
        """Apply `update` (its `card_json`, or `elements` of a CardKit entity) to `card`:
        CardKit `card.update` / element updates with the card's next `sequence` (returned),
        or a whole-card message PATCH for a plain message (returns None). Raises
        `cards.UpdateFailed` with Feishu's code, `retryable` / `rate_limited` and
        `retry_after` (https://open.feishu.cn/document/server-docs/api-call-guide/frequency-control)."""
        # imported here: lark-oapi takes seconds to import, and every process imports the queue
        from interactions.lark.client import LarkApiError, gateway_for

        sequence = cards.next_sequence(card) if card.card_id else None
        try:
            gateway = gateway_for(card.bot)
            if update.card_json is not None:
                if card.card_id:
                    gateway.update_card(card.card_id, update.card_json, sequence=sequence)
                else:
                    gateway.patch_message(card.open_message_id, update.card_json)
            elif len(update.elements) == 1:
                ((element_id, element),) = update.elements.items()
                gateway.update_element(card.card_id, element_id, element, sequence=sequence)
            else:
                gateway.batch_update_elements(card.card_id, update.elements, sequence=sequence)
        except LarkApiError as exc:
            raise cards.UpdateFailed(
                str(exc),
                retryable=exc.retryable,
                rate_limited=exc.rate_limited,
                retry_after=getattr(exc, "retry_after", None),
                code=exc.code,
                sequence=sequence,
            ) from exc
        except Exception as exc:  # noqa: BLE001 - unexpected library/bug: keep the update, retry
            raise cards.UpdateFailed(
                str(exc), retryable=True, sequence=sequence, unexpected=True
            ) from exc
        return sequence

    def reply_text(self, bot, reply_to: dict[str, Any], text: str, *, uuid: str = "") -> None:
        """Reply `text` to message `reply_to["message_id"]` (`uuid` deduplicates a retried
        reply). Raises `LarkApiError`."""
        # imported here: lark-oapi takes seconds to import, and a text reply is rare
        from interactions.lark.client import gateway_for

        gateway_for(bot).reply_text(str(reply_to["message_id"]), text, uuid=uuid)

    def parse_callback(self, bot, payload: dict[str, Any]) -> CardAction:
        return CardAction.from_payload(bot, payload)

    def operator(self, action: CardAction) -> str:
        return action.operator_open_id
