""" "Cancel task" on a progress card, pressed through the real Feishu ingress (encrypted and
signed callback), records the request and, in the same transaction, one
`session.cancel_requested` event: an outbox row per subscribed destination, an item in the
feed, and a wake-up for feed long-polls (`GET /api/v1/events?wait=`) that are waiting."""

from __future__ import annotations

import asyncio
import json
import threading

import pytest
from asgiref.sync import sync_to_async
from django.db import connections

from feedback.models import Event, OutboxItem
from interactions import events as interaction_events
from interactions.lifecycle import longpoll
from interactions.models import ProgressSession
from interactions.tests.ask_helpers import *  # noqa: F403
from interactions.tests.ask_helpers import CHAT, OTHER, REQUESTER, SESSION
from tests import feishu

pytestmark = pytest.mark.django_db(transaction=True)

FEED = "/api/v1/events"
TYPE = "session.cancel_requested"


@pytest.fixture
def feed_key(lark_bot, make_api_key):
    raw, _key = make_api_key(lark_bot)
    return raw


@pytest.fixture
def api(feed_key):
    from rest_framework.test import APIClient

    client = APIClient(HTTP_ACCEPT_LANGUAGE="en")
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {feed_key}")
    return client


def press_cancel(lark_callback, progress, operator=REQUESTER):
    payload = feishu.payload(
        "card_action_ask_submit",
        {
            "event.action.value": {"kind": "progress", "act": "cancel", "sessionId": SESSION},
            "event.action.name": "progress_cancel",
            "event.operator.open_id": operator,
            "event.context.open_message_id": progress.card.open_message_id,
        },
    )
    del payload["event"]["action"]["form_value"]
    response = lark_callback(payload)
    assert response.status_code == 200
    return json.loads(response.content)


def test_cancel_task_emits_one_event_per_subscribed_destination_once(
    lark_callback, lark_stub, lark_bot, progress, panel, make_destination
):
    subscribed, _ = make_destination("https://a.example.com/hook", event_types=[TYPE])
    both, _ = make_destination(
        "https://b.example.com/hook", event_types=["interaction.resolved", TYPE]
    )
    make_destination("https://c.example.com/hook", event_types=["interaction.resolved"])

    assert press_cancel(lark_callback, progress)["toast"]["type"] == "success"

    event = Event.objects.get(type=TYPE)
    rows = OutboxItem.objects.filter(event=event)
    assert sorted(rows.values_list("destination_id", flat=True)) == sorted([subscribed.pk, both.pk])
    session = ProgressSession.objects.get(pk=progress.pk)
    envelope = json.loads(event.body)
    assert envelope["type"] == TYPE
    assert envelope["data"] == {
        "session_id": SESSION,
        "bot_app_id": lark_bot.app_id,
        "operator_open_id": REQUESTER,
        "requested_at": envelope["data"]["requested_at"],
        "chat_id": CHAT,
        "card_id": progress.card.card_id,
        "platform_message_id": progress.card.open_message_id,
    }
    assert session.cancel_requested_at is not None
    assert all(json.loads(row.body) == envelope for row in rows)

    # a second press changes nothing: no second event, no more rows
    again = press_cancel(lark_callback, progress)
    assert again["toast"]["i18n"]["en_us"] == "Cancellation was already requested"
    assert Event.objects.filter(type=TYPE).count() == 1
    assert OutboxItem.objects.count() == 2


def test_a_refused_press_emits_nothing(lark_callback, lark_stub, progress, panel, make_destination):
    make_destination("https://a.example.com/hook", event_types=[TYPE])
    press_cancel(lark_callback, progress, operator=OTHER)
    assert not Event.objects.filter(type=TYPE).exists()
    assert not OutboxItem.objects.exists()


@pytest.mark.postgres
def test_two_concurrent_presses_emit_one_event(lark_stub, progress, panel, make_destination):
    from interactions.asks import progress as progress_sessions

    make_destination("https://a.example.com/hook", event_types=[TYPE])
    barrier = threading.Barrier(2)
    recorded = []

    def press():
        try:
            barrier.wait(5)
            recorded.append(progress_sessions.request_cancel(progress, operator_open_id=REQUESTER))
        finally:
            connections.close_all()

    threads = [threading.Thread(target=press) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(recorded) == [False, True]
    assert Event.objects.filter(type=TYPE).count() == 1
    assert OutboxItem.objects.count() == 1


def test_the_flag_and_the_event_commit_together(lark_stub, progress, panel, monkeypatch):
    """If the event cannot be written the request is not recorded either (one transaction)."""
    from interactions.asks import progress as progress_sessions

    def broken_sink(*args, **kwargs):
        raise RuntimeError("event store down")

    monkeypatch.setattr(interaction_events, "_sink", broken_sink)
    with pytest.raises(RuntimeError):
        progress_sessions.request_cancel(progress, operator_open_id=REQUESTER)
    assert ProgressSession.objects.get(pk=progress.pk).cancel_requested_at is None


def test_the_feed_shows_the_event_and_filters_by_its_type(
    lark_callback, lark_stub, progress, panel, api
):
    press_cancel(lark_callback, progress)
    page = api.get(FEED, {"types": TYPE}).json()
    assert [e["type"] for e in page["events"]] == [TYPE]
    assert page["events"][0]["data"]["session_id"] == SESSION
    assert TYPE not in [e["type"] for e in api.get(FEED, {"types": "alert.fired"}).json()["events"]]


def test_a_feed_long_poll_returns_at_once_when_events_are_waiting(
    lark_callback, lark_stub, progress, panel, api
):
    press_cancel(lark_callback, progress)
    page = api.get(FEED, {"wait": "60", "types": TYPE}).json()
    assert [e["type"] for e in page["events"]] == [TYPE]


def test_a_feed_long_poll_returns_an_empty_page_when_the_wait_ran_out(api, db):
    page = api.get(FEED, {"wait": "0.3"}).json()
    assert page["events"] == [] and page["has_more"] is False


@pytest.mark.parametrize("wait", ["-1", "61", "soon"])
def test_a_bad_feed_wait_is_a_400_naming_the_field(api, wait):
    response = api.get(FEED, {"wait": wait})
    assert response.status_code == 400
    assert "wait" in response.json()["detail"]


async def _feed_long_poll(raw_key: str, query: str) -> tuple[int, dict]:
    from channels.testing import HttpCommunicator

    from cardloop.asgi import application

    communicator = HttpCommunicator(
        application,
        "GET",
        f"{FEED}?{query}",
        headers=[(b"host", b"testserver"), (b"authorization", f"Bearer {raw_key}".encode())],
    )
    response = await communicator.get_response(timeout=70)
    return response["status"], json.loads(response["body"])


async def test_a_waiting_feed_long_poll_is_woken_by_the_cancel(
    lark_callback, lark_stub, progress, panel, feed_key, monkeypatch
):
    """With database polls 30 s apart, only the wake-up sent after the cancel committed can
    end a 50 s wait within the 20 s guard: the long-poll returns early, with the event."""
    monkeypatch.setattr(longpoll, "FIRST_POLL_INTERVAL", 30.0)
    monkeypatch.setattr(longpoll, "MAX_POLL_INTERVAL", 30.0)
    from feedback import event_views

    waiting = threading.Event()
    subscribed = event_views.wait_for_events

    async def spy(*args, **kwargs):
        asyncio.get_running_loop().call_later(0.5, waiting.set)
        return await subscribed(*args, **kwargs)

    monkeypatch.setattr(event_views, "wait_for_events", spy)

    def press_when_waiting():
        waiting.wait(10)
        try:
            press_cancel(lark_callback, progress)
        finally:
            connections.close_all()

    thread = threading.Thread(target=press_when_waiting)
    thread.start()
    status, page = await asyncio.wait_for(
        _feed_long_poll(feed_key, f"wait=50&types={TYPE}"), timeout=20
    )
    await sync_to_async(thread.join)()
    assert waiting.is_set()
    assert status == 200
    assert [e["type"] for e in page["events"]] == [TYPE]
    assert page["events"][0]["data"]["session_id"] == SESSION
    await sync_to_async(connections.close_all)()


@pytest.mark.redis
async def test_a_feed_long_poll_in_another_process_is_woken_through_redis(
    lark_callback, lark_stub, progress, panel, feed_key, monkeypatch
):
    """The waiter does not register for in-process wake-ups (as if the click were handled by
    another process): only the Redis group message can end the wait within the guard."""
    from interactions.lifecycle import waiters

    monkeypatch.setattr(longpoll, "FIRST_POLL_INTERVAL", 30.0)
    monkeypatch.setattr(longpoll, "MAX_POLL_INTERVAL", 30.0)
    monkeypatch.setattr(waiters, "add_local_waiter", lambda *args: None)
    assert waiters.channel_layer_for_waiters() is not None
    from feedback import event_views

    waiting = threading.Event()
    subscribed = event_views.wait_for_events

    async def spy(*args, **kwargs):
        asyncio.get_running_loop().call_later(1.0, waiting.set)
        return await subscribed(*args, **kwargs)

    monkeypatch.setattr(event_views, "wait_for_events", spy)

    def press_when_waiting():
        waiting.wait(10)
        try:
            press_cancel(lark_callback, progress)
        finally:
            connections.close_all()

    thread = threading.Thread(target=press_when_waiting)
    thread.start()
    status, page = await asyncio.wait_for(
        _feed_long_poll(feed_key, f"wait=50&types={TYPE}"), timeout=20
    )
    await sync_to_async(thread.join)()
    assert status == 200 and [e["type"] for e in page["events"]] == [TYPE]
    await sync_to_async(connections.close_all)()


def test_the_event_type_is_documented_and_subscribable(admin_client):
    from pathlib import Path

    from django.conf import settings

    from feedback.envelopes import FEED_TYPES

    assert TYPE in FEED_TYPES
    contract = (Path(settings.BASE_DIR) / "docs" / "CONTRACT.md").read_text()
    assert f"**`{TYPE}`**" in contract
    schema = admin_client.get("/api/schema/", {"format": "json"}).json()
    types = schema["paths"][FEED]["get"]["parameters"]
    assert TYPE in next(p for p in types if p["name"] == "types")["description"]
    assert "wait" in [p["name"] for p in types]
