"""The text-fallback channels (wechat, text, webhook): no buttons, no forms, no updates.

Cardloop renders the interaction as plain text — the question, numbered options, the exact
`/_interaction <id> <value>` command for each, and why there are no buttons on this channel —
and the bot backend sends that text itself. A person answers by typing the command (the
backend forwards it to `POST /api/v1/interactions/text-command`), so there is nothing to send,
update or parse here: those operations raise `Unsupported`.
"""

from __future__ import annotations

from typing import Any

from interactions import kinds
from interactions.channels.base import Channel, Unsupported
from interactions.render import interaction_cards


class TextChannel(Channel):
    """A channel shown only as text (`kinds.WECHAT`, `kinds.TEXT` or `kinds.WEBHOOK`)."""

    def __init__(self, name: str):
        if name == kinds.FEISHU or kinds.normalize(name) != name:
            raise ValueError(f"{name!r} is not a text-fallback channel kind")
        self.name = name
        self.capabilities = kinds.CAPABILITIES[name]

    def render_interaction(self, ia) -> str:
        """The text fallback (`interaction_cards.fallback_text`) with this channel's reason
        for having no buttons."""
        return interaction_cards.fallback_text(ia, self.name)

    def render_progress(self, session, asks) -> str:
        raise Unsupported(f"{self.name}: progress messages need a channel with buttons")

    def render_feedback_area(self, policy: dict[str, Any], delivery_id: str, choice) -> str:
        raise Unsupported(f"{self.name}: feedback areas need a channel with buttons")

    def send(self, bot, message, *, receive_id, receive_id_type="chat_id", uuid=None, purpose=""):
        raise Unsupported(f"{self.name}: the bot backend sends the text itself")

    def update(self, sent, message, *, version=None):
        raise Unsupported(f"{self.name}: a sent text cannot be changed")

    def parse_callback(self, bot, payload: dict[str, Any]):
        raise Unsupported(f"{self.name}: answers arrive as typed commands, not callbacks")

    def operator(self, action) -> str:
        raise Unsupported(f"{self.name}: answers arrive as typed commands, not callbacks")


def text_channels() -> list[TextChannel]:
    """One `TextChannel` per channel kind without buttons."""
    return [TextChannel(kind) for kind in kinds.KINDS if not kinds.CAPABILITIES[kind].buttons]
