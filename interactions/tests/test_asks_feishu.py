"""Asks answered from the progress card through the real Feishu ingress (fixtures
`card_action_ask_submit.json` and `card_action_ask_other_only.json`, encrypted and signed as
Feishu does), the card queue against the loopback stub, timeouts and runtime restarts."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.utils import timezone

from feedback.models import Event
from interactions.asks import card as session_card
from interactions.asks import progress as progress_sessions
from interactions.asks import service as asks
from interactions.cardqueue import service as cards
from interactions.cardqueue import worker as cardworker
from interactions.lifecycle import resolve as lifecycle
from interactions.models import Ask, CardUpdate, ProgressSession
from interactions.tests.ask_helpers import *  # noqa: F403
from interactions.tests.ask_helpers import (
    OTHER,
    QUESTIONS,
    REQUESTER,
    SESSION,
    forms_of,
    has_form,
    run_queue,
)
from plumbing.workqueue import WorkStatus, claim_due
from tests import feishu

pytestmark = pytest.mark.django_db(transaction=True)


def register(bot, questions=QUESTIONS, session=SESSION, **kw):
    return asks.register_ask(bot, session, questions=questions, **kw).ask


def submit_payload(ask, progress, fixture="card_action_ask_submit", **changes):
    return feishu.payload(
        fixture,
        {
            "event.action.value.requestId": ask.public_id,
            "event.action.value.sessionId": ask.session_id,
            "event.context.open_message_id": progress.card.open_message_id,
            **changes,
        },
    )


def answer_of(response):
    assert response.status_code == 200
    assert response["Content-Type"] == "application/json"
    return json.loads(response.content)


def toast(body):
    return body["toast"]["i18n"]["zh_cn"], body["toast"]["i18n"]["en_us"]


def stub_card(stub, progress):
    progress = ProgressSession.objects.select_related("card").get(pk=progress.pk)
    return stub.cards[progress.card.card_id]


def test_submit_fixture_answers_single_and_multi_and_the_card_loses_the_form(
    lark_callback, lark_stub, lark_bot, progress, panel
):
    ask = register(lark_bot)
    run_queue()
    assert has_form(stub_card(lark_stub, progress).card)
    body = answer_of(lark_callback(submit_payload(ask, progress)))
    assert toast(body) == ("已提交", "Submitted")
    answer_card = body["card"]["data"]
    feishu.assert_valid_card(answer_card)
    assert not has_form(answer_card)  # the whole card, without that form
    assert answer_card["header"]["title"]["content"] == "Deploying the service"
    state = asks.ask_state(Ask.objects.get(pk=ask.pk))
    assert state["status"] == "answered" and state["answered_via"] == "card"
    assert state["answers"] == [
        {"question": QUESTIONS[0]["question"], "selectedLabels": ["PostgreSQL"], "customInput": ""},
        {
            "question": QUESTIONS[1]["question"],
            "selectedLabels": ["Unit tests", "Migrations"],
            "customInput": "也请检查测试环境",
        },
    ]
    assert panel.of_type("ask_user_questions_cancelled") == [
        asks.cancelled_message(ask.public_id, "answered")
    ]
    assert Event.objects.filter(type="interaction.resolved").count() == 1
    # everyone else: the queued update (released after the answer) removes the form too
    run_queue()
    card = stub_card(lark_stub, progress)
    assert not has_form(card.card)
    assert card.sequences == sorted(set(card.sequences))


def test_single_select_other_only_fixture_keeps_the_text_and_clears_the_label(
    lark_callback, lark_bot, progress, panel
):
    ask = register(lark_bot, questions=QUESTIONS[:1])
    body = answer_of(
        lark_callback(submit_payload(ask, progress, fixture="card_action_ask_other_only"))
    )
    assert toast(body)[0] == "已提交"
    (answer,) = asks.ask_state(Ask.objects.get(pk=ask.pk))["answers"]
    assert answer["selectedLabels"] == []
    assert answer["customInput"] == "用 PostgreSQL 16，不要用 MySQL"


def test_non_sender_gets_a_toast_and_nothing_is_written(lark_callback, lark_bot, progress, panel):
    ask = register(lark_bot)
    body = answer_of(
        lark_callback(submit_payload(ask, progress, **{"event.operator.open_id": OTHER}))
    )
    assert toast(body) == ("仅消息发送者可操作", "Only the message sender can do this")
    assert "card" not in body
    assert Ask.objects.get(pk=ask.pk).status == "pending"
    assert panel.of_type("ask_user_questions_cancelled") == []
    assert not Event.objects.filter(type="interaction.resolved").exists()


def test_a_question_with_neither_option_nor_text_is_refused_and_the_form_stays(
    lark_callback, lark_stub, lark_bot, progress, panel
):
    ask = register(lark_bot)
    run_queue()
    sequences = list(stub_card(lark_stub, progress).sequences)
    payload = submit_payload(
        ask, progress, **{"event.action.form_value": {"q0": "1", "c0": "", "q1": [], "c1": " "}}
    )
    body = answer_of(lark_callback(payload))
    assert toast(body)[0] == "请至少选择一项或填写其他"
    assert "card" not in body  # the client keeps the form as the user filled it
    assert Ask.objects.get(pk=ask.pk).status == "pending"
    assert run_queue() == 0 and stub_card(lark_stub, progress).sequences == sequences


@pytest.mark.parametrize("index", ["²", "1" * 5000, "-1", "9"])
def test_an_option_index_that_is_not_an_option_gets_a_warning_toast_not_an_error(
    lark_callback, lark_bot, progress, panel, caplog, index
):
    ask = register(lark_bot)
    payload = submit_payload(
        ask, progress, **{"event.action.form_value": {"q0": index, "q1": ["0"]}}
    )
    body = answer_of(lark_callback(payload))
    assert body["toast"]["type"] == "warning", body
    assert Ask.objects.get(pk=ask.pk).status == "pending"
    assert not [r for r in caplog.records if r.exc_info]


def test_multi_select_submit_records_every_choice_and_empty_multi_is_refused(
    lark_callback, lark_bot, progress, panel
):
    multi = [dict(QUESTIONS[1])]
    empty = register(lark_bot, questions=multi)
    body = answer_of(
        lark_callback(submit_payload(empty, progress, **{"event.action.form_value": {"q0": []}}))
    )
    assert toast(body)[0] == "请至少选择一项或填写其他"
    assert Ask.objects.get(pk=empty.pk).status == "pending"
    body = answer_of(
        lark_callback(
            submit_payload(empty, progress, **{"event.action.form_value": {"q0": ["0", "2"]}})
        )
    )
    assert toast(body)[0] == "已提交"
    (answer,) = asks.ask_state(Ask.objects.get(pk=empty.pk))["answers"]
    assert answer["selectedLabels"] == ["Unit tests", "Migrations"]


def test_stale_and_unknown_requests_answer_question_invalid_with_a_card_without_that_form(
    lark_callback, lark_bot, progress, panel
):
    answered = register(lark_bot)
    other = register(lark_bot)
    assert asks.submit_answers(
        lark_bot,
        answered.public_id,
        [{"selectedLabels": ["SQLite"]}, {"selectedLabels": ["Lint"]}],
        via="panel",
        operator_open_id=REQUESTER,
    ).won
    body = answer_of(lark_callback(submit_payload(answered, progress)))
    assert toast(body) == ("问题已失效", "This question is no longer valid")
    assert [f["name"] for f in forms_of(body["card"]["data"])] == [f"ask_{other.form_index}"]
    unknown = answer_of(
        lark_callback(
            submit_payload(answered, progress, **{"event.action.value.requestId": "ask_unknown"})
        )
    )
    assert toast(unknown)[0] == "问题已失效"
    feishu.assert_valid_card(unknown["card"]["data"])
    # the answer is still the panel's
    assert asks.ask_state(Ask.objects.get(pk=answered.pk))["answered_via"] == "panel"


def test_second_form_on_the_card_is_answered_with_its_own_field_names(
    lark_callback, lark_bot, progress, panel
):
    first, second = register(lark_bot), register(lark_bot, questions=QUESTIONS[:1])
    assert (first.form_index, second.form_index) == (0, 1)
    payload = submit_payload(
        second,
        progress,
        **{
            "event.action.name": "ask_1_submit",
            "event.action.form_value": {"q0_1": "0", "c0_1": ""},
        },
    )
    body = answer_of(lark_callback(payload))
    assert toast(body)[0] == "已提交"
    assert [f["name"] for f in forms_of(body["card"]["data"])] == ["ask_0"]
    assert asks.ask_state(Ask.objects.get(pk=second.pk))["answers"][0]["selectedLabels"] == [
        "SQLite"
    ]


def test_timeout_clears_the_form_tells_panels_and_long_polls_answer_timeout(
    lark_stub, lark_bot, progress, panel
):
    ask = register(lark_bot)
    run_queue()
    Ask.objects.filter(pk=ask.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    assert lifecycle.expire_due() == 1
    assert panel.of_type("ask_user_questions_cancelled") == [
        asks.cancelled_message(ask.public_id, "timeout")
    ]
    run_queue()
    assert not has_form(stub_card(lark_stub, progress).card)
    state = asks.ask_state(Ask.objects.get(pk=ask.pk))
    assert state["status"] == "timeout" and state["reason"] == "timeout"


def test_terminal_progress_state_ends_pending_asks(lark_stub, lark_bot, progress, panel):
    ask = register(lark_bot)
    result = progress_sessions.update_progress(lark_bot, SESSION, status="completed")
    assert result.invalidated == 1
    assert panel.of_type("ask_user_questions_cancelled") == [
        asks.cancelled_message(ask.public_id, "session_ended")
    ]
    run_queue()
    assert not has_form(stub_card(lark_stub, progress).card)


def test_a_cleared_form_never_comes_back_in_a_later_update(
    lark_callback, lark_stub, lark_bot, progress, panel
):
    """An update claimed before the submit but applied after it, a retry after a rate limit
    and later progress updates all render the state current at send time."""
    ask = register(lark_bot)
    # the worker claims the update that would show the form …
    token, (claimed,) = claim_due(CardUpdate, limit=1, now=timezone.now() + timedelta(seconds=5))
    # … the requester submits meanwhile …
    body = answer_of(lark_callback(submit_payload(ask, progress)))
    assert toast(body)[0] == "已提交"
    # … then the claimed update is applied: it is rendered now, without the form
    lark_stub.fail("PUT", "/open-apis/cardkit/v1/cards/", code=11232, http_status=429, times=1)
    assert cardworker.apply_update(claimed, token) == "retry"
    progress_sessions.update_progress(lark_bot, SESSION, status="running", summary="Step 3 of 5")
    CardUpdate.objects.filter(status=WorkStatus.PENDING).update(next_attempt_at=timezone.now())
    run_queue()
    card = stub_card(lark_stub, progress)
    assert not has_form(card.card) and "Step 3 of 5" in json.dumps(card.card)
    for call in lark_stub.calls_to("PUT", "/open-apis/cardkit"):
        assert "ask_0" not in json.dumps(call.body, ensure_ascii=False)
    assert card.sequences == sorted(set(card.sequences))
    assert CardUpdate.objects.filter(status=WorkStatus.PENDING).count() == 0


def test_runtime_restart_invalidates_asks_and_an_old_form_never_reaches_the_new_loop(
    lark_callback, lark_stub, lark_bot, progress, panel
):
    old = register(lark_bot)
    run_queue()
    # Cardloop itself restarting loses nothing: the state is in the database
    assert asks.open_asks_for(lark_bot, REQUESTER)[0].public_id == old.public_id
    result = progress_sessions.update_progress(lark_bot, SESSION, status="recovering")
    assert result.invalidated == 1
    assert panel.of_type("ask_user_questions_cancelled") == [
        asks.cancelled_message(old.public_id, "recovering")
    ]
    run_queue()
    card = stub_card(lark_stub, progress).card
    assert not has_form(card)
    assert "progress_recovery" in [e.get("element_id") for e in card["body"]["elements"]]
    # the restarted runtime resumes and asks again
    progress_sessions.update_progress(lark_bot, SESSION, status="running")
    new = register(lark_bot)
    body = answer_of(lark_callback(submit_payload(old, progress)))
    assert toast(body)[0] == "问题已失效"
    assert [f["name"] for f in forms_of(body["card"]["data"])] == [f"ask_{new.form_index}"]
    assert Ask.objects.get(pk=new.pk).status == "pending"
    assert asks.ask_state(Ask.objects.get(pk=old.pk))["reason"] == "recovering"


def test_cancel_task_button_records_the_request_for_the_requester_only(
    lark_callback, lark_stub, lark_bot, progress, panel
):
    def press(operator):
        payload = feishu.payload(
            "card_action_ask_submit",
            {
                "event.action.value": {"kind": "progress", "act": "cancel", "sessionId": SESSION},
                "event.action.name": "progress_cancel",
                "event.operator.open_id": operator,
                "event.context.open_message_id": progress.card.open_message_id,
            },
        )
        del payload["event"]["action"]["form_value"]
        return answer_of(lark_callback(payload))

    refused = press(OTHER)
    assert toast(refused)[0] == "仅消息发送者可操作"
    assert ProgressSession.objects.get(pk=progress.pk).cancel_requested_at is None
    body = press(REQUESTER)
    assert body["toast"]["type"] == "success"
    session = ProgressSession.objects.get(pk=progress.pk)
    assert session.cancel_requested_at is not None
    card = body["card"]["data"]
    feishu.assert_valid_card(card)
    assert "progress_cancel" in [e.get("element_id") for e in card["body"]["elements"]]
    assert toast(press(REQUESTER))[1] == "Cancellation was already requested"


def test_progress_renderer_is_registered_with_the_card_queue(progress):
    assert cards.render_now(progress.card, session_card.RENDERER) == session_card.render_session(
        progress
    )


def test_session_details_button_answers_a_toast_with_the_state(
    lark_callback, lark_bot, progress, panel
):
    register(lark_bot)
    payload = feishu.payload(
        "card_action_ask_submit",
        {
            "event.action.value": {"kind": "progress", "act": "details", "sessionId": SESSION},
            "event.context.open_message_id": progress.card.open_message_id,
        },
    )
    del payload["event"]["action"]["form_value"]
    body = answer_of(lark_callback(payload))
    zh, en = toast(body)
    assert "运行中" in zh and "1" in zh
    assert en == f"Session {SESSION}: running, 1 open question(s)"
    payload["event"]["context"]["open_message_id"] = "om_unknown"
    payload["header"]["event_id"] = "f" * 32
    assert toast(answer_of(lark_callback(payload)))[1] == "This task card is no longer tracked"
