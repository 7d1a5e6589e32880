"""The Feishu channel: `FeishuChannel` implements `interactions.channels.base.Channel` by
wrapping the code that does the work today.

| interface | Feishu |
|---|---|
| `render_interaction` | `interactions.render.interaction_cards.feishu_card` (Card JSON 2.0) |
| `render_progress` | `interactions.render.progress_cards.render` |
| `render_feedback_area` | the renderer the feedback app hands over (`use_feedback_renderer`) |
| `send` | `interactions.cardqueue.service.send_card` (CardKit entity, `uuid` deduplicated) |
| `update` | `interactions.cardqueue.service.enqueue_card` (the durable card-update queue) |
| `parse_callback` | `CardAction.from_payload` of a verified `card.action.trigger` body |
| `operator` | `event.operator.open_id` of the verified callback |

The transport that verifies callbacks is `interactions.channels.feishu.ingress` (HTTP, through
`asgi`) and `ws` (long connection); both feed `interactions.callbacks.dispatcher`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from interactions import kinds
from interactions.callbacks.registry import CardAction
from interactions.cardqueue import service as cards
from interactions.channels.base import Channel
from interactions.render import interaction_cards, progress_cards


class FeishuChannel(Channel):
    """Feishu / Lark: interactive cards (Card JSON 2.0) with buttons and forms, updated in
    place through CardKit or a message PATCH."""

    name = kinds.FEISHU
    capabilities = kinds.CAPABILITIES[kinds.FEISHU]

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

    def parse_callback(self, bot, payload: dict[str, Any]) -> CardAction:
        return CardAction.from_payload(bot, payload)

    def operator(self, action: CardAction) -> str:
        return action.operator_open_id
