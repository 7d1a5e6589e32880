"""Helpers of the question-panel tests: a WebSocketCommunicator on the real ASGI application
and a panel user with a desktop token. Import with `from interactions.tests.panel_helpers
import *  # noqa: F403`."""

from __future__ import annotations

import json

import pytest
from channels.testing import WebsocketCommunicator

from botadmin import services
from botadmin.asgi import application  # at import: django.setup() there reconfigures logging
from interactions.tests.ask_helpers import QUESTIONS, REQUESTER

__all__ = ["QUESTIONS", "REQUESTER", "communicator", "panel_user", "receive", "receive_until"]


def communicator(*, raw=None, subprotocols=None, headers=None) -> WebsocketCommunicator:
    """A client of `/ws/panel/` through `botadmin.asgi.application` (origin check, session
    middleware, routing); `raw` is sent as `Authorization: Bearer <raw>`."""
    hdrs = list(headers or [])
    if raw is not None:
        hdrs.append((b"authorization", f"Bearer {raw}".encode()))
    return WebsocketCommunicator(application, "/ws/panel/", headers=hdrs, subprotocols=subprotocols)


async def receive(comm, timeout=5) -> dict:
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
