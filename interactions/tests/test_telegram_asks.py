"""ask_user_questions on a Telegram progress message, end to end: the bot API
(`PUT /api/v1/sessions/<id>/progress` with `channel: "telegram"`, `POST …/asks`), the real
ASGI app (`cardloop.asgi.application`) taking webhook updates with the secret-token header,
the dispatcher, the card-update worker, and Cardloop's httpx Bot API client against the
loopback stub (tests/telegram_stub.py), which checks Telegram's limits independently.

Updates are built in the shapes Telegram documents (tests/telegram_updates.py: Update,
CallbackQuery, Message with `reply_to_message`, https://core.telegram.org/bots/api#update).

Covered: the first send, the keyboard of an ask, a single-select tap answering at once,
multi-select toggling held server-side (two taps at once stay consistent), "Other…" through a
force_reply prompt and the reply, Submit, the requester-only rule with nothing written for
anyone else, first answer wins against an answer through the API service (the late tap is
told), cancel / withdraw removing the keyboard, "Cancel task", a callback_data over 64
bytes, a wrong or missing secret (401, nothing written), a repeated update_id applied once;
on PostgreSQL 20 concurrent identical Submit taps give one answer."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import pytest
from asgiref.sync import async_to_sync
from channels.testing import HttpCommunicator
from django.db import connections
from django.utils import timezone

from feedback.models import Event
from interactions.asks import service as asks_service
from interactions.cardqueue import worker
from interactions.models import (
    Ask,
    CardEntity,
    CardUpdate,
    InboundEvent,
    Interaction,
    ProgressSession,
    TelegramAskState,
    TelegramReplyPrompt,
)
from interactions.tests.telegram_helpers import *  # noqa: F403 - the stub fixture
from interactions.tests.telegram_helpers import (
    BOT_ID,
    TOKEN,
    api_client,
    run_worker,
    telegram_bot,
)
from tests import telegram_updates as tu

pytestmark = pytest.mark.django_db(transaction=True)

SECRET = "wh-secret_asks"
SESSION = "sess_tg_1"
CHAT = str(tu.GROUP_CHAT_ID)
S = Interaction.Status

SINGLE = {
    "question": "Which database should the service use?",
    "header": "Database",
    "options": [{"label": "SQLite"}, {"label": "PostgreSQL"}],
    "multiSelect": False,
}
MULTI = {
    "question": "Which checks should run before the deploy?",
    "header": "Checks",
    "options": [{"label": "Unit tests"}, {"label": "Lint"}, {"label": "Migrations"}],
    "multiSelect": True,
}


@pytest.fixture
def tg(make_bot):
    return telegram_bot(make_bot, "cli_tg_asks", SECRET)


@pytest.fixture
def api(tg, make_api_key):
    return api_client(make_api_key, tg.bot)


def start_session(api, **fields):
    body = {
        "status": "running",
        "channel": "telegram",
        "chat_id": CHAT,
        "requester_open_id": str(tu.REQUESTER_ID),
        "title": "Deploying the service",
        **fields,
    }
    resp = api.put(f"/api/v1/sessions/{SESSION}/progress", body, format="json")
    assert resp.status_code in (200, 201), resp.content
    return resp.json()


def ask(api, *questions) -> Ask:
    resp = api.post(
        f"/api/v1/sessions/{SESSION}/asks", {"questions": list(questions)}, format="json"
    )
    assert resp.status_code == 201, resp.content
    assert resp.json()["shown"]["card"] is True
    return Ask.objects.get(public_id=resp.json()["requestId"])


@pytest.fixture
def shown(stub, api):
    """A running Telegram progress message (message 1001 in the group)."""
    start_session(api)
    run_worker()
    return stub


async def _post(update: dict, secret: str | None):
    from cardloop.asgi import application

    headers = [(b"host", b"testserver"), (b"content-type", b"application/json")]
    if secret is not None:
        headers.append((b"x-telegram-bot-api-secret-token", secret.encode()))
    communicator = HttpCommunicator(
        application,
        "POST",
        f"/telegram/{BOT_ID}/webhook",
        body=json.dumps(update).encode(),
        headers=headers,
    )
    response = await communicator.get_response(timeout=10)
    await communicator.wait(timeout=10)
    return response["status"], json.loads(response["body"] or b"{}")


def post(update: dict, secret: str | None = SECRET) -> int:
    status, _body = async_to_sync(_post)(update, secret)
    return status


def tap(data: str, **kwargs) -> dict:
    return tu.callback_query(data, message_id=1001, **kwargs)


def toasts(stub) -> list[str]:
    return [c[2].get("text", "") for c in stub.calls if c[0] == "answerCallbackQuery"]


def shown_message(stub) -> dict:
    return stub.messages[(CHAT, 1001)]


def button_texts(stub) -> list[str]:
    markup = shown_message(stub)["reply_markup"] or {}
    return [b["text"] for row in markup.get("inline_keyboard", []) for b in row]


def state_of(a: Ask) -> TelegramAskState | None:
    return TelegramAskState.objects.filter(ask_id=a.pk).first()


def concurrently(updates: list[dict]) -> list[int]:
    def one(update):
        try:
            return post(update)
        finally:
            connections.close_all()

    with ThreadPoolExecutor(max_workers=len(updates)) as pool:
        return list(pool.map(one, updates))


# ---------------------------------------------------------------------------------------------


def test_the_first_progress_call_sends_the_message_with_cancel_and_details(stub, api):
    body = start_session(api, summary="Step 1 of 3")
    ((method, token, params),) = stub.calls
    assert method == "sendMessage" and token == TOKEN and params["chat_id"] == CHAT
    assert params["text"].startswith("[Deploying the service]\nRunning\nStep 1 of 3")
    rows = params["reply_markup"]["inline_keyboard"]
    assert [[b["callback_data"] for b in row] for row in rows] == [["pg:c", "pg:d"]]
    assert body["channel"] == "telegram" and body["platform_message_id"] == f"tg:{CHAT}:1001"


def test_an_ask_is_shown_as_a_keyboard_on_the_progress_message(shown, api):
    a = ask(api, SINGLE, MULTI)
    assert run_worker() == 1
    assert shown.methods()[-1] == "editMessageText"
    assert "❓ 1. [Database] Which database should the service use?" in shown_message(shown)["text"]
    assert button_texts(shown) == [
        "1. SQLite",
        "1. PostgreSQL",
        "1. Other…",
        "2. Unit tests",
        "2. Lint",
        "2. Migrations",
        "2. Other…",
        "✅ Submit (1–2)",
        "Cancel task",
        "Session details",
    ]
    assert a.card.channel == "telegram"


def test_a_tap_on_a_single_select_ask_answers_it_and_the_worker_removes_its_buttons(shown, api):
    a = ask(api, SINGLE)
    run_worker()
    assert post(tap(f"aq:{a.public_id}:0:1")) == 200
    a.refresh_from_db()
    assert a.status == S.RESOLVED
    assert a.resolution["via"] == "card" and a.resolution["operator"] == str(tu.REQUESTER_ID)
    assert a.resolution["value"] == [
        {"question": SINGLE["question"], "selectedLabels": ["PostgreSQL"], "customInput": ""}
    ]
    assert toasts(shown) == ["Submitted"]
    assert shown.methods()[-1] == "answerCallbackQuery"  # the answer first, then the edit
    run_worker()
    assert button_texts(shown) == ["Cancel task", "Session details"]
    assert state_of(a) is None


def test_multi_select_taps_toggle_server_side_and_the_keyboard_shows_the_ticks(shown, api):
    a = ask(api, SINGLE, MULTI)
    run_worker()
    post(tap(f"aq:{a.public_id}:1:0"))
    post(tap(f"aq:{a.public_id}:1:2"))
    post(tap(f"aq:{a.public_id}:1:0"))
    post(tap(f"aq:{a.public_id}:0:0"))
    assert state_of(a).picked == {"0": [0], "1": [2]}
    assert toasts(shown) == [
        "Chosen: Unit tests",
        "Chosen: Migrations",
        "Removed: Unit tests",
        "Chosen: SQLite",
    ]
    a.refresh_from_db()
    assert a.status == S.PENDING
    run_worker()
    texts = button_texts(shown)
    assert "1. ✓ SQLite" in texts and "2. ✓ Migrations" in texts and "2. Unit tests" in texts
    assert "   ✓ Migrations" in shown_message(shown)["text"]


def test_two_taps_at_once_on_different_options_are_both_applied(shown, api):
    a = ask(api, MULTI)
    run_worker()
    statuses = concurrently([tap(f"aq:{a.public_id}:0:0"), tap(f"aq:{a.public_id}:0:1")])
    assert statuses == [200, 200]
    assert state_of(a).picked == {"0": [0, 1]}
    assert len(state_of(a).taps) == 2
    run_worker()
    assert button_texts(shown)[:2] == ["✓ Unit tests", "✓ Lint"]


def test_submit_answers_with_the_held_choice(shown, api):
    a = ask(api, SINGLE, MULTI)
    run_worker()
    for data in ("aq:{id}:0:0", "aq:{id}:1:1", "aq:{id}:1:2", "as:{id}"):
        post(tap(data.format(id=a.public_id)))
    a.refresh_from_db()
    assert a.status == S.RESOLVED
    assert [x["selectedLabels"] for x in a.resolution["value"]] == [
        ["SQLite"],
        ["Lint", "Migrations"],
    ]
    assert toasts(shown)[-1] == "Submitted"
    assert state_of(a) is None


def test_submit_before_every_question_has_an_answer_is_refused_and_keeps_the_choice(shown, api):
    a = ask(api, SINGLE, MULTI)
    run_worker()
    post(tap(f"aq:{a.public_id}:1:1"))
    post(tap(f"as:{a.public_id}"))
    a.refresh_from_db()
    assert a.status == S.PENDING
    assert toasts(shown)[-1].startswith("Answer every question")
    assert state_of(a).picked == {"1": [1]}


def test_other_text_comes_from_the_reply_to_the_force_reply_prompt(shown, api):
    a = ask(api, SINGLE, MULTI)
    run_worker()
    post(tap(f"ao:{a.public_id}:0"))
    (prompt_call,) = [c for c in shown.calls if c[0] == "sendMessage"][1:]
    assert prompt_call[2]["reply_markup"]["force_reply"] is True
    assert SINGLE["question"] in prompt_call[2]["text"]
    assert toasts(shown)[-1] == "Reply to the prompt below with your answer"
    prompt = TelegramReplyPrompt.objects.get(ask_id=a.pk)
    assert (prompt.chat_id, prompt.question) == (CHAT, 0)
    replied = tu.bot_message(prompt.message_id, text=prompt_call[2]["text"])
    assert post(tu.text_message("MariaDB, please", reply_to=replied)) == 200
    assert state_of(a).other == {"0": "MariaDB, please"}
    reply = [c for c in shown.calls if c[0] == "sendMessage"][-1][2]
    assert reply["text"].startswith("Noted.") and reply["reply_parameters"]
    post(tap(f"aq:{a.public_id}:1:0"))
    post(tap(f"as:{a.public_id}"))
    a.refresh_from_db()
    assert a.status == S.RESOLVED
    assert a.resolution["value"][0] == {
        "question": SINGLE["question"],
        "selectedLabels": [],
        "customInput": "MariaDB, please",
    }
    assert not TelegramReplyPrompt.objects.exists()


def test_a_reply_to_the_prompt_of_a_one_question_ask_answers_it(shown, api):
    a = ask(api, SINGLE)
    run_worker()
    post(tap(f"ao:{a.public_id}:0"))
    prompt = TelegramReplyPrompt.objects.get(ask_id=a.pk)
    post(tu.text_message("DuckDB", reply_to=tu.bot_message(prompt.message_id), language_code="zh"))
    a.refresh_from_db()
    assert a.status == S.RESOLVED and a.resolution["value"][0]["customInput"] == "DuckDB"
    reply = [c for c in shown.calls if c[0] == "sendMessage"][-1][2]
    assert reply["text"] == "已提交"


def test_a_non_requesters_taps_and_replies_are_refused_and_nothing_is_written(shown, api):
    a = ask(api, SINGLE, MULTI)
    run_worker()
    updates_before = CardUpdate.objects.count()
    for data in ("aq:{id}:1:0", "as:{id}", "ao:{id}:0"):
        post(tap(data.format(id=a.public_id), from_id=tu.OTHER_ID))
    assert toasts(shown) == ["Only the requester can answer this question"] * 3
    assert state_of(a) is None and not TelegramReplyPrompt.objects.exists()
    assert CardUpdate.objects.count() == updates_before
    # a prompt the requester asked for, answered by someone else
    post(tap(f"ao:{a.public_id}:0"))
    prompt = TelegramReplyPrompt.objects.get()
    post(tu.text_message("mine", reply_to=tu.bot_message(prompt.message_id), from_id=tu.OTHER_ID))
    assert state_of(a) is None
    assert "Only the requester" in [c for c in shown.calls if c[0] == "sendMessage"][-1][2]["text"]
    a.refresh_from_db()
    assert a.status == S.PENDING


def test_a_tap_after_the_ask_was_answered_elsewhere_is_told_and_changes_nothing(shown, api, tg):
    a = ask(api, SINGLE, MULTI)
    run_worker()
    answers = [
        {"selectedLabels": ["SQLite"]},
        {"selectedLabels": ["Lint"]},
    ]
    won = asks_service.submit_answers(
        tg.bot, a.public_id, answers, via="api", operator_open_id=str(tu.REQUESTER_ID)
    )
    assert won.won
    post(tap(f"aq:{a.public_id}:1:0", language_code="zh-hans"))
    post(tap(f"as:{a.public_id}"))
    assert toasts(shown) == ["该问题已被回答", "This question was already answered"]
    a.refresh_from_db()
    assert a.resolution["via"] == "api" and state_of(a) is None


def test_withdrawing_the_ask_removes_its_keyboard_and_a_late_tap_is_told(shown, api):
    a = ask(api, SINGLE, MULTI)
    run_worker()
    assert api.post(f"/api/v1/asks/{a.public_id}/cancel").status_code == 200
    run_worker()
    assert button_texts(shown) == ["Cancel task", "Session details"]
    assert "Which database" not in shown_message(shown)["text"]
    post(tap(f"aq:{a.public_id}:0:0"))
    assert toasts(shown) == ["This question was withdrawn"]


def test_a_withdrawn_ask_takes_its_held_choice_and_other_text_with_it(shown, api):
    a = ask(api, SINGLE, MULTI)
    run_worker()
    post(tap(f"aq:{a.public_id}:1:0"))
    post(tap(f"ao:{a.public_id}:0"))
    prompt = TelegramReplyPrompt.objects.get()
    post(tu.text_message("MariaDB", reply_to=tu.bot_message(prompt.message_id)))
    assert state_of(a).other == {"0": "MariaDB"}
    assert api.post(f"/api/v1/asks/{a.public_id}/cancel").status_code == 200
    assert state_of(a) is None and not TelegramReplyPrompt.objects.exists()


def test_a_rate_limited_edit_is_retried_no_sooner_than_retry_after(shown, api):
    a = ask(api, MULTI)
    run_worker()
    post(tap(f"aq:{a.public_id}:0:1"))
    shown.rate_limit("editMessageText", retry_after=30)
    before = timezone.now()
    CardEntity.objects.update(next_send_at=before)
    worker.run_due()
    card = CardEntity.objects.get(pk=a.card_id)
    assert card.next_send_at >= before + timedelta(seconds=30)
    assert worker.run_due() == 0  # not due yet
    run_worker()
    assert "✓ Lint" in button_texts(shown)


def test_a_terminal_progress_update_withdraws_the_ask_and_leaves_only_details(shown, api):
    a = ask(api, MULTI)
    run_worker()
    start_session(api, status="completed")
    run_worker()
    a.refresh_from_db()
    assert a.status == S.CANCELLED
    assert button_texts(shown) == ["Session details"]
    assert shown_message(shown)["text"].split("\n")[1] == "Completed"


def test_cancel_task_is_the_requesters_once_and_others_are_refused(shown, api):
    post(tap("pg:c", from_id=tu.OTHER_ID))
    session = ProgressSession.objects.get()
    assert session.cancel_requested_at is None
    post(tap("pg:c"))
    session.refresh_from_db()
    assert session.cancel_requested_by == str(tu.REQUESTER_ID)
    assert Event.objects.filter(type="session.cancel_requested").count() == 1
    assert toasts(shown)[-1] == "Cancellation requested; the agent will stop"
    run_worker()
    assert "Cancel task" not in button_texts(shown)
    assert "Cancellation requested" in shown_message(shown)["text"]


def test_callback_data_over_64_bytes_or_foreign_is_refused_with_nothing_written(shown, api):
    a = ask(api, MULTI)
    run_worker()
    too_long = f"aq:{a.public_id}:0:0:" + "9" * 40
    assert len(too_long.encode()) > 64
    post(tap(too_long))
    post(tap(f"aq:{a.public_id}:0:7"))  # no such option
    post(tap("aq:ask_ffffffffffffffff:0:0"))  # no such ask on this message
    assert toasts(shown) == [
        "This button has no action Cardloop understands.",
        "That answer does not fit the question; please refresh the card",
        "This question is not on this message; please use the latest task message",
    ]
    assert state_of(a) is None


def test_a_tap_on_another_message_finds_no_ask(shown, api):
    a = ask(api, MULTI)
    run_worker()
    post(tu.callback_query(f"aq:{a.public_id}:0:0", message_id=999, chat_id=-100777))
    assert state_of(a) is None
    assert toasts(shown) == [
        "This question is not on this message; please use the latest task message"
    ]


@pytest.mark.parametrize("secret", [None, "", "wrong-secret"])
def test_a_missing_or_wrong_secret_is_401_and_nothing_is_written(shown, api, secret):
    a = ask(api, MULTI)
    calls = len(shown.calls)
    assert post(tap(f"aq:{a.public_id}:0:0"), secret=secret) == 401
    assert state_of(a) is None and not InboundEvent.objects.exists()
    assert len(shown.calls) == calls


def test_a_repeated_update_id_is_applied_once(shown, api):
    a = ask(api, MULTI)
    run_worker()
    update = tap(f"aq:{a.public_id}:0:1")
    assert post(update) == 200 and post(update) == 200
    assert state_of(a).picked == {"0": [1]}  # toggled once, not on and off again


def test_a_tap_whose_handler_runs_again_is_not_applied_twice(shown, api):
    """The dispatcher may run a claimed click's handler again after a crash; the state
    remembers the taps it applied."""
    from interactions.channels.telegram import asks as tg_asks

    a = ask(api, MULTI)
    session = ProgressSession.objects.get()
    assert tg_asks.toggle_option(a, session, 0, 2, tap_id="tg:1").picked == {0: (2,)}
    assert tg_asks.toggle_option(a, session, 0, 2, tap_id="tg:1").picked == {0: (2,)}
    assert tg_asks.toggle_option(a, session, 0, 2, tap_id="tg:2").picked == {0: ()}
    assert state_of(a).picked == {} and state_of(a).taps == ["tg:1", "tg:2"]


@pytest.mark.postgres
def test_two_rapid_taps_on_postgresql_leave_a_state_consistent_with_both(shown, api):
    a = ask(api, MULTI)
    run_worker()
    post(tap(f"aq:{a.public_id}:0:2"))
    for _round in range(5):
        statuses = concurrently([tap(f"aq:{a.public_id}:0:0"), tap(f"aq:{a.public_id}:0:1")])
        assert statuses == [200, 200]
    # each option toggled 5 times: on; both taps of every round applied, none lost
    assert state_of(a).picked == {"0": [0, 1, 2]}
    assert len(state_of(a).taps) == 11


@pytest.mark.postgres
def test_twenty_concurrent_identical_submit_taps_give_one_answer(shown, api):
    a = ask(api, SINGLE, MULTI)
    run_worker()
    post(tap(f"aq:{a.public_id}:0:0"))
    post(tap(f"aq:{a.public_id}:1:1"))
    statuses = concurrently([tap(f"as:{a.public_id}") for _ in range(20)])
    assert statuses == [200] * 20
    a.refresh_from_db()
    assert a.status == S.RESOLVED
    assert Event.objects.filter(type="interaction.resolved").count() == 1
    answered = toasts(shown)[2:]
    assert len(answered) == 20 and answered.count("Submitted") == 1
    assert set(answered) - {"Submitted"} == {"This question was already answered"}


def test_an_expired_ask_takes_no_tap(shown, api):
    a = ask(api, MULTI)
    Interaction.objects.filter(pk=a.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    post(tap(f"aq:{a.public_id}:0:0"))
    assert toasts(shown) == ["This question has expired"] and state_of(a) is None


def test_an_other_tap_whose_handler_runs_twice_sends_one_prompt(shown, api, monkeypatch):
    from interactions.tests.telegram_helpers import rerun_every_handler

    a = ask(api, SINGLE, MULTI)
    run_worker()
    sent_before = len([c for c in shown.calls if c[0] == "sendMessage"])
    failed = rerun_every_handler(monkeypatch)
    post(tap(f"ao:{a.public_id}:0"))
    assert len(failed) == 1  # the handler did run a second time
    (prompt_call,) = [c for c in shown.calls if c[0] == "sendMessage"][sent_before:]
    assert prompt_call[2]["reply_markup"]["force_reply"] is True
    prompt = TelegramReplyPrompt.objects.get(ask_id=a.pk)
    assert prompt.message_id is not None and prompt.event_id
    assert toasts(shown)[-1] == "Reply to the prompt below with your answer"


def test_an_other_tap_on_an_ask_withdrawn_meanwhile_writes_and_sends_no_prompt(
    shown, api, monkeypatch
):
    from interactions.channels.telegram import asks as telegram_asks

    a = ask(api, SINGLE, MULTI)
    run_worker()
    checked = telegram_asks._checked

    def checked_then_withdrawn(action, public_id):
        result = checked(action, public_id)
        asks_service.cancel_ask(Ask.objects.get(pk=a.pk))
        return result

    monkeypatch.setattr(telegram_asks, "_checked", checked_then_withdrawn)
    sent_before = len([c for c in shown.calls if c[0] == "sendMessage"])
    post(tap(f"ao:{a.public_id}:0"))
    assert toasts(shown)[-1] == "This question was withdrawn"
    assert not TelegramReplyPrompt.objects.exists()
    assert len([c for c in shown.calls if c[0] == "sendMessage"]) == sent_before


def test_a_prompt_claimed_by_a_run_that_died_is_sent_once_its_claim_is_stale(shown, api):
    from interactions.channels.telegram import prompts

    a = ask(api, SINGLE, MULTI)
    fields = {"bot": a.bot, "event_id": "tg:77", "chat_id": CHAT, "ask_id": a.pk, "question": 0}
    row, send = prompts.claim(TelegramReplyPrompt, **fields)
    assert send and row.message_id is None
    assert prompts.claim(TelegramReplyPrompt, **fields) == (row, False)  # still being sent
    TelegramReplyPrompt.objects.update(created_at=timezone.now() - prompts.STALE_AFTER)
    again, send = prompts.claim(TelegramReplyPrompt, **fields)
    assert send and again.pk == row.pk
    TelegramReplyPrompt.objects.update(message_id=5)
    TelegramReplyPrompt.objects.update(created_at=timezone.now() - prompts.STALE_AFTER)
    assert prompts.claim(TelegramReplyPrompt, **fields)[1] is False  # sent: never again
