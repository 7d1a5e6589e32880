"""The contract the panel builds on (`interactions.asks.service`): open_asks_for, panel_message,
cancelled_message, submit_answers — with a monkeypatched connected panel, no card."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from feedback.models import Event
from interactions.asks import service as asks
from interactions.models import Ask, Interaction
from interactions.tests.ask_helpers import *  # noqa: F403
from interactions.tests.ask_helpers import OTHER, QUESTIONS, REQUESTER

pytestmark = pytest.mark.django_db(transaction=True)

ANSWERS = [
    {"question": QUESTIONS[0]["question"], "selectedLabels": ["PostgreSQL"], "customInput": ""},
    {"selectedLabels": ["Lint", "Unit tests"], "customInput": "staging too"},  # question omitted
]


@pytest.fixture
def panel_ask(make_bot, panel):
    bot = make_bot()
    panel.connected.add(REQUESTER)
    reg = asks.register_ask(bot, "sess_p", questions=QUESTIONS, requester_open_id=REQUESTER)
    return bot, reg.ask


def test_panel_only_ask_is_registered_and_pushed_on_commit(panel_ask, panel):
    bot, ask = panel_ask
    assert ask.kind == Interaction.Kind.ASK and ask.status == "pending"
    (message,) = panel.of_type("ask_user_questions")
    assert message == asks.panel_message(ask)
    assert message["requestId"] == ask.public_id and message["sessionId"] == "sess_p"
    assert message["questions"][1]["multiSelect"] is True
    assert message["questions"][0]["options"][0] == {
        "label": "SQLite",
        "description": "Single file, zero setup",
    }
    assert timezone.datetime.fromisoformat(message["expiresAt"]) > timezone.now() + timedelta(
        minutes=14
    )


def test_open_asks_for_lists_pending_unexpired_asks_of_that_requester_only(panel_ask, panel):
    bot, ask = panel_ask
    panel.connected.add(OTHER)
    other = asks.register_ask(bot, "sess_q", questions=QUESTIONS, requester_open_id=OTHER).ask
    expired = asks.register_ask(bot, "sess_r", questions=QUESTIONS, requester_open_id=REQUESTER)
    Ask.objects.filter(pk=expired.ask.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    assert [a.public_id for a in asks.open_asks_for(bot, REQUESTER)] == [ask.public_id]
    assert [a.public_id for a in asks.open_asks_for(bot, OTHER)] == [other.public_id]
    assert all(isinstance(a, Ask) for a in asks.open_asks_for(bot, REQUESTER))


def test_first_submit_wins_writes_one_event_and_tells_panels_answered(panel_ask, panel):
    bot, ask = panel_ask
    first = asks.submit_answers(
        bot, ask.public_id, ANSWERS, via="panel", operator_open_id=REQUESTER
    )
    second = asks.submit_answers(
        bot, ask.public_id, ANSWERS, via="card", operator_open_id=REQUESTER
    )
    assert first.won and first.code == ""
    assert not second.won and second.code == "finished"
    state = asks.ask_state(Ask.objects.get(pk=ask.pk))
    assert state["status"] == "answered" and state["answered_via"] == "panel"
    assert state["answers"] == [
        {
            "question": QUESTIONS[0]["question"],
            "selectedLabels": ["PostgreSQL"],
            "customInput": "",
        },
        {
            "question": QUESTIONS[1]["question"],
            "selectedLabels": ["Unit tests", "Lint"],
            "customInput": "staging too",
        },
    ]
    assert panel.of_type("ask_user_questions_cancelled") == [
        asks.cancelled_message(ask.public_id, "answered")
    ]
    assert Event.objects.filter(type="interaction.resolved").count() == 1


@pytest.mark.parametrize(
    ("operator", "answers", "code"),
    [
        (OTHER, ANSWERS, "not_sender"),
        ("", ANSWERS, "not_sender"),
        (REQUESTER, ANSWERS[:1], "invalid"),
        (
            REQUESTER,
            [{"selectedLabels": ["MySQL"], "customInput": ""}, ANSWERS[1]],
            "invalid",
        ),
        (
            REQUESTER,
            [{"selectedLabels": ["SQLite", "PostgreSQL"]}, ANSWERS[1]],
            "invalid",
        ),
        (
            REQUESTER,
            [ANSWERS[0], {"selectedLabels": [], "customInput": "   "}],
            "empty_answer",
        ),
        (  # a client that reordered the answers: each names the other question
            REQUESTER,
            [
                {"question": QUESTIONS[1]["question"], "selectedLabels": ["PostgreSQL"]},
                {"question": QUESTIONS[0]["question"], "selectedLabels": ["Lint"]},
            ],
            "invalid",
        ),
    ],
)
def test_refused_submissions_write_nothing(panel_ask, panel, operator, answers, code):
    bot, ask = panel_ask
    outcome = asks.submit_answers(
        bot, ask.public_id, answers, via="panel", operator_open_id=operator
    )
    assert not outcome.won and outcome.code == code
    assert Ask.objects.get(pk=ask.pk).status == "pending"
    assert panel.of_type("ask_user_questions_cancelled") == []
    assert not Event.objects.filter(type="interaction.resolved").exists()


def test_unknown_request_is_unknown(make_bot):
    outcome = asks.submit_answers(
        make_bot(), "ask_nope", ANSWERS, via="api", operator_open_id=REQUESTER
    )
    assert outcome == asks.AskOutcome(False, "unknown", None)


def test_single_select_other_text_wins_and_clears_labels():
    cleaned = asks.clean_answers(
        QUESTIONS,
        [
            {"selectedLabels": ["SQLite"], "customInput": "  PostgreSQL 16  "},
            {"selectedLabels": ["Lint"], "customInput": "also docs"},
        ],
    )
    assert cleaned[0]["selectedLabels"] == [] and cleaned[0]["customInput"] == "PostgreSQL 16"
    assert cleaned[1]["selectedLabels"] == ["Lint"] and cleaned[1]["customInput"] == "also docs"


def test_cancelled_message_reasons():
    for reason in asks.REASONS:
        assert asks.cancelled_message("ask_1", reason) == {
            "type": "ask_user_questions_cancelled",
            "requestId": "ask_1",
            "reason": reason,
        }
    with pytest.raises(ValueError):
        asks.cancelled_message("ask_1", "bored")


def test_no_card_and_no_panel_raises_no_channel_and_records_nothing(make_bot, panel):
    bot = make_bot()
    with pytest.raises(asks.NoChannel):
        asks.register_ask(bot, "sess_x", questions=QUESTIONS, requester_open_id=REQUESTER)
    assert not Ask.objects.exists()
