"""Long-polls waiting for an interaction's final state (key: its public_id) or for new feed
events (keys `feed.<bot pk>` / `feed`, `feedback.events.feed_waiter_key`), and waking them.

A waiter in this process registers an `asyncio.Event` (`add_local_waiter`); waiters in other
processes listen on the channel-layer group `GROUP_PREFIX + public_id` (Redis). `resolve()`
calls `notify_waiters` after commit. Best effort: the database stays the truth, and a lost
wake-up only means the waiter finds the state at its next database poll.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import InMemoryChannelLayer, get_channel_layer

log = logging.getLogger(__name__)

#: Prefix of channel-layer groups that wake long-polls.
GROUP_PREFIX = "interaction."

#: Long-polls waiting in this process: public_id → {(event loop, asyncio.Event)}.
_local_waiters: dict[str, set[tuple[Any, Any]]] = {}
_local_lock = threading.Lock()


def add_local_waiter(public_id: str, loop, event) -> None:
    """Register an `asyncio.Event` (set on `loop`) to wake when `public_id` is resolved in
    this process."""
    with _local_lock:
        _local_waiters.setdefault(public_id, set()).add((loop, event))


def remove_local_waiter(public_id: str, loop, event) -> None:
    with _local_lock:
        waiters = _local_waiters.get(public_id)
        if waiters is not None:
            waiters.discard((loop, event))
            if not waiters:
                del _local_waiters[public_id]


def channel_layer_for_waiters():
    """The channel layer that reaches waiters in other processes (Redis), or None. The
    in-memory layer reaches no other process, and in-process waiters are woken directly."""
    layer = get_channel_layer()
    return None if layer is None or isinstance(layer, InMemoryChannelLayer) else layer


def notify_waiters(public_id: str) -> None:
    """Wake long-polls of `public_id`: those of this process directly (thread-safe), those
    of other processes through the channel layer group. Best effort: a lost wake-up only
    means the waiter finds the state at its next database poll."""
    with _local_lock:
        waiters = list(_local_waiters.get(public_id, ()))
    for loop, event in waiters:
        try:
            loop.call_soon_threadsafe(event.set)
        except RuntimeError:  # that loop is closed: its waiter is gone
            pass
    try:
        layer = channel_layer_for_waiters()
        if layer is not None:
            async_to_sync(layer.group_send)(
                GROUP_PREFIX + public_id, {"type": "interaction.resolved", "id": public_id}
            )
    except Exception:  # noqa: BLE001 - never fail a resolution for a wake-up
        log.warning("interaction %s: could not notify waiters", public_id, exc_info=True)
