"""The Telegram progress message renderer (`interactions.channels.telegram.progress`) is pure
and keeps Telegram's limits in every state: title, status, summary and tool lines; pending
asks as inline keyboards (a button per option, ✓ on ticked multi-select options, Other…,
Submit unless the ask is one single-select question); "Cancel task" and "Session details"
(a url button when there is a details URL); no ask buttons once the session is terminal or
recovering; shortening and hiding of asks when the message would not fit.

Limits: https://core.telegram.org/bots/api#sendmessage (text 1-4096 characters),
https://core.telegram.org/bots/api#inlinekeyboardbutton (callback_data 1-64 bytes); the
loopback stub (tests/telegram_stub.py) checks the same limits independently."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone, translation

from interactions.channels.telegram import progress, render
from interactions.channels.telegram.render import Selection, TelegramMessage
from interactions.models import Ask, Interaction, ProgressSession
from tests.telegram_stub import TelegramStub

QUESTIONS = [
    {
        "question": "Which database should the service use?",
        "header": "Database",
        "options": [
            {"label": "SQLite", "description": "Single file, zero setup"},
            {"label": "PostgreSQL", "description": "Production grade"},
        ],
        "multiSelect": False,
    },
    {
        "question": "Which checks should run before the deploy?",
        "header": "Checks",
        "options": [{"label": "Unit tests"}, {"label": "Lint"}, {"label": "Migrations"}],
        "multiSelect": True,
    },
]


@pytest.fixture(autouse=True)
def english():
    with translation.override("en"):
        yield


def session(**overrides) -> ProgressSession:
    values = {
        "session_id": "sess_tg",
        "channel": "telegram",
        "receive_id": "-1001234567890",
        "requester_open_id": "4242",
        "status": "running",
        "title": "Deploying the service",
        "summary": "Step 2 of 5",
        "tool_lines": ["bash: make build", "read: settings.py"],
    }
    return ProgressSession(**{**values, **overrides})


def ask(n=0, questions=QUESTIONS, **overrides) -> Ask:
    now = timezone.now()
    values = {
        "public_id": f"ask_{n:016x}",
        "kind": Interaction.Kind.ASK,
        "session_id": "sess_tg",
        "requester_open_id": "4242",
        "questions": questions,
        "form_index": n,
        "created_at": now,
        "expires_at": now + timedelta(minutes=15),
        "status": "pending",
    }
    return Ask(**{**values, **overrides})


def buttons(message: TelegramMessage) -> list[dict]:
    rows = (message.reply_markup or {}).get("inline_keyboard") or []
    return [b for row in rows for b in row]


def stub_accepts(message: TelegramMessage) -> bool:
    stub = TelegramStub()
    return (
        stub._text_problem(message.text) is None
        and stub.keyboard_problem(message.reply_markup) is None
    )


def test_a_running_session_shows_title_status_summary_tools_and_its_two_buttons():
    message = progress.render_progress(session())
    lines = message.text.split("\n")
    assert lines[:5] == [
        "[Deploying the service]",
        "Running",
        "Step 2 of 5",
        "• bash: make build",
        "• read: settings.py",
    ]
    assert [(b["text"], b["callback_data"]) for b in buttons(message)] == [
        ("Cancel task", "pg:c"),
        ("Session details", "pg:d"),
    ]
    assert stub_accepts(message)


def test_session_details_is_a_url_button_when_there_is_a_details_url():
    message = progress.render_progress(session(details_url="https://agents.example/s/1"))
    assert buttons(message)[-1] == {
        "text": "Session details",
        "url": "https://agents.example/s/1",
    }
    assert render.limit_problems(message) == [] and stub_accepts(message)


def test_an_ask_shows_numbered_questions_a_button_per_option_other_and_submit():
    message = progress.render_progress(session(), [ask()])
    assert "❓ 1. [Database] Which database should the service use?" in message.text
    assert "   SQLite — Single file, zero setup" in message.text
    assert "❓ 2. [Checks] Which checks should run before the deploy? (choose one or more)" in (
        message.text
    )
    assert [(b["text"], b.get("callback_data")) for b in buttons(message)] == [
        ("1. SQLite", "aq:ask_0000000000000000:0:0"),
        ("1. PostgreSQL", "aq:ask_0000000000000000:0:1"),
        ("1. Other…", "ao:ask_0000000000000000:0"),
        ("2. Unit tests", "aq:ask_0000000000000000:1:0"),
        ("2. Lint", "aq:ask_0000000000000000:1:1"),
        ("2. Migrations", "aq:ask_0000000000000000:1:2"),
        ("2. Other…", "ao:ask_0000000000000000:1"),
        ("✅ Submit (1–2)", "as:ask_0000000000000000"),
        ("Cancel task", "pg:c"),
        ("Session details", "pg:d"),
    ]
    assert stub_accepts(message)


def test_one_single_select_question_is_answered_by_a_tap_so_it_has_no_submit():
    message = progress.render_progress(session(), [ask(questions=QUESTIONS[:1])])
    texts = [b["text"] for b in buttons(message)]
    assert texts == ["SQLite", "PostgreSQL", "Other…", "Cancel task", "Session details"]
    assert "Tap an option to answer." in message.text


def test_the_server_side_selection_ticks_options_and_shows_the_other_text():
    selection = Selection(picked={0: (1,), 1: (0, 2)}, other={1: "smoke test"})
    message = progress.render_progress(session(), [ask()], {"ask_0000000000000000": selection})
    texts = [b["text"] for b in buttons(message)]
    assert texts[:6] == [
        "1. SQLite",
        "1. ✓ PostgreSQL",
        "1. Other…",
        "2. ✓ Unit tests",
        "2. Lint",
        "2. ✓ Migrations",
    ]
    assert "   ✓ Migrations" in message.text and "   Other: smoke test" in message.text


def test_two_asks_are_numbered_across_the_message_each_with_its_own_submit():
    message = progress.render_progress(session(), [ask(1), ask(0)])
    submits = [b for b in buttons(message) if b["text"].startswith("✅")]
    assert [(b["text"], b["callback_data"]) for b in submits] == [
        ("✅ Submit (1–2)", "as:ask_0000000000000000"),
        ("✅ Submit (3–4)", "as:ask_0000000000000001"),
    ]
    assert "❓ 3. [Database]" in message.text


@pytest.mark.parametrize("status", ["completed", "failed", "cancelled", "recovering"])
def test_a_terminal_or_recovering_session_shows_no_ask_and_no_cancel(status):
    message = progress.render_progress(session(status=status), [ask()])
    assert [b["text"] for b in buttons(message)] == ["Session details"]
    assert "Which database" not in message.text
    if status == "recovering":
        assert "restarting" in message.text


def test_a_cancel_request_replaces_the_cancel_button_with_a_note():
    message = progress.render_progress(session(cancel_requested_at=timezone.now()), [ask()])
    assert "Cancel task" not in [b["text"] for b in buttons(message)]
    assert "Cancellation requested" in message.text


def test_final_asks_are_left_out():
    message = progress.render_progress(session(), [ask(status="resolved")])
    assert [b["text"] for b in buttons(message)] == ["Cancel task", "Session details"]


def test_the_longest_ask_id_fits_the_64_byte_callback_data_and_more_does_not():
    longest = "a" * 40  # Interaction.public_id max_length
    message = progress.render_progress(session(), [ask(public_id=longest)])
    sizes = [len(b["callback_data"].encode()) for b in buttons(message) if "callback_data" in b]
    assert max(sizes) == len(f"aq:{longest}:1:2") <= 64
    with pytest.raises(render.LimitError):
        render.callback_data(render.PICK, "é" * 30, 1, 2)  # 60 bytes of id + 9 > 64


def test_a_message_over_4096_characters_is_shortened_and_keeps_every_ask():
    big = [
        {
            "question": "Q" * 1000,
            "header": "H",
            "options": [{"label": f"L{i}" * 10, "description": "d" * 500} for i in range(10)],
            "multiSelect": True,
        }
    ] * 4
    message = progress.render_progress(
        session(summary="s" * 4000, tool_lines=["t" * 500] * 20), [ask(questions=big)]
    )
    assert render.tg_len(message.text) <= 4096 and stub_accepts(message)
    assert len([b for b in buttons(message) if b["text"].startswith("✅")]) == 1


def test_asks_beyond_100_buttons_wait_with_a_note():
    big = [
        {
            "question": f"Question {q}",
            "options": [{"label": f"Option {o}"} for o in range(10)],
            "multiSelect": True,
        }
        for q in range(4)
    ]  # 4 × (10 + Other) + Submit = 45 buttons per ask
    message = progress.render_progress(session(), [ask(0, big), ask(1, big), ask(2, big)])
    assert len(buttons(message)) <= render.MAX_BUTTONS and stub_accepts(message)
    assert len([b for b in buttons(message) if b["text"].startswith("✅")]) == 2
    assert "1 more question request(s) are waiting" in message.text


def test_the_progress_message_speaks_zh_hans():
    with translation.override("zh-hans"):
        message = progress.render_progress(session(), [ask()])
    texts = [b["text"] for b in buttons(message)]
    assert "取消任务" in texts and any("提交" in t for t in texts)


def test_progress_button_data_is_parsed_and_anything_else_is_not():
    assert progress.progress_act("pg:c") == "cancel"
    assert progress.progress_act("pg:d") == "details"
    assert progress.progress_act("pg:x") is None
    assert progress.progress_act("ia:ia_1:0") is None
    assert progress.progress_act(None) is None
