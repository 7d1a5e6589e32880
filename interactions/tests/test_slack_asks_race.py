"""The race of a panel answer and a Slack submit on the same ask, on one Slack progress
message: in every round exactly one wins and the loser is told — the Slack clicker gets
"问题已失效" as an ephemeral message, the panel `ask_user_questions_rejected` (`finished`). The
panel answers over the real WebSocket consumer; the Slack submit is a signed `block_actions`
request (Slack's documented shape, `tests/fixtures/slack/block_actions.json`) through the real
ASGI app in its own thread, concurrently; both enter `asks.submit_answers` together."""

from __future__ import annotations

import asyncio

import pytest
from channels.db import database_sync_to_async
from django.db import connection
from django.utils import translation

from botadmin import services
from feedback.models import Event
from interactions.asks import handlers
from interactions.asks import progress as progress_sessions
from interactions.asks import service as asks
from interactions.models import Ask, ProgressSession
from interactions.tests.ask_helpers import QUESTIONS, SESSION
from interactions.tests.panel_helpers import communicator, receive, receive_until
from interactions.tests.slack_helpers import *  # noqa: F403
from interactions.tests.slack_helpers import CHAT, REQUESTER
from interactions.tests.test_panel_race import ANSWERS, start_gate  # noqa: F401 - a fixture
from interactions.tests.test_slack_asks import state_for, submit

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _in_memory_channel_layer(settings):
    """The race is decided by the database (PostgreSQL here); the panel's channel layer only
    carries the frames. channels-redis binds its connections to the event loop that opened
    them, and the 200 rounds mix the test's loop with the request threads' loops, so the
    in-memory layer carries the frames (the Redis layer has its own tests)."""
    settings.CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}


@pytest.fixture
def slack_progress(slack_app, slack_stub):
    result = progress_sessions.update_progress(
        slack_app.bot,
        SESSION,
        status="running",
        channel="slack",
        receive_id=CHAT,
        requester_open_id=REQUESTER,
    )
    assert result.sent
    return ProgressSession.objects.select_related("card").get(pk=result.session.pk)


def _slack_submit(session, ask, key, stub):
    try:
        return submit(session, ask, state_for(ask, [(1, ""), ([0], "")]), key=key, slack_stub=stub)
    finally:
        connection.close()  # this executor thread's connection (PostgreSQL drops the test DB)


def _close():
    connection.close()


async def _race(rounds, bot, session, stub):
    with translation.override("zh-hans"):
        stale = str(handlers.STALE)
        submitted = str(handlers.SUBMITTED)
    raw, _token = await database_sync_to_async(services.issue_desktop_token)("test", bot, REQUESTER)
    comm = communicator(raw=raw)
    assert (await comm.connect())[0]
    await receive(comm)
    loop = asyncio.get_running_loop()
    wins = {"slack": 0, "panel": 0}
    for n in range(rounds):
        reg = await database_sync_to_async(asks.register_ask)(bot, SESSION, questions=QUESTIONS)
        ask = reg.ask
        assert reg.on_card and reg.on_panel
        await receive_until(comm, lambda f, a=ask: f.get("requestId") == a.public_id)
        key = f"r{n}"
        slack_future = loop.run_in_executor(None, _slack_submit, session, ask, key, stub)
        await comm.send_json_to(
            {"type": "ask_user_questions_result", "requestId": ask.public_id, "answers": ANSWERS}
        )
        reply, _ = await receive_until(
            comm,
            lambda f, a=ask: (
                f.get("requestId") == a.public_id
                and f["type"] in ("ask_user_questions_accepted", "ask_user_questions_rejected")
            ),
        )
        assert await slack_future == (200, {})
        told = [b["text"] for k, b in stub.responses if k == key]
        panel_won = reply["type"] == "ask_user_questions_accepted"
        slack_won = told == [submitted]
        assert panel_won != slack_won, (n, reply, told)
        stored = await database_sync_to_async(Ask.objects.get)(pk=ask.pk)
        assert stored.status == "resolved"
        if panel_won:
            wins["panel"] += 1
            assert told == [stale]  # the Slack clicker is told the question is gone
            assert stored.resolution["via"] == "panel"
            assert stored.resolution["value"][0]["selectedLabels"] == ["SQLite"]
        else:
            wins["slack"] += 1
            assert reply["code"] == "finished"
            assert stored.resolution["via"] == "card"
            assert stored.resolution["value"][0]["selectedLabels"] == ["PostgreSQL"]
        count = await database_sync_to_async(
            Event.objects.filter(type="interaction.resolved", body__contains=ask.public_id).count
        )()
        assert count == 1
    await comm.disconnect(timeout=10)
    await database_sync_to_async(_close)()  # the sync thread's connection, before teardown
    return wins


@pytest.mark.postgres
async def test_a_panel_answer_and_a_slack_submit_racing_200_times_leave_one_winner_each(
    slack_app,
    slack_stub,
    slack_progress,
    start_gate,  # noqa: F811 - the imported fixture
):
    wins = await _race(200, slack_app.bot, slack_progress, slack_stub)
    assert sum(wins.values()) == 200


async def test_a_panel_answer_and_a_slack_submit_racing_on_sqlite(
    slack_app,
    slack_stub,
    slack_progress,
    start_gate,  # noqa: F811 - the imported fixture
):
    if connection.vendor != "sqlite":
        pytest.skip("the PostgreSQL variant runs instead")
    wins = await _race(20, slack_app.bot, slack_progress, slack_stub)
    assert sum(wins.values()) == 20
