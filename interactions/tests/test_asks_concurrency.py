"""Races on PostgreSQL (each attempt in its own thread and connection): a runtime restart
(`recovering`) racing submits never deadlocks and leaves no pending ask behind. The race of a
panel answer and a card submit (200 rounds, through the WebSocket and the ingress) is in
`test_panel_race.py`."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.db import connections

from interactions.asks import progress as progress_sessions
from interactions.asks import service as asks
from interactions.models import Ask
from interactions.tests.ask_helpers import *  # noqa: F403
from interactions.tests.ask_helpers import QUESTIONS, REQUESTER, SESSION

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

ANSWERS = [{"selectedLabels": ["SQLite"]}, {"selectedLabels": ["Lint"]}]


def panel_submit(bot, ask, gate):
    try:
        gate.wait(10)
        outcome = asks.submit_answers(
            bot, ask.public_id, ANSWERS, via="panel", operator_open_id=REQUESTER
        )
        return "panel", outcome.won, outcome.code
    finally:
        connections.close_all()


def test_recovering_racing_submits_never_deadlocks(lark_bot, progress, panel):
    for _round in range(20):
        pending = [asks.register_ask(lark_bot, SESSION, questions=QUESTIONS).ask for _ in range(3)]
        gate = threading.Event()

        def recover():
            try:
                gate.wait(10)
                return progress_sessions.update_progress(
                    lark_bot, SESSION, status="recovering"
                ).invalidated
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
        progress_sessions.update_progress(lark_bot, SESSION, status="running")
