"""Panels on the Redis channel layer (`@pytest.mark.redis`): the process, not each panel, is
the member of a user's group (`presence._Fanout`), so a push to many panels of one user is one
layer message per process, delivered here to every panel once; the membership follows the
process's panels through joins and leaves racing each other, a failed receive and the
layer's group expiry. Real ASGI application, real Redis, no mocks but the seams named."""

from __future__ import annotations

import asyncio

import pytest
from channels.layers import get_channel_layer

from interactions import presence
from interactions.tests.panel_helpers import *  # noqa: F403
from interactions.tests.panel_helpers import REQUESTER, communicator, receive

pytestmark = [pytest.mark.redis, pytest.mark.django_db(transaction=True)]

CANCEL = {"type": "ask_user_questions_cancelled", "requestId": "ask_fan", "reason": "timeout"}


@pytest.fixture(autouse=True)
def own_layer():
    """A channel layer of this test's own, on an empty Redis: channels-redis lets one event
    loop at a time receive on a layer, and a test whose panels are still leaving when its
    loop ends would otherwise leave a receive pending for the next test (Daphne runs one
    loop); and group members left by earlier tests' loops would count in `_members`."""
    from asgiref.sync import async_to_sync
    from channels.layers import channel_layers

    channel_layers.backends.clear()
    async_to_sync(get_channel_layer().flush)()
    yield
    channel_layers.backends.clear()


@pytest.fixture
def no_asks(monkeypatch):
    from interactions.panels import service as panels

    monkeypatch.setattr(panels, "open_messages", lambda user: [])


async def _members(group: str) -> dict[str, float]:
    """The Redis members of `group` (channel name → score, the time it was last added)."""
    layer = get_channel_layer()
    connection = layer.connection(layer.consistent_hash(group))
    rows = await connection.zrange(layer._group_key(group), 0, -1, withscores=True)
    return {name.decode(): score for name, score in rows}


async def _connected(raw: str):
    comm = communicator(raw=raw)
    connected, _ = await comm.connect()
    assert connected
    assert (await receive(comm))["type"] == "snapshot"
    return comm


async def _frames_until_quiet(comm, limit: int, quiet: float = 3) -> list[dict]:
    """The frames `comm` receives, at most `limit`, until none arrives for `quiet` s.

    For pushes that may be lost: a timed `receive` would not do, since asgiref's
    `receive_output` cancels the application when it times out, so a single lost push
    would end the panel (its leave then takes the process out of the group)."""
    frames: list[dict] = []
    while len(frames) < limit and not await comm.receive_nothing(quiet):
        frames.append(await receive(comm))
    return frames


async def _push_and_expect(bot, comms) -> None:
    """Push CANCEL to the user; each of `comms` gets it exactly once."""
    presence.push(bot, REQUESTER, CANCEL)
    for comm in comms:
        assert await receive(comm) == CANCEL
    for comm in comms:
        assert await comm.receive_nothing(0.3)


async def test_a_users_panels_in_one_process_are_one_group_member_and_each_gets_a_push_once(
    panel_user, no_asks
):
    bot, raw, _token = panel_user
    comms = [await _connected(raw) for _ in range(3)]
    group = presence.group_for(bot, REQUESTER)
    fanout = presence.FANOUT.channels[asyncio.get_running_loop()]
    assert list(await _members(group)) == [fanout]
    assert not {c for c in presence.LOCAL.groups[group]} & set(await _members(group))

    await _push_and_expect(bot, comms)
    for comm in comms:
        await comm.disconnect()


async def test_the_process_leaves_the_group_with_its_last_panel_only(panel_user, no_asks):
    bot, raw, _token = panel_user
    first, second = await _connected(raw), await _connected(raw)
    group = presence.group_for(bot, REQUESTER)
    loop = asyncio.get_running_loop()

    await first.disconnect()
    assert list(await _members(group)) == [presence.FANOUT.channels[loop]]
    await _push_and_expect(bot, [second])

    await second.disconnect()
    assert await _members(group) == {}
    await asyncio.sleep(0)
    assert loop not in presence.FANOUT.listeners


async def test_a_panel_joining_while_the_last_one_leaves_stays_in_the_group(
    panel_user, no_asks, monkeypatch
):
    """The last panel's discard reaches Redis after a new panel's add: the leave sees the new
    panel and adds the process back, so the new panel still gets pushes."""
    bot, raw, _token = panel_user
    layer = get_channel_layer()
    leaving = await _connected(raw)
    discard_started, new_panel_in = asyncio.Event(), asyncio.Event()
    real_discard = layer.group_discard

    async def late_discard(group, channel):
        discard_started.set()
        await new_panel_in.wait()
        await real_discard(group, channel)

    monkeypatch.setattr(layer, "group_discard", late_discard)
    disconnecting = asyncio.ensure_future(leaving.disconnect())
    await asyncio.wait_for(discard_started.wait(), 5)
    joined = await _connected(raw)
    new_panel_in.set()
    await disconnecting

    group = presence.group_for(bot, REQUESTER)
    assert list(await _members(group)) == [presence.FANOUT.channels[asyncio.get_running_loop()]]
    await _push_and_expect(bot, [joined])
    await joined.disconnect()


async def test_the_fanout_listener_survives_a_failed_receive(panel_user, no_asks, monkeypatch):
    bot, raw, _token = panel_user
    layer = get_channel_layer()
    real_receive = layer.receive
    failures = []

    async def flaky_receive(channel):
        if channel in presence.FANOUT.channels.values() and not failures:
            failures.append(channel)
            raise ConnectionError("Connection reset by peer")
        return await real_receive(channel)

    monkeypatch.setattr(layer, "receive", flaky_receive)
    before = presence.STATS["fanout_receive_failed"]
    comm = await _connected(raw)
    await _push_and_expect(bot, [comm])
    assert failures and presence.STATS["fanout_receive_failed"] == before + 1
    await comm.disconnect()


async def test_the_heartbeat_renews_the_membership_before_the_group_expires(
    panel_user, no_asks, monkeypatch, settings
):
    """channels_redis drops a member not added again within `group_expiry`: a panel
    connected that long must stay reachable."""
    bot, raw, _token = panel_user
    settings.CARDLOOP_PANEL_HEARTBEAT = 0.2
    monkeypatch.setattr(get_channel_layer(), "group_expiry", 2)  # renewed every 0.5 s
    comm = await _connected(raw)
    group = presence.group_for(bot, REQUESTER)
    (added,) = (await _members(group)).values()
    await asyncio.sleep(1.5)
    (renewed,) = (await _members(group)).values()
    assert renewed > added
    await comm.disconnect()


def _cancel(request_id: str) -> dict:
    return {"type": "ask_user_questions_cancelled", "requestId": request_id, "reason": "timeout"}


async def test_a_panel_joining_while_a_slow_discard_times_out_still_gets_pushes(
    panel_user, no_asks, monkeypatch
):
    """Redis applies the last panel's discard after a new panel's add and answers it late:
    the consumer gives its leave 2 s and cancels it, which must not leave the process out of
    the group (the new panel would get no push until the group's renewal)."""
    bot, raw, _token = panel_user
    layer = get_channel_layer()
    leaving = await _connected(raw)
    discard_started, new_panel_in = asyncio.Event(), asyncio.Event()
    real_discard = layer.group_discard

    async def slow_discard(group, channel):
        discard_started.set()
        await new_panel_in.wait()
        await real_discard(group, channel)
        await asyncio.sleep(3)  # the answer is late

    monkeypatch.setattr(layer, "group_discard", slow_discard)
    disconnecting = asyncio.ensure_future(leaving.disconnect())
    await asyncio.wait_for(discard_started.wait(), 5)
    joined = await _connected(raw)
    new_panel_in.set()
    await disconnecting
    await asyncio.sleep(2.5)  # the leave was given 2 s

    group = presence.group_for(bot, REQUESTER)
    assert list(await _members(group)) == [presence.FANOUT.channels[asyncio.get_running_loop()]]
    await _push_and_expect(bot, [joined])
    await joined.disconnect()


async def test_a_live_panel_still_gets_pushes_after_other_panels_of_its_user_came_and_went(
    panel_user, no_asks
):
    """Membership and listener survive churn. Pushes sent *during* the churn are best effort
    on Redis (channels-redis can lose a message of this process's shared receive when another
    receiver is cancelled mid-receive; the resync repairs it), so only most must arrive."""
    bot, raw, _token = panel_user
    steady = await _connected(raw)
    loop = asyncio.get_running_loop()

    async def churn(rounds):
        for _ in range(rounds):
            comm = communicator(raw=raw)
            connected, _ = await comm.connect()
            if connected:
                await comm.disconnect()

    async def pushes():
        for i in range(30):
            presence.push(bot, REQUESTER, _cancel(f"ask_{i}"))
            await asyncio.sleep(0.02)

    try:
        await asyncio.gather(*(churn(8) for _ in range(6)), pushes())
        got = {frame["requestId"] for frame in await _frames_until_quiet(steady, 30)}
        assert len(got) >= 25
        group = presence.group_for(bot, REQUESTER)
        assert list(await _members(group)) == [presence.FANOUT.channels[loop]]
        assert not presence.FANOUT.listeners[loop].done()
        await _push_and_expect(bot, [steady])  # once the churn is over: every push
    finally:
        await steady.disconnect()


async def test_a_panel_that_missed_a_push_stays_in_the_group_and_gets_the_next_ones(
    panel_user, no_asks, monkeypatch
):
    """A push lost on its way to this process (channels-redis's shared receive can lose one
    when another receiver is cancelled mid-receive) costs the panel that push only: the
    process stays in the group and its listener delivers the next ones."""
    bot, raw, _token = panel_user
    layer = get_channel_layer()
    real_receive = layer.receive
    lost = []

    async def losing_receive(channel):
        while True:
            event = await real_receive(channel)
            if event.get("message", {}).get("requestId") != "ask_lost":
                return event
            lost.append(event)

    monkeypatch.setattr(layer, "receive", losing_receive)
    steady = await _connected(raw)
    for request_id in ("ask_before", "ask_lost", "ask_after"):
        presence.push(bot, REQUESTER, _cancel(request_id))
    frames = await _frames_until_quiet(steady, 3)
    assert sorted(frame["requestId"] for frame in frames) == ["ask_after", "ask_before"]
    assert len(lost) == 1
    group = presence.group_for(bot, REQUESTER)
    assert list(await _members(group)) == [presence.FANOUT.channels[asyncio.get_running_loop()]]
    await _push_and_expect(bot, [steady])
    await steady.disconnect()


async def test_revoking_one_token_closes_its_panels_and_the_users_other_panels_keep_pushes(
    panel_user, no_asks
):
    from channels.db import database_sync_to_async

    from botadmin import services
    from interactions.panels import service as panels

    bot, raw, token = panel_user
    other_raw, _other = await database_sync_to_async(services.issue_desktop_token)(
        "test", bot, REQUESTER, "second"
    )
    revoked = [await _connected(raw), await _connected(raw)]
    kept = await _connected(other_raw)
    await database_sync_to_async(panels.revoke_token)("test", token)
    for comm in revoked:
        assert (await receive(comm))["error"] == "invalid_token"
        assert (await comm.receive_output(5))["type"] == "websocket.close"
    group = presence.group_for(bot, REQUESTER)
    assert list(await _members(group)) == [presence.FANOUT.channels[asyncio.get_running_loop()]]
    await _push_and_expect(bot, [kept])
    await kept.disconnect()


async def test_a_panel_whose_join_fails_leaves_no_member_or_listener_behind(
    panel_user, no_asks, monkeypatch
):
    bot, raw, _token = panel_user
    layer = get_channel_layer()
    real_add = layer.group_add
    loop = asyncio.get_running_loop()

    async def refused(group, channel):
        raise ConnectionError("Connection refused")

    monkeypatch.setattr(layer, "group_add", refused)
    await communicator(raw=raw).connect()
    await asyncio.sleep(0.5)
    assert presence.LOCAL.channels == {}
    assert loop not in presence.FANOUT.listeners
    monkeypatch.setattr(layer, "group_add", real_add)
    live = await _connected(raw)
    await _push_and_expect(bot, [live])
    await live.disconnect()
