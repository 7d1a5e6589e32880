"""Panels and asks together (`interactions.panels` on `interactions.asks`, no monkeypatching):
snapshot on connect, pushes of registrations and completions, answers from the panel accepted
or rejected, presence, token revocation, a channel over capacity (pushes dropped,
the resync repairs) and events while a client reconnects."""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta

import pytest
from channels.db import database_sync_to_async
from django.utils import timezone

from botadmin import services
from interactions import presence as panel_presence
from interactions.asks import service as asks
from interactions.lifecycle import resolve as lifecycle
from interactions.models import Ask, PanelPresence
from interactions.panels import service as panels
from interactions.tests.panel_helpers import *  # noqa: F403
from interactions.tests.panel_helpers import (
    QUESTIONS,
    REQUESTER,
    communicator,
    receive,
    receive_until,
)

pytestmark = pytest.mark.django_db(transaction=True)

ANSWERS = [
    {"question": QUESTIONS[0]["question"], "selectedLabels": ["PostgreSQL"], "customInput": ""},
    {"question": QUESTIONS[1]["question"], "selectedLabels": ["Lint"], "customInput": "e2e"},
]

db = database_sync_to_async


def register(bot, session="sess_1", requester=REQUESTER):
    return asks.register_ask(bot, session, questions=QUESTIONS, requester_open_id=requester).ask


def result(request_id, answers=ANSWERS):
    return {"type": "ask_user_questions_result", "requestId": request_id, "answers": answers}


async def connected(raw):
    comm = communicator(raw=raw)
    # the handshake reads the token and writes presence: with 20 panels reconnecting at once
    # on a loaded machine that takes longer than the communicator's 1 s default
    ok, _ = await comm.connect(timeout=15)
    assert ok
    return comm


async def test_no_panel_means_no_channel_and_a_connected_panel_gets_the_push(panel_user):
    bot, raw, _token = panel_user
    with pytest.raises(asks.NoChannel):
        await db(register)(bot)
    comm = await connected(raw)
    assert (await receive(comm))["requestIds"] == []
    ask = await db(register)(bot)
    pushed = await receive(comm)
    assert pushed == asks.panel_message(ask)
    await comm.disconnect(timeout=10)


async def test_snapshot_on_connect_lists_every_open_ask_of_that_user_only(panel_user):
    bot, raw, _token = panel_user
    first = await connected(raw)
    await receive(first)
    mine = [await db(register)(bot, f"sess_{i}") for i in range(3)]
    for _ in mine:
        await receive(first)
    other_raw, _ = await db(services.issue_desktop_token)("t", bot, "ou_other")
    other = await connected(other_raw)
    await receive(other)
    theirs = await db(register)(bot, "sess_x", "ou_other")
    await receive(other)
    await db(asks.cancel_ask)(mine[1])  # no longer open

    second = await connected(raw)
    envelope = await receive(second)
    expected = [mine[0].public_id, mine[2].public_id]
    assert envelope["type"] == "snapshot" and envelope["requestIds"] == expected
    assert [(await receive(second))["requestId"] for _ in expected] == expected
    assert theirs.public_id not in envelope["requestIds"]
    for comm in (first, second, other):
        await comm.disconnect(timeout=10)


async def test_the_winning_panel_gets_only_its_acceptance_and_the_others_the_cancellation(
    panel_user,
):
    bot, raw, _token = panel_user
    a, b = await connected(raw), await connected(raw)
    await receive(a), await receive(b)
    ask = await db(register)(bot)
    await receive(a), await receive(b)

    await a.send_json_to(result(ask.public_id))
    assert await receive(a) == {"type": "ask_user_questions_accepted", "requestId": ask.public_id}
    cancelled = asks.cancelled_message(ask.public_id, "answered")
    assert await receive(b) == cancelled
    # the push reached a as well by now (b got it); a drops it: "you answered" stays final
    await a.send_json_to({"type": "ping"})
    assert await receive(a) == {"type": "pong"}
    assert await a.receive_nothing(timeout=0.3)
    state = asks.ask_state(await db(Ask.objects.get)(pk=ask.pk))
    assert state["status"] == "answered" and state["answered_via"] == "panel"
    assert state["answers"][1] == {
        "question": QUESTIONS[1]["question"],
        "selectedLabels": ["Lint"],
        "customInput": "e2e",
    }

    # The other panel answers late: rejected as finished, nothing changes.
    await b.send_json_to(result(ask.public_id))
    rejected = await receive(b)
    assert rejected["type"] == "ask_user_questions_rejected" and rejected["code"] == "finished"
    for comm in (a, b):
        await comm.disconnect(timeout=10)


async def test_refused_answers_are_rejected_with_their_code_and_the_ask_stays_open(panel_user):
    bot, raw, _token = panel_user
    comm = await connected(raw)
    await receive(comm)
    ask = await db(register)(bot)
    await receive(comm)
    empty = [
        {"question": "", "selectedLabels": [], "customInput": ""},
        {"question": "", "selectedLabels": ["Lint"], "customInput": ""},
    ]
    unknown_label = [
        {"question": "", "selectedLabels": ["MySQL"], "customInput": ""},
        ANSWERS[1],
    ]
    for answers, code in ((empty, "empty_answer"), (unknown_label, "invalid")):
        await comm.send_json_to(result(ask.public_id, answers))
        reply = await receive(comm)
        assert reply["type"] == "ask_user_questions_rejected" and reply["code"] == code
        assert reply["detail"]
    await comm.send_json_to(result("ask_0000000000000000"))
    assert (await receive(comm))["code"] == "unknown"
    assert (await db(Ask.objects.get)(pk=ask.pk)).status == "pending"

    # Another user's panel cannot answer it (it never sees it, and a guessed id is refused).
    other_raw, _ = await db(services.issue_desktop_token)("t", bot, "ou_other")
    other = await connected(other_raw)
    await receive(other)
    await other.send_json_to(result(ask.public_id))
    assert (await receive(other))["code"] == "not_sender"
    assert (await db(Ask.objects.get)(pk=ask.pk)).status == "pending"
    for c in (comm, other):
        await c.disconnect(timeout=10)


async def test_timeout_and_cancel_reach_the_panel_with_their_reason(panel_user):
    bot, raw, _token = panel_user
    comm = await connected(raw)
    await receive(comm)
    ask1, ask2 = await db(register)(bot, "s1"), await db(register)(bot, "s2")
    await receive(comm), await receive(comm)
    await db(asks.cancel_ask)(ask1)
    assert await receive(comm) == asks.cancelled_message(ask1.public_id, "cancelled")
    await db(Ask.objects.filter(pk=ask2.pk).update)(expires_at=timezone.now())

    await db(lifecycle.expire_due)()
    assert await receive(comm) == asks.cancelled_message(ask2.public_id, "timeout")
    await comm.disconnect(timeout=10)


async def test_presence_follows_connections_and_a_dead_process_expires(panel_user, settings):
    bot, raw, _token = panel_user
    comm = await connected(raw)
    await receive(comm)
    assert await db(panel_presence.is_connected)(bot, REQUESTER)
    # Simulate the serving process dying: its row stops being refreshed.
    await db(PanelPresence.objects.update)(last_seen_at=timezone.now() - timedelta(seconds=61))
    assert not await db(panel_presence.is_connected)(bot, REQUESTER)
    with pytest.raises(asks.NoChannel):
        await db(register)(bot)
    # A heartbeat of a live process sweeps the dead row (and refreshes only live channels).
    assert await db(panel_presence.refresh)(["specific.gone!1"]) == 0
    assert await db(PanelPresence.objects.count)() == 0
    await comm.disconnect(timeout=10)


async def test_heartbeat_keeps_a_live_panel_present(panel_user, settings):
    settings.CARDLOOP_PANEL_HEARTBEAT = 0.05
    settings.CARDLOOP_PANEL_PRESENCE_TTL = 0.5
    bot, raw, _token = panel_user
    comm = await connected(raw)
    await receive(comm)
    first = (await db(PanelPresence.objects.get)()).last_seen_at
    await asyncio.sleep(0.8)  # past the TTL: only refreshes keep it present
    assert await db(panel_presence.is_connected)(bot, REQUESTER)
    assert (await db(PanelPresence.objects.get)()).last_seen_at > first
    await comm.disconnect(timeout=10)
    assert not await db(panel_presence.is_connected)(bot, REQUESTER)


async def test_a_token_revoked_while_connected_closes_the_panel(panel_user, settings):
    settings.CARDLOOP_PANEL_RESYNC = 0.05
    bot, raw, token = panel_user
    comm = await connected(raw)
    await receive(comm)
    await db(services.revoke_desktop_token)("test", token)
    frame, _ = await receive_until(comm, lambda f: f["type"] == "error")
    assert frame["error"] == "invalid_token"
    assert (await comm.receive_output(5))["code"] == panels.CLOSE_INVALID_TOKEN
    assert not await db(panel_presence.is_connected)(bot, REQUESTER)


async def test_revoking_a_token_closes_its_connected_panel_at_once(panel_user, settings):
    settings.CARDLOOP_PANEL_RESYNC = 600  # no resync check: the revocation's message does it
    bot, raw, token = panel_user
    other_raw, _ = await db(services.issue_desktop_token)("t", bot, REQUESTER)
    comm, other = await connected(raw), await connected(other_raw)
    await receive(comm), await receive(other)
    await db(panels.revoke_token)("test", token)
    frame, _ = await receive_until(comm, lambda f: f["type"] == "error")
    assert frame["error"] == "invalid_token"
    assert (await comm.receive_output(5))["code"] == panels.CLOSE_INVALID_TOKEN
    # the user's other panel (another token) stays, and still gets new questions
    ask = await db(register)(bot)
    assert await receive(other) == asks.panel_message(ask)
    assert await db(PanelPresence.objects.count)() == 1
    await other.disconnect(timeout=10)


async def test_a_revoked_token_whose_close_never_arrived_answers_nothing_and_is_not_a_channel(
    panel_user, settings
):
    # the revocation without its channel message, as if that message were lost
    settings.CARDLOOP_PANEL_RESYNC = 600
    bot, raw, token = panel_user
    comm = await connected(raw)
    await receive(comm)
    ask = await db(register)(bot)
    await receive(comm)
    await db(services.revoke_desktop_token)("test", token)
    assert not await db(panel_presence.is_connected)(bot, REQUESTER)
    with pytest.raises(asks.NoChannel):  # no new question goes to that panel
        await db(register)(bot, "sess_2")
    await comm.send_json_to(result(ask.public_id))
    frame, _ = await receive_until(comm, lambda f: f["type"] == "error")
    assert frame["error"] == "invalid_token"
    assert (await comm.receive_output(5))["code"] == panels.CLOSE_INVALID_TOKEN
    assert (await db(Ask.objects.get)(pk=ask.pk)).status == "pending"


def _layer_of_capacity_20(settings, backend: str) -> None:
    """`backend` as the channel layer, each channel holding at most 20 messages (the caller
    clears `channel_layers.backends` again when done)."""
    from channels.layers import channel_layers

    settings.CHANNEL_LAYERS = {"default": {"BACKEND": backend, "CONFIG": {"capacity": 20}}}
    channel_layers.backends.clear()


async def _connected_with_150_held_pushes(panel_user, monkeypatch):
    """A connected panel (its snapshot read), 150 asks registered for its user, and their
    pushes held back (`(bot, open_id, message)` each) so the caller can send them as one
    burst. Returns `(communicator, asks, held pushes)`."""
    bot, raw, _token = panel_user
    comm = await connected(raw)
    await receive(comm)
    held = []
    monkeypatch.setattr(panel_presence, "push", lambda b, o, m: held.append((b, o, m)))
    made = await db(lambda: [register(bot, f"s{i}") for i in range(150)])()
    monkeypatch.undo()
    assert len(held) == 150
    return comm, made, held


async def test_a_burst_over_channel_capacity_is_dropped_and_the_resync_has_it_all(
    panel_user, settings, caplog, monkeypatch
):
    """A panel's channel holds `capacity` messages; a burst of 150 pushes arriving while the
    consumer is busy (its lock held, as by a resync: pushes then queue on its channel instead
    of reaching it directly) overflows it, and sends past capacity are dropped. The drop is
    logged and counted; a resync (on request, on reconnect) gives the panel all 150 open
    asks, each answerable."""
    from channels.layers import channel_layers

    caplog.set_level(logging.INFO, logger="interactions")
    _layer_of_capacity_20(settings, "channels.layers.InMemoryChannelLayer")
    try:
        _bot, raw, _token = panel_user
        comm, made, held = await _connected_with_150_held_pushes(panel_user, monkeypatch)
        dropped_before = panel_presence.STATS["push_dropped"]
        (consumer,) = [entry.receiver for entry in panel_presence.LOCAL.channels.values()]
        async with consumer.lock:
            for args in held:  # on this loop, without yielding: the consumer reads none
                panel_presence.push(*args)
            await asyncio.sleep(0.2)  # the pushes are handed to the layer on this loop
        seen = set()
        while not await comm.receive_nothing(0.5):
            seen.add((await receive(comm))["requestId"])
        dropped = panel_presence.STATS["push_dropped"] - dropped_before
        assert dropped == 150 - len(seen) and dropped >= 100  # most were really dropped
        assert "over capacity" in caplog.text

        ids = {a.public_id for a in made}
        await comm.send_json_to({"type": "sync"})
        envelope = await receive(comm)
        assert envelope["type"] == "snapshot" and set(envelope["requestIds"]) == ids
        assert {(await receive(comm))["requestId"] for _ in ids} == ids
        again = await connected(raw)
        assert set((await receive(again))["requestIds"]) == ids
        # Every one of them can be answered from the panel.
        one = made[0].public_id
        await comm.send_json_to(result(one))
        accepted, _ = await receive_until(
            comm, lambda f: f["type"] == "ask_user_questions_accepted"
        )
        assert accepted["requestId"] == one
        for c in (comm, again):
            await c.disconnect(timeout=10)
    finally:
        channel_layers.backends.clear()


async def test_a_burst_to_an_idle_panel_reaches_it_whole_past_its_channel_capacity(
    panel_user, settings, monkeypatch
):
    """On the in-memory layer a push reaches an idle consumer directly, not through its
    channel: 150 pushes in one burst to a panel whose channel holds 20 all arrive, in
    order, and none is counted as dropped."""
    from channels.layers import channel_layers

    _layer_of_capacity_20(settings, "plumbing.layers.InMemoryChannelLayer")
    try:
        comm, made, held = await _connected_with_150_held_pushes(panel_user, monkeypatch)
        dropped_before = panel_presence.STATS["push_dropped"]
        for args in held:  # on this loop, without yielding
            panel_presence.push(*args)
        got = [(await receive(comm))["requestId"] for _ in made]
        assert got == [a.public_id for a in made]
        assert await comm.receive_nothing(0.3)
        assert panel_presence.STATS["push_dropped"] == dropped_before
        await comm.disconnect(timeout=10)
    finally:
        channel_layers.backends.clear()


async def test_a_lost_push_is_repaired_by_the_periodic_resync_and_logged(
    panel_user, settings, caplog, monkeypatch
):
    caplog.set_level(logging.INFO, logger="interactions")
    settings.CARDLOOP_PANEL_RESYNC = 0.2
    bot, raw, _token = panel_user
    comm = await connected(raw)
    await receive(comm)
    monkeypatch.setattr(panel_presence, "push", lambda *args: None)  # every push is lost
    ask = await db(register)(bot)
    repaired = panel_presence.STATS["resync_repaired"]
    envelope = await receive(comm)
    assert envelope["type"] == "snapshot" and envelope["requestIds"] == [ask.public_id]
    assert await receive(comm) == asks.panel_message(ask)
    await db(asks.cancel_ask)(ask)  # its cancellation push is lost too
    envelope, _ = await receive_until(comm, lambda f: f["type"] == "snapshot")
    assert envelope["requestIds"] == []
    assert panel_presence.STATS["resync_repaired"] == repaired + 2
    assert "resync repaired a lost push: 1 question(s) missing" in caplog.text
    assert "0 question(s) missing, 1 stale" in caplog.text
    await comm.disconnect(timeout=10)


async def test_a_panel_that_reconnects_learns_what_was_answered_meanwhile(panel_user):
    """The client vanishes without a close frame, its question is answered elsewhere
    within 100 ms, it reconnects: the snapshot no longer lists it, and an answer it still
    sends is rejected."""
    from channels.layers import get_channel_layer

    bot, raw, _token = panel_user
    layer = get_channel_layer()
    group = panel_presence.group_for(bot, REQUESTER)
    if not hasattr(layer, "groups"):  # Redis outlives test databases: start from an empty group
        await layer.connection(layer.consistent_hash(group)).delete(layer._group_key(group))
    comm = await connected(raw)
    await receive(comm)
    ask = await db(register)(bot)
    await receive(comm)
    await comm.disconnect(code=1006, timeout=10)  # dropped; the server runs disconnect()
    outcome = await db(asks.submit_answers)(
        bot, ask.public_id, ANSWERS, via="card", operator_open_id=REQUESTER
    )
    assert outcome.won
    again = await connected(raw)
    envelope = await receive(again)
    assert envelope["type"] == "snapshot" and envelope["requestIds"] == []
    await again.send_json_to(result(ask.public_id))
    rejected = await receive(again)
    assert rejected["type"] == "ask_user_questions_rejected" and rejected["code"] == "finished"
    await again.disconnect(timeout=10)
    # Dead channels leave the group: a push now reaches nobody and raises nothing.
    if hasattr(layer, "groups"):  # in-memory
        assert not layer.groups.get(group)
    else:  # Redis: the group's sorted set of channel names is empty
        index = layer.consistent_hash(group)
        assert await layer.connection(index).zcard(layer._group_key(group)) == 0
    assert await db(PanelPresence.objects.count)() == 0


async def test_stress_20_reconnecting_panels_while_200_asks_are_answered_elsewhere(
    panel_user,
):
    bot, raw, _token = panel_user
    keeper = await connected(raw)  # keeps the user "connected" so asks can be registered
    await receive(keeper)
    made = await db(lambda: [register(bot, f"s{i}") for i in range(200)])()
    ids = [a.public_id for a in made]
    answered: set[str] = set()

    async def answer_all():
        for i, request_id in enumerate(ids):
            if i % 2 == 0:  # half answered through the card, half through the API
                via = "card" if i % 4 == 0 else "api"
                out = await db(asks.submit_answers)(
                    bot, request_id, ANSWERS, via=via, operator_open_id=REQUESTER
                )
                assert out.won
                answered.add(request_id)
            await asyncio.sleep(0)

    async def flap(n):
        for _ in range(5):
            comm = await connected(raw)
            await receive(comm, timeout=30)  # snapshot envelope
            await comm.disconnect(code=1006, timeout=10)
        return n

    await asyncio.gather(answer_all(), *(flap(n) for n in range(20)))
    # Every client that connects now sees exactly the unanswered ones.
    finals = [await connected(raw) for _ in range(20)]
    expected = [r for r in ids if r not in answered]
    for comm in finals:
        envelope = await receive(comm, timeout=30)
        assert envelope["requestIds"] == expected
    for comm in [*finals, keeper]:
        await comm.disconnect(timeout=10)
    assert await db(PanelPresence.objects.count)() == 0
    from django.db import connections

    await db(connections.close_all)()  # the executor thread's connection (PostgreSQL drops the DB)
