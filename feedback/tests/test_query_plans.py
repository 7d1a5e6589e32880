"""SQLite finds every row the main job touches through an index that narrows to it, never by
searching all rows of a bot.

The kind of fault: a lookup on a column whose only index is partial (`UNIQUE (bot, card_id)
WHERE NOT (card_id = '')`) cannot use that index on SQLite unless its WHERE repeats the
index's condition, so SQLite falls back to the foreign-key index on `bot_id` and reads every
card entity (delivery, interaction, pending update) the bot ever had, on every click. It stays
invisible in tests with ten rows and grows with every card sent. PostgreSQL proves the
condition from the literal and is not affected, so these tests are SQLite's.
"""

from __future__ import annotations

import re
import sys
from contextlib import contextmanager
from pathlib import Path

import pytest
from django.db import connection
from django.utils import timezone

from feedback.models import Delivery
from feedback.tests.test_answer_never_stored import _exercise_every_path
from interactions.asks import progress as progress_sessions
from interactions.models import Ask, CardEntity, Interaction
from plumbing.db.sqlite3 import base as sqlite_base

pytestmark = pytest.mark.django_db(transaction=True)

ROOT = Path(__file__).resolve().parents[2]

#: Tables that grow with use (per bot, per card sent, per click).
GROWING = (
    "feedback_delivery",
    "feedback_revision",
    "feedback_latestfeedback",
    "feedback_event",
    "interactions_cardentity",
    "interactions_cardupdate",
    "interactions_inboundevent",
    "interactions_interaction",
    "interactions_progresssession",
)
#: A plan step that reads a growing table whole, or by bot / status alone.
WIDE = re.compile(
    rf"^(SCAN ({'|'.join(GROWING)})\b|SEARCH ({'|'.join(GROWING)}) USING .*\((bot_id|status)=\?\)$)"
)


@pytest.fixture
def sqlite_only():
    if connection.vendor != "sqlite":
        pytest.skip("SQLite's query planner (PostgreSQL uses the partial indexes anyway)")


def _plan(query: str, params) -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN QUERY PLAN " + query, params)
        return [row[3] for row in cursor.fetchall()]


def _caller_is_application_code() -> bool:
    """Whether the statement being run comes from Cardloop's code rather than from a test's
    own assertions (the innermost frame of this repository, outside .venv, decides)."""
    frame = sys._getframe(2)
    while frame is not None:
        name = frame.f_code.co_filename
        if name.startswith(str(ROOT)) and "/.venv/" not in name and "/plumbing/db/" not in name:
            return "/tests/" not in name and not name.endswith("conftest.py")
        frame = frame.f_back
    return False


@contextmanager
def _recorded(monkeypatch, *, application_only: bool):
    """{statement: params} of every SELECT / UPDATE / DELETE run in the block (any thread);
    with `application_only`, not those of the test's own code."""
    statements: dict[str, object] = {}
    real_execute = sqlite_base.QueuedCursor.execute

    def recording(self, query, params=None):
        if query.lstrip()[:6].upper() in ("SELECT", "UPDATE", "DELETE"):
            if not application_only or _caller_is_application_code():
                statements.setdefault(query, params)
        return real_execute(self, query, params)

    with monkeypatch.context() as patch:
        patch.setattr(sqlite_base.QueuedCursor, "execute", recording)
        yield statements


def test_no_statement_of_delivering_clicking_and_updating_cards_reads_a_bot_s_rows_whole(
    sqlite_only, feedback_api, click, lark_stub, monkeypatch
):
    """Every statement Cardloop runs for deliveries (sent, retried, progress, failed and
    resent, two-phase), clicks (choice, negative, details, stale) and the card updates after
    them, run again under EXPLAIN QUERY PLAN with the parameters it had."""
    with _recorded(monkeypatch, application_only=True) as statements:
        _exercise_every_path(feedback_api, click, lark_stub)
    assert len(statements) > 20  # the flows ran and were seen
    wide = {}
    for query, params in statements.items():
        steps = [step for step in _plan(query, params) if WIDE.match(step)]
        if steps:
            wide[query[:300]] = steps
    assert wide == {}


def test_lookups_by_message_card_and_request_id_use_their_unique_index(
    sqlite_only, lark_bot, monkeypatch
):
    """The named lookups, and the card-action path's progress-session lookup built on one,
    each go through the partial unique index of the column they look up."""

    lookups = {
        "card_entity_card_id": lambda: CardEntity.objects.for_card_id(lark_bot, "card_x").first(),
        "card_entity_message": lambda: CardEntity.objects.for_message(lark_bot, "om_x").first(),
        "delivery_platform_message_unique": lambda: Delivery.objects.for_platform_message(
            lark_bot, "om_x"
        ).first(),
        "interaction_request_id": lambda: Interaction.objects.for_request(
            lark_bot, "req_x"
        ).first(),
        "interaction_request_id ": lambda: Ask.objects.for_request(lark_bot, "req_x").first(),
        "card_entity_message ": lambda: progress_sessions.session_for_message(lark_bot, "om_x"),
        # every few seconds per outbox worker (`deliveries.fail_interrupted_sends`)
        "delivery_pending": lambda: Delivery.objects.interrupted_sends(timezone.now()).first(),
    }
    for index, lookup in lookups.items():
        with _recorded(monkeypatch, application_only=False) as statements:
            assert lookup() is None
        plan = [step for query, params in statements.items() for step in _plan(query, params)]
        assert any(f"INDEX {index.strip()} " in step for step in plan), (index, plan)


def test_an_empty_id_finds_nothing_instead_of_every_row_without_one(lark_bot):
    """An empty id is what a card without a CardKit entity, or a plain message card, stores."""
    CardEntity.objects.create(bot=lark_bot, card_id="", open_message_id="om_only_message")
    CardEntity.objects.create(bot=lark_bot, card_id="card_only_entity", open_message_id="")
    assert not CardEntity.objects.for_card_id(lark_bot, "").exists()
    assert not CardEntity.objects.for_message(lark_bot, "").exists()
    assert CardEntity.objects.for_card_id(lark_bot, "card_only_entity").count() == 1
    assert CardEntity.objects.for_message(lark_bot, "om_only_message").count() == 1
