"""Progress messages and asks on Slack end to end: the bot API (`PUT …/progress` with channel
slack, `POST …/asks`), the real slack-sdk client against the loopback Web API stub, and signed
`block_actions` submits through the real ASGI app. The payloads are Slack's documented
`block_actions` shape (`tests/fixtures/slack/block_actions.json`, from
https://api.slack.com/reference/interaction-payloads/block-actions) with the Submit button's
`action_id` / `value` and the `state.values` of the message's input blocks as the renderer
made them."""

from __future__ import annotations

import copy
import json
import threading
import time

import pytest
from django.db import connection
from django.utils import translation
from rest_framework.test import APIClient

from feedback.models import Event
from interactions.asks import handlers
from interactions.asks import service as asks
from interactions.channels.slack import blocks
from interactions.channels.slack.progress import LINK_PREFIX
from interactions.models import Ask, CardUpdate, InboundEvent, ProgressSession
from interactions.render import progress_cards
from interactions.render.bilingual import bot_language
from interactions.tests.ask_helpers import QUESTIONS, SESSION, run_queue
from interactions.tests.slack_helpers import *  # noqa: F403
from interactions.tests.slack_helpers import CHAT, OTHER_USER, REQUESTER, fixture, form_body, sign
from interactions.tests.test_slack_ingress import post_interactivity
from plumbing.workqueue import WorkStatus

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def api(slack_app, slack_stub, make_api_key):
    raw, _key = make_api_key(slack_app.bot)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    client.bot = slack_app.bot
    return client


def put_progress(api, **body):
    body.setdefault("status", "running")
    body.setdefault("channel", "slack")
    return api.put(f"/api/v1/sessions/{SESSION}/progress", body, format="json")


def post_ask(api, questions=QUESTIONS, **body):
    return api.post(
        f"/api/v1/sessions/{SESSION}/asks", {"questions": questions, **body}, format="json"
    )


@pytest.fixture
def shown(api, slack_stub):
    """A running Slack progress session of the requester, its message posted."""
    response = put_progress(
        api, chat_id=CHAT, requester_open_id=REQUESTER, title="Deploying", summary="Step 1"
    )
    assert response.status_code == 201, response.content
    return ProgressSession.objects.select_related("card").get(session_id=SESSION)


def message_blocks(stub, session) -> list[dict]:
    return stub.messages[(CHAT, session.card.address["ts"])]


def inputs_of(stub, session) -> list[str]:
    return [b["block_id"] for b in message_blocks(stub, session) if b["type"] == "input"]


def told(bot, message) -> str:
    with translation.override(bot_language(bot)):
        return str(message)


def state_for(ask, answers) -> dict:
    """`state.values` as Slack sends it for the ask's form: per question `(selection, other)`,
    the selection an option index (single), a list of them (multi) or None."""
    values = {}
    for i, (selection, other) in enumerate(answers):
        select, custom = progress_cards.field_names(ask.form_index, i)
        if ask.questions[i].get("multiSelect"):
            chosen = {
                "type": "multi_static_select",
                "selected_options": [{"value": str(x)} for x in selection or []],
            }
        else:
            chosen = {
                "type": "static_select",
                "selected_option": None if selection is None else {"value": str(selection)},
            }
        values[select] = {blocks.field_action(select): chosen}
        values[custom] = {blocks.field_action(custom): {"type": "plain_text_input", "value": other}}
    return values


_clicks = iter(range(10**6))


def submit(session, ask, state, *, user=REQUESTER, key="r", slack_stub=None):
    """Post a signed click on the ask's Submit button of the session's message."""
    payload = copy.deepcopy(fixture("block_actions"))
    ts = session.card.address["ts"]
    payload["user"]["id"] = user
    payload["container"].update(message_ts=ts, channel_id=CHAT)
    payload["channel"]["id"] = CHAT
    payload["message"]["ts"] = ts
    payload["state"] = {"values": state}
    payload["actions"] = [
        {
            "action_id": progress_cards.submit_name(ask.form_index),
            "block_id": progress_cards.form_name(ask.form_index),
            "text": {"type": "plain_text", "text": "Submit", "emoji": True},
            "value": json.dumps(progress_cards.submit_value(ask)),
            "style": "primary",
            "type": "button",
            "action_ts": f"1700000100.{next(_clicks):06d}",
        }
    ]
    if slack_stub is not None:
        payload["response_url"] = slack_stub.response_url(key)
    body = form_body(payload)
    return post_interactivity(body, sign(body))


def ephemeral(slack_stub, key) -> list[str]:
    return [b["text"] for k, b in slack_stub.responses if k == key]


def test_put_progress_on_slack_posts_the_message_and_an_ask_adds_its_form_by_chat_update(
    api, shown, slack_stub
):
    (post,) = [c for c in slack_stub.calls if c[0] == "chat.postMessage"]
    assert post[2]["channel"] == CHAT
    body = api.get(f"/api/v1/sessions/{SESSION}/progress").json()
    assert body["channel"] == "slack" and body["platform_message_id"] == shown.card.address["ts"]
    assert inputs_of(slack_stub, shown) == []
    response = post_ask(api)
    assert response.status_code == 201, response.content
    assert response.json()["shown"]["card"] is True
    assert Ask.objects.get().channel == "slack"
    assert run_queue() == 1
    assert slack_stub.calls[-1][0] == "chat.update"
    assert inputs_of(slack_stub, shown) == ["q0", "c0", "q1", "c1"]


def test_the_requesters_submit_answers_wakes_the_long_poll_and_the_form_leaves_the_message(
    api, shown, slack_stub, caplog
):
    request_id = post_ask(api).json()["requestId"]
    run_queue()
    ask = Ask.objects.get(public_id=request_id)
    result = {}

    def long_poll():
        try:
            result["response"] = api.get(f"/api/v1/asks/{request_id}?wait=20")
        finally:
            connection.close()  # this thread's connection (PostgreSQL drops the test DB)

    poll = threading.Thread(target=long_poll)
    poll.start()
    time.sleep(0.3)
    status, answer = submit(
        shown, ask, state_for(ask, [(1, ""), ([0, 2], "")]), slack_stub=slack_stub
    )
    assert (status, answer) == (200, {})
    poll.join(25)
    body = result["response"].json()
    assert body["status"] == "answered" and body["answered_via"] == "card"
    assert body["answers"] == [
        {"question": QUESTIONS[0]["question"], "selectedLabels": ["PostgreSQL"], "customInput": ""},
        {
            "question": QUESTIONS[1]["question"],
            "selectedLabels": ["Unit tests", "Migrations"],
            "customInput": "",
        },
    ]
    assert ephemeral(slack_stub, "r") == [told(api.bot, handlers.SUBMITTED)]
    assert run_queue() == 1 and slack_stub.calls[-1][0] == "chat.update"
    assert inputs_of(slack_stub, shown) == []
    # the answer card is Feishu's alone: nothing invalid was logged or queued for Slack
    assert "answer card invalid" not in caplog.text
    assert not CardUpdate.objects.exclude(card=shown.card).exists()


def test_someone_else_submitting_is_told_and_nothing_is_written(api, shown, slack_stub):
    request_id = post_ask(api).json()["requestId"]
    run_queue()
    ask = Ask.objects.get(public_id=request_id)
    updates = CardUpdate.objects.count()
    status, _ = submit(
        shown, ask, state_for(ask, [(0, ""), ([1], "")]), user=OTHER_USER, slack_stub=slack_stub
    )
    assert status == 200
    assert ephemeral(slack_stub, "r") == [told(api.bot, handlers.NOT_SENDER)]
    ask.refresh_from_db()
    assert ask.status == "pending" and ask.resolution in (None, {})
    assert not Event.objects.filter(type="interaction.resolved").exists()
    assert CardUpdate.objects.count() == updates
    assert inputs_of(slack_stub, shown) == ["q0", "c0", "q1", "c1"]


def test_a_single_select_with_other_text_keeps_the_text_and_a_multi_select_both(
    api, shown, slack_stub
):
    request_id = post_ask(api).json()["requestId"]
    ask = Ask.objects.get(public_id=request_id)
    submit(
        shown, ask, state_for(ask, [(0, "MariaDB"), ([1], "smoke tests")]), slack_stub=slack_stub
    )
    ask.refresh_from_db()
    assert ask.resolution["value"] == [
        {"question": QUESTIONS[0]["question"], "selectedLabels": [], "customInput": "MariaDB"},
        {
            "question": QUESTIONS[1]["question"],
            "selectedLabels": ["Lint"],
            "customInput": "smoke tests",
        },
    ]


def test_an_empty_answer_is_refused_and_the_form_stays(api, shown, slack_stub):
    request_id = post_ask(api).json()["requestId"]
    run_queue()
    ask = Ask.objects.get(public_id=request_id)
    submit(shown, ask, state_for(ask, [(None, None), ([], None)]), slack_stub=slack_stub)
    assert ephemeral(slack_stub, "r") == [told(api.bot, handlers.EMPTY_ANSWER)]
    ask.refresh_from_db()
    assert ask.status == "pending"
    assert inputs_of(slack_stub, shown) == ["q0", "c0", "q1", "c1"]


def test_stacked_asks_answer_the_second_first_and_each_reads_only_its_own_fields(
    api, shown, slack_stub
):
    first = Ask.objects.get(public_id=post_ask(api).json()["requestId"])
    second = Ask.objects.get(public_id=post_ask(api).json()["requestId"])
    run_queue()
    assert inputs_of(slack_stub, shown) == ["q0", "c0", "q1", "c1", "q0_1", "c0_1", "q1_1", "c1_1"]
    # Slack sends every input of the message with the click: both forms' state
    both = {**state_for(first, [(0, ""), ([0], "")]), **state_for(second, [(1, ""), ([2], "")])}
    submit(shown, second, both, key="second", slack_stub=slack_stub)
    second.refresh_from_db()
    first.refresh_from_db()
    assert second.status == "resolved" and first.status == "pending"
    assert [a["selectedLabels"] for a in second.resolution["value"]] == [
        ["PostgreSQL"],
        ["Migrations"],
    ]
    run_queue()
    assert inputs_of(slack_stub, shown) == ["q0", "c0", "q1", "c1"]
    submit(shown, first, both, key="first", slack_stub=slack_stub)
    first.refresh_from_db()
    assert [a["selectedLabels"] for a in first.resolution["value"]] == [["SQLite"], ["Unit tests"]]
    run_queue()
    assert inputs_of(slack_stub, shown) == []


def test_a_cancelled_ask_leaves_the_message_and_a_late_submit_is_told_it_is_gone(
    api, shown, slack_stub
):
    request_id = post_ask(api).json()["requestId"]
    run_queue()
    assert api.post(f"/api/v1/asks/{request_id}/cancel").status_code == 200
    run_queue()
    assert inputs_of(slack_stub, shown) == []
    ask = Ask.objects.get(public_id=request_id)
    submit(shown, ask, state_for(ask, [(0, ""), ([0], "")]), slack_stub=slack_stub)
    assert ephemeral(slack_stub, "r") == [told(api.bot, handlers.STALE)]
    assert Ask.objects.get(pk=ask.pk).status == "cancelled"


def test_recovering_withdraws_the_forms_and_says_so(api, shown, slack_stub):
    post_ask(api)
    run_queue()
    assert put_progress(api, status="recovering").status_code == 200
    run_queue()
    assert inputs_of(slack_stub, shown) == []
    assert "progress_recovery" in [b["block_id"] for b in message_blocks(slack_stub, shown)]
    assert Ask.objects.get().resolution["reason"] == "recovering"


def test_cancel_task_by_the_requester_is_recorded_and_the_button_leaves_the_message(
    api, shown, slack_stub
):
    payload = copy.deepcopy(fixture("block_actions"))
    ts = shown.card.address["ts"]
    payload["container"].update(message_ts=ts, channel_id=CHAT)
    payload["actions"][0].update(
        action_id="progress_cancel",
        block_id="progress_buttons",
        value=json.dumps({"kind": "progress", "act": "cancel", "sessionId": SESSION}),
    )
    payload["response_url"] = slack_stub.response_url("c")
    body = form_body(payload)
    assert post_interactivity(body, sign(body)) == (200, {})
    assert ProgressSession.objects.get().cancel_requested_at is not None
    assert ephemeral(slack_stub, "c") == [told(api.bot, handlers.CANCEL_RECORDED)]
    run_queue()
    action_ids = [
        e["action_id"]
        for b in message_blocks(slack_stub, shown)
        if b["type"] == "actions"
        for e in b["elements"]
    ]
    assert action_ids == ["progress_details"]


def test_a_click_on_the_details_link_is_acknowledged_and_nothing_is_handled(api, slack_stub):
    put_progress(
        api, chat_id=CHAT, requester_open_id=REQUESTER, details_url="https://agents.example/s"
    )
    session = ProgressSession.objects.select_related("card").get()
    payload = copy.deepcopy(fixture("block_actions"))
    payload["container"]["message_ts"] = session.card.address["ts"]
    payload["actions"][0].update(
        action_id=f"{LINK_PREFIX}progress_details", block_id="progress_buttons"
    )
    del payload["actions"][0]["value"]
    payload["response_url"] = slack_stub.response_url("l")
    body = form_body(payload)
    assert post_interactivity(body, sign(body)) == (200, {})
    assert not InboundEvent.objects.exists() and ephemeral(slack_stub, "l") == []


def test_an_ask_naming_a_requester_of_another_channel_is_refused(api, shown):
    response = post_ask(api, requester_open_id="ou_feishu_person")
    assert response.status_code == 400, response.content
    assert response.json()["error"] == "requester_channel"
    assert "requester_open_id" in response.json()["detail"]
    assert not Ask.objects.exists()
    assert not CardUpdate.objects.filter(status=WorkStatus.PENDING).exists()


def test_an_answer_card_for_a_slack_click_is_left_out_without_a_warning_or_an_update(
    slack_app, caplog
):
    from interactions.callbacks import dispatcher
    from interactions.channels.slack.channel import neutral_payload

    payload = copy.deepcopy(fixture("block_actions"))
    payload["actions"][0]["value"] = json.dumps({"kind": "progress", "act": "details"})
    action = dispatcher.registry.CardAction.from_payload(slack_app.bot, neutral_payload(payload))
    assert action.channel == "slack"
    answer = {
        "toast": {"type": "info", "content": "x"},
        "card": {"type": "raw", "data": {"blocks": []}},
    }
    assert dispatcher._checked_card(slack_app.bot, action, answer) == {"toast": answer["toast"]}
    assert "answer card invalid" not in caplog.text
    assert not CardUpdate.objects.exists()


def test_capabilities_still_report_slack_with_buttons_forms_and_updates(api):
    slack = api.get("/api/v1/capabilities").json()["channels"]["slack"]
    assert slack["buttons"] and slack["forms"] and slack["update"]


def test_slack_ask_replay_submits_the_chosen_options_against_a_live_server(
    api, shown, slack_stub, live_server, monkeypatch
):
    import io

    from django.core.management import CommandError, call_command

    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    request_id = post_ask(api).json()["requestId"]
    out = io.StringIO()
    common = ["--url", live_server.url, "--set", f"response_url={slack_stub.response_url('a')}"]
    with pytest.raises(CommandError):
        call_command("slack_ask_replay", "ask_nope", "--user", REQUESTER, *common, stdout=out)
    call_command(
        "slack_ask_replay",
        request_id,
        "--user",
        REQUESTER,
        "--answer",
        "0=1",
        "--answer",
        "1=0,2",
        "--other",
        "1=smoke test",
        *common,
        stdout=out,
    )
    assert "200 in" in out.getvalue()
    ask = Ask.objects.get(public_id=request_id)
    assert ask.status == "resolved" and ask.resolution["operator"] == REQUESTER
    assert ask.resolution["value"][1] == {
        "question": QUESTIONS[1]["question"],
        "selectedLabels": ["Unit tests", "Migrations"],
        "customInput": "smoke test",
    }
    deadline = time.monotonic() + 5  # told after the answer left the live server
    while not ephemeral(slack_stub, "a") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert ephemeral(slack_stub, "a") == [told(api.bot, handlers.SUBMITTED)]


def test_an_mcp_ask_of_a_slack_session_goes_on_its_slack_message(api, shown, slack_stub):
    """`ask_user_questions` over MCP registers through `asks.register_ask` with the token's
    session: the ask takes the session's channel and its form goes on the Slack message; a
    token naming a Feishu requester for a Slack session is refused by name."""
    from interactions.mcp import tools
    from interactions.mcp.tokens import issue_token

    _raw, token = issue_token(None, api.bot, SESSION, chat_id=CHAT)
    ask, _call = tools._register_ask(token, {"questions": QUESTIONS}, "rpc-1")
    assert ask.channel == "slack" and ask.requester_open_id == REQUESTER
    run_queue()
    assert inputs_of(slack_stub, shown) == ["q0", "c0", "q1", "c1"]
    _raw, feishu_token = issue_token(None, api.bot, SESSION, requester_open_id="ou_someone")
    with pytest.raises(asks.AskRefused) as refused:
        tools._register_ask(feishu_token, {"questions": QUESTIONS}, "rpc-2")
    assert refused.value.code == "requester_channel"


def test_later_progress_calls_may_leave_the_channel_out_and_keep_slacks(api, shown, slack_stub):
    later = api.put(
        f"/api/v1/sessions/{SESSION}/progress",
        {"status": "completed", "summary": "Done", "requester_open_id": REQUESTER},
        format="json",
    )
    assert later.status_code == 200, later.content
    assert later.json()["channel"] == "slack" and later.json()["status"] == "completed"
    run_queue()
    assert "Done" in json.dumps(message_blocks(slack_stub, shown))


def test_a_requester_of_another_channel_is_refused_without_a_channel_named(api, shown):
    wrong = api.put(
        f"/api/v1/sessions/{SESSION}/progress",
        {"status": "running", "requester_open_id": "ou_feishu_person"},
        format="json",
    )
    assert wrong.status_code == 400
    assert wrong.json()["error"] == "requester_channel"
    assert "requester_open_id" in wrong.json()["detail"]
    assert ProgressSession.objects.get(session_id=SESSION).requester_open_id == REQUESTER
