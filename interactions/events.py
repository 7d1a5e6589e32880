"""How `interactions` records facts for the outside world without importing `feedback`.

The events table and the outbox live in `feedback`; `feedback` registers the sink from its
`AppConfig.ready()`. `emit()` must be called inside the transaction that records the fact, and
fails loudly when no sink is registered, so an event can never be dropped silently.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

_sink: Callable[..., Any] | None = None


class NoEventSink(RuntimeError):
    """No app registered an event sink (feedback is not installed or not ready)."""


def register_sink(fn: Callable[..., Any]) -> None:
    """Install `fn(type_, event_id, data, *, bot, team, time)` as the event sink."""
    global _sink
    _sink = fn


def emit(type_: str, event_id: str, data: dict[str, Any], *, bot=None, team=None, time=None):
    """Record an event through the registered sink (inside the caller's transaction)."""
    if _sink is None:
        raise NoEventSink("no event sink registered; is the feedback app installed?")
    return _sink(type_, event_id, data, bot=bot, team=team, time=time)
