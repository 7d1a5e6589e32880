"""The MCP tool server `/mcp` with the real `mcp` client (`ClientSession` over Streamable HTTP)
against a live Daphne: tool lists per session, asks answered on the card and on the panel,
cancellation withdrawing the question, "always" approvals, and token refusals."""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta

import httpx
import pytest
from django.utils import timezone
from mcp.shared.exceptions import MCPError
from websockets.asyncio.client import connect

from botadmin import services
from interactions.models import Ask, Interaction, McpToken
from interactions.tests.ask_helpers import has_form, run_queue
from interactions.tests.mcp_helpers import *  # noqa: F403
from interactions.tests.mcp_helpers import (
    QUESTIONS,
    REQUESTER,
    card_of,
    db,
    issue_token,
    mcp_client,
    pending_interaction,
    post_card_action,
    start_progress,
)
from interactions.tests.panel_helpers import ws_receive_until, ws_url

pytestmark = pytest.mark.django_db(transaction=True)


def tool_names(listed) -> list[str]:
    return [tool.name for tool in listed.tools]


async def test_a_main_session_lists_three_tools_and_a_sub_agent_gets_no_ask_user_questions(live):
    main = await issue_token(live.url, live.key, "sess_main")
    sub = await issue_token(live.url, live.key, "sess_main_sub", subagent=True)
    assert main["url"] == f"{live.url}/mcp"
    assert main["tools"] == ["ask_user_questions", "request_approval", "check_approval"]
    assert sub["tools"] == ["request_approval", "check_approval"]
    async with mcp_client(main["url"], main["token"]) as session:
        listed = await session.list_tools()
        assert tool_names(listed) == main["tools"]
        ask = next(t for t in listed.tools if t.name == "ask_user_questions")
        questions = ask.input_schema["properties"]["questions"]
        assert (questions["minItems"], questions["maxItems"]) == (1, 4)
        assert questions["items"]["properties"]["options"]["maxItems"] == 10
    async with mcp_client(sub["url"], sub["token"]) as session:
        assert tool_names(await session.list_tools()) == sub["tools"]
        refused = await session.call_tool("ask_user_questions", {"questions": QUESTIONS})
        assert refused.is_error
        assert "Sub-agents may not ask" in refused.content[0].text
    # the 2026-07-28 protocol (no handshake, one POST per request) lists the same
    async with mcp_client(sub["url"], sub["token"], modern=True) as session:
        assert tool_names(await session.list_tools()) == sub["tools"]


async def test_an_ask_answered_by_a_signed_form_submit_returns_the_mapped_answers(live):
    live.start("a", CARDLOOP_MCP_PROGRESS_SECONDS="0.3")
    session_row = await db(start_progress)(live.bot, "sess_card")
    issued = await issue_token(live.url, live.key, "sess_card")
    progress: list[float] = []

    async def on_progress(done, total, message):
        progress.append(done)

    async with mcp_client(issued["url"], issued["token"]) as session:
        call = asyncio.ensure_future(
            session.call_tool(
                "ask_user_questions", {"questions": QUESTIONS}, progress_callback=on_progress
            )
        )
        ask = await pending_interaction("sess_card", kind="ask")
        await db(run_queue)()
        card_id = await db(card_of)(session_row)
        assert has_form(live.stub.cards[card_id.card_id].card)  # the form is on the card
        for _ in range(100):  # the waiting call reports progress
            if progress:
                break
            await asyncio.sleep(0.1)
        assert progress and progress[0] > 0
        answer = await post_card_action(
            live.url,
            live.bot,
            "card_action_ask_submit",
            {
                "event.action.value.sessionId": "sess_card",
                "event.action.value.requestId": ask.public_id,
                "event.context.open_message_id": card_id.open_message_id,
            },
        )
        assert answer["toast"]["type"] == "success"
        result = await asyncio.wait_for(call, 30)
    assert not result.is_error
    assert result.structured_content == {
        "answers": [
            {
                "question": QUESTIONS[0]["question"],
                "selectedLabels": ["PostgreSQL"],
                "customInput": "",
            },
            {
                "question": QUESTIONS[1]["question"],
                "selectedLabels": ["Unit tests", "Migrations"],
                "customInput": "也请检查测试环境",
            },
        ]
    }
    assert json.loads(result.content[0].text) == result.structured_content
    stored = await db(lambda: Ask.objects.get(pk=ask.pk))()
    assert stored.resolution["via"] == "card"


async def test_the_same_ask_answered_from_the_panel_returns_the_panels_answers(live):
    raw_desktop, _token = await db(services.issue_desktop_token)("test", live.bot, REQUESTER)
    issued = await issue_token(live.url, live.key, "sess_panel")  # no progress card: panel only
    answers = [
        {"question": QUESTIONS[0]["question"], "selectedLabels": ["SQLite"], "customInput": ""},
        {"question": QUESTIONS[1]["question"], "selectedLabels": ["Lint"], "customInput": ""},
    ]
    async with (
        connect(
            ws_url(live.url), additional_headers={"Authorization": f"Bearer {raw_desktop}"}
        ) as panel,
        mcp_client(issued["url"], issued["token"]) as session,
    ):
        await ws_receive_until(panel, lambda f: f["type"] == "snapshot")
        call = asyncio.ensure_future(
            session.call_tool("ask_user_questions", {"questions": QUESTIONS})
        )
        pushed = await ws_receive_until(panel, lambda f: f["type"] == "ask_user_questions")
        assert pushed["sessionId"] == "sess_panel"
        await panel.send(
            json.dumps(
                {
                    "type": "ask_user_questions_result",
                    "requestId": pushed["requestId"],
                    "answers": answers,
                }
            )
        )
        await ws_receive_until(panel, lambda f: f["type"] == "ask_user_questions_accepted")
        result = await asyncio.wait_for(call, 30)
    assert not result.is_error
    assert result.structured_content == {"answers": answers}


async def test_with_no_card_and_no_panel_the_ask_fails_at_once_with_the_no_channel_text(live):
    issued = await issue_token(live.url, live.key, "sess_nowhere")
    async with mcp_client(issued["url"], issued["token"]) as session:
        result = await asyncio.wait_for(
            session.call_tool("ask_user_questions", {"questions": QUESTIONS}), 10
        )
    assert result.is_error
    assert result.content[0].text == "当前通道无法向用户提问"
    assert not await db(Ask.objects.filter(session_id="sess_nowhere").exists)()


async def test_arguments_past_the_rest_limits_are_a_tool_error_naming_the_field(live):
    issued = await issue_token(live.url, live.key, "sess_limits")
    async with mcp_client(issued["url"], issued["token"]) as session:
        result = await session.call_tool("ask_user_questions", {"questions": QUESTIONS * 3})
    assert result.is_error
    assert "questions: Ask 1 to 4 questions." in result.content[0].text


@pytest.mark.parametrize("modern", [False, True], ids=["handshake-cancel", "closed-stream"])
async def test_a_cancelled_call_withdraws_the_form_from_the_card(live, modern):
    session_id = f"sess_cancel_{int(modern)}"
    session_row = await db(start_progress)(live.bot, session_id)
    issued = await issue_token(live.url, live.key, session_id)
    async with mcp_client(issued["url"], issued["token"], modern=modern) as session:
        call = asyncio.ensure_future(
            session.call_tool("ask_user_questions", {"questions": QUESTIONS})
        )
        ask = await pending_interaction(session_id, kind="ask")
        await db(run_queue)()
        card = await db(card_of)(session_row)
        assert has_form(live.stub.cards[card.card_id].card)
        call.cancel()  # the SDK sends notifications/cancelled, or closes the stream (2026)
        with pytest.raises(asyncio.CancelledError):
            await call
        for _ in range(100):
            ask = await db(lambda: Ask.objects.get(pk=ask.pk))()
            if ask.is_final:
                break
            await asyncio.sleep(0.1)
    assert ask.status == Interaction.Status.CANCELLED, live.daphnes.log("a")[-3000:]
    assert ask.resolution["reason"] == "cancelled"
    await db(run_queue)()
    assert not has_form(live.stub.cards[card.card_id].card)  # the card update reached Feishu


async def test_an_always_approval_makes_the_next_request_approval_return_at_once(live):
    issued = await issue_token(live.url, live.key, "sess_approve")
    arguments = {"tool": "bash", "summary": "Run make deploy", "arguments": {"cmd": "make deploy"}}
    async with mcp_client(issued["url"], issued["token"]) as session:
        before = await session.call_tool("check_approval", {"tool": "bash"})
        assert before.structured_content == {"allowed": False, "rule": None}
        call = asyncio.ensure_future(session.call_tool("request_approval", arguments))
        ia = await pending_interaction("sess_approve", kind="approval")
        assert ia.tool == "bash" and "make deploy" in ia.body
        assert live.stub.calls_to("POST", "/open-apis/im/v1/messages")  # the card was sent
        answer = await post_card_action(
            live.url,
            live.bot,
            "card_action_approval",
            {
                "event.action.value.interaction_id": ia.public_id,
                "event.action.value.action_id": "always",
                "event.action.value.action_value": "always",
                "event.context.open_message_id": ia.open_message_id,
                "event.context.open_chat_id": ia.chat_id,
            },
        )
        assert answer["toast"]["type"] == "success"
        first = await asyncio.wait_for(call, 30)
        assert first.structured_content["decision"] == "always"
        assert first.structured_content["rule"]["scope"] == "session"

        second = await asyncio.wait_for(session.call_tool("request_approval", arguments), 10)
        assert second.structured_content["decision"] == "approve"
        assert second.structured_content["asked"] is False
        check = await session.call_tool("check_approval", {"tool": "bash"})
        assert check.structured_content["allowed"] is True
    assert await db(Interaction.objects.filter(session_id="sess_approve").count)() == 1


async def test_a_wrong_expired_or_revoked_token_is_refused(live):
    issued = await issue_token(live.url, live.key, "sess_refused")
    expired = await issue_token(live.url, live.key, "sess_refused")
    await db(
        lambda: McpToken.objects.filter(lookup=expired["prefix"][4:12]).update(
            expires_at=timezone.now() - timedelta(seconds=1)
        )
    )()
    async with httpx.AsyncClient(timeout=20, trust_env=False) as api:
        revoked = await api.post(
            f"{live.url}/api/v1/mcp-tokens/{issued['prefix']}/revoke",
            headers={"Authorization": f"Bearer {live.key}"},
        )
        assert revoked.status_code == 200, revoked.text
        for bearer in (
            issued["token"],  # revoked
            expired["token"],
            "cmt_00000000_not-a-token",
            live.key,  # a bot API key is not an MCP token
            None,  # no Authorization header
        ):
            headers = {"Accept": "application/json, text/event-stream"}
            if bearer is not None:
                headers["Authorization"] = f"Bearer {bearer}"
            answer = await api.post(
                f"{live.url}/mcp",
                json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
                headers=headers,
            )
            assert answer.status_code == 401, (bearer or "")[:4]
            assert answer.json()["error"] == "invalid_token"
            assert answer.headers["www-authenticate"].startswith("Bearer")
    # the real client cannot even initialize with the revoked token
    with pytest.raises(ExceptionGroup) as refused:
        async with mcp_client(f"{live.url}/mcp", issued["token"]) as session:
            await session.list_tools()
    assert refused.group_contains(MCPError)


async def test_another_bots_key_cannot_reach_the_session_nor_its_tokens(
    live, make_bot, make_api_key
):
    await db(start_progress)(live.bot, "sess_owned")
    other = await db(make_bot)(app_id="cli_other_bot")
    other_key = (await db(make_api_key)(other))[0]
    mine = await issue_token(live.url, live.key, "sess_owned")
    theirs = await issue_token(live.url, other_key, "sess_owned")
    async with httpx.AsyncClient(timeout=20, trust_env=False) as api:
        refused = await api.post(
            f"{live.url}/api/v1/mcp-tokens/{mine['prefix']}/revoke",
            headers={"Authorization": f"Bearer {other_key}"},
        )
    assert refused.status_code == 404
    assert refused.json()["error"] == "not_found"
    # the other bot's token acts for its own bot: the first bot's progress card is not its own
    async with mcp_client(theirs["url"], theirs["token"]) as session:
        result = await asyncio.wait_for(
            session.call_tool("ask_user_questions", {"questions": QUESTIONS}), 10
        )
    assert result.is_error and result.content[0].text == "当前通道无法向用户提问"
    assert not await db(Ask.objects.filter(session_id="sess_owned").exists)()
    token = await db(lambda: McpToken.objects.get(lookup=mine["prefix"][4:12]))()
    assert token.revoked_at is None


async def test_a_client_that_disconnects_mid_call_without_cancelling_withdraws_the_question(live):
    await db(start_progress)(live.bot, "sess_gone")
    issued = await issue_token(live.url, live.key, "sess_gone")
    call = {
        "jsonrpc": "2.0",
        "id": 7,
        "method": "tools/call",
        "params": {"name": "ask_user_questions", "arguments": {"questions": QUESTIONS}},
    }
    headers = {
        "Authorization": f"Bearer {issued['token']}",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": "2025-11-25",
    }
    async with httpx.AsyncClient(timeout=60, trust_env=False) as client:
        request = asyncio.ensure_future(client.post(issued["url"], json=call, headers=headers))
        ask = await pending_interaction("sess_gone", kind="ask")
        request.cancel()  # the connection is dropped; no notifications/cancelled is sent
        with pytest.raises(asyncio.CancelledError):
            await request
    for _ in range(100):
        ask = await db(lambda: Ask.objects.get(pk=ask.pk))()
        if ask.is_final:
            break
        await asyncio.sleep(0.1)
    assert ask.status == Interaction.Status.CANCELLED
