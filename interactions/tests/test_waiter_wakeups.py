"""Wake-ups of long-polls in other processes (`interactions.lifecycle.waiters`) on the Redis
channel layer (`@pytest.mark.redis`): sent from the waker thread, so the caller never waits on
Redis, and repeats of one key while a send is on its way become one message. A real listener
on the real layer receives them; the only seam is a gate in front of the layer's
`group_send`."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
from channels.layers import get_channel_layer

from interactions.lifecycle import waiters

pytestmark = pytest.mark.redis


async def _listen(key: str):
    layer = get_channel_layer()
    channel = await layer.new_channel()
    await layer.group_add(waiters.GROUP_PREFIX + key, channel)
    return layer, channel


async def _received(layer, channel, timeout=5.0) -> list[dict]:
    """Every message on `channel` until none came for 0.5 s (the first within `timeout`)."""
    messages = [await asyncio.wait_for(layer.receive(channel), timeout)]
    while True:
        try:
            messages.append(await asyncio.wait_for(layer.receive(channel), 0.5))
        except TimeoutError:
            return messages


async def test_a_wake_up_reaches_a_listener_of_another_process_through_redis():
    key = f"feed.test-{time.monotonic_ns()}"
    layer, channel = await _listen(key)
    await asyncio.to_thread(waiters.notify_waiters, key)
    assert await _received(layer, channel) == [{"type": "interaction.resolved", "id": key}]
    await layer.group_discard(waiters.GROUP_PREFIX + key, channel)


async def test_the_caller_does_not_wait_on_redis_and_repeats_become_one_message(monkeypatch):
    key = f"feed.test-{time.monotonic_ns()}"
    layer, channel = await _listen(key)
    gate, entered = threading.Event(), threading.Event()
    real_send = type(layer).group_send

    async def gated(self, group, message):
        entered.set()
        await asyncio.to_thread(gate.wait, 10)  # Redis slow to answer
        return await real_send(self, group, message)

    monkeypatch.setattr(type(layer), "group_send", gated)
    sent_before = waiters.REMOTE.sent

    def burst():
        waiters.notify_waiters(key)  # the waker takes it and stalls at the gate
        assert entered.wait(5)
        started = time.monotonic()
        for _ in range(50):  # every later click of the bot while Redis is slow
            waiters.notify_waiters(key)
        return time.monotonic() - started

    elapsed = await asyncio.to_thread(burst)
    assert elapsed < 1.0  # none of the 50 waited for the stalled send
    gate.set()
    messages = await _received(layer, channel)
    assert messages == [{"type": "interaction.resolved", "id": key}] * 2  # first, then the rest
    assert waiters.REMOTE.sent == sent_before + 2
    await layer.group_discard(waiters.GROUP_PREFIX + key, channel)


async def test_a_send_that_ends_cancelled_neither_stops_the_waker_nor_strands_the_next_key(
    monkeypatch,
):
    """A send whose coroutine ends in CancelledError (a BaseException, which an Exception
    handler lets through): the key queued meanwhile is still sent, without another wake-up."""
    stalled, queued = f"feed.test-a{time.monotonic_ns()}", f"feed.test-b{time.monotonic_ns()}"
    layer, channel = await _listen(queued)
    gate, entered = threading.Event(), threading.Event()
    real_send = type(layer).group_send

    async def cancelled_once(self, group, message):
        if message["id"] == stalled:
            entered.set()
            await asyncio.to_thread(gate.wait, 10)
            raise asyncio.CancelledError
        return await real_send(self, group, message)

    monkeypatch.setattr(type(layer), "group_send", cancelled_once)

    def wake_both():
        waiters.notify_waiters(stalled)
        assert entered.wait(5)
        waiters.notify_waiters(queued)  # queued while the first send is on its way
        gate.set()

    await asyncio.to_thread(wake_both)
    assert await _received(layer, channel) == [{"type": "interaction.resolved", "id": queued}]
    await layer.group_discard(waiters.GROUP_PREFIX + queued, channel)
