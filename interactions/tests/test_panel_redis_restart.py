"""A Redis restart under a live panel (a Redis this test starts itself, so nobody else's is
touched): Daphne closes the socket with 1011 because the consumer's channel-layer receive
raised, and no disconnect step runs — the panel's presence must still end, within the
presence TTL, so that an ask then answers 409 "no panel" instead of waiting for a panel that
is gone."""

from __future__ import annotations

import asyncio
import shutil
import socket
import subprocess
import time

import httpx
import pytest
from channels.db import database_sync_to_async
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from interactions import presence as panel_presence
from interactions.models import PanelPresence
from interactions.tests.panel_helpers import *  # noqa: F403
from interactions.tests.panel_helpers import QUESTIONS, REQUESTER, ws_receive, ws_url

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(shutil.which("redis-server") is None, reason="needs redis-server"),
]

TTL = 3  # seconds, in the Daphne child and in this process's `is_connected`
FAST = {"CARDLOOP_PANEL_HEARTBEAT": "0.5", "CARDLOOP_PANEL_PRESENCE_TTL": str(TTL)}


class PrivateRedis:
    """A `redis-server` on a free loopback port with no persistence, started and restarted
    by the test (same port, empty data)."""

    def __init__(self, tmp_path):
        self.dir = tmp_path
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.process = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1"]
            + ["--save", "", "--appendonly", "no", "--dir", str(self.dir)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 20
        while True:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1) as conn:
                    conn.sendall(b"PING\r\n")
                    if conn.recv(16).startswith(b"+PONG"):
                        return
            except OSError:
                pass
            assert time.monotonic() < deadline, "redis-server did not start"
            time.sleep(0.1)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)


@pytest.fixture
def key(panel_user, make_api_key):
    return make_api_key(panel_user[0])[0]


@pytest.fixture
def private_redis(tmp_path):
    server = PrivateRedis(tmp_path)
    server.start()
    yield server
    server.stop()


async def test_a_panel_dropped_by_a_redis_restart_loses_its_presence_and_asks_get_409(
    panel_user, key, daphnes, private_redis, settings
):
    settings.CARDLOOP_PANEL_PRESENCE_TTL = TTL
    bot, raw, _token = panel_user
    base = daphnes.start("a", REDIS_URL=private_redis.url, **FAST)
    ws = await connect(ws_url(base), additional_headers={"Authorization": f"Bearer {raw}"})
    assert (await ws_receive(ws))["type"] == "snapshot"
    assert await database_sync_to_async(panel_presence.is_connected)(bot, REQUESTER)

    private_redis.stop()
    private_redis.start()  # same port, empty: the consumer's blocking receive lost its link
    try:  # the server closes the socket (1011); a client that did not notice closes it too
        await asyncio.wait_for(ws.recv(), 15)
        await asyncio.wait_for(ws.recv(), 15)
    except (ConnectionClosed, TimeoutError):
        pass
    await ws.close()

    deadline = time.monotonic() + TTL + 20  # the TTL, plus slack for a loaded machine
    while await database_sync_to_async(panel_presence.is_connected)(bot, REQUESTER):
        assert time.monotonic() < deadline, (
            "presence of a dropped socket stayed fresh\n" + (daphnes.log("a")[-3000:])
        )
        await asyncio.sleep(0.2)
    async with httpx.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=20) as api:
        refused = await api.post(
            f"{base}/api/v1/sessions/sess_after_restart/asks",
            json={"questions": QUESTIONS, "requester_open_id": REQUESTER},
        )
    assert refused.status_code == 409, refused.text
    assert refused.json()["code"] == "no_channel"
    # nothing refreshes the dropped socket's row any more
    await asyncio.sleep(TTL / 2)
    live = await database_sync_to_async(lambda: PanelPresence.objects.live().count())()
    assert live == 0


async def test_the_heartbeat_forgets_a_channel_whose_consumer_task_ended_without_detaching():
    local = panel_presence._Local()

    async def consumer_that_dies():
        local.attach("specific.dead!1", "cardloop.panel.x")
        raise ConnectionError("the channel layer went away")

    task = asyncio.get_running_loop().create_task(consumer_that_dies())
    with pytest.raises(ConnectionError):
        await task
    loop = asyncio.get_running_loop()

    async def live_consumer():
        local.attach("specific.live!2", "cardloop.panel.y")
        assert local.on_loop(loop) == ["specific.live!2"]
        local.detach("specific.live!2")

    await loop.create_task(live_consumer())
    assert local.on_loop(loop) == [] and local.channels == {}
    for heartbeat in local.heartbeats.values():
        heartbeat.cancel()
