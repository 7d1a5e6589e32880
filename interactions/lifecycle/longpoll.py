"""Long-polls (`GET …?wait=`): wait until an interaction or ask is final
(`wait_for_final`), or until any read is ready (`wait_until`: the event feed), holding no
thread and no database connection between polls.

The waiter subscribes to wake-ups first (`interactions.lifecycle.waiters`), then polls the
database with backoff; a wake-up only triggers the next poll, the database is the truth.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from asgiref.sync import sync_to_async
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from interactions.lifecycle import waiters
from interactions.models import Interaction

log = logging.getLogger(__name__)

#: Longest long-poll (seconds).
MAX_WAIT = 60
#: Database polls of a long-poll start this far apart and back off up to MAX_POLL_INTERVAL;
#: a channel-layer message wakes the waiter earlier.
FIRST_POLL_INTERVAL = 0.25
MAX_POLL_INTERVAL = 5.0


class _Wakeups:
    """The wake-ups of one long-poll on `key`: this process's (`waiters.add_local_waiter`)
    and, with Redis, the channel-layer group `waiters.GROUP_PREFIX + key`. Subscribed on
    entering, before the first database read, so a change between a read and the
    subscription cannot be missed."""

    def __init__(self, key: str):
        self.key = key
        self.group = waiters.GROUP_PREFIX + key
        self.woken = asyncio.Event()
        self.layer = None
        self.channel_name = None

    async def __aenter__(self) -> _Wakeups:
        self.loop = asyncio.get_running_loop()
        waiters.add_local_waiter(self.key, self.loop, self.woken)
        self.layer = waiters.channel_layer_for_waiters()
        if self.layer is not None:
            try:
                self.channel_name = await self.layer.new_channel()
                await self.layer.group_add(self.group, self.channel_name)
            except Exception:  # noqa: BLE001 - polling alone is still correct
                log.warning("long-poll %s: channel layer unavailable; polling only", self.key)
                self.channel_name = None
        return self

    def clear(self) -> None:
        """Forget wake-ups received so far (call before each database read)."""
        self.woken.clear()

    async def wait(self, timeout: float) -> None:
        """Return after a wake-up or `timeout` seconds, whichever comes first."""
        waits = [asyncio.ensure_future(self.woken.wait())]
        if self.channel_name is not None:
            waits.append(asyncio.ensure_future(self.layer.receive(self.channel_name)))
        try:
            done, _pending = await asyncio.wait(
                waits, timeout=timeout, return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            # also when the client went away and this request was cancelled: asyncio.wait
            # leaves its tasks running ("Task was destroyed but it is pending!")
            for task in waits:
                task.cancel()
        for task in done:
            if task.exception() is not None:
                log.warning("long-poll %s: channel layer receive failed", self.key)
                self.channel_name = None

    async def __aexit__(self, *exc) -> None:
        waiters.remove_local_waiter(self.key, self.loop, self.woken)
        if self.channel_name is not None:
            try:
                await self.layer.group_discard(self.group, self.channel_name)
            except Exception:  # noqa: BLE001
                log.debug("long-poll %s: group_discard failed", self.key)


async def wait_for_final(
    bot,
    public_id: str,
    wait: float,
    state: dict,
    *,
    read_state,
    expires_key: str = "expires_at",
) -> dict | None:
    """Poll the interaction until it is final or `wait` seconds passed.

    Subscribes first — to this process's wake-ups (`waiters.add_local_waiter`) and, with
    Redis, to the channel-layer group — so a resolution between a poll and the subscription
    cannot be missed; then polls the database with backoff (FIRST_POLL_INTERVAL doubling to
    MAX_POLL_INTERVAL, never sleeping past `expires_at`, where the poll expires it). A wake-up
    only triggers the next poll: the database is the truth. Returns the last state read.

    `read_state(bot, public_id) -> dict | None` (sync) reads one state: an interaction's JSON
    (`GET /api/v1/interactions/<id>`) or an ask's (`GET /api/v1/asks/<requestId>`, with
    `expires_key`); a state is final when its `status` is not "pending"."""
    read = sync_to_async(read_state)
    deadline = time.monotonic() + wait
    delay = FIRST_POLL_INTERVAL
    async with _Wakeups(public_id) as wakeups:
        while True:
            wakeups.clear()
            state = await read(bot, public_id)
            if state is None or state["status"] != Interaction.Status.PENDING:
                return state
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return state
            until_expiry = (_parse_time(state[expires_key]) - timezone.now()).total_seconds() + 0.05
            await wakeups.wait(max(0.01, min(delay, remaining, max(until_expiry, 0.01))))
            delay = min(delay * 2, MAX_POLL_INTERVAL)


async def wait_until(key: str, wait: float, read, *, ready) -> Any:
    """Call `read()` (sync, in a worker thread) until `ready(result)` or `wait` seconds
    passed; return the last result. Woken early by `waiters.notify_waiters(key)` (this
    process, and other processes through the Redis channel layer), subscribed before the
    first read; between wake-ups the database is polled with the same backoff as
    `wait_for_final` (FIRST_POLL_INTERVAL doubling to MAX_POLL_INTERVAL). Holds no thread
    and no database connection while waiting if `read` closes its connection."""
    read_async = sync_to_async(read)
    deadline = time.monotonic() + wait
    delay = FIRST_POLL_INTERVAL
    async with _Wakeups(key) as wakeups:
        while True:
            wakeups.clear()
            result = await read_async()
            remaining = deadline - time.monotonic()
            if ready(result) or remaining <= 0:
                return result
            await wakeups.wait(max(0.01, min(delay, remaining)))
            delay = min(delay * 2, MAX_POLL_INTERVAL)


def _parse_time(value: str):
    return parse_datetime(value)
