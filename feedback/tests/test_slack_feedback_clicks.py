"""Feedback clicks on a Slack final answer, end to end: the answer sent through
`POST /api/v1/deliveries` (real slack-sdk client, loopback stub), a signed `block_actions`
payload (the documented fixture, the button value Cardloop put on the message) posted to
`/slack/<app>/interactivity`, the same feedback handlers writing one revision with its event
and outbox rows, the clicker told ephemerally, and the message updated after the answer by
reading it back and replacing only the feedback blocks; analytics count it under `slack`."""

from __future__ import annotations

import copy
import json
import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import pytest
from django.db import connections
from django.test import Client, override_settings
from django.utils import translation

from feedback import revisions, slack_cards
from feedback.models import Delivery, Event, LatestFeedback, OutboxItem, Revision
from feedback.tests.conftest import FULL_POLICY
from feedback.tests.test_slack_deliveries import SENTINEL, MessagesStub, answer_blocks
from interactions.models import CardUpdate
from interactions.tests.slack_helpers import (
    APP_ID,
    OTHER_USER,
    REQUESTER,
    TOKEN,
    fixture,
    form_body,
    sign,
    slack_app,  # noqa: F401 - fixture
)
from interactions.tests.test_slack_ingress import drain

pytestmark = pytest.mark.django_db(transaction=True)

CHANNEL = "C0ANSWERS"
PATH = f"/slack/{APP_ID}/interactivity"


@pytest.fixture
def slack_stub():
    stub = MessagesStub(tokens={TOKEN: "T0TEAM"}).start()
    with override_settings(CARDLOOP_SLACK_API_BASE_URL=stub.base_url):
        yield stub
    stub.stop()


@pytest.fixture
def answer(slack_app, slack_stub, make_api_key, make_destination, webhook_settings):  # noqa: F811
    """A final answer sent to Slack with feedback (policy `FULL_POLICY`: requester audience,
    reselect on, reasons), a webhook destination for the bot, and the message as posted."""
    from rest_framework.test import APIClient

    bot = slack_app.bot
    bot.policy = FULL_POLICY
    bot.save()
    make_destination("https://hooks.example.com/slack", bots=[bot])
    raw, _key = make_api_key(bot)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    response = client.post(
        "/api/v1/deliveries",
        {
            "chat_id": CHANNEL,
            "requester_user_id": REQUESTER,
            "response_kind": "final",
            "session_id": "s-slack",
            "turn_id": "t-1",
            "blocks": answer_blocks(f"*{SENTINEL}*"),
            "text": f"{SENTINEL} text",
        },
        format="json",
    )
    assert response.status_code == 201, response.json()
    delivery = Delivery.objects.get(delivery_id=response.json()["delivery_id"])
    return delivery


def _message(stub, delivery):
    return stub.posted[(CHANNEL, delivery.platform_message_id)]


def _click(stub, delivery, action_id, *, user=REQUESTER, state=None, key="r"):
    """The documented `block_actions` fixture for a click on `action_id` of the message as
    Slack holds it now (so the button carries the value Cardloop rendered)."""
    message = _message(stub, delivery)
    element = next(
        e
        for b in message["blocks"]
        for e in (b.get("elements") or [])
        if isinstance(e, dict) and e.get("action_id") == action_id
    )
    payload = copy.deepcopy(fixture("block_actions"))
    payload["api_app_id"] = APP_ID
    payload["user"]["id"] = user
    payload["container"].update(message_ts=delivery.platform_message_id, channel_id=CHANNEL)
    payload["channel"]["id"] = CHANNEL
    payload["message"] = {**message, "ts": delivery.platform_message_id}
    payload["response_url"] = stub.response_url(key)
    payload["actions"] = [
        {
            "action_id": action_id,
            "block_id": next(
                b["block_id"] for b in message["blocks"] if element in (b.get("elements") or [])
            ),
            "value": element["value"],
            "type": "button",
            "action_ts": "1700000009.000001",
        }
    ]
    if state is not None:
        payload["state"] = {"values": state}
    return form_body(payload)


def _post(body: bytes, gate: threading.Barrier | None = None) -> int:
    try:
        headers = {f"HTTP_{k.replace('-', '_').upper()}": v for k, v in sign(body).items()}
        if gate is not None:
            gate.wait(30)
        response = Client().post(
            PATH, data=body, content_type="application/x-www-form-urlencoded", **headers
        )
        response.close()
        return response.status_code
    finally:
        connections.close_all()


def _zh(message) -> str:
    with translation.override("zh-hans"):
        return str(message)


def test_a_signed_feedback_click_writes_one_revision_then_the_message_is_updated(
    answer, slack_stub, admin_client
):
    assert _post(_click(slack_stub, answer, "fb_conclusive_usable", key="c1")) == 200
    (revision,) = Revision.objects.all()
    assert (revision.delivery_id, revision.operator_open_id) == (answer.pk, REQUESTER)
    assert (revision.verdict_key, revision.semantic) == ("conclusive_usable", "positive")
    assert LatestFeedback.objects.get().revision == revision
    (event,) = Event.objects.filter(type="feedback.revised")
    assert OutboxItem.objects.filter(event=event).count() == 1
    assert slack_stub.responses == [
        (
            "c1",
            {"text": "已记录：结论可用", "response_type": "ephemeral", "replace_original": False},
        )
    ]
    # after the answer: read back, only the fb_ blocks replaced, chat.update
    before = len(slack_stub.calls)
    assert drain() == 1
    methods = [m for m, _t, _p in slack_stub.calls[before:]]
    assert methods == ["conversations.history", "chat.update"]
    updated = _message(slack_stub, answer)
    assert updated["blocks"][:2] == answer_blocks(f"*{SENTINEL}*")
    assert updated["text"] == f"{SENTINEL} text"
    answer.refresh_from_db()
    assert updated["blocks"][2:] == slack_cards.feedback_area(
        answer.policy_snapshot,
        answer.delivery_id,
        revisions.feedback_cards.Choice.of(answer.current_revision),
    )
    assert "已选择：*结论可用*" in json.dumps(updated["blocks"], ensure_ascii=False)
    # the queue row never held the answer
    assert SENTINEL not in json.dumps(list(CardUpdate.objects.values()), default=str)
    # analytics count it under the channel it came from
    today = answer.created_at.date()
    params = {"from": str(today - timedelta(days=1)), "to": str(today + timedelta(days=1))}
    params["tz"] = "UTC"
    slack = admin_client.get("/api/v1/analytics/summary", {**params, "channel": "slack"})
    assert (slack.json()["current"]["delivered"], slack.json()["current"]["positive"]) == (1, 1)
    feishu = admin_client.get("/api/v1/analytics/summary", {**params, "channel": "feishu"})
    assert feishu.json()["current"]["ratings"] == 0


def test_the_same_click_twice_writes_one_revision(answer, slack_stub):
    body = _click(slack_stub, answer, "fb_conclusive_usable")
    assert [_post(body), _post(body)] == [200, 200]
    assert Revision.objects.count() == 1
    assert Event.objects.filter(type="feedback.revised").count() == 1


def test_someone_other_than_the_requester_is_told_and_nothing_is_written(answer, slack_stub):
    body = _click(slack_stub, answer, "fb_conclusive_usable", user=OTHER_USER, key="o")
    assert _post(body) == 200
    assert not Revision.objects.exists()
    (response,) = slack_stub.responses
    assert response[1]["text"] == _zh(revisions._not_allowed_message(answer.policy_snapshot))


def test_a_negative_choice_then_the_follow_up_form_records_the_reason(answer, slack_stub):
    assert _post(_click(slack_stub, answer, "fb_incorrect")) == 200
    assert drain() == 1
    # the message now holds the follow-up form; the submit carries the inputs in state.values
    state = {
        "fb_reason": {
            "fb_reason": {"type": "static_select", "selected_option": {"value": "incomplete"}}
        },
        "fb_comment": {"fb_comment": {"type": "plain_text_input", "value": "  too short  "}},
    }
    assert _post(_click(slack_stub, answer, "fb_detail_submit", state=state)) == 200
    latest = Revision.objects.order_by("-revision").first()
    assert (latest.revision, latest.verdict_key, latest.reason_key) == (
        2,
        "incorrect",
        "incomplete",
    )
    assert latest.comment == "too short"
    assert drain() == 1
    assert "已补充说明，谢谢" in json.dumps(
        _message(slack_stub, answer)["blocks"], ensure_ascii=False
    )


def test_a_click_on_an_older_state_is_stale_and_writes_nothing(answer, slack_stub):
    old = _click(slack_stub, answer, "fb_effective_progress")
    assert _post(_click(slack_stub, answer, "fb_incorrect")) == 200
    assert _post(old.replace(b"1700000009.000001", b"1700000010.000001")) == 200
    assert Revision.objects.count() == 1
    assert Revision.objects.get().verdict_key == "incorrect"


@pytest.mark.postgres
def test_twenty_concurrent_identical_feedback_clicks_write_one_revision(answer, slack_stub):
    body = _click(slack_stub, answer, "fb_conclusive_usable")
    gate = threading.Barrier(20)
    with ThreadPoolExecutor(20) as pool:
        statuses = list(pool.map(lambda _i: _post(body, gate), range(20)))
    assert statuses == [200] * 20
    assert Revision.objects.count() == 1
    assert Event.objects.filter(type="feedback.revised").count() == 1
    assert LatestFeedback.objects.count() == 1


def test_slack_feedback_replay_clicks_the_current_area_against_a_live_server(
    answer, slack_stub, live_server, monkeypatch
):
    """The walk-through's command: a verdict click with the value Cardloop put on the
    message, then the follow-up form with a reason, each a revision of the requester."""
    import io

    from django.core.management import CommandError, call_command

    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    out = io.StringIO()
    common = ["--user", REQUESTER, "--url", live_server.url]
    common += ["--set", f"response_url={slack_stub.response_url('r')}"]
    with pytest.raises(CommandError):
        call_command("slack_feedback_replay", "del_nope", "incorrect", *common, stdout=out)
    call_command("slack_feedback_replay", answer.delivery_id, "incorrect", *common, stdout=out)
    assert "200 in" in out.getvalue()
    (first,) = Revision.objects.all()
    assert (first.verdict_key, first.semantic, first.operator_open_id) == (
        "incorrect",
        "negative",
        REQUESTER,
    )
    call_command(
        "slack_feedback_replay", answer.delivery_id, "--reason", "incomplete", *common, stdout=out
    )
    latest = Revision.objects.order_by("-id").first()
    assert latest.pk != first.pk and latest.reason_key == "incomplete"
