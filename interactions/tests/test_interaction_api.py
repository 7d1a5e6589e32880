"""The interactions bot API: create (Feishu card sent through the real client to the stub, or
the text fallback), validation errors naming the field, send failure → 502 with nothing left
pending, idempotent retries, the text-command endpoint, capabilities, approval checks, the
long-poll (answers at once when final, returns early on resolution — woken by the channel
layer — and stays correct without it), and the OpenAPI document."""

from __future__ import annotations

import asyncio
import json
import threading
from datetime import timedelta

import pytest
from asgiref.sync import sync_to_async
from django.apps import apps
from django.core.management import call_command
from django.db import connections
from django.utils import timezone, translation
from rest_framework.test import APIClient

from interactions.api import interactions as interaction_views
from interactions.approvals import service as approvals
from interactions.lifecycle import longpoll, waiters
from interactions.lifecycle import resolve as lifecycle
from interactions.models import Interaction
from interactions.tests.ia_helpers import CHAT, FORM_FIELDS, QUICK_ACTIONS, REQUESTER
from tests.feishu import assert_valid_card


@pytest.fixture(autouse=True)
def english():
    with translation.override("en"):
        yield


@pytest.fixture
def api(lark_bot, make_api_key):
    raw, _key = make_api_key(lark_bot)
    client = APIClient(HTTP_ACCEPT_LANGUAGE="en")
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    client.raw_key = raw
    return client


def approval_body(**overrides):
    body = {
        "kind": "approval",
        "channel": "feishu",
        "chat_id": CHAT,
        "requester_open_id": REQUESTER,
        "session_id": "sess_1",
        "title": "Run a shell command?",
        "body": "rm -rf build/",
        "tool": "bash",
    }
    body.update(overrides)
    return body


def create(api, **overrides):
    return api.post("/api/v1/interactions", approval_body(**overrides), format="json")


# ---------------------------------------------------------------------------------------------
# Create
# ---------------------------------------------------------------------------------------------


def test_feishu_approval_is_sent_as_a_card_entity_to_the_chat(api, lark_stub):
    response = create(api)
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["rendered"] == "card" and body["created"] is True
    ia = body["interaction"]
    assert ia["status"] == "pending" and ia["id"].startswith("ia_")
    assert [a["id"] for a in ia["actions"]] == ["approve", "deny", "always"]
    message = lark_stub.messages[ia["platform_message_id"]]
    assert message["receive_id"] == CHAT and message["receive_id_type"] == "chat_id"
    card = lark_stub.cards[message["card_id"]].card
    assert_valid_card(card)
    assert ia["id"] in json.dumps(card)
    (send,) = lark_stub.calls_to("POST", "/open-apis/im/v1/messages")
    assert send.body["uuid"] == ia["id"]


@pytest.mark.parametrize("channel", ["wechat", "text", "cli", "webhook", "other"])
def test_channel_without_buttons_gets_the_text_fallback_and_nothing_is_sent(
    api, lark_stub, channel
):
    response = create(api, channel=channel)
    assert response.status_code == 201
    body = response.json()
    assert body["rendered"] == "text"
    assert body["capabilities"]["buttons"] is False
    assert f"/_interaction {body['interaction']['id']} approve" in body["text"]
    assert "no buttons" in body["text"]
    assert lark_stub.calls_to("POST", "/open-apis/im/v1/messages") == []


def test_quick_reply_form_and_command_kinds_are_accepted(api, lark_stub):
    quick = create(api, kind="quick_reply", tool="", actions=QUICK_ACTIONS)
    assert quick.status_code == 201, quick.content
    form = create(api, kind="form", tool="", fields=FORM_FIELDS)
    assert form.status_code == 201, form.content
    assert form.json()["interaction"]["fields"][0]["name"] == "env"
    command = create(api, kind="command", tool="", channel="text")
    assert command.status_code == 201, command.content


def test_retry_with_the_same_request_id_returns_the_same_interaction_and_sends_once(api, lark_stub):
    first = create(api, request_id="req-1")
    again = create(api, request_id="req-1")
    assert (first.status_code, again.status_code) == (201, 200)
    assert first.json()["interaction"]["id"] == again.json()["interaction"]["id"]
    assert len(lark_stub.calls_to("POST", "/open-apis/im/v1/messages")) == 1


@pytest.mark.parametrize(
    "changed",
    [
        {"tool": "rm"},
        {"session_id": "sess_2"},
        {"chat_id": "oc_other_chat"},
        {"kind": "quick_reply", "actions": [{"id": "a", "label": "A"}, {"id": "b", "label": "B"}]},
    ],
    ids=["tool", "session", "chat", "kind"],
)
def test_a_request_id_reused_for_another_request_is_400_not_the_first_answer(
    api, lark_stub, changed
):
    """A caller asking about one tool must never get the answer given about another."""
    first = create(api, request_id="req-shared")
    assert first.status_code == 201
    other = create(api, request_id="req-shared", **changed)
    assert other.status_code == 400, other.content
    assert other.json()["error"] == "request_id_taken"
    assert Interaction.objects.count() == 1
    assert len(lark_stub.calls_to("POST", "/open-apis/im/v1/messages")) == 1


def test_a_retry_sends_an_interaction_whose_first_send_was_interrupted(api, lark_stub, lark_bot):
    from interactions.approvals import service as approvals

    # the creating request died between recording the interaction and sending it
    row, _ = approvals.create_interaction(
        lark_bot,
        kind="approval",
        channel="feishu",
        chat_id=CHAT,
        requester_open_id=REQUESTER,
        session_id="sess_1",
        title="Run a shell command?",
        body="rm -rf build/",
        tool="bash",
        request_id="req-crash",
    )
    early = create(api, request_id="req-crash")
    assert early.status_code == 200 and early.json()["interaction"]["platform_message_id"] == ""
    assert lark_stub.calls_to("POST", "/open-apis/im/v1/messages") == []
    Interaction.objects.filter(pk=row.pk).update(
        created_at=row.created_at - approvals.SEND_STALE - timedelta(seconds=1)
    )
    late = create(api, request_id="req-crash")
    assert late.status_code == 200
    assert late.json()["interaction"]["platform_message_id"]
    assert len(lark_stub.calls_to("POST", "/open-apis/im/v1/messages")) == 1
    again = create(api, request_id="req-crash")
    assert again.json()["interaction"] == late.json()["interaction"]
    assert len(lark_stub.calls_to("POST", "/open-apis/im/v1/messages")) == 1


def test_timeout_override_within_bounds_sets_the_expiry(api, lark_stub):
    ia = create(api, timeout_seconds=30).json()["interaction"]
    row = Interaction.objects.get(public_id=ia["id"])
    assert (row.expires_at - row.created_at) == timedelta(seconds=30)
    default = Interaction.objects.get(public_id=create(api).json()["interaction"]["id"])
    assert (default.expires_at - default.created_at) == timedelta(seconds=300)


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"kind": "vote"}, "kind"),
        ({"channel": "pager"}, "channel"),
        ({"chat_id": ""}, "chat_id"),
        ({"requester_open_id": ""}, "requester_open_id"),
        ({"tool": ""}, "tool"),
        ({"actions": QUICK_ACTIONS}, "actions"),
        ({"always_scope": "session", "session_id": ""}, "always_scope"),
        ({"kind": "quick_reply", "tool": ""}, "actions"),
        (
            {"kind": "quick_reply", "tool": "", "actions": [{"id": "bad id", "label": "x"}]},
            "actions",
        ),
        ({"kind": "quick_reply", "tool": "", "actions": QUICK_ACTIONS[:1] * 2}, "actions"),
        ({"kind": "form", "tool": ""}, "fields"),
        (
            {"kind": "form", "tool": "", "fields": [{"name": "x", "label": "X", "type": "select"}]},
            "fields",
        ),
        ({"fields": FORM_FIELDS}, "fields"),
        ({"timeout_seconds": 5}, "timeout_seconds"),
        ({"timeout_seconds": 7200}, "timeout_seconds"),
        ({"body": "x" * 4001}, "body"),
        ({"title": ""}, "title"),
        ({"allowed_open_ids": ["ou_x"] * 51}, "allowed_open_ids"),
    ],
)
def test_bad_input_is_a_400_naming_the_field_and_nothing_is_recorded(
    api, lark_stub, overrides, field
):
    response = create(api, **overrides)
    assert response.status_code == 400, response.content
    body = response.json()
    assert body["error"] == "invalid" and field in body["detail"], body
    assert Interaction.objects.count() == 0
    assert lark_stub.calls_to("POST", "/open-apis/im/v1/messages") == []


def test_without_a_bot_key_the_api_refuses(client, db):
    response = client.post("/api/v1/interactions", approval_body(), content_type="application/json")
    assert response.status_code in (401, 403)
    assert "error" in response.json()


def test_send_failure_is_a_502_and_the_interaction_is_cancelled_with_its_event(api, lark_stub):
    lark_stub.fail("POST", "/open-apis/im/v1/messages", code=230002, msg="bot not in chat")
    response = create(api)
    assert response.status_code == 502
    body = response.json()
    assert body["error"] == "send_failed"
    assert body["detail"]["feishu_code"] == 230002
    ia = body["detail"]["interaction"]
    assert ia["status"] == "cancelled" and ia["resolution"]["reason"] == "send_failed"
    row = Interaction.objects.get(public_id=ia["id"])
    assert row.status == "cancelled" and row.body == "rm -rf build/"
    Event = apps.get_model("feedback", "Event")
    assert Event.objects.filter(event_id=lifecycle.stable_event_id(row.public_id)).count() == 1


def test_feishu_answering_html_is_also_a_502(api, lark_stub):
    lark_stub.fail("POST", "/open-apis/cardkit/v1/cards", http_status=502, body=b"<html>")
    response = create(api)
    assert response.status_code == 502 and response.json()["error"] == "send_failed"


def test_dry_run_bot_records_the_synthetic_message(bot_client):
    response = bot_client.post("/api/v1/interactions", approval_body(), format="json")
    assert response.status_code == 201
    assert response.json()["interaction"]["platform_message_id"].startswith("om_dry_")


# ---------------------------------------------------------------------------------------------
# Read, resolve, cancel
# ---------------------------------------------------------------------------------------------


def test_get_unknown_or_another_bots_interaction_is_404(api, lark_stub, make_bot, make_api_key):
    ia_id = create(api).json()["interaction"]["id"]
    assert api.get("/api/v1/interactions/ia_nope").status_code == 404
    other = APIClient()
    other.credentials(HTTP_AUTHORIZATION=f"Bearer {make_api_key(make_bot(app_id='cli_b'))[0]}")
    response = other.get(f"/api/v1/interactions/{ia_id}")
    assert response.status_code == 404 and response.json()["error"] == "not_found"
    assert other.post(f"/api/v1/interactions/{ia_id}/cancel").status_code == 404


@pytest.mark.parametrize("wait", ["-1", "61", "soon"])
def test_bad_wait_is_a_400_naming_wait(api, lark_stub, wait):
    ia_id = create(api).json()["interaction"]["id"]
    response = api.get(f"/api/v1/interactions/{ia_id}", {"wait": wait})
    assert response.status_code == 400 and "wait" in response.json()["detail"]


def test_get_of_an_overdue_interaction_expires_it(api, lark_stub):
    ia_id = create(api).json()["interaction"]["id"]
    Interaction.objects.filter(public_id=ia_id).update(expires_at=timezone.now())
    body = api.get(f"/api/v1/interactions/{ia_id}").json()
    assert body["status"] == "expired" and body["resolution"]["via"] == "timeout"


def test_resolve_refusals_name_the_field(api, lark_stub):
    ia_id = create(api).json()["interaction"]["id"]
    url = f"/api/v1/interactions/{ia_id}/resolve"
    unknown = api.post(url, {"value": "explode"}, format="json")
    assert unknown.status_code == 400 and unknown.json()["error"] == "unknown_action"
    assert "value" in unknown.json()["detail"]
    stranger = api.post(url, {"value": "approve", "open_id": "ou_stranger"}, format="json")
    assert stranger.status_code == 400 and "open_id" in stranger.json()["detail"]
    assert Interaction.objects.get(public_id=ia_id).status == "pending"
    assert (
        api.post(url, {"value": "approve", "open_id": REQUESTER}, format="json").status_code == 200
    )


def test_resolve_form_through_the_api(api, lark_stub):
    ia_id = create(api, kind="form", tool="", fields=FORM_FIELDS).json()["interaction"]["id"]
    url = f"/api/v1/interactions/{ia_id}/resolve"
    bad = api.post(url, {"form": {"note": "x"}}, format="json")
    assert bad.status_code == 400 and bad.json()["detail"]["fields"] == ["env"]
    ok = api.post(url, {"form": {"env": "prod"}}, format="json")
    assert ok.json()["interaction"]["resolution"]["value"] == {"env": "prod", "note": ""}


# ---------------------------------------------------------------------------------------------
# Text commands through the API
# ---------------------------------------------------------------------------------------------


def _text(api, text, open_id=REQUESTER, chat_id=CHAT):
    return api.post(
        "/api/v1/interactions/text-command",
        {"text": text, "open_id": open_id, "chat_id": chat_id},
        format="json",
    )


def test_text_command_api_resolves_and_answers_the_reply_in_both_languages(api, lark_stub):
    ia_id = create(api, channel="wechat").json()["interaction"]["id"]
    response = _text(api, f"/_interaction {ia_id} 1")
    assert response.status_code == 200
    body = response.json()
    assert (body["handled"], body["ok"], body["code"]) == (True, True, "resolved")
    assert body["reply"] == "Approved."
    assert body["reply_i18n"] == {"zh_cn": "已批准", "en_us": "Approved."}
    assert body["interaction"]["resolution"]["via"] == "text"
    again = _text(api, f"/_interaction {ia_id} deny").json()
    assert (again["ok"], again["code"], again["reply_i18n"]["zh_cn"]) == (
        False,
        "already_final",
        "已处理",
    )


@pytest.mark.parametrize(
    ("template", "open_id", "chat_id", "code"),
    [
        ("/_interaction {id} approve", "ou_other", CHAT, "not_allowed"),
        ("/_interaction {id} approve", REQUESTER, "oc_else", "wrong_chat"),
        ("/_interaction ia_0000000000000000 approve", REQUESTER, CHAT, "unknown_interaction"),
        ("/_interaction {id}", REQUESTER, CHAT, "malformed"),
        ("/_interaction {id} perhaps", REQUESTER, CHAT, "unknown_action"),
    ],
)
def test_text_command_api_refusals(api, lark_stub, template, open_id, chat_id, code):
    ia_id = create(api, channel="text").json()["interaction"]["id"]
    body = _text(api, template.format(id=ia_id), open_id, chat_id).json()
    assert (body["handled"], body["ok"], body["code"]) == (True, False, code)
    assert body["reply"]
    assert Interaction.objects.get(public_id=ia_id).status == "pending"


def test_text_command_api_with_expired_interaction(api, lark_stub):
    ia_id = create(api, channel="text").json()["interaction"]["id"]
    Interaction.objects.filter(public_id=ia_id).update(expires_at=timezone.now())
    body = _text(api, f"/_interaction {ia_id} approve").json()
    assert (body["ok"], body["code"], body["reply_i18n"]["zh_cn"]) == (False, "expired", "已过期")


def test_text_command_api_ignores_ordinary_messages_and_refuses_missing_fields(api):
    assert _text(api, "good morning").json() == {
        "handled": False,
        "ok": False,
        "code": "not_a_command",
        "reply": "",
        "reply_i18n": {"zh_cn": "", "en_us": ""},
        "interaction": None,
    }
    response = api.post("/api/v1/interactions/text-command", {"text": "x"}, format="json")
    assert response.status_code == 400 and "open_id" in response.json()["detail"]


# ---------------------------------------------------------------------------------------------
# Capabilities and approval checks
# ---------------------------------------------------------------------------------------------


def test_capabilities_endpoint_applies_the_seed_rule(api):
    private = api.get(
        "/api/v1/capabilities", {"project_key": "feishu-cli_a-private-ou_1", "workspace": "/w"}
    ).json()
    assert private["channel"] == "feishu" and private["tools"]["ask_user_questions"] is True
    assert private["capabilities"]["buttons"] is True
    sub = api.get(
        "/api/v1/capabilities",
        {"workspace": "/x/feishu-chat/oc_1", "subagent": "background"},
    ).json()
    assert sub["tools"]["ask_user_questions"] is False and sub["reason"] == "subagent"
    wechat = api.get("/api/v1/capabilities", {"project_key": "wechat-a-private-b"}).json()
    assert wechat["tools"]["ask_user_questions"] is False
    assert wechat["capabilities"]["text_fallback"] is True
    other = api.get("/api/v1/capabilities").json()
    assert other["tools"] == {"ask_user_questions": None, "approvals": None}


def test_capabilities_report_what_each_registered_channel_can_show(api):
    from interactions import channels

    answer = api.get("/api/v1/capabilities").json()["channels"]
    assert answer == {c.name: c.capabilities.to_json() for c in channels.registered()}
    assert answer["feishu"] == {
        "buttons": True,
        "forms": True,
        "update": True,
        "markdown": True,
        "text_fallback": False,
    }
    assert answer["wechat"]["buttons"] is False and answer["wechat"]["text_fallback"] is True


def test_approval_check_needs_a_tool(api):
    response = api.get("/api/v1/approvals/check")
    assert response.status_code == 400 and "tool" in response.json()["detail"]


def test_approval_check_with_no_rule_is_not_allowed(api):
    assert api.get("/api/v1/approvals/check", {"tool": "bash"}).json() == {
        "allowed": False,
        "rule": None,
    }


# ---------------------------------------------------------------------------------------------
# The sweeper inside card_worker
# ---------------------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_card_worker_periodic_hook_expires_overdue_interactions(api, lark_stub):
    ia_id = create(api).json()["interaction"]["id"]
    live_id = create(api).json()["interaction"]["id"]
    Interaction.objects.filter(public_id=ia_id).update(expires_at=timezone.now())
    call_command("card_worker", "--once")
    row = Interaction.objects.get(public_id=ia_id)
    assert (row.status, row.resolution["via"], row.resolution["action_id"]) == (
        "expired",
        "timeout",
        "deny",
    )
    assert Interaction.objects.get(public_id=live_id).status == "pending"


# ---------------------------------------------------------------------------------------------
# Long-poll
# ---------------------------------------------------------------------------------------------


def test_long_poll_answers_at_once_when_already_final(api, lark_stub):
    ia_id = create(api).json()["interaction"]["id"]
    api.post(f"/api/v1/interactions/{ia_id}/cancel")
    body = api.get(f"/api/v1/interactions/{ia_id}", {"wait": "60"}).json()
    assert body["status"] == "cancelled"


def test_long_poll_returns_pending_when_the_wait_ran_out(api, lark_stub):
    ia_id = create(api).json()["interaction"]["id"]
    body = api.get(f"/api/v1/interactions/{ia_id}", {"wait": "0.3"}).json()
    assert body["status"] == "pending"


async def _long_poll(raw_key: str, ia_id: str, wait: int) -> tuple[int, dict]:
    from channels.testing import HttpCommunicator

    from cardloop.asgi import application

    communicator = HttpCommunicator(
        application,
        "GET",
        f"/api/v1/interactions/{ia_id}?wait={wait}",
        headers=[
            (b"host", b"testserver"),
            (b"authorization", f"Bearer {raw_key}".encode()),
        ],
    )
    response = await communicator.get_response(timeout=wait + 10)
    return response["status"], json.loads(response["body"])


def _resolve_later(ia_id: str, started: threading.Event) -> threading.Thread:
    def run():
        started.wait(10)
        try:
            ia = Interaction.objects.get(public_id=ia_id)
            approvals.answer(ia, choice="approve", via="api", check_operator=False)
        finally:
            connections.close_all()

    thread = threading.Thread(target=run)
    thread.start()
    return thread


@pytest.mark.django_db(transaction=True)
async def test_long_poll_is_woken_early_by_the_resolution(api, lark_stub, monkeypatch):
    """With database polls 30 s apart, only the wake-up sent after the resolution committed
    can end a 50 s wait within the 20 s guard: the wait returns early, resolved."""
    monkeypatch.setattr(longpoll, "FIRST_POLL_INTERVAL", 30.0)
    monkeypatch.setattr(longpoll, "MAX_POLL_INTERVAL", 30.0)
    created = await sync_to_async(create)(api)
    ia_id = created.json()["interaction"]["id"]
    started = threading.Event()
    subscribed = interaction_views.wait_for_final

    async def spy(*args, **kwargs):
        asyncio.get_running_loop().call_later(0.5, started.set)
        return await subscribed(*args, **kwargs)

    monkeypatch.setattr(interaction_views, "wait_for_final", spy)
    thread = _resolve_later(ia_id, started)
    status, body = await asyncio.wait_for(_long_poll(api.raw_key, ia_id, 50), timeout=20)
    await sync_to_async(thread.join)()
    assert status == 200
    assert body["status"] == "resolved" and body["resolution"]["action_id"] == "approve"
    await sync_to_async(connections.close_all)()


@pytest.mark.redis
@pytest.mark.django_db(transaction=True)
async def test_long_poll_in_another_process_is_woken_through_the_redis_channel_layer(
    api, lark_stub, monkeypatch
):
    """The waiter does not register for in-process wake-ups (as if the resolution happened
    in another process): only the Redis group message can end the wait within the guard."""
    monkeypatch.setattr(longpoll, "FIRST_POLL_INTERVAL", 30.0)
    monkeypatch.setattr(longpoll, "MAX_POLL_INTERVAL", 30.0)
    monkeypatch.setattr(waiters, "add_local_waiter", lambda *args: None)
    assert waiters.channel_layer_for_waiters() is not None
    created = await sync_to_async(create)(api)
    ia_id = created.json()["interaction"]["id"]
    started = threading.Event()
    subscribed = interaction_views.wait_for_final

    async def spy(*args, **kwargs):
        asyncio.get_running_loop().call_later(1.0, started.set)
        return await subscribed(*args, **kwargs)

    monkeypatch.setattr(interaction_views, "wait_for_final", spy)
    thread = _resolve_later(ia_id, started)
    status, body = await asyncio.wait_for(_long_poll(api.raw_key, ia_id, 50), timeout=20)
    await sync_to_async(thread.join)()
    assert status == 200 and body["status"] == "resolved"
    await sync_to_async(connections.close_all)()


@pytest.mark.django_db(transaction=True)
async def test_long_poll_is_still_correct_without_the_channel_message(api, lark_stub, monkeypatch):
    monkeypatch.setattr(longpoll, "FIRST_POLL_INTERVAL", 0.1)
    monkeypatch.setattr(longpoll, "MAX_POLL_INTERVAL", 0.2)
    monkeypatch.setattr(waiters, "notify_waiters", lambda public_id: None)
    created = await sync_to_async(create)(api)
    ia_id = created.json()["interaction"]["id"]
    started = threading.Event()
    thread = _resolve_later(ia_id, started)
    started.set()
    status, body = await asyncio.wait_for(_long_poll(api.raw_key, ia_id, 50), timeout=20)
    await sync_to_async(thread.join)()
    assert status == 200 and body["status"] == "resolved"
    await sync_to_async(connections.close_all)()


@pytest.mark.django_db(transaction=True)
async def test_long_poll_reports_the_timeout_when_the_interaction_expires_during_the_wait(
    api, lark_stub
):
    created = await sync_to_async(create)(api, timeout_seconds=10)
    ia_id = created.json()["interaction"]["id"]
    await sync_to_async(Interaction.objects.filter(public_id=ia_id).update)(
        expires_at=timezone.now() + timedelta(seconds=0.5)
    )
    status, body = await asyncio.wait_for(_long_poll(api.raw_key, ia_id, 30), timeout=20)
    assert status == 200
    assert body["status"] == "expired" and body["resolution"]["via"] == "timeout"
    await sync_to_async(connections.close_all)()


# ---------------------------------------------------------------------------------------------
# OpenAPI
# ---------------------------------------------------------------------------------------------


def test_openapi_documents_the_interaction_endpoints_without_warnings(tmp_path):
    out = tmp_path / "schema.yaml"
    call_command("spectacular", "--validate", "--fail-on-warn", "--file", str(out))
    text = out.read_text()
    for path in (
        "/api/v1/interactions:",
        "/api/v1/interactions/{public_id}:",
        "/api/v1/interactions/{public_id}/cancel:",
        "/api/v1/interactions/{public_id}/resolve:",
        "/api/v1/interactions/text-command:",
        "/api/v1/approvals/check:",
        "/api/v1/capabilities:",
    ):
        assert path in text


async def test_a_long_poll_whose_client_went_away_leaves_no_task_behind():
    """A cancelled wait (the client disconnected) cancels the tasks it waits on; before,
    each left an `Event.wait()` task that asyncio later logged as destroyed while pending."""
    from datetime import timedelta

    from django.utils import timezone

    expires = (timezone.now() + timedelta(minutes=5)).isoformat()
    state = {"status": "pending", "expires_at": expires}
    before = asyncio.all_tasks()
    poll = asyncio.ensure_future(
        interaction_views.wait_for_final(
            None, "ia_gone", 30, state, read_state=lambda bot, public_id: state
        )
    )
    await asyncio.sleep(0.3)
    poll.cancel()
    with pytest.raises(asyncio.CancelledError):
        await poll
    await asyncio.sleep(0)  # let cancelled tasks finish
    left = [t for t in asyncio.all_tasks() - before if t is not asyncio.current_task()]
    assert [t for t in left if not t.done()] == []
