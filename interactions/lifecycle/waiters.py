"""Long-polls waiting for an interaction's final state (key: its public_id) or for new feed
events (keys `feed.<bot pk>` / `feed`, `feedback.events.feed_waiter_key`), and waking them.

A waiter in this process registers an `asyncio.Event` (`add_local_waiter`); waiters in other
processes listen on the channel-layer group `GROUP_PREFIX + public_id` (Redis), sent by this
process's waker thread (`_RemoteWaker`), so the caller never waits on Redis. `resolve()` calls
`notify_waiters` after commit. Best effort: the database stays the truth, and a lost wake-up
only means the waiter finds the state at its next database poll.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from typing import Any

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
    of other processes through the channel layer group, sent by the waker thread
    (`_RemoteWaker`). Returns at once. Best effort: a lost wake-up only means the waiter
    finds the state at its next database poll."""
    with _local_lock:
        waiters = list(_local_waiters.get(public_id, ()))
    for loop, event in waiters:
        try:
            loop.call_soon_threadsafe(event.set)
        except RuntimeError:  # that loop is closed: its waiter is gone
            pass
    try:
        if channel_layer_for_waiters() is not None:
            REMOTE.wake(public_id)
    except Exception:  # noqa: BLE001 - never fail a resolution for a wake-up
        log.warning("interaction %s: could not notify waiters", public_id, exc_info=True)


class _RemoteWaker:
    """Sends the channel-layer wake-ups of this process from one daemon thread with its own
    event loop, coalescing repeats.

    Why: every feedback click wakes two feed groups (staff's and its bot's), and each
    `group_send` from the click's handler thread cost about 0.23 ms of its CPU on Redis
    (`async_to_sync`'s hand-off plus channels-redis's three commands) and the click's time
    waiting on Redis. Here the caller only adds the key to a set; the thread sends one
    message per key per round, so under load many clicks of one bot share one send, and
    while idle a wake-up leaves at once. Keys are sent in the order they were first added.
    A failed send (an exception or a cancelled send) is logged (the key, never who caused it)
    and dropped, and the thread goes on: the waiter still finds the state at its next poll.
    A forked child starts its own thread."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.pending: dict[str, None] = {}  # insertion-ordered set
        self.thread: threading.Thread | None = None
        self.pid = 0
        #: group messages sent (for logs and tests)
        self.sent = 0

    def wake(self, public_id: str) -> None:
        """Queue a wake-up of `public_id`'s group (thread-safe, never blocks on I/O)."""
        with self.cond:
            self.pending[public_id] = None
            if self.thread is None or self.pid != os.getpid() or not self.thread.is_alive():
                self.pid = os.getpid()
                self.thread = threading.Thread(
                    target=self._run, name="cardloop-waiter-wakeups", daemon=True
                )
                self.thread.start()
            self.cond.notify()

    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        while True:
            with self.cond:
                while not self.pending:
                    self.cond.wait()
                keys = list(self.pending)
                self.pending.clear()
            layer = channel_layer_for_waiters()
            if layer is None:
                continue
            for key in keys:
                try:
                    loop.run_until_complete(
                        layer.group_send(
                            GROUP_PREFIX + key, {"type": "interaction.resolved", "id": key}
                        )
                    )
                    self.sent += 1
                # CancelledError too: a BaseException, it would end the thread and leave the
                # keys queued meanwhile unsent until the next wake-up
                except (Exception, asyncio.CancelledError):  # noqa: BLE001 - the waiter polls
                    log.warning("waiters of %s: could not notify through the layer", key)


#: This process's waker thread.
REMOTE = _RemoteWaker()
