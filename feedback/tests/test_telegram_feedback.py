"""Feedback on a Telegram final answer, end to end: the answer sent through
`POST /api/v1/deliveries` (Cardloop's httpx Bot API client against the loopback stub
`tests.telegram_stub`), taps posted as documented `Update`s (`tests.telegram_updates`) to the
Telegram webhook with its secret token, the same feedback handlers writing one revision with
its event and outbox rows, the toast as `answerCallbackQuery`'s text in the reader's language,
and after the answer only the keyboard edited (`editMessageReplyMarkup`); the negative
follow-up's reasons keyboard and the comment taken from the reply to a `force_reply` prompt;
analytics count it under `telegram`. The answer's text is never stored."""

from __future__ import annotations

import itertools
import json
import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import pytest
from django.db import connections
from django.test import Client

from botadmin import services
from botadmin.models import TelegramBot
from feedback import telegram_cards
from feedback.cards import Choice
from feedback.models import (
    Delivery,
    Event,
    LatestFeedback,
    OutboxItem,
    Revision,
    TelegramCommentPrompt,
)
from feedback.tests.conftest import FULL_POLICY
from interactions.models import CardEntity, CardUpdate, InboundEvent
from interactions.tests.telegram_helpers import rerun_every_handler
from interactions.tests.test_slack_ingress import drain
from interactions.tests.test_telegram_webhook import (  # the same Telegram bot and stub
    BOT_ID,
    SECRET,
    TOKEN,
    URL,
    stub,  # noqa: F401 - fixture
)
from tests import telegram_updates as tu

pytestmark = pytest.mark.django_db(transaction=True)

CHAT = str(tu.GROUP_CHAT_ID)
SENTINEL = "SENTINEL-telegram-answer-5c7e"


@pytest.fixture
def api(make_bot, make_api_key, make_destination, webhook_settings, stub):  # noqa: F811
    """An APIClient of a bot with a Telegram bot (token, webhook secret; policy
    `FULL_POLICY`: requester audience, reselect on, two reasons, comments up to 50
    characters) and a webhook destination; `api.deliver(**fields)` sends a final answer to the
    group for `tu.REQUESTER_ID`."""
    from rest_framework.test import APIClient

    bot = make_bot(app_id="cli_tg_answers", policy=FULL_POLICY)
    tg = TelegramBot.objects.create(bot=bot, bot_user_id=BOT_ID)
    services.set_telegram_secret(None, tg, "bot_token", TOKEN)
    services.set_telegram_secret(None, tg, "webhook_secret", SECRET)
    make_destination("https://hooks.example.com/telegram", bots=[bot])
    raw, _key = make_api_key(bot)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    client.bot, client.tg, client.stub = bot, tg, stub
    turns = itertools.count(1)

    def deliver(**fields):
        body = {
            "channel": "telegram",
            "chat_id": CHAT,
            "requester_user_id": str(tu.REQUESTER_ID),
            "response_kind": "final",
            "session_id": "s-tg",
            "turn_id": f"t-{next(turns)}",
            "text": f"{SENTINEL}: the answer",
        }
        body.update(fields)
        return client.post(
            "/api/v1/deliveries",
            {k: v for k, v in body.items() if v is not None},
            format="json",
            HTTP_ACCEPT_LANGUAGE="en",
        )

    client.deliver = deliver
    return client


@pytest.fixture
def answer(api):
    response = api.deliver()
    assert response.status_code == 201, response.json()
    return Delivery.objects.get(delivery_id=response.json()["delivery_id"])


def _message_id(delivery: Delivery) -> int:
    return int(delivery.platform_message_id.rsplit(":", 1)[1])


def _message(api_stub, delivery):
    return api_stub.messages[(CHAT, _message_id(delivery))]


def _data(api_stub, delivery, label: str) -> str:
    """The callback_data of the button whose text contains `label`, as the message shows now."""
    rows = _message(api_stub, delivery)["reply_markup"]["inline_keyboard"]
    return next(b["callback_data"] for row in rows for b in row if label in b["text"])


def _tap(api_stub, delivery, label, **kwargs) -> dict:
    return tu.callback_query(
        _data(api_stub, delivery, label), message_id=_message_id(delivery), **kwargs
    )


def post(update: dict, secret: str | None = SECRET, gate: threading.Barrier | None = None):
    headers = {} if secret is None else {"HTTP_X_TELEGRAM_BOT_API_SECRET_TOKEN": secret}
    try:
        if gate is not None:
            gate.wait(30)
        response = Client().post(
            URL, data=json.dumps(update), content_type="application/json", **headers
        )
        response.close()
        return response.status_code
    finally:
        if gate is not None:
            connections.close_all()


def _toasts(api_stub) -> list[str]:
    return [p.get("text", "") for m, _t, p in api_stub.calls if m == "answerCallbackQuery"]


def test_a_final_answer_is_sent_with_the_feedback_keyboard_and_its_text_is_never_stored(
    api, answer
):
    (send,) = [p for m, _t, p in api.stub.calls if m == "sendMessage"]
    assert send["chat_id"] == CHAT and send["text"] == f"{SENTINEL}: the answer"
    assert send["reply_markup"] == telegram_cards.keyboard(
        answer.policy_snapshot, answer.delivery_id, None
    )
    assert [b["text"] for b in send["reply_markup"]["inline_keyboard"][0]] == [
        "结论可用",
        "有效推进",
        "结论有误",
    ]
    assert answer.channel == "telegram" and answer.status == Delivery.Status.SENT
    assert answer.platform_message_id == f"tg:{CHAT}:{_message_id(answer)}"
    assert answer.feedback_shown and answer.requester_open_id == str(tu.REQUESTER_ID)
    stored = json.dumps(
        [list(Delivery.objects.values()), list(CardEntity.objects.values())], default=str
    )
    assert SENTINEL not in stored
    assert answer.content_hash.startswith("sha256:")


def test_a_tap_writes_one_revision_with_event_and_outbox_row_then_only_the_keyboard_changes(
    api, answer, admin_client
):
    assert post(_tap(api.stub, answer, "结论可用", language_code="en")) == 200
    (revision,) = Revision.objects.all()
    assert (revision.operator_open_id, revision.verdict_key) == (
        str(tu.REQUESTER_ID),
        "conclusive_usable",
    )
    assert LatestFeedback.objects.get().revision == revision
    (event,) = Event.objects.filter(type="feedback.revised")
    assert OutboxItem.objects.filter(event=event).count() == 1
    assert _toasts(api.stub) == ["Recorded: Usable conclusion"]
    # after the answer: only the keyboard is edited, the text stays as sent
    before = len(api.stub.calls)
    assert drain() == 1
    assert [m for m, _t, _p in api.stub.calls[before:]] == ["editMessageReplyMarkup"]
    shown = _message(api.stub, answer)
    assert shown["text"] == f"{SENTINEL}: the answer"
    answer.refresh_from_db()
    assert shown["reply_markup"] == telegram_cards.keyboard(
        answer.policy_snapshot, answer.delivery_id, Choice.of(answer.current_revision)
    )
    assert shown["reply_markup"]["inline_keyboard"][0][0]["text"] == "✓ 结论可用"
    assert SENTINEL not in json.dumps(list(CardUpdate.objects.values()), default=str)
    # analytics count it under telegram
    today = answer.created_at.date()
    params = {"from": str(today - timedelta(days=1)), "to": str(today + timedelta(days=1))}
    params["tz"] = "UTC"
    telegram = admin_client.get("/api/v1/analytics/summary", {**params, "channel": "telegram"})
    assert telegram.status_code == 200, telegram.json()
    current = telegram.json()["current"]
    assert (current["delivered"], current["positive"]) == (1, 1)
    feishu = admin_client.get("/api/v1/analytics/summary", {**params, "channel": "feishu"})
    assert feishu.json()["current"]["ratings"] == 0


def test_the_toast_is_in_the_readers_language(api, answer):
    assert post(_tap(api.stub, answer, "结论可用", language_code="zh-hans")) == 200
    assert _toasts(api.stub) == ["已记录：结论可用"]


def test_a_repeated_update_is_handled_once(api, answer):
    update = _tap(api.stub, answer, "结论可用")
    assert [post(update), post(update)] == [200, 200]
    assert Revision.objects.count() == 1
    assert Event.objects.filter(type="feedback.revised").count() == 1
    # the duplicate's query is already answered: Telegram refuses a second answer
    assert api.stub.answered == {update["callback_query"]["id"]}


def test_a_wrong_secret_is_401_and_nothing_is_written(api, answer):
    calls = len(api.stub.calls)
    assert post(_tap(api.stub, answer, "结论可用"), secret="wrong-secret") == 401
    assert post(_tap(api.stub, answer, "结论可用"), secret=None) == 401
    assert not Revision.objects.exists() and not InboundEvent.objects.exists()
    assert len(api.stub.calls) == calls


def test_a_non_requester_tap_gets_the_toast_and_nothing_is_written(api, answer):
    assert post(_tap(api.stub, answer, "结论可用", from_id=tu.OTHER_ID)) == 200
    assert _toasts(api.stub) == ["Only the person who asked can give feedback on this answer."]
    assert not Revision.objects.exists() and not Event.objects.exists()
    assert not CardUpdate.objects.exists()


def test_a_negative_choice_shows_the_reasons_and_a_reason_tap_records_it(api, answer):
    assert post(_tap(api.stub, answer, "结论有误")) == 200
    assert _toasts(api.stub) == ["Recorded. You can add a reason below."]
    assert drain() == 1
    rows = _message(api.stub, answer)["reply_markup"]["inline_keyboard"]
    assert [[b["text"] for b in row] for row in rows[1:]] == [
        ["事实错误"],
        ["不完整"],
        ["💬 补充说明"],
    ]
    assert post(_tap(api.stub, answer, "不完整")) == 200
    latest = Revision.objects.order_by("-revision").first()
    assert (latest.revision, latest.verdict_key, latest.reason_key, latest.comment) == (
        2,
        "incorrect",
        "incomplete",
        "",
    )
    assert _toasts(api.stub)[-1] == "Thanks, your details were recorded."
    assert drain() == 1
    status = _message(api.stub, answer)["reply_markup"]["inline_keyboard"][-1][0]
    assert status["text"].startswith("✓ 已选择：结论有误 · 原因：不完整")
    assert status["callback_data"] == "fs"


def test_a_comment_is_the_reply_to_the_force_reply_prompt(api, answer):
    assert post(_tap(api.stub, answer, "结论有误")) == 200
    assert drain() == 1
    assert post(_tap(api.stub, answer, "补充说明", language_code="en")) == 200
    assert _toasts(api.stub)[-1] == "Reply to the message below with your comment."
    prompt_send = [p for m, _t, p in api.stub.calls if m == "sendMessage"][-1]
    assert prompt_send["reply_markup"]["force_reply"] is True
    (prompt,) = TelegramCommentPrompt.objects.all()
    prompt_message = tu.bot_message(prompt.message_id, text=prompt_send["text"])
    # someone else's reply to the prompt is not the comment
    other = tu.text_message("not mine", from_id=tu.OTHER_ID, reply_to=prompt_message)
    assert post(other) == 200
    assert Revision.objects.count() == 1
    reply = tu.text_message("  the numbers are wrong  ", reply_to=prompt_message)
    assert post(reply) == 200
    latest = Revision.objects.order_by("-revision").first()
    assert (latest.revision, latest.reason_key, latest.comment) == (2, "", "the numbers are wrong")
    assert Event.objects.filter(type="feedback.revised").count() == 2
    answered = [p for m, _t, p in api.stub.calls if m == "sendMessage"][-1]
    assert answered["text"] == "Thanks, your details were recorded."
    assert answered["reply_parameters"] == {"message_id": reply["message"]["message_id"]}
    # the comment text is on the revision only, and the answered prompt is gone
    assert "numbers are wrong" not in json.dumps(
        [list(TelegramCommentPrompt.objects.values()), list(CardUpdate.objects.values())],
        default=str,
    )
    assert not TelegramCommentPrompt.objects.exists()


def _prompted(api, answer, **tap) -> tuple[TelegramCommentPrompt, dict]:
    """Choose "incorrect", then tap "add a comment"; the prompt row and its message."""
    assert post(_tap(api.stub, answer, "结论有误")) == 200
    assert drain() == 1
    assert post(_tap(api.stub, answer, "补充说明", **tap)) == 200
    prompt = TelegramCommentPrompt.objects.get()
    return prompt, tu.bot_message(prompt.message_id)


def _sent(api_stub) -> list[dict]:
    return [p for m, _t, p in api_stub.calls if m == "sendMessage"]


def test_a_comment_tap_whose_handler_runs_twice_sends_one_prompt(api, answer, monkeypatch):
    assert post(_tap(api.stub, answer, "结论有误")) == 200
    assert drain() == 1
    sent_before = len(_sent(api.stub))
    failed = rerun_every_handler(monkeypatch)
    assert post(_tap(api.stub, answer, "补充说明")) == 200
    assert len(failed) == 1  # the handler did run a second time
    (prompt_send,) = _sent(api.stub)[sent_before:]
    assert prompt_send["reply_markup"]["force_reply"] is True
    (prompt,) = TelegramCommentPrompt.objects.all()
    assert prompt.message_id is not None and prompt.event_id
    assert _toasts(api.stub)[-1] == "Reply to the message below with your comment."


def test_a_second_reply_to_an_answered_prompt_is_ignored(api, answer):
    _prompt, message = _prompted(api, answer)
    assert post(tu.text_message("first comment", reply_to=message)) == 200
    sent = len(_sent(api.stub))
    assert post(tu.text_message("second comment", reply_to=message)) == 200
    assert [r.comment for r in Revision.objects.order_by("revision")] == ["", "first comment"]
    assert len(_sent(api.stub)) == sent  # not answered "out of date"


def test_a_comment_the_policy_refuses_keeps_the_prompt_for_another_reply(api, answer):
    _prompt, message = _prompted(api, answer)
    assert post(tu.text_message("x" * 51, reply_to=message)) == 200  # at most 50 characters
    assert _sent(api.stub)[-1]["text"] == "The comment is too long: at most 50 characters."
    assert post(tu.text_message("short", reply_to=message)) == 200
    assert Revision.objects.order_by("-revision").first().comment == "short"
    assert not TelegramCommentPrompt.objects.exists()


def test_a_new_prompt_replaces_the_earlier_one_and_prompts_older_than_a_day_go(api, answer):
    first, _message = _prompted(api, answer)
    other = api.deliver()
    old = TelegramCommentPrompt.objects.create(
        bot=api.bot,
        delivery=Delivery.objects.get(delivery_id=other.json()["delivery_id"]),
        event_id="tg:1",
        chat_id=CHAT,
        message_id=1,
        operator_open_id=str(tu.OTHER_ID),
        created_at=first.created_at - TelegramCommentPrompt.PROMPT_LIFETIME,
    )
    assert post(_tap(api.stub, answer, "补充说明")) == 200
    (second,) = TelegramCommentPrompt.objects.all()
    assert second.pk not in (first.pk, old.pk) and second.message_id != first.message_id
    # the replaced prompt's reply is no longer a comment
    assert post(tu.text_message("late", reply_to=tu.bot_message(first.message_id))) == 200
    assert Revision.objects.count() == 1


@pytest.mark.parametrize("bad", ["as text", True, None, 1.0])
def test_a_reply_whose_reply_to_message_id_is_not_an_integer_is_no_comment(api, answer, bad):
    prompt, message = _prompted(api, answer)
    replied = {**message, "message_id": str(prompt.message_id) if bad == "as text" else bad}
    if bad is True:
        TelegramCommentPrompt.objects.update(message_id=1)  # what True would match as
    assert post(tu.text_message("a comment", reply_to=replied)) == 200
    assert Revision.objects.count() == 1
    assert TelegramCommentPrompt.objects.count() == 1


def test_the_comment_replay_command_refuses_a_user_that_is_not_a_telegram_id(answer):
    from django.core.management import CommandError, call_command

    with pytest.raises(CommandError, match="--user must be a Telegram user id"):
        call_command("telegram_feedback_replay", answer.delivery_id, "incorrect", "--user", "alice")


def test_a_tap_on_an_older_keyboard_is_stale_and_writes_nothing(api, answer):
    old = _tap(api.stub, answer, "有效推进")
    assert post(_tap(api.stub, answer, "结论有误")) == 200
    assert post(old) == 200
    assert Revision.objects.count() == 1 and Revision.objects.get().verdict_key == "incorrect"
    assert _toasts(api.stub)[-1] == (
        "This card was out of date; it has been refreshed. Please choose again."
    )


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"chat_id": "oc_group"}, "chat_id"),
        ({"text": ""}, "text"),
        ({"blocks": [{"type": "divider"}]}, "blocks"),
        ({"requester_user_id": "U0SLACKUSER"}, "requester_user_id"),
        ({"requester_user_id": None, "requester_open_id": "ou_x"}, "requester_open_id"),
    ],
)
def test_bad_telegram_requests_are_400_naming_the_field_and_send_nothing(api, fields, field):
    response = api.deliver(**fields)
    assert response.status_code == 400, response.json()
    assert field in response.json()["detail"]
    assert not [m for m, _t, _p in api.stub.calls if m == "sendMessage"]
    assert not Delivery.objects.exists()


def test_a_bot_without_a_telegram_bot_is_told_so(api):
    api.tg.delete()
    response = api.deliver()
    assert response.status_code == 400
    assert response.json()["detail"]["channel"] == [
        "This bot has no Telegram bot: add one under Telegram bots in the admin first."
    ]


def test_telegrams_refusal_is_502_and_kept_as_send_failed(api):
    api.stub.tokens.clear()  # every call now answers 401 Unauthorized
    response = api.deliver()
    assert response.status_code == 502
    assert response.json()["detail"]["telegram_error"] == "401"
    assert Delivery.objects.get().error_code == "telegram_401"


@pytest.mark.postgres
def test_twenty_concurrent_identical_taps_write_one_revision(api, answer):
    data = _data(api.stub, answer, "结论可用")
    updates = [tu.callback_query(data, message_id=_message_id(answer)) for _ in range(20)]
    gate = threading.Barrier(20)
    with ThreadPoolExecutor(20) as pool:
        statuses = list(pool.map(lambda u: post(u, gate=gate), updates))
    assert statuses == [200] * 20
    assert Revision.objects.count() == 1
    assert Event.objects.filter(type="feedback.revised").count() == 1
    assert LatestFeedback.objects.count() == 1


def test_the_replay_command_taps_what_the_keyboard_shows_now(api, answer):
    from feedback.management.commands.telegram_feedback_replay import tap_data

    answer = Delivery.objects.select_related("current_revision").get(pk=answer.pk)
    assert tap_data(answer, "incorrect", "", False) == _data(api.stub, answer, "结论有误")
    assert post(_tap(api.stub, answer, "结论有误")) == 200
    assert drain() == 1
    answer = Delivery.objects.select_related("current_revision").get(pk=answer.pk)
    assert tap_data(answer, "", "incomplete", False) == _data(api.stub, answer, "不完整")
    assert tap_data(answer, "", "", True) == _data(api.stub, answer, "补充说明")


def test_the_answer_text_never_reaches_the_database_file(api, answer):
    from pathlib import Path

    from django.db import connection

    from feedback.tests.test_answer_never_stored import _forms, _scan

    if connection.vendor != "sqlite":
        pytest.skip("scans the SQLite file")
    api.deliver(text=f"{SENTINEL} retried", session_id="s-tg", turn_id="t-1")  # a retry
    api.deliver(text=f"{SENTINEL} progress", response_kind="progress")
    assert post(_tap(api.stub, answer, "结论有误")) == 200
    assert drain() == 1
    assert post(_tap(api.stub, answer, "不完整")) == 200
    assert drain() == 1
    assert Revision.objects.count() == 2
    name = Path(connection.settings_dict["NAME"])
    delivery_id = answer.delivery_id.encode()
    found = _scan(name, [delivery_id, *_forms(SENTINEL)])
    for file, hits in found.items():
        assert set(hits) <= {delivery_id}, f"answer text found in {file}"
    assert any(delivery_id in hits for hits in found.values())
