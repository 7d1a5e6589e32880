"""Panels across real Daphne processes (`@pytest.mark.redis`: the Redis channel layer): a
panel on one process gets asks registered and answered through another; presence is shared
through the database and a process killed without cleanup stops counting after the TTL."""

from __future__ import annotations

import asyncio
import json
import time

import httpx
import pytest
from channels.db import database_sync_to_async
from websockets.asyncio.client import connect

from interactions import presence as panel_presence
from interactions.models import PanelPresence
from interactions.tests.panel_helpers import *  # noqa: F403
from interactions.tests.panel_helpers import (
    QUESTIONS,
    REQUESTER,
    ws_receive,
    ws_receive_until,
    ws_url,
)

pytestmark = [pytest.mark.redis, pytest.mark.django_db(transaction=True)]

ANSWERS = [
    {"question": QUESTIONS[0]["question"], "selectedLabels": ["SQLite"], "customInput": ""},
    {"question": QUESTIONS[1]["question"], "selectedLabels": [], "customInput": "all of them"},
]
FAST = {"CARDLOOP_PANEL_HEARTBEAT": "0.5", "CARDLOOP_PANEL_PRESENCE_TTL": "3"}


@pytest.fixture
def key(panel_user, make_api_key):
    return make_api_key(panel_user[0])[0]


async def test_ask_registered_on_one_process_reaches_a_panel_on_another_and_answers_cross(
    panel_user, key, daphnes
):
    _bot, raw, _token = panel_user
    a, b = daphnes.start("a"), daphnes.start("b")
    auth = {"Authorization": f"Bearer {raw}"}
    async with (
        connect(ws_url(a), additional_headers=auth) as on_a,
        connect(ws_url(b), additional_headers=auth) as on_b,
        httpx.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=20) as api,
    ):
        assert (await ws_receive(on_a))["type"] == "snapshot"
        assert (await ws_receive(on_b))["type"] == "snapshot"
        servers = await database_sync_to_async(
            lambda: sorted(PanelPresence.objects.values_list("server", flat=True))
        )()
        assert len(servers) == 2 and servers[0] != servers[1]

        created = await api.post(
            f"{b}/api/v1/sessions/sess_x/asks",
            json={"questions": QUESTIONS, "requester_open_id": REQUESTER},
        )
        assert created.status_code == 201, created.text
        request_id = created.json()["requestId"]
        for ws in (on_a, on_b):  # on_a through Redis from process b
            pushed = await ws_receive_until(ws, lambda f: f["type"] == "ask_user_questions")
            assert pushed["requestId"] == request_id
            assert pushed["questions"][1]["multiSelect"] is True

        # Answered on process a's panel: process b's panel is told.
        await on_a.send(
            json.dumps(
                {"type": "ask_user_questions_result", "requestId": request_id, "answers": ANSWERS}
            )
        )
        accepted = await ws_receive_until(on_a, lambda f: f["type"].endswith("_accepted"))
        assert accepted["requestId"] == request_id
        cancelled = await ws_receive_until(on_b, lambda f: f["type"].endswith("_cancelled"))
        assert cancelled == {
            "type": "ask_user_questions_cancelled",
            "requestId": request_id,
            "reason": "answered",
        }
        state = (await api.get(f"{b}/api/v1/asks/{request_id}")).json()
        assert state["status"] == "answered" and state["answered_via"] == "panel"
        assert state["answers"][1]["customInput"] == "all of them"

        # A late answer from process b's panel is rejected.
        await on_b.send(
            json.dumps(
                {"type": "ask_user_questions_result", "requestId": request_id, "answers": ANSWERS}
            )
        )
        rejected = await ws_receive_until(on_b, lambda f: f["type"].endswith("_rejected"))
        assert rejected["code"] == "finished"
    # Both sockets closed: both processes removed their presence.
    for _ in range(50):
        if not await database_sync_to_async(PanelPresence.objects.exists)():
            break
        await asyncio.sleep(0.1)
    assert not await database_sync_to_async(PanelPresence.objects.exists)()


async def test_a_killed_process_stops_counting_as_connected_after_the_ttl(
    panel_user, key, daphnes, settings
):
    settings.CARDLOOP_PANEL_PRESENCE_TTL = 3
    bot, raw, _token = panel_user
    a, b = daphnes.start("a", **FAST), daphnes.start("b", **FAST)
    ws = await connect(ws_url(a), additional_headers={"Authorization": f"Bearer {raw}"})
    assert (await ws_receive(ws))["type"] == "snapshot"
    assert await database_sync_to_async(panel_presence.is_connected)(bot, REQUESTER)
    await asyncio.sleep(1.5)  # heartbeats keep it fresh past half the TTL
    assert await database_sync_to_async(panel_presence.is_connected)(bot, REQUESTER)

    daphnes.kill("a")  # no disconnect handler runs; the row stays behind
    killed_at = time.monotonic()
    assert await database_sync_to_async(PanelPresence.objects.count)() == 1
    while await database_sync_to_async(panel_presence.is_connected)(bot, REQUESTER):
        assert time.monotonic() - killed_at < 10
        await asyncio.sleep(0.2)
    async with httpx.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=20) as api:
        refused = await api.post(
            f"{b}/api/v1/sessions/sess_y/asks",
            json={"questions": QUESTIONS, "requester_open_id": REQUESTER},
        )
    assert refused.status_code == 409
    assert refused.json()["error"] == "当前通道无法向用户提问"
    # A live process's heartbeat sweeps the dead row.
    second = await connect(ws_url(b), additional_headers={"Authorization": f"Bearer {raw}"})
    await ws_receive(second)
    for _ in range(50):
        servers = await database_sync_to_async(
            lambda: set(PanelPresence.objects.values_list("server", flat=True))
        )()
        if len(servers) == 1:
            break
        await asyncio.sleep(0.2)
    assert len(servers) == 1
    await second.close()


async def test_an_idle_panel_on_the_redis_layer_stays_connected_and_gets_later_pushes(
    panel_user, key, daphnes
):
    """redis-py 8 reads with a 5 s socket timeout by default; without `socket_timeout: None`
    in CHANNEL_LAYERS an idle consumer's blocking receive times out and Daphne closes it with
    1011 after ~5 s (django/channels_redis#422)."""
    _bot, raw, _token = panel_user
    a = daphnes.start("a")
    async with (
        connect(ws_url(a), additional_headers={"Authorization": f"Bearer {raw}"}) as ws,
        httpx.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=20) as api,
    ):
        assert (await ws_receive(ws))["type"] == "snapshot"
        await asyncio.sleep(12)  # idle past two blocking-receive periods
        created = await api.post(
            f"{a}/api/v1/sessions/sess_idle/asks",
            json={"questions": QUESTIONS, "requester_open_id": REQUESTER},
        )
        assert created.status_code == 201, created.text
        pushed = await ws_receive_until(ws, lambda f: f["type"] == "ask_user_questions")
        assert pushed["requestId"] == created.json()["requestId"]
    assert "Timeout reading" not in daphnes.log("a")
