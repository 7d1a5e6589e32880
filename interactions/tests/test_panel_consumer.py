"""`/ws/panel/` through the real ASGI application (origin check, session middleware, routing)
with Channels' WebsocketCommunicator: authentication, presence, push, malformed frames."""

from __future__ import annotations

import json

import pytest
from channels.db import database_sync_to_async

from botadmin import services
from interactions import presence as panel_presence
from interactions.models import PanelPresence
from interactions.panels import service as panels
from interactions.tests.panel_helpers import communicator, receive

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def no_asks(monkeypatch):
    """No open asks (the asks module is exercised in test_panel_asks)."""
    monkeypatch.setattr(panels, "open_messages", lambda user: [])


@pytest.fixture
def token(make_bot):
    bot = make_bot(app_id="cli_panel")
    raw, row = services.issue_desktop_token("test", bot, "ou_alice", "test")
    return raw, row


async def test_missing_or_wrong_token_gets_an_error_frame_and_close_4401(token, no_asks):
    for kwargs in ({}, {"raw": "cdt_nope_nope"}, {"raw": token[0] + "x"}):
        comm = communicator(**kwargs)
        connected, _ = await comm.connect()
        assert connected
        assert await receive(comm) == {
            "type": "error",
            "error": "invalid_token",
            "detail": "A valid desktop token is required.",
        }
        assert (await comm.receive_output(5))["code"] == panels.CLOSE_INVALID_TOKEN
    assert await database_sync_to_async(PanelPresence.objects.count)() == 0


async def test_revoked_token_cannot_connect(token, no_asks):
    raw, row = token
    await database_sync_to_async(services.revoke_desktop_token)("test", row)
    comm = communicator(raw=raw)
    await comm.connect()
    assert (await receive(comm))["error"] == "invalid_token"


async def test_header_token_connects_registers_presence_and_disconnect_clears_it(token, no_asks):
    raw, row = token
    bot = row.bot
    assert not await database_sync_to_async(panel_presence.is_connected)(bot, "ou_alice")
    comm = communicator(raw=raw)
    connected, _ = await comm.connect()
    assert connected
    snapshot = await receive(comm)
    assert snapshot["type"] == "snapshot" and snapshot["requestIds"] == []
    assert await database_sync_to_async(panel_presence.is_connected)(bot, "ou_alice")
    assert not await database_sync_to_async(panel_presence.is_connected)(bot, "ou_bob")
    presence = await database_sync_to_async(PanelPresence.objects.get)()
    assert presence.via == "desktop" and presence.server == panel_presence.SERVER_ID
    await comm.disconnect(timeout=10)
    assert not await database_sync_to_async(panel_presence.is_connected)(bot, "ou_alice")
    assert await database_sync_to_async(PanelPresence.objects.count)() == 0


async def test_subprotocol_token_is_accepted_and_the_panel_subprotocol_selected(token, no_asks):
    comm = communicator(subprotocols=[panels.SUBPROTOCOL, token[0]])
    connected, subprotocol = await comm.connect()
    assert connected and subprotocol == panels.SUBPROTOCOL
    assert (await receive(comm))["type"] == "snapshot"
    await comm.disconnect(timeout=10)


async def test_push_reaches_every_panel_of_the_user_and_no_one_else(token, make_bot, no_asks):
    raw, row = token
    other_raw, _other = await database_sync_to_async(services.issue_desktop_token)(
        "test", row.bot, "ou_bob"
    )
    first, second, bob = communicator(raw=raw), communicator(raw=raw), communicator(raw=other_raw)
    for comm in (first, second, bob):
        await comm.connect()
        assert (await receive(comm))["type"] == "snapshot"
    message = {"type": "ask_user_questions_cancelled", "requestId": "ask_1", "reason": "timeout"}
    # From a plain thread, as a Feishu callback handler or an on_commit hook calls it.
    await database_sync_to_async(panel_presence.push)(row.bot, "ou_alice", message)
    assert await receive(first) == message
    assert await receive(second) == message
    assert await bob.receive_nothing(0.3)
    for comm in (first, second, bob):
        await comm.disconnect(timeout=10)


async def test_a_push_is_sent_as_the_text_encoded_once_and_without_it_as_before(token, no_asks):
    """`presence.push` encodes the frame once (`"text"` in the group message) and each panel
    sends that text as it is; a push event without `"text"` (sent by a process of an older
    release during a rolling deploy) is still encoded and sent by the panel."""
    raw, row = token
    comm = communicator(raw=raw)
    await comm.connect()
    assert (await receive(comm))["type"] == "snapshot"
    message = {"type": "ask_user_questions_cancelled", "requestId": "ask_é", "reason": "timeout"}
    await database_sync_to_async(panel_presence.push)(row.bot, "ou_alice", message)
    sent = await comm.receive_output(5)
    assert sent["text"] == json.dumps(message, ensure_ascii=False)
    older = {"type": "ask_user_questions_cancelled", "requestId": "ask_2", "reason": "timeout"}
    await database_sync_to_async(panel_presence.group_send)(
        row.bot, "ou_alice", {"type": "panel.push", "message": older}
    )
    assert await receive(comm) == older
    await comm.disconnect(timeout=10)


async def test_malformed_frames_get_error_frames_and_the_panel_stays_open(token, no_asks):
    comm = communicator(raw=token[0])
    await comm.connect()
    await receive(comm)
    cases = [
        ("{not json", "malformed_json"),
        ("[" * 30_000 + "]" * 30_000, "malformed_json"),  # RecursionError, not ValueError
        ("[1, 2]", "invalid_message"),
        (json.dumps({"type": "launch_rockets"}), "unknown_type"),
        (json.dumps({"type": "ask_user_questions_result"}), "invalid_message"),
        (
            json.dumps(
                {
                    "type": "ask_user_questions_result",
                    "requestId": "ask_1",
                    "answers": [{"question": 1, "selectedLabels": "A", "customInput": 3}],
                }
            ),
            "invalid_message",
        ),
        ("x" * (panels.MAX_FRAME + 1), "too_large"),
        ("😀" * (panels.MAX_FRAME // 4 + 1), "too_large"),  # fewer characters than bytes
        (  # PostgreSQL text cannot hold NUL: refused before the lookup, not internal_error
            json.dumps(
                {"type": "ask_user_questions_result", "requestId": "ask_\u0000", "answers": []}
            ),
            "invalid_message",
        ),
        (  # nor can UTF-8 hold a lone surrogate
            json.dumps(
                {"type": "ask_user_questions_result", "requestId": "ask_\ud800", "answers": []}
            ),
            "invalid_message",
        ),
    ]
    for frame, code in cases:
        await comm.send_to(text_data=frame)
        reply = await receive(comm)
        assert reply["type"] == "error" and reply["error"] == code, (frame[:40], reply)
    await comm.send_to(bytes_data=b"\x00\x01")
    assert (await receive(comm))["error"] == "binary_frame"
    bad = await comm.send_to(
        text_data=json.dumps(
            {"type": "ask_user_questions_result", "requestId": "a", "answers": [{"question": 1}]}
        )
    )
    assert bad is None
    detail = (await receive(comm))["detail"]
    assert detail == {"answers[0].question": "a string is required"}
    await comm.send_to(text_data=json.dumps({"type": "ping"}))
    assert await receive(comm) == {"type": "pong"}
    await comm.disconnect(timeout=10)


async def test_web_session_authenticates_only_with_a_browser_origin(token, no_asks, client):
    raw, _row = token
    await database_sync_to_async(client.post)("/panel/login", {"token": raw})
    cookie = f"sessionid={client.cookies['sessionid'].value}".encode()
    browser = communicator(headers=[(b"cookie", cookie), (b"origin", b"http://testserver")])
    await browser.connect()
    assert (await receive(browser))["type"] == "snapshot"
    presence = await database_sync_to_async(PanelPresence.objects.get)()
    assert presence.via == "web"
    await browser.disconnect(timeout=10)
    # Without an Origin the cookie does not count (only browsers send cookies implicitly).
    no_origin = communicator(headers=[(b"cookie", cookie)])
    await no_origin.connect()
    assert (await receive(no_origin))["error"] == "invalid_token"
    # Another site's page is refused at the handshake.
    foreign = communicator(headers=[(b"cookie", cookie), (b"origin", b"http://evil.example")])
    connected, _ = await foreign.connect()
    assert not connected


async def test_a_failing_answer_gets_an_internal_error_frame_and_the_panel_stays_open(
    token, no_asks, monkeypatch
):
    def broken(user, message):
        raise RuntimeError("database went away")

    monkeypatch.setattr(panels, "submit", broken)
    comm = communicator(raw=token[0])
    await comm.connect()
    await receive(comm)
    await comm.send_json_to({"type": "ask_user_questions_result", "requestId": "a", "answers": []})
    assert (await receive(comm))["error"] == "internal_error"
    await comm.send_json_to({"type": "ping"})
    assert await receive(comm) == {"type": "pong"}
    await comm.disconnect(timeout=10)


async def test_a_failing_group_discard_still_removes_the_presence(token, no_asks, monkeypatch):
    """A layer error while leaving the group (channels-redis: pool exhausted when many panels
    close at once) is logged; the presence row goes anyway, the group entry expires."""
    from channels.layers import get_channel_layer

    async def broken(group, channel):
        raise ConnectionError("Too many connections")

    comm = communicator(raw=token[0])
    await comm.connect()
    await receive(comm)
    monkeypatch.setattr(get_channel_layer(), "group_discard", broken)
    await comm.disconnect(timeout=10)
    assert await database_sync_to_async(PanelPresence.objects.count)() == 0


@pytest.fixture
def in_memory_layer(settings):
    """The in-memory channel layer (direct delivery to this process's panels), whatever
    REDIS_URL says."""
    from channels.layers import channel_layers

    settings.CHANNEL_LAYERS = {
        "default": {"BACKEND": "plumbing.layers.InMemoryChannelLayer", "CONFIG": {}}
    }
    channel_layers.backends.clear()
    yield
    channel_layers.backends.clear()


async def test_a_push_that_fails_on_a_panel_closes_it_with_1011_and_the_others_still_get_it(
    token, no_asks, in_memory_layer, caplog
):
    """On the in-memory layer, a failed direct push may leave the panel's bookkeeping saying
    the client has the frame: the socket is closed (the client reconnects to a fresh
    snapshot), the failure is counted, and the user's other panels get the push."""
    raw, row = token
    broken, fine = communicator(raw=raw), communicator(raw=raw)
    for comm in (broken, fine):
        await comm.connect()
        assert (await receive(comm))["type"] == "snapshot"
    consumers = [entry.receiver for entry in panel_presence.LOCAL.channels.values()]
    assert len(consumers) == 2

    async def failing(_message):
        raise RuntimeError("the socket write failed")

    consumers[0].frame_send = failing
    failed_before = panel_presence.STATS["push_failed"]
    message = {"type": "ask_user_questions_cancelled", "requestId": "ask_1", "reason": "timeout"}
    await database_sync_to_async(panel_presence.push)(row.bot, "ou_alice", message)
    outputs = {}
    for comm in (broken, fine):
        outputs[comm] = await comm.receive_output(5)
    closed = [c for c, out in outputs.items() if out["type"] == "websocket.close"]
    got = [c for c, out in outputs.items() if out.get("text") == json.dumps(message)]
    assert len(closed) == 1 and outputs[closed[0]]["code"] == 1011 and len(got) == 1
    assert panel_presence.STATS["push_failed"] == failed_before + 1
    assert "panel push failed on 1 panel(s) (RuntimeError)" in caplog.text  # which error
    for comm in (broken, fine):
        await comm.disconnect(timeout=10)
