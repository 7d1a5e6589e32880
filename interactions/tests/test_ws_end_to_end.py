"""`manage.py lark_connect` end to end: lark-oapi's real `lark.ws.Client` discovers the endpoint
over HTTP and holds a WebSocket to a loopback stand-in of Feishu's long-connection endpoint
(`tests/lark_ws_stub.py`, frames encoded with lark-oapi's own `Frame` class)."""

from __future__ import annotations

import asyncio
import io
import threading

import lark_oapi.ws.client as ws_client_module
import pytest
from django.core.management import CommandError, call_command
from django.db import connections

from botadmin.models import Chat
from interactions.callbacks import registry
from interactions.channels.feishu import ws
from interactions.models import InboundEvent
from tests import feishu
from tests.lark_ws_stub import LongConnectionStub

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def long_connection(settings, monkeypatch):
    """The stand-in, with `cli_test_app`'s secret; every lark-oapi client of the test uses it."""
    stub = LongConnectionStub(app_secrets={feishu.APP_ID: feishu.APP_SECRET}).start()
    settings.CARDLOOP_LARK_DOMAIN = stub.url
    for name in ("NO_PROXY", "no_proxy"):
        monkeypatch.setenv(name, "127.0.0.1,localhost")
    yield stub
    stub.stop()


@pytest.fixture
def lark_connect(long_connection, monkeypatch):
    """`lark_connect(app_id)`: run `manage.py lark_connect app_id` in a thread, as its own
    process would, until the test ends; returns once the first connection is up. The command
    blocks forever (lark-oapi's client has no stop), so teardown stops its event loop."""
    original_loop = ws_client_module.loop
    runs: list[tuple[threading.Thread, list]] = []
    clients = []
    build_client = ws.build_client

    def keep_client(bot):
        clients.append(build_client(bot))
        return clients[-1]

    monkeypatch.setattr(ws, "build_client", keep_client)

    def run(app_id: str) -> None:
        errors: list[BaseException] = []

        def target():
            try:
                call_command("lark_connect", app_id, stdout=io.StringIO())
            except RuntimeError:  # "Event loop stopped before Future completed": teardown
                pass
            except BaseException as error:  # noqa: BLE001 - reported to the test
                errors.append(error)
            finally:
                _finish(ws_client_module.loop, clients)

        thread = threading.Thread(target=target, daemon=True)
        runs.append((thread, errors))
        thread.start()
        long_connection.wait_for_connections(1)
        assert not errors

    yield run
    for thread, _errors in runs:
        loop = ws_client_module.loop
        if loop is not original_loop:
            loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        assert not thread.is_alive()
    ws_client_module.loop = original_loop


def _finish(loop, clients) -> None:
    """End what lark-oapi left on the command's event loop (its receive and ping loops, its
    cache's cleaner), close the connection cleanly so the stand-in stops at once, close the loop
    and this thread's database connections."""
    tasks = [task for task in asyncio.all_tasks(loop) if not task.done()]
    for task in tasks:
        task.cancel()
    if tasks:
        loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
    for client in clients:
        if client._conn is not None:
            loop.run_until_complete(client._conn.close())
    loop.close()
    connections.close_all()


def _recording_handler(register_card_handler, seen: list):
    def handler(action):
        Chat.objects.create(chat_id=f"oc_seen_{len(seen)}")
        seen.append(action.event_id)
        return registry.Answer.success("Recorded")

    register_card_handler("feedback", handler)


def test_a_click_over_the_long_connection_is_answered_by_its_handler(
    lark_bot, long_connection, lark_connect, register_card_handler
):
    seen: list[str] = []
    _recording_handler(register_card_handler, seen)
    lark_connect(lark_bot.app_id)

    click = feishu.payload("card_action_feedback_click")
    reply = long_connection.send_event(click)

    assert long_connection.discoveries == [lark_bot.app_id]
    assert reply.code == 200
    assert reply.answer["toast"]["type"] == "success"
    assert reply.answer["toast"]["i18n"]["en_us"] == "Recorded"
    assert "biz_rt" in reply.headers
    assert seen == [click["header"]["event_id"]]
    assert Chat.objects.filter(chat_id="oc_seen_0").exists()


def test_the_same_click_over_the_long_connection_and_http_is_recorded_once(
    lark_bot, long_connection, lark_connect, lark_callback, register_card_handler
):
    seen: list[str] = []
    _recording_handler(register_card_handler, seen)
    lark_connect(lark_bot.app_id)

    over_ws_first = feishu.payload("card_action_feedback_click")
    assert long_connection.send_event(over_ws_first).answer["toast"]["type"] == "success"
    again_over_http = lark_callback(over_ws_first)

    over_http_first = feishu.payload("card_action_feedback_click")
    assert lark_callback(over_http_first).json()["toast"]["type"] == "success"
    again_over_ws = long_connection.send_event(over_http_first)

    assert again_over_http.status_code == 200
    assert again_over_http.json()["toast"]["i18n"]["en_us"] == "Recorded"  # the first answer
    assert again_over_ws.answer["toast"]["i18n"]["en_us"] == "Recorded"
    assert seen == [over_ws_first["header"]["event_id"], over_http_first["header"]["event_id"]]
    assert InboundEvent.objects.count() == 2
    assert Chat.objects.count() == 2


def test_a_slow_handler_is_answered_over_the_long_connection_within_the_budget(
    lark_bot, long_connection, lark_connect, register_card_handler, settings
):
    settings.CARDLOOP_CALLBACK_BUDGET = 0.3
    release = threading.Event()
    finished = threading.Event()

    def slow(action):
        release.wait(20)
        Chat.objects.create(chat_id="oc_after_the_answer")
        finished.set()
        return registry.Answer.success("Recorded")

    register_card_handler("feedback", slow)
    lark_connect(lark_bot.app_id)

    reply = long_connection.send_event(feishu.payload("card_action_feedback_click"))

    # the answer frame came back while the handler was still blocked: the budget answered it
    assert not release.is_set()
    assert reply.code == 200 and reply.answer["toast"]["type"] == "info"
    release.set()
    assert finished.wait(10)
    assert Chat.objects.filter(chat_id="oc_after_the_answer").exists()


def test_the_connection_survives_a_server_side_drop_and_reconnects(
    lark_bot, long_connection, lark_connect, register_card_handler
):
    seen: list[str] = []
    _recording_handler(register_card_handler, seen)
    lark_connect(lark_bot.app_id)
    before = feishu.payload("card_action_feedback_click")
    assert long_connection.send_event(before).answer["toast"]["type"] == "success"

    long_connection.drop()
    long_connection.wait_for_connections(2)
    after = feishu.payload("card_action_feedback_click")
    reply = long_connection.send_event(after)

    assert reply.answer["toast"]["type"] == "success"
    assert long_connection.discoveries == [lark_bot.app_id, lark_bot.app_id]  # asked again
    assert seen == [before["header"]["event_id"], after["header"]["event_id"]]


def test_lark_connect_reports_a_refused_app_secret(make_bot, long_connection):
    original_loop = ws_client_module.loop
    make_bot(app_id="cli_wrong_secret", app_secret="not-the-secret")
    try:
        with pytest.raises(CommandError, match="refused the long connection"):
            call_command("lark_connect", "cli_wrong_secret", stdout=io.StringIO())
    finally:
        _finish(ws_client_module.loop, [])
        ws_client_module.loop = original_loop
    assert long_connection.discoveries == ["cli_wrong_secret"]
    assert long_connection.connections == 0
