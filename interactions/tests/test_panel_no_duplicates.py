"""A client never sees the same question twice on one connection: a push racing the connect
snapshot or a periodic resync, and a cancellation racing a resync that already dropped its
question (the real ASGI application, the in-memory or Redis channel layer, no mocks except
holding pushes back to order the race)."""

from __future__ import annotations

import asyncio

import pytest

from interactions import presence as panel_presence
from interactions.asks import service as asks
from interactions.tests.panel_helpers import *  # noqa: F403
from interactions.tests.panel_helpers import receive, receive_until
from interactions.tests.test_panel_asks import connected, db, register

pytestmark = pytest.mark.django_db(transaction=True)


def hold_pushes(monkeypatch) -> list[tuple]:
    """Collect every push instead of sending it; `release(held)` sends them later."""
    held: list[tuple] = []
    monkeypatch.setattr(panel_presence, "push", lambda *args: held.append(args))
    return held


def release(monkeypatch, held):
    monkeypatch.undo()
    for args in held:
        panel_presence.push(*args)


async def test_a_push_arriving_after_the_resync_sent_its_ask_is_not_sent_again(
    panel_user, settings, monkeypatch
):
    settings.CARDLOOP_PANEL_RESYNC = 0.2
    settings.CARDLOOP_PANEL_RESYNC_GRACE = 0.05
    bot, raw, _token = panel_user
    comm = await connected(raw)
    await receive(comm)
    held = hold_pushes(monkeypatch)
    ask = await db(register)(bot)
    envelope = await receive(comm)  # the periodic resync finds it first
    assert envelope == {**envelope, "type": "snapshot", "requestIds": [ask.public_id]}
    assert await receive(comm) == asks.panel_message(ask)
    release(monkeypatch, held)  # the push, late (a fan-out to many panels)
    assert await comm.receive_nothing(1.0)  # several resyncs ran too: nothing more
    await comm.disconnect(timeout=10)


async def test_an_ask_younger_than_the_grace_is_left_to_its_push(panel_user, settings, monkeypatch):
    settings.CARDLOOP_PANEL_RESYNC = 0.2
    settings.CARDLOOP_PANEL_RESYNC_GRACE = 30
    bot, raw, _token = panel_user
    comm = await connected(raw)
    await receive(comm)
    held = hold_pushes(monkeypatch)
    repaired = panel_presence.STATS["resync_repaired"]
    deferred = panel_presence.STATS["resync_deferred"]
    ask = await db(register)(bot)
    assert await comm.receive_nothing(1.0)  # resyncs ran: none "repaired" the push in flight
    assert panel_presence.STATS["resync_repaired"] == repaired
    assert panel_presence.STATS["resync_deferred"] > deferred
    release(monkeypatch, held)
    assert await receive(comm) == asks.panel_message(ask)
    assert await comm.receive_nothing(0.6)
    await comm.disconnect(timeout=10)


async def test_a_push_arriving_after_the_connect_snapshot_sent_its_ask_is_not_sent_again(
    panel_user, settings, monkeypatch
):
    settings.CARDLOOP_PANEL_RESYNC = 600
    bot, raw, _token = panel_user
    first = await connected(raw)
    await receive(first)
    held = hold_pushes(monkeypatch)
    ask = await db(register)(bot)
    second = await connected(raw)  # its snapshot has the ask; the push is still on its way
    assert (await receive(second))["requestIds"] == [ask.public_id]
    assert await receive(second) == asks.panel_message(ask)
    release(monkeypatch, held)
    assert await receive(first) == asks.panel_message(ask)  # the first panel gets it once
    assert await second.receive_nothing(0.5)
    assert await first.receive_nothing(0.2)
    for comm in (first, second):
        await comm.disconnect(timeout=10)


async def test_a_cancellation_after_a_resync_dropped_its_ask_is_not_sent_again(
    panel_user, settings, monkeypatch
):
    settings.CARDLOOP_PANEL_RESYNC = 0.2
    bot, raw, _token = panel_user
    comm = await connected(raw)
    await receive(comm)
    ask = await db(register)(bot)
    assert await receive(comm) == asks.panel_message(ask)
    held = hold_pushes(monkeypatch)
    await db(asks.cancel_ask)(ask)
    envelope, before = await receive_until(comm, lambda f: f["type"] == "snapshot")
    assert envelope["requestIds"] == [] and before == []
    release(monkeypatch, held)  # the cancellation, late
    assert await comm.receive_nothing(1.0)
    await comm.disconnect(timeout=10)


async def test_a_requested_sync_still_sends_every_open_ask(panel_user, settings):
    settings.CARDLOOP_PANEL_RESYNC = 600
    bot, raw, _token = panel_user
    comm = await connected(raw)
    await receive(comm)
    ask = await db(register)(bot)
    await receive(comm)
    await comm.send_json_to({"type": "sync"})  # a client that lost its state asks for all
    assert (await receive(comm))["requestIds"] == [ask.public_id]
    assert await receive(comm) == asks.panel_message(ask)
    await asyncio.sleep(0)
    await comm.disconnect(timeout=10)
