"""`interactions.channels.feishu.asgi.LarkCallbackApp`: the Feishu callback route in front of Django, through
`cardloop.asgi.application` (channels' `HttpCommunicator`)."""

from __future__ import annotations

import json
import threading
import time

import pytest
from asgiref.sync import sync_to_async
from channels.testing import HttpCommunicator
from django.core import signals
from django.db import connections
from django.db.backends.signals import connection_created as connection_created_signal
from django.utils import timezone

from interactions.callbacks import registry
from interactions.cardqueue import releases
from interactions.cardqueue import service as cards
from interactions.lark.signing import seal
from interactions.models import CardUpdate, InboundEvent
from interactions.tests.test_cardjson import feedback_card
from interactions.tests.test_cardqueue import md
from tests import feishu

pytestmark = [pytest.mark.asyncio, pytest.mark.django_db(transaction=True)]


async def _request(method: str, path: str, body: bytes = b"", headers=None):
    from cardloop.asgi import application

    sent = {"Host": "testserver", **(headers or {})}
    communicator = HttpCommunicator(
        application,
        method,
        path,
        body=body,
        headers=[(k.lower().encode(), v.encode()) for k, v in sent.items()],
    )
    response = await communicator.get_response(timeout=10)
    await communicator.wait(timeout=10)
    response_headers = {k.decode().lower(): v.decode() for k, v in response["headers"]}
    return response["status"], response_headers, response["body"]


def _scope(app_id: str, headers: dict) -> dict:
    """An HTTP scope for `POST /lark/<app_id>/callback` as Daphne builds it."""
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": f"/lark/{app_id}/callback",
        "raw_path": f"/lark/{app_id}/callback".encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [(b"host", b"testserver")]
        + [(k.lower().encode(), v.encode()) for k, v in headers.items()],
        "client": ("127.0.0.1", 50000),
        "server": ("testserver", 80),
    }


async def _click(app_id: str, payload=None, headers=None):
    raw, sent = seal(
        payload or feishu.payload("card_action_feedback_click"), encrypt_key=feishu.ENCRYPT_KEY
    )
    return await _request("POST", f"/lark/{app_id}/callback", raw, {**sent, **(headers or {})})


async def test_callback_is_answered_outside_the_middleware_stack_with_django_request_signals(
    lark_bot, register_card_handler
):
    register_card_handler("feedback", lambda action: registry.Answer.success("Recorded"))
    seen = []

    def started(**kwargs):
        seen.append("started")

    def finished(**kwargs):
        seen.append("finished")

    signals.request_started.connect(started)
    signals.request_finished.connect(finished)
    try:
        status, headers, body = await _click(lark_bot.app_id)
    finally:
        signals.request_started.disconnect(started)
        signals.request_finished.disconnect(finished)
    assert status == 200
    assert headers["content-type"] == "application/json"
    assert json.loads(body)["toast"]["type"] == "success"
    # XFrameOptionsMiddleware / SecurityMiddleware headers are what Django's stack adds
    assert "x-frame-options" not in headers and "referrer-policy" not in headers
    assert seen == ["started", "finished"]
    status, headers, _ = await _request("GET", "/healthz")
    assert status == 200 and headers.get("x-frame-options") == "DENY"  # others still get them


async def test_oversized_callback_body_is_413_json_and_nothing_is_written(lark_bot, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 2048
    payload = feishu.payload("card_action_feedback_click")
    payload["event"]["action"]["value"]["padding"] = "x" * 4096
    status, headers, body = await _click(lark_bot.app_id, payload)
    assert (status, headers["content-type"]) == (413, "application/json")
    assert json.loads(body)["error"] == "too_large"
    assert not await InboundEvent.objects.aexists()


async def test_get_on_the_callback_url_goes_through_django_and_gets_405_json(lark_bot):
    status, headers, body = await _request("GET", f"/lark/{lark_bot.app_id}/callback")
    assert status == 405 and json.loads(body)["error"] == "method_not_allowed"
    assert headers.get("x-frame-options") == "DENY"  # Django's stack answered


async def test_callback_for_a_host_outside_allowed_hosts_is_refused_and_nothing_is_written(
    lark_bot, register_card_handler, settings
):
    settings.ALLOWED_HOSTS = ["cardloop.example"]
    calls = []
    register_card_handler("feedback", lambda action: calls.append(action))
    status, _, _ = await _click(lark_bot.app_id, headers={"Host": "evil.example"})
    assert status == 400
    assert calls == [] and not await InboundEvent.objects.aexists()


async def test_unknown_app_through_asgi_is_404_json(db):
    status, _, body = await _click("cli_nobody")
    assert status == 404 and json.loads(body)["error"] == "unknown_app"


async def test_click_past_the_budget_gets_info_toast_then_its_update_is_released_when_done(
    lark_stub, lark_bot, register_card_handler, settings
):
    settings.CARDLOOP_CALLBACK_BUDGET = 0.3
    entity = await sync_to_async(cards.send_card)(
        lark_bot, feedback_card(), receive_id="oc_group_chat"
    )
    done = threading.Event()

    def slow(action):
        time.sleep(1.0)
        cards.enqueue_elements(entity, {"fb_prompt": md("late")})
        done.set()
        return registry.Answer.success("Recorded")

    register_card_handler("feedback", slow)
    started = time.monotonic()
    status, _, body = await _click(lark_bot.app_id)
    assert status == 200 and json.loads(body)["toast"]["type"] == "info"
    assert time.monotonic() - started < 1.0
    assert await sync_to_async(done.wait)(5)
    row = None
    for _ in range(100):  # released by the real response's close(), after the handler
        await sync_to_async(connections.close_all)()
        row = await CardUpdate.objects.filter(card=entity).afirst()
        if row is not None and row.hold_token == "":
            break
        time.sleep(0.05)
    assert row is not None and row.hold_token == "" and row.next_attempt_at <= timezone.now()
    event = await InboundEvent.objects.aget()
    assert event.answer["toast"]["type"] == "success"  # the dedupe row has the real answer


@pytest.mark.parametrize("timestamp", ["9" * 5000, "\u00b2", "１７００"])
async def test_timestamp_that_int_cannot_read_is_401_stale_request_without_traceback(
    lark_bot, caplog, timestamp
):
    raw, sent = seal(feishu.payload("card_action_feedback_click"), encrypt_key=feishu.ENCRYPT_KEY)
    sent["X-Lark-Request-Timestamp"] = timestamp
    headers = [(b"host", b"testserver")] + [
        (k.lower().encode(), v.encode("utf-8")) for k, v in sent.items()
    ]
    from cardloop.asgi import application

    communicator = HttpCommunicator(
        application, "POST", f"/lark/{lark_bot.app_id}/callback", body=raw, headers=headers
    )
    response = await communicator.get_response(timeout=10)
    await communicator.wait(timeout=10)
    assert response["status"] == 401
    assert json.loads(response["body"])["error"] == "stale_request"
    assert not [r for r in caplog.records if r.exc_info], "traceback logged for bad input"


@pytest.mark.parametrize("debug", [False, True])
async def test_disallowed_host_on_the_callback_is_400_json_with_one_line_and_no_traceback(
    lark_bot, settings, caplog, debug
):
    settings.DEBUG = debug
    settings.ALLOWED_HOSTS = ["cardloop.example"]
    status, headers, body = await _click(lark_bot.app_id, headers={"Host": "evil.example"})
    assert (status, headers["content-type"]) == (400, "application/json")
    assert json.loads(body)["error"] == "disallowed_host"
    assert not [r for r in caplog.records if r.exc_info]
    assert not await InboundEvent.objects.aexists()


async def test_several_host_headers_are_refused_like_django_refuses_them(
    lark_bot, register_card_handler, settings
):
    settings.ALLOWED_HOSTS = ["cardloop.example"]
    calls = []
    register_card_handler("feedback", lambda action: calls.append(action))
    raw, sent = seal(feishu.payload("card_action_feedback_click"), encrypt_key=feishu.ENCRYPT_KEY)
    from cardloop.asgi import application

    communicator = HttpCommunicator(
        application,
        "POST",
        f"/lark/{lark_bot.app_id}/callback",
        body=raw,
        headers=[(b"host", b"cardloop.example"), (b"host", b"evil.example")]
        + [(k.lower().encode(), v.encode()) for k, v in sent.items()],
    )
    response = await communicator.get_response(timeout=10)
    await communicator.wait(timeout=10)
    assert response["status"] == 400
    assert calls == [] and not await InboundEvent.objects.aexists()


async def test_control_characters_in_the_app_id_never_reach_a_log_line(db, caplog):
    # Daphne hands the app the percent-decoded path: %0A arrives as a newline
    status, _, body = await _request(
        "POST", "/lark/x\n2026-12-01 12:00:00,000 ERROR forged: y/callback", b"{}"
    )
    assert status == 404 and json.loads(body)["error"] == "unknown_app"
    assert not [r for r in caplog.records if "\n" in r.getMessage()]


async def test_budget_warning_names_the_app_id_quoted(
    lark_bot, register_card_handler, settings, caplog
):
    settings.CARDLOOP_CALLBACK_BUDGET = 0.2
    register_card_handler(
        "feedback", lambda action: time.sleep(0.6) or registry.Answer.success("Recorded")
    )
    status, _, body = await _click(lark_bot.app_id)
    assert status == 200 and json.loads(body)["toast"]["type"] == "info"
    (warning,) = [r for r in caplog.records if "ran past" in r.getMessage()]
    assert f"{lark_bot.app_id!r} ran past the 0.2s budget" in warning.getMessage()
    for _ in range(100):  # let the handler finish before the test database goes away
        await sync_to_async(connections.close_all)()
        if await InboundEvent.objects.filter(status=InboundEvent.Status.ANSWERED).aexists():
            break
        time.sleep(0.05)


async def test_lower_case_post_takes_the_callback_route(lark_bot, register_card_handler):
    register_card_handler("feedback", lambda action: registry.Answer.success("Recorded"))
    raw, sent = seal(feishu.payload("card_action_feedback_click"), encrypt_key=feishu.ENCRYPT_KEY)
    status, headers, body = await _request("post", f"/lark/{lark_bot.app_id}/callback", raw, sent)
    assert status == 200 and json.loads(body)["toast"]["type"] == "success"
    assert "x-frame-options" not in headers  # not through Django's middleware
    assert headers["content-length"] == str(len(body))


async def test_held_update_is_released_after_the_answer_by_the_release_thread_not_the_handler(
    lark_stub, lark_bot, register_card_handler, monkeypatch
):
    from cardloop.asgi import application

    entity = await sync_to_async(cards.send_card)(
        lark_bot, feedback_card(), receive_id="oc_group_chat"
    )
    threads = {}

    def handler(action):
        threads["handler"] = threading.get_ident()
        cards.enqueue_elements(entity, {"fb_prompt": md("chosen")})
        return registry.Answer.success("Recorded")

    real_release = releases.release_tokens

    def release(tokens):
        threads["release"] = threading.get_ident()
        return real_release(tokens)

    monkeypatch.setattr(releases, "release_tokens", release)
    register_card_handler("feedback", handler)
    raw, headers = seal(
        feishu.payload("card_action_feedback_click"), encrypt_key=feishu.ENCRYPT_KEY
    )
    scope = _scope(lark_bot.app_id, headers)
    messages = [{"type": "http.request", "body": raw, "more_body": False}]
    held_when_sent = []
    opened = []

    def connection_created(**kwargs):
        opened.append(threading.get_ident())

    async def receive():
        return messages.pop(0) if messages else {"type": "http.disconnect"}

    async def send(message):
        if message["type"] == "http.response.body":
            held_when_sent.append((json.loads(message["body"]), "release" not in threads))

    await sync_to_async(connections.close_all)()
    connection_created_signal.connect(connection_created)
    try:
        await application(scope, receive, send)
    finally:
        connection_created_signal.disconnect(connection_created)
    ((answer, still_held),) = held_when_sent
    assert answer["toast"]["type"] == "success"
    assert still_held  # Feishu applies nothing sent before the callback answer
    assert await sync_to_async(releases.RELEASES.flush, thread_sensitive=False)()
    # one database connection for the click (on PostgreSQL: one checkout from the pool and its
    # health check; on SQLite the handler thread may still hold the one it kept from an
    # earlier click); the release is written by the process's release thread, not the
    # handler's, so the handler thread is free for the next click once the answer is sent
    by_handler = [t for t in opened if t == threads["handler"]]
    if connections["default"].vendor == "sqlite":
        assert by_handler in ([], [threads["handler"]])
    else:
        assert by_handler == [threads["handler"]]
    row = await CardUpdate.objects.filter(card=entity).aget()
    assert row.hold_token == "" and row.next_attempt_at <= timezone.now()
    assert threads["release"] != threads["handler"]


async def test_a_click_cancelled_by_a_stopping_server_never_leaves_its_thread_waiting(
    lark_stub, lark_bot, register_card_handler, monkeypatch
):
    """Daphne cancels pending requests when it stops; the handler thread must then close its
    response as soon as the handler is done, not wait for a send that never comes (the
    process could not exit before `SEND_WAIT_SECONDS`)."""
    import asyncio

    from cardloop.asgi import application
    from interactions.channels.feishu import asgi

    monkeypatch.setattr(asgi, "SEND_WAIT_SECONDS", 30.0)
    entity = await sync_to_async(cards.send_card)(
        lark_bot, feedback_card(), receive_id="oc_group_chat"
    )
    handler_running = threading.Event()
    released = threading.Event()

    def slow(action):
        handler_running.set()
        time.sleep(0.5)
        cards.enqueue_elements(entity, {"fb_prompt": md("chosen")})
        return registry.Answer.success("Recorded")

    real_release = releases.release_tokens

    def release(tokens):
        try:
            return real_release(tokens)
        finally:
            released.set()

    monkeypatch.setattr(releases, "release_tokens", release)
    register_card_handler("feedback", slow)
    raw, headers = seal(
        feishu.payload("card_action_feedback_click"), encrypt_key=feishu.ENCRYPT_KEY
    )
    messages = [{"type": "http.request", "body": raw, "more_body": False}]
    answers = []

    async def receive():
        return messages.pop(0) if messages else {"type": "http.disconnect"}

    async def send(message):
        answers.append(message)

    request = asyncio.ensure_future(application(_scope(lark_bot.app_id, headers), receive, send))
    assert await sync_to_async(handler_running.wait, thread_sensitive=False)(5)
    request.cancel()  # what Daphne does to pending application instances on SIGTERM
    with pytest.raises(asyncio.CancelledError):
        await request
    started = time.monotonic()
    assert await sync_to_async(released.wait, thread_sensitive=False)(5)
    assert time.monotonic() - started < 3  # not SEND_WAIT_SECONDS
    assert answers == []  # nothing was sent on the cancelled request
    row = await CardUpdate.objects.filter(card=entity).aget()
    assert row.hold_token == ""  # the update is due now, as after a sent answer
