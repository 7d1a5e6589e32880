"""The registry of channel implementations: the channel kind → its `base.Channel`.

    channel = channels.get(ia.channel)          # FeishuChannel, or a text-fallback channel
    if channel.capabilities.buttons: ...

Implementations register in `InteractionsConfig.ready()`; this package imports none of them
(only `kinds` and `base`), so a domain module may import it without importing any channel.

| module | what |
|---|---|
| `base` | THE CHANNEL INTERFACE (`Channel`), which every channel implements |
| `kinds` | channel kinds, `Capabilities`, and which tools a session may expose (pure) |
| `text` | the text-fallback channels (wechat, text, webhook) |
| `feishu/` | the Feishu channel: `channel` (`FeishuChannel`), `asgi` (the callback route), `ingress`, `ws` (long connection) |
| `slack/` | the Slack channel: `channel` (`SlackChannel`), `blocks` (Block Kit, limits), `ingress` (interactivity and events URLs), `webapi` (slack-sdk) |
"""

from __future__ import annotations

import threading

from interactions import kinds
from interactions.channels.base import Channel
from interactions.kinds import Capabilities

_lock = threading.Lock()
_channels: dict[str, Channel] = {}


def register(channel: Channel) -> None:
    """Make `channel` the implementation of its kind (`channel.name`, a kind of
    `kinds.KINDS`), and, when it can update sent messages, the applier of its cards' queued
    updates (`cardqueue.service.register_applier`). Registering again replaces it (ready()
    may run twice)."""
    if kinds.normalize(channel.name) != channel.name:
        raise ValueError(f"{channel.name!r} is not a canonical channel kind")
    with _lock:
        _channels[channel.name] = channel
    if channel.capabilities.update:
        # the card worker applies this channel's updates; it never imports a channel
        from interactions.cardqueue import service as cards

        cards.register_applier(channel.name, channel)


def get(kind: str) -> Channel:
    """The channel of `kind` (canonical or alias). Unknown kinds get webhook's (nothing
    interactive: the safe answer). Raises LookupError when that kind has no registered
    implementation."""
    name = kinds.normalize(kind) or kinds.WEBHOOK
    try:
        return _channels[name]
    except KeyError:
        raise LookupError(f"no channel registered for {name!r}") from None


def capabilities(kind: str) -> Capabilities:
    """What the channel of `kind` can show (its registered implementation's)."""
    return get(kind).capabilities


def registered() -> list[Channel]:
    """Every registered channel, in `kinds.KINDS` order."""
    with _lock:
        return [_channels[k] for k in kinds.KINDS if k in _channels]
