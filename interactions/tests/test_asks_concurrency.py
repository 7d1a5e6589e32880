"""Races on PostgreSQL (each attempt in its own thread and connection): a panel answer and a
card submit on the same ask, 200 rounds — one winner each, the loser told; a runtime restart
(`recovering`) racing submits never deadlocks and leaves no pending ask behind."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.db import connections

from feedback.models import Event
from interactions import asks, progress_cards, registry
from interactions.models import Ask
from interactions.tests.ask_helpers import *  # noqa: F403
from interactions.tests.ask_helpers import QUESTIONS, REQUESTER, SESSION
from tests import feishu

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

ROUNDS = 200
ANSWERS = [{"selectedLabels": ["SQLite"]}, {"selectedLabels": ["Lint"]}]


def card_submit(bot, ask, open_message_id, gate):
    try:
        payload = feishu.payload(
            "card_action_ask_submit",
            {
                "event.action.value.requestId": ask.public_id,
                "event.context.open_message_id": open_message_id,
                "event.action.form_value": {
                    progress_cards.field_names(ask.form_index, 0)[0]: "0",
                    progress_cards.field_names(ask.form_index, 1)[0]: ["1"],
                },
            },
        )
        gate.wait(10)
        answer = asks.on_ask_action(registry.CardAction.from_payload(bot, payload))
        return "card", answer.toast.type == "success", answer.toast.zh_cn
    finally:
        connections.close_all()


def panel_submit(bot, ask, gate):
    try:
        gate.wait(10)
        outcome = asks.submit_answers(
            bot, ask.public_id, ANSWERS, via="panel", operator_open_id=REQUESTER
        )
        return "panel", outcome.won, outcome.code
    finally:
        connections.close_all()


def test_panel_answer_and_card_submit_race_two_hundred_rounds(lark_bot, progress, panel):
    panel.connected.add(REQUESTER)
    winners = {"card": 0, "panel": 0}
    with ThreadPoolExecutor(max_workers=2) as pool:
        for _round in range(ROUNDS):
            ask = asks.register_ask(lark_bot, SESSION, questions=QUESTIONS).ask
            gate = threading.Event()
            futures = [
                pool.submit(card_submit, lark_bot, ask, progress.card.open_message_id, gate),
                pool.submit(panel_submit, lark_bot, ask, gate),
            ]
            gate.set()
            results = [f.result(timeout=30) for f in futures]
            won = [r for r in results if r[1]]
            lost = [r for r in results if not r[1]]
            assert len(won) == 1 and len(lost) == 1, results
            winners[won[0][0]] += 1
            # the loser is told: the card gets 问题已失效, the panel `finished`
            assert lost[0][2] in ("问题已失效", "finished")
            stored = Ask.objects.get(pk=ask.pk)
            assert stored.resolution["via"] == won[0][0]
    assert Event.objects.filter(type="interaction.resolved").count() == ROUNDS
    cancelled = panel.of_type("ask_user_questions_cancelled")
    assert len(cancelled) == ROUNDS and {m["reason"] for m in cancelled} == {"answered"}
    assert not Ask.objects.pending().exists()


def test_recovering_racing_submits_never_deadlocks(lark_bot, progress, panel):
    for _round in range(20):
        pending = [asks.register_ask(lark_bot, SESSION, questions=QUESTIONS).ask for _ in range(3)]
        gate = threading.Event()

        def recover():
            try:
                gate.wait(10)
                return asks.update_progress(lark_bot, SESSION, status="recovering").invalidated
            finally:
                connections.close_all()

        with ThreadPoolExecutor(max_workers=4) as pool:
            futures = [pool.submit(panel_submit, lark_bot, ask, gate) for ask in pending]
            restart = pool.submit(recover)
            gate.set()
            submitted = sum(1 for f in futures if f.result(timeout=30)[1])
            invalidated = restart.result(timeout=30)
        assert submitted + invalidated == 3
        assert not Ask.objects.pending().exists()
        asks.update_progress(lark_bot, SESSION, status="running")
