"""Progress cards and asks through the bot API, against the real lark-oapi client and the
loopback Feishu stub: first send, queued updates rendered from the current state, ask
registration on the card (no other message), long-poll, cancel, errors naming fields."""

from __future__ import annotations

import asyncio
import json
import threading
import time

import pytest
from rest_framework.test import APIClient

from interactions.asks import service as asks
from interactions.models import Ask, ProgressSession
from interactions.tests.ask_helpers import *  # noqa: F403
from interactions.tests.ask_helpers import (
    CHAT,
    QUESTIONS,
    REQUESTER,
    SESSION,
    card_text,
    forms_of,
    has_form,
    run_queue,
)
from tests import feishu

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def api(lark_stub, lark_bot, make_api_key):
    raw, _key = make_api_key(lark_bot)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    client.bot = lark_bot
    return client


def put_progress(api, session=SESSION, **body):
    body.setdefault("status", "running")
    return api.put(f"/api/v1/sessions/{session}/progress", body, format="json")


def post_ask(api, session=SESSION, **body):
    body.setdefault("questions", QUESTIONS)
    return api.post(f"/api/v1/sessions/{session}/asks", body, format="json")


def stub_card(stub, session=SESSION):
    entity = ProgressSession.objects.get(session_id=session).card
    return stub.cards[entity.card_id]


def test_first_put_sends_the_card_and_later_puts_update_it_in_sequence(api, lark_stub):
    first = put_progress(
        api,
        chat_id=CHAT,
        requester_open_id=REQUESTER,
        title="Deploying",
        summary="Step 1",
        tool_lines=["bash: make build"],
    )
    assert first.status_code == 201, first.content
    assert first.json()["created"] and first.json()["sent"]
    assert first.json()["platform_message_id"].startswith("om_stub_")
    (send,) = lark_stub.calls_to("POST", "/open-apis/im/v1/messages")
    assert send.body["receive_id"] == CHAT
    card = stub_card(lark_stub)
    feishu.assert_valid_card(card.card)
    assert "make build" in card_text(card.card)

    second = put_progress(api, summary="Step 2", tool_lines=["bash: make test"])
    assert second.status_code == 200 and not second.json()["sent"]
    third = put_progress(api, summary="Step 3")
    assert third.status_code == 200
    assert run_queue() == 1  # coalesced into one update, rendered at apply time
    card = stub_card(lark_stub)
    assert "Step 3" in card_text(card.card) and "make test" in card_text(card.card)
    assert card.sequences == [1]
    assert len(lark_stub.calls_to("POST", "/open-apis/im/v1/messages")) == 1


def test_first_put_without_chat_is_refused_naming_the_field(api):
    response = put_progress(api)
    assert response.status_code == 400
    assert response.json()["error"] == "receive_id_required"
    assert "chat_id" in response.json()["detail"]
    bad = put_progress(api, status="sleeping", chat_id=CHAT)
    assert bad.status_code == 400 and "status" in bad.json()["detail"]


def test_p2p_progress_card_is_sent_to_the_open_id(api, lark_stub):
    response = put_progress(api, open_id=REQUESTER, requester_open_id=REQUESTER)
    assert response.status_code == 201
    (send,) = lark_stub.calls_to("POST", "/open-apis/im/v1/messages")
    assert send.query["receive_id_type"] == "open_id" and send.body["receive_id"] == REQUESTER


def test_registration_refreshes_the_card_and_sends_no_other_message(api, lark_stub, panel):
    put_progress(api, chat_id=CHAT, requester_open_id=REQUESTER)
    sends_before = len(lark_stub.calls_to("POST", "/open-apis/im/v1/messages"))
    response = post_ask(api)
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["shown"] == {"card": True, "panel": False}
    assert body["requestId"].startswith("ask_")
    run_queue()
    card = stub_card(lark_stub).card
    feishu.assert_valid_card(card)
    (form,) = forms_of(card)
    assert form["name"] == "ask_0"
    # no offline notification: nothing but the card update reached Feishu
    assert len(lark_stub.calls_to("POST", "/open-apis/im/v1/messages")) == sends_before
    assert panel.pushes == []


def test_no_card_and_no_panel_answers_at_once_with_the_seed_error(api, panel):
    started = time.monotonic()
    response = post_ask(api, requester_open_id=REQUESTER)
    assert response.status_code == 409
    assert response.json()["error"] == "当前通道无法向用户提问"
    assert response.json()["code"] == "no_channel"
    assert not Ask.objects.exists()
    assert time.monotonic() - started < 5  # answered, not held


def test_terminal_session_card_takes_no_ask_but_a_connected_panel_still_does(api, panel):
    put_progress(api, chat_id=CHAT, requester_open_id=REQUESTER)
    put_progress(api, status="completed")
    assert post_ask(api).status_code == 409
    panel.connected.add(REQUESTER)
    response = post_ask(api)
    assert response.status_code == 201
    assert response.json()["shown"] == {"card": False, "panel": True}
    (message,) = panel.of_type("ask_user_questions")
    assert message["requestId"] == response.json()["requestId"]


def test_panel_is_pushed_too_when_connected_and_the_card_shows_the_form(api, lark_stub, panel):
    put_progress(api, chat_id=CHAT, requester_open_id=REQUESTER)
    panel.connected.add(REQUESTER)
    response = post_ask(api)
    assert response.json()["shown"] == {"card": True, "panel": True}
    (message,) = panel.of_type("ask_user_questions")
    assert message == asks.panel_message(asks.find_ask(api.bot, response.json()["requestId"]))
    run_queue()
    assert has_form(stub_card(lark_stub).card)


@pytest.mark.parametrize("subagent", ["foreground", "background", "true"])
def test_sub_agents_are_refused(api, panel, subagent):
    put_progress(api, chat_id=CHAT, requester_open_id=REQUESTER)
    response = post_ask(
        api, project_key="feishu-cli_test_app-private-ou_requester", subagent=subagent
    )
    assert response.status_code == 403
    assert response.json()["error"] == "subagent_not_allowed"
    assert "subagent" in response.json()["detail"]
    assert not Ask.objects.exists()


def test_wechat_sessions_are_refused(api, panel):
    put_progress(api, chat_id=CHAT, requester_open_id=REQUESTER)
    response = post_ask(api, project_key="wechat-abc")
    assert response.status_code == 403 and response.json()["error"] == "ask_not_available"


@pytest.mark.parametrize(
    ("questions", "path"),
    [
        ([], ["questions"]),
        (QUESTIONS * 3, ["questions"]),
        ([{"question": "x", "options": []}], ["questions", "0", "options"]),
        ([{"question": "", "options": [{"label": "a"}]}], ["questions", "0", "question"]),
        (
            [{"question": "x", "options": [{"label": "a"}, {"label": "a"}]}],
            ["questions", "0", "options"],
        ),
        ([{"question": "x", "options": [{"label": ""}]}], ["questions", "0", "options"]),
    ],
)
def test_malformed_questions_get_a_400_naming_the_field(api, panel, questions, path):
    put_progress(api, chat_id=CHAT, requester_open_id=REQUESTER)
    response = post_ask(api, questions=questions)
    assert response.status_code == 400, response.content
    assert response.json()["error"] == "invalid"
    detail = response.json()["detail"]
    for key in path:
        detail = detail[key]
    assert detail
    assert not Ask.objects.exists()


def test_default_timeout_is_15_minutes_and_idempotency_key_returns_the_same_ask(api, panel):
    put_progress(api, chat_id=CHAT, requester_open_id=REQUESTER)
    first = post_ask(api, idempotency_key="hook-1")
    again = post_ask(api, idempotency_key="hook-1")
    assert first.status_code == 201 and again.status_code == 200
    assert first.json()["requestId"] == again.json()["requestId"]
    ask = Ask.objects.get()
    assert abs((ask.expires_at - ask.created_at).total_seconds() - 900) < 1


def test_an_idempotency_key_of_another_sessions_ask_is_refused_400(api, panel):
    put_progress(api, chat_id=CHAT, requester_open_id=REQUESTER)
    put_progress(api, session="sess-other", chat_id=CHAT, requester_open_id=REQUESTER)
    first = post_ask(api, idempotency_key="hook-1")
    assert first.status_code == 201
    other = post_ask(api, session="sess-other", idempotency_key="hook-1")
    assert other.status_code == 400, other.content
    assert other.json()["error"] == "idempotency_key_taken"
    assert Ask.objects.count() == 1


def test_an_idempotency_key_an_approval_already_holds_is_refused_400_and_nothing_is_written(
    api, panel
):
    """One key space per bot (the `interaction_request_id` unique index): before, the ask's
    insert hit the index, and the retry branch found no ask to return (a 500)."""
    from interactions.approvals import service as approvals
    from interactions.models import Interaction

    put_progress(api, chat_id=CHAT, requester_open_id=REQUESTER)
    approvals.create_interaction(
        api.bot,
        kind="approval",
        channel="feishu",
        chat_id=CHAT,
        title="Run the migration?",
        requester_open_id=REQUESTER,
        request_id="hook-shared",
    )
    response = post_ask(api, idempotency_key="hook-shared")
    assert response.status_code == 400, response.content
    body = response.json()
    assert body["error"] == "idempotency_key_taken" and "idempotency_key" in json.dumps(body)
    assert not Ask.objects.exists()
    assert Interaction.objects.get().kind == "approval"


def test_a_request_id_an_ask_already_holds_is_refused_400_and_the_ask_is_untouched(
    api, panel, lark_stub
):
    """The other direction: an approval whose request_id is an ask's idempotency_key used to
    get that ask back, and a failed card send for it cancelled the user's question."""
    put_progress(api, chat_id=CHAT, requester_open_id=REQUESTER)
    ask_id = post_ask(api, idempotency_key="hook-mine").json()["requestId"]
    messages = len(lark_stub.calls_to("POST", "/open-apis/im/v1/messages"))
    lark_stub.fail("POST", "/open-apis/cardkit/v1/cards", code=230099)
    response = api.post(
        "/api/v1/interactions",
        {
            "kind": "approval",
            "channel": "feishu",
            "chat_id": CHAT,
            "requester_open_id": REQUESTER,
            "title": "x",
            "tool": "t",
            "request_id": "hook-mine",
        },
        format="json",
    )
    assert response.status_code == 400, response.content
    body = response.json()
    assert body["error"] == "request_id_taken" and "request_id" in body["detail"]
    assert Ask.objects.get(public_id=ask_id).status == "pending"
    assert len(lark_stub.calls_to("POST", "/open-apis/im/v1/messages")) == messages


def test_long_poll_returns_the_answer_when_it_arrives(api, panel, live_answer):
    put_progress(api, chat_id=CHAT, requester_open_id=REQUESTER)
    request_id = post_ask(api).json()["requestId"]
    pending = api.get(f"/api/v1/asks/{request_id}")
    assert pending.json()["status"] == "pending" and pending.json()["answers"] == []
    live_answer(request_id, delay=0.5)
    started = time.monotonic()
    response = api.get(f"/api/v1/asks/{request_id}?wait=20")
    assert time.monotonic() - started < 15
    body = response.json()
    assert body["status"] == "answered" and body["answered_via"] == "panel"
    assert body["answers"][0] == {
        "question": QUESTIONS[0]["question"],
        "selectedLabels": [],
        "customInput": "MariaDB",
    }
    assert body["reason"] == "answered"


@pytest.fixture
def live_answer(api):
    threads = []

    def answer(request_id, delay):
        def run():
            time.sleep(delay)
            asks.submit_answers(
                api.bot,
                request_id,
                [
                    {"selectedLabels": ["SQLite"], "customInput": "MariaDB"},
                    {"selectedLabels": ["Lint"], "customInput": ""},
                ],
                via="panel",
                operator_open_id=REQUESTER,
            )
            from django.db import connection

            connection.close()

        thread = threading.Thread(target=run)
        thread.start()
        threads.append(thread)

    yield answer
    for thread in threads:
        thread.join()


def test_long_poll_wait_is_validated_and_unknown_ids_are_404(api):
    assert api.get("/api/v1/asks/ask_nope").status_code == 404
    response = api.get("/api/v1/asks/ask_nope?wait=600")
    assert response.status_code == 400 and "wait" in response.json()["detail"]


def test_cancel_removes_the_form_tells_panels_and_answers_cancelled(api, lark_stub, panel):
    put_progress(api, chat_id=CHAT, requester_open_id=REQUESTER)
    panel.connected.add(REQUESTER)
    request_id = post_ask(api).json()["requestId"]
    run_queue()
    assert has_form(stub_card(lark_stub).card)
    response = api.post(f"/api/v1/asks/{request_id}/cancel")
    assert response.status_code == 200 and response.json()["ask"]["status"] == "cancelled"
    assert panel.of_type("ask_user_questions_cancelled") == [
        asks.cancelled_message(request_id, "cancelled")
    ]
    run_queue()
    assert not has_form(stub_card(lark_stub).card)
    again = api.post(f"/api/v1/asks/{request_id}/cancel")
    assert again.status_code == 409 and again.json()["error"] == "already_final"
    state = api.get(f"/api/v1/asks/{request_id}").json()
    assert state["status"] == "cancelled" and state["reason"] == "cancelled"


def test_async_long_poll_through_asgi_is_woken_by_a_card_submit(api, panel):
    """The long-poll holds no thread: two concurrent waits finish when one answer lands."""
    put_progress(api, chat_id=CHAT, requester_open_id=REQUESTER)
    request_id = post_ask(api).json()["requestId"]
    from channels.testing import HttpCommunicator

    from cardloop.asgi import application

    auth = [
        (b"authorization", api._credentials["HTTP_AUTHORIZATION"].encode()),
        (b"host", b"testserver"),
    ]

    async def poll():
        comm = HttpCommunicator(application, "GET", f"/api/v1/asks/{request_id}", headers=auth)
        comm.scope["query_string"] = b"wait=20"
        return await comm.get_response(timeout=25)

    async def scenario():
        tasks = [asyncio.ensure_future(poll()) for _ in range(2)]
        await asyncio.sleep(0.5)
        from asgiref.sync import sync_to_async

        await sync_to_async(asks.submit_answers)(
            api.bot,
            request_id,
            [
                {"selectedLabels": ["PostgreSQL"]},
                {"selectedLabels": ["Lint", "Migrations"]},
            ],
            via="card",
            operator_open_id=REQUESTER,
        )
        return await asyncio.gather(*tasks)

    import json

    responses = asyncio.run(scenario())
    for response in responses:
        assert response["status"] == 200
        body = json.loads(response["body"])
        assert body["status"] == "answered" and body["answered_via"] == "card"
        assert body["answers"][1]["selectedLabels"] == ["Lint", "Migrations"]


def test_failed_first_send_keeps_the_state_and_the_next_put_sends(api, lark_stub):
    lark_stub.fail("POST", "/open-apis/im/v1/messages", code=230002, times=1)
    failed = put_progress(api, chat_id=CHAT, requester_open_id=REQUESTER, title="Build")
    assert failed.status_code == 502
    assert failed.json()["error"] == "send_failed"
    assert failed.json()["detail"]["feishu_code"] == 230002
    session = ProgressSession.objects.get()
    assert session.card is None and session.sending_since is None and session.title == "Build"
    retried = put_progress(api, summary="Step 1")
    assert retried.status_code == 200 and retried.json()["sent"] is True
    assert retried.json()["platform_message_id"]


def test_get_progress_reports_cancel_requests_and_pending_asks(api, panel):
    put_progress(api, chat_id=CHAT, requester_open_id=REQUESTER)
    request_id = post_ask(api).json()["requestId"]
    ProgressSession.objects.update(cancel_requested_at="2026-01-01T00:00:00Z")
    body = api.get(f"/api/v1/sessions/{SESSION}/progress").json()
    assert body["cancel_requested"] is True and body["pending_asks"] == [request_id]
    assert api.get("/api/v1/sessions/nope/progress").status_code == 404


def test_session_asks_cancel_with_recovering_invalidates_every_pending_ask(api, panel):
    put_progress(api, chat_id=CHAT, requester_open_id=REQUESTER)
    ids = [post_ask(api).json()["requestId"] for _ in range(2)]
    response = api.post(
        f"/api/v1/sessions/{SESSION}/asks/cancel", {"reason": "recovering"}, format="json"
    )
    assert response.json() == {"cancelled": 2}
    for request_id in ids:
        state = api.get(f"/api/v1/asks/{request_id}").json()
        assert state["status"] == "cancelled" and state["reason"] == "recovering"
    assert [m["reason"] for m in panel.of_type("ask_user_questions_cancelled")] == [
        "recovering",
        "recovering",
    ]
    bad = api.post(f"/api/v1/sessions/{SESSION}/asks/cancel", {"reason": "x"}, format="json")
    assert bad.status_code == 400 and "reason" in bad.json()["detail"]


def test_the_first_put_sets_the_channel_and_a_later_put_naming_another_is_refused(
    api, lark_stub, monkeypatch
):
    from interactions import channels

    monkeypatch.setattr(channels.get("slack"), "shows_progress", True)
    first = put_progress(api, chat_id=CHAT, requester_open_id=REQUESTER)
    assert first.status_code == 201, first.content
    assert first.json()["channel"] == "feishu"
    other = put_progress(api, channel="slack", summary="moved?")
    assert other.status_code == 400
    assert other.json()["error"] == "channel_changed" and "channel" in other.json()["detail"]
    session = ProgressSession.objects.get(session_id=SESSION)
    assert session.channel == "feishu" and session.summary == ""


@pytest.mark.parametrize(
    "body, field",
    [
        ({"channel": "wechat", "chat_id": CHAT}, "channel"),
        ({"channel": "slack", "open_id": REQUESTER}, "open_id"),
        (
            {"channel": "slack", "chat_id": "C0CHAN", "requester_open_id": REQUESTER},
            "requester_open_id",
        ),
        ({"chat_id": CHAT, "requester_open_id": "U0SLACKUSER"}, "requester_open_id"),
        (
            {"channel": "telegram", "chat_id": "42", "requester_open_id": "U0SLACK"},
            "requester_open_id",
        ),
    ],
)
def test_a_channel_and_person_id_that_do_not_fit_are_refused_naming_the_field(api, body, field):
    response = put_progress(api, **body)
    assert response.status_code == 400, response.content
    assert field in response.json()["detail"]
    assert not ProgressSession.objects.exists()
