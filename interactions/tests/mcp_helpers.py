"""Shared helpers and fixtures of the MCP tool-server tests: the real `mcp` client
(`ClientSession` over Streamable HTTP) against live Daphne child processes. Import into a test
module with `from interactions.tests.mcp_helpers import *  # noqa: F403`."""

from __future__ import annotations

import asyncio
import contextlib
import time

import httpx
import httpx2
import pytest
from channels.db import database_sync_to_async
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client

from interactions.asks import progress
from interactions.lark.signing import seal
from interactions.models import Interaction, ProgressSession
from interactions.tests.ask_helpers import CHAT, QUESTIONS, REQUESTER
from interactions.tests.panel_helpers import daphnes  # noqa: F401 - a fixture
from tests import feishu

__all__ = [
    "CHAT",
    "QUESTIONS",
    "REQUESTER",
    "card_of",
    "daphnes",
    "db",
    "issue_token",
    "live",
    "mcp_client",
    "pending_interaction",
    "post_card_action",
    "start_progress",
]

db = database_sync_to_async


class Live:
    """A running Cardloop (Daphne child processes on the test database, Feishu calls going
    to `stub`), the bot `lark_bot` and its API key."""

    def __init__(self, daphnes, stub, bot, key):
        self.daphnes, self.stub, self.bot, self.key = daphnes, stub, bot, key
        self.urls: dict[str, str] = {}

    def start(self, name: str = "a", **env: str) -> str:
        self.urls[name] = self.daphnes.start(name, CARDLOOP_LARK_DOMAIN=self.stub.url, **env)
        return self.urls[name]

    @property
    def url(self) -> str:
        return self.urls.get("a") or self.start("a")


@pytest.fixture
def live(daphnes, lark_stub, lark_bot, make_api_key):  # noqa: F811 - the fixture above
    return Live(daphnes, lark_stub, lark_bot, make_api_key(lark_bot)[0])


async def issue_token(base: str, key: str, session_id: str, **body) -> dict:
    """`POST /api/v1/sessions/<session_id>/mcp-tokens` with bot key `key`; the JSON answer
    (asserts 201). Defaults: chat_id CHAT, requester REQUESTER."""
    body = {"chat_id": CHAT, "requester_open_id": REQUESTER, **body}
    async with httpx.AsyncClient(timeout=20, trust_env=False) as api:
        answer = await api.post(
            f"{base}/api/v1/sessions/{session_id}/mcp-tokens",
            json=body,
            headers={"Authorization": f"Bearer {key}"},
        )
    assert answer.status_code == 201, answer.text
    return answer.json()


@contextlib.asynccontextmanager
async def mcp_client(url: str, token: str, *, modern: bool = False):
    """An initialized `ClientSession` on `url` with `Authorization: Bearer <token>`: the
    initialize handshake (2025-11-25), or with `modern` the 2026-07-28 per-request protocol
    (`server/discover`)."""
    async with (
        httpx2.AsyncClient(
            headers={"Authorization": f"Bearer {token}"},
            timeout=httpx2.Timeout(30, read=300),
            trust_env=False,
        ) as http,
        streamable_http_client(url, http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
        if modern:
            await session.discover()
        else:
            await session.initialize()
        yield session


def card_of(session):
    """The card entity of a progress session, read now."""
    return ProgressSession.objects.select_related("card").get(pk=session.pk).card


def start_progress(bot, session_id: str, *, requester: str = REQUESTER):
    """A running progress session whose card was sent (to the stub): asks can be shown."""
    return progress.update_progress(
        bot,
        session_id,
        status="running",
        title="Deploying",
        receive_id=CHAT,
        requester_open_id=requester,
    ).session


async def pending_interaction(session_id: str, *, kind: str, timeout: float = 20) -> Interaction:
    """Wait until the session has a pending interaction of `kind` shown on a card (a call
    registered it; an approval's card was sent)."""
    deadline = time.monotonic() + timeout
    while True:
        found = await db(
            lambda: (
                Interaction.objects.filter(session_id=session_id, kind=kind)
                .pending()
                .exclude(open_message_id="", kind="approval")
                .select_related("card")
                .first()
            )
        )()
        if found is not None:
            return found
        assert time.monotonic() < deadline, f"no pending {kind} for {session_id}"
        await asyncio.sleep(0.1)


async def post_card_action(base: str, bot, name: str, changes: dict) -> dict:
    """Seal fixture `name` (with `changes`) for `bot` as Feishu does and POST it to the live
    server's ingress; returns the callback's JSON answer (asserts 200)."""
    body = feishu.payload(name, changes)
    raw, headers = seal(body, encrypt_key=bot.secret("encrypt_key"))
    async with httpx.AsyncClient(timeout=20, trust_env=False) as client:
        answer = await client.post(
            f"{base}/lark/{bot.app_id}/callback", content=raw, headers=headers
        )
    assert answer.status_code == 200, answer.text
    return answer.json()
