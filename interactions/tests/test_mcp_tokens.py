"""MCP tokens through the bot API and the admin: issued per session and shown once, stored
hashed, audited without a person's id, bounded lifetimes, revocation; tool lists and argument
limits (pure)."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.utils import timezone

from botadmin.models import AuditEntry
from interactions.mcp import tokens, tools
from interactions.models import McpToken

pytestmark = pytest.mark.django_db

URL = "/api/v1/sessions/sess_1/mcp-tokens"


def issue(client, **body):
    body = {"chat_id": "oc_chat", "requester_open_id": "ou_requester", **body}
    return client.post(URL, body, format="json")


def test_a_token_is_shown_once_stored_hashed_and_audited_without_open_ids(bot_client):
    answer = issue(bot_client, ttl=600)
    assert answer.status_code == 201, answer.content
    body = answer.json()
    assert body["token"].startswith("cmt_") and body["url"] == "http://testserver/mcp"
    assert body["tools"] == ["ask_user_questions", "request_approval", "check_approval"]
    row = McpToken.objects.get()
    assert row.token_hash != body["token"] and body["token"] not in json.dumps(
        list(McpToken.objects.values()), default=str
    )
    assert (row.expires_at - row.created_at).total_seconds() == pytest.approx(600, abs=2)
    assert tokens.authenticate(body["token"]) == row
    entry = AuditEntry.objects.get(action="mcptoken.issued")
    text = json.dumps(entry.after)
    assert "ou_requester" not in text and body["token"] not in text
    assert entry.after["session_id"] == "sess_1" and entry.actor_repr == "bot:cli_test_app"


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"ttl": 59}, "ttl"),
        ({"ttl": 86401}, "ttl"),
        ({"open_id": "ou_x"}, "open_id"),  # with chat_id: not both
        ({"chat_id": ""}, "chat_id"),
        ({"chat_id": None, "open_id": None}, "chat_id"),
        ({"subagent": "maybe"}, "subagent"),
        ({"requester_open_id": "ou x"}, "requester_open_id"),
    ],
)
def test_a_refused_body_is_a_400_naming_the_field(bot_client, body, field):
    payload = {"chat_id": "oc_chat", "requester_open_id": "ou_requester", **body}
    payload = {k: v for k, v in payload.items() if v is not None}
    answer = bot_client.post(URL, payload, format="json")
    assert answer.status_code == 400
    assert answer.json()["error"] == "invalid" and field in answer.json()["detail"]
    assert not McpToken.objects.exists()


def test_a_too_long_session_id_is_refused_and_no_key_is_refused(bot_client, client):
    answer = bot_client.post(f"/api/v1/sessions/{'s' * 129}/mcp-tokens", {"chat_id": "oc"})
    assert answer.status_code == 400 and "session_id" in answer.json()["detail"]
    assert client.post(URL, {"chat_id": "oc"}).status_code in (401, 403)


def test_revoking_stops_authentication_is_audited_and_idempotent(bot_client):
    body = issue(bot_client).json()
    first = bot_client.post(f"/api/v1/mcp-tokens/{body['prefix']}/revoke")
    assert first.status_code == 200
    again = bot_client.post(f"/api/v1/mcp-tokens/{body['prefix']}/revoke")
    assert again.json()["revoked_at"] == first.json()["revoked_at"]
    assert tokens.authenticate(body["token"]) is None
    assert AuditEntry.objects.filter(action="mcptoken.revoked").count() == 1
    assert bot_client.post("/api/v1/mcp-tokens/cmt_zz_/revoke").status_code == 404


def test_an_expired_token_no_longer_authenticates(bot_client):
    body = issue(bot_client).json()
    McpToken.objects.update(expires_at=timezone.now() - timedelta(seconds=1))
    assert tokens.authenticate(body["token"]) is None
    assert tokens.authenticate("cmt_nope") is None and tokens.authenticate("") is None


def test_the_admin_lists_tokens_and_revokes_selected_ones(bot_client, admin_client):
    issue(bot_client)
    token = McpToken.objects.get()
    page = admin_client.get("/admin/interactions/mcptoken/")
    assert page.status_code == 200 and tokens.token_prefix(token) in page.content.decode()
    assert "ou_requester" not in page.content.decode()
    admin_client.post(
        "/admin/interactions/mcptoken/",
        {"action": "revoke_selected", "_selected_action": [token.pk]},
    )
    token.refresh_from_db()
    assert token.revoked_at is not None
    assert admin_client.get("/admin/interactions/mcptoken/add/").status_code == 403


def test_a_sub_agent_or_wechat_session_lists_no_ask_user_questions(make_bot):
    bot = make_bot()
    common = {"bot": bot, "session_id": "s", "expires_at": timezone.now()}
    sub = McpToken(subagent=True, **common)
    wechat = McpToken(project_key="wechat-room-1", **common)
    feishu = McpToken(project_key="feishu-cli_x-private-ou_y", **common)
    assert [t.name for t in tools.tools_for(sub)] == ["request_approval", "check_approval"]
    assert [t.name for t in tools.tools_for(wechat)] == ["request_approval", "check_approval"]
    assert tools.tools_for(feishu)[0].name == "ask_user_questions"


@pytest.mark.parametrize(
    ("arguments", "named"),
    [
        ({"questions": []}, "questions: Ask 1 to 4 questions."),
        ({"questions": [{"question": "q", "options": []}]}, "questions[0].options"),
        (
            {"questions": [{"question": "q", "options": [{"label": "a" * 61}]}]},
            "questions[0].options[0].label",
        ),
        ({"questions": [{"question": "q", "options": [{"label": "a"}]}], "x": 1}, "x: unknown"),
        (
            {"questions": [{"question": "q", "options": [{"label": "a"}]}], "timeout_seconds": 5},
            "timeout_seconds",
        ),
    ],
)
def test_ask_arguments_past_the_rest_limits_are_refused_naming_the_field(arguments, named):
    data, refused = tools.validate_arguments(tools.ASK, arguments)
    assert data is None and refused.is_error
    assert named in refused.text


def test_approval_arguments_too_long_to_show_are_refused():
    data, refused = tools.validate_arguments(
        tools.REQUEST_APPROVAL, {"tool": "bash", "summary": "s", "arguments": {"a": "x" * 4000}}
    )
    assert data is None and "arguments" in refused.text


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("headers", "status", "error"),
    [
        ([(b"host", b"evil.example")], 400, "disallowed_host"),
        ([(b"host", b"testserver"), (b"origin", b"https://evil.example")], 403, "forbidden_origin"),
        ([(b"host", b"testserver")], 401, "invalid_token"),
        (
            [(b"host", b"testserver"), (b"authorization", b"Bearer cmt_12345678_x")],
            401,
            "invalid_token",
        ),
    ],
)
async def test_mcp_refuses_a_bad_host_a_foreign_origin_and_a_missing_token_as_json(
    headers, status, error, settings
):
    from channels.testing import HttpCommunicator

    from cardloop.asgi import application

    settings.ALLOWED_HOSTS = ["testserver"]
    communicator = HttpCommunicator(application, "POST", "/mcp", body=b"{}", headers=headers)
    response = await communicator.get_response(timeout=10)
    assert response["status"] == status
    assert json.loads(response["body"])["error"] == error
    assert dict(response["headers"])[b"content-type"] == b"application/json"
