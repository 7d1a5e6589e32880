"""Helpers of the question-panel tests: a WebSocketCommunicator on the real ASGI application
and a panel user with a desktop token. Import with `from interactions.tests.panel_helpers
import *  # noqa: F403`."""

from __future__ import annotations

import json

import pytest
from channels.testing import WebsocketCommunicator

from botadmin import services
from cardloop.asgi import application  # at import: django.setup() there reconfigures logging
from interactions.tests.ask_helpers import QUESTIONS, REQUESTER

__all__ = [
    "QUESTIONS",
    "REQUESTER",
    "communicator",
    "daphnes",
    "panel_user",
    "receive",
    "receive_until",
    "ws_receive",
    "ws_receive_until",
    "ws_url",
]


def communicator(*, raw=None, subprotocols=None, headers=None) -> WebsocketCommunicator:
    """A client of `/ws/panel/` through `cardloop.asgi.application` (origin check, session
    middleware, routing); `raw` is sent as `Authorization: Bearer <raw>`."""
    hdrs = list(headers or [])
    if raw is not None:
        hdrs.append((b"authorization", f"Bearer {raw}".encode()))
    return WebsocketCommunicator(application, "/ws/panel/", headers=hdrs, subprotocols=subprotocols)


async def receive(comm, timeout=5) -> dict:
    """The next frame of `comm`, decoded. Raises TimeoutError after `timeout` s, and then the
    application is already cancelled (asgiref's `receive_output`): the panel is gone, and its
    leave may take the process out of the user's group. To wait for a frame that may not
    come, poll `comm.receive_nothing(timeout)` first."""
    return json.loads(await comm.receive_from(timeout))


async def receive_until(comm, predicate, timeout=5, limit=1000) -> tuple[dict, list[dict]]:
    """Read frames until `predicate(frame)`; returns (that frame, the frames before it)."""
    seen = []
    for _ in range(limit):
        frame = await receive(comm, timeout)
        if predicate(frame):
            return frame, seen
        seen.append(frame)
    raise AssertionError(f"no matching frame in {limit}")


@pytest.fixture
def panel_user(make_bot):
    """(bot, raw desktop token of REQUESTER, token row)."""
    bot = make_bot(app_id="cli_panel")
    raw, token = services.issue_desktop_token("test", bot, REQUESTER, "test")
    return bot, raw, token


class Daphnes:
    """Cardloop under real Daphne child processes on ephemeral 127.0.0.1 ports, sharing the
    test database, secret directory and (when set) REDIS_URL; each `start()` returns its base
    URL. Processes are stopped (SIGTERM, then SIGKILL) at teardown."""

    def __init__(self, tmp_path):
        self.tmp_path = tmp_path
        self.processes: dict[str, object] = {}

    def start(self, name: str, **env: str) -> str:
        import socket
        import subprocess
        import sys

        from tests.processes import child_env, wait_until_serving

        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        sock.listen(128)
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        log_path = self.tmp_path / f"daphne-{name}.log"
        log = log_path.open("wb")
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "daphne",
                "--fd",
                str(sock.fileno()),
                "cardloop.asgi:application",
            ],
            env=child_env(DJANGO_ALLOWED_HOSTS="127.0.0.1", **env),
            pass_fds=[sock.fileno()],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        sock.close()
        log.close()
        self.processes[name] = process
        wait_until_serving(f"{url}/healthz", process, log_path)
        return url

    def kill(self, name: str) -> None:
        """SIGKILL: the process dies without running any disconnect handler."""
        process = self.processes[name]
        process.kill()
        process.wait(10)

    def log(self, name: str) -> str:
        return (self.tmp_path / f"daphne-{name}.log").read_text(errors="replace")

    def stop_all(self) -> None:
        import subprocess

        for process in self.processes.values():
            if process.poll() is None:
                process.terminate()
                try:
                    process.wait(10)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait(10)


@pytest.fixture
def daphnes(transactional_db, tmp_path):
    manager = Daphnes(tmp_path)
    yield manager
    manager.stop_all()


def ws_url(base: str) -> str:
    return base.replace("http://", "ws://") + "/ws/panel/"


async def ws_receive(ws, timeout=15) -> dict:
    import asyncio

    return json.loads(await asyncio.wait_for(ws.recv(), timeout))


async def ws_receive_until(ws, predicate, timeout=15, limit=1000) -> dict:
    for _ in range(limit):
        frame = await ws_receive(ws, timeout)
        if predicate(frame):
            return frame
    raise AssertionError("no matching frame")
