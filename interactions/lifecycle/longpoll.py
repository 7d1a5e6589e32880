"""Long-polls (`GET …?wait=`): wait until an interaction or ask is final, holding no thread
and no database connection between polls.

The waiter subscribes to wake-ups first (`interactions.lifecycle.waiters`), then polls the
database with backoff; a wake-up only triggers the next poll, the database is the truth.
"""

from __future__ import annotations

import asyncio
import logging
import time

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
    loop = asyncio.get_running_loop()
    woken = asyncio.Event()
    waiters.add_local_waiter(public_id, loop, woken)
    layer = waiters.channel_layer_for_waiters()
    group = waiters.GROUP_PREFIX + public_id
    channel_name = None
    if layer is not None:
        try:
            channel_name = await layer.new_channel()
            await layer.group_add(group, channel_name)
        except Exception:  # noqa: BLE001 - polling alone is still correct
            log.warning("interaction %s: channel layer unavailable; polling only", public_id)
            channel_name = None
    read = sync_to_async(read_state)
    deadline = time.monotonic() + wait
    delay = FIRST_POLL_INTERVAL
    try:
        while True:
            woken.clear()
            state = await read(bot, public_id)
            if state is None or state["status"] != Interaction.Status.PENDING:
                return state
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return state
            until_expiry = (_parse_time(state[expires_key]) - timezone.now()).total_seconds() + 0.05
            pause = max(0.01, min(delay, remaining, max(until_expiry, 0.01)))
            waits = [asyncio.ensure_future(woken.wait())]
            if channel_name is not None:
                waits.append(asyncio.ensure_future(layer.receive(channel_name)))
            try:
                done, _pending = await asyncio.wait(
                    waits, timeout=pause, return_when=asyncio.FIRST_COMPLETED
                )
            finally:
                # also when the client went away and this request was cancelled: asyncio.wait
                # leaves its tasks running ("Task was destroyed but it is pending!")
                for task in waits:
                    task.cancel()
            for task in done:
                if task.exception() is not None:
                    log.warning("interaction %s: channel layer receive failed", public_id)
                    channel_name = None
            delay = min(delay * 2, MAX_POLL_INTERVAL)
    finally:
        waiters.remove_local_waiter(public_id, loop, woken)
        if channel_name is not None:
            try:
                await layer.group_discard(group, channel_name)
            except Exception:  # noqa: BLE001
                log.debug("interaction %s: group_discard failed", public_id)


def _parse_time(value: str):
    return parse_datetime(value)
