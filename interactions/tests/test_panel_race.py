"""The race of a panel answer and a card submit on the same ask: in every round exactly one
wins, and the loser is told — the card gets "问题已失效" (with a card without the form), the
panel gets `ask_user_questions_rejected` (`finished`). The panel answers over the real
WebSocket consumer; the card submit goes through the real Feishu ingress, concurrently."""

from __future__ import annotations

import asyncio
import json
import threading

import pytest
from channels.db import database_sync_to_async
from django.db import connection

from botadmin import services
from feedback.models import Event
from interactions.asks import service as asks
from interactions.models import Ask
from interactions.render import progress_cards
from interactions.tests.ask_helpers import *  # noqa: F403
from interactions.tests.ask_helpers import QUESTIONS, REQUESTER, SESSION, has_form
from interactions.tests.panel_helpers import communicator, receive, receive_until
from tests import feishu

pytestmark = pytest.mark.django_db(transaction=True)

ANSWERS = [
    {"question": QUESTIONS[0]["question"], "selectedLabels": ["SQLite"], "customInput": ""},
    {"question": QUESTIONS[1]["question"], "selectedLabels": ["Lint"], "customInput": ""},
]


def _card_submit(lark_callback, payload):
    try:
        return lark_callback(payload)
    finally:
        connection.close()  # this executor thread's connection (PostgreSQL drops the test DB)


def card_form(ask):
    """The card's form_value for ANSWERS, in the field names of the ask's form."""
    (q0, c0), (q1, c1) = (progress_cards.field_names(ask.form_index, i) for i in (0, 1))
    return {q0: "0", c0: "", q1: ["1"], c1: ""}


@pytest.fixture
def start_gate(monkeypatch):
    """Both paths enter `asks.submit_answers` at the same moment in every round (a barrier of
    two), so the database decides the race, not which side's transport is faster."""
    real = asks.submit_answers
    barrier = threading.Barrier(2, timeout=30)

    def gated(*args, **kwargs):
        barrier.wait()
        return real(*args, **kwargs)

    monkeypatch.setattr(asks, "submit_answers", gated)
    return barrier


async def _race(rounds, lark_bot, lark_callback, progress):
    raw, _token = await database_sync_to_async(services.issue_desktop_token)(
        "test", lark_bot, REQUESTER
    )
    comm = communicator(raw=raw)
    assert (await comm.connect())[0]
    await receive(comm)
    loop = asyncio.get_running_loop()
    wins = {"card": 0, "panel": 0}
    for n in range(rounds):
        reg = await database_sync_to_async(asks.register_ask)(
            lark_bot, SESSION, questions=QUESTIONS, requester_open_id=REQUESTER
        )
        ask = reg.ask
        assert reg.on_card and reg.on_panel
        await receive_until(comm, lambda f, a=ask: f.get("requestId") == a.public_id)
        payload = feishu.payload(
            "card_action_ask_submit",
            {
                "event.action.value.requestId": ask.public_id,
                "event.action.value.sessionId": SESSION,
                "event.context.open_message_id": progress.card.open_message_id,
                "event.action.form_value": card_form(ask),
            },
        )
        card_future = loop.run_in_executor(None, _card_submit, lark_callback, payload)
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
        response = await card_future
        assert response.status_code == 200
        body = json.loads(response.content)
        toast = body["toast"]["i18n"]["zh_cn"]
        panel_won = reply["type"] == "ask_user_questions_accepted"
        card_won = toast == "已提交"
        assert panel_won != card_won, (n, reply, toast)
        if panel_won:
            wins["panel"] += 1
            assert toast == "问题已失效" and not has_form(body["card"]["data"])
        else:
            wins["card"] += 1
            assert reply["code"] == "finished"
        stored = await database_sync_to_async(Ask.objects.get)(pk=ask.pk)
        assert stored.status == "resolved"
        assert stored.resolution["via"] == ("panel" if panel_won else "card")
        count = await database_sync_to_async(
            Event.objects.filter(type="interaction.resolved", body__contains=ask.public_id).count
        )()
        assert count == 1
    await comm.disconnect(timeout=10)
    return wins


@pytest.mark.postgres
async def test_panel_and_card_race_200_rounds_one_winner_each_on_postgresql(
    lark_bot, lark_callback, lark_stub, progress, start_gate
):
    wins = await _race(200, lark_bot, lark_callback, progress)
    assert sum(wins.values()) == 200


async def test_panel_and_card_race_on_sqlite(
    lark_bot, lark_callback, lark_stub, progress, start_gate
):
    if connection.vendor != "sqlite":
        pytest.skip("the PostgreSQL variant runs instead")
    wins = await _race(200, lark_bot, lark_callback, progress)
    assert sum(wins.values()) == 200
