"""`POST /api/v1/deliveries` for Slack: the backend's Block Kit blocks with Cardloop's feedback
area appended, sent with `chat.postMessage` by the real slack-sdk client to the loopback stub
(`tests.slack_stub`), the `ts` recorded, the answer never stored; and every refusal a 400 that
names the field."""

from __future__ import annotations

import itertools
import json

import pytest
from django.db import connection
from django.test import override_settings

from botadmin import services
from botadmin.models import SlackApp
from feedback import slack_cards
from feedback.models import Delivery
from feedback.tests.conftest import FULL_POLICY
from tests.slack_stub import SlackStub

TOKEN = "xoxb-stub-deliveries"
SENTINEL = "SENTINEL-slack-answer-9d21"
CHANNEL = "C0ANSWERS"
REQUESTER = "U0REQUESTER"


def answer_blocks(text: str = "The answer") -> list[dict]:
    return [
        {"type": "header", "block_id": "title", "text": {"type": "plain_text", "text": "Answer"}},
        {"type": "section", "block_id": "answer", "text": {"type": "mrkdwn", "text": text}},
    ]


class MessagesStub(SlackStub):
    """`SlackStub` that also keeps every posted message with its text (`posted`, updated by
    `chat.update`) and answers `conversations.history` (`latest`, `inclusive`, `limit`) and
    `conversations.replies` (`ts` of a thread's message) from them, shapes from
    https://api.slack.com/methods/conversations.history and …/conversations.replies.
    `thread_replies` are messages only a thread holds (never in the history)."""

    def __init__(self, tokens):
        super().__init__(tokens)
        self.posted: dict[tuple[str, str], dict] = {}
        self.thread_replies: dict[tuple[str, str], dict] = {}

    def answer(self, method, token, params):
        if token in self.tokens and method == "conversations.history":
            latest = params.get("latest")
            found = [
                m
                for (channel, ts), m in sorted(self.posted.items(), reverse=True)
                if channel == params.get("channel") and (latest is None or ts <= latest)
            ]
            return {"ok": True, "messages": found[: int(params.get("limit") or 100)]}
        if token in self.tokens and method == "conversations.replies":
            key = (params.get("channel"), params.get("ts"))
            message = self.thread_replies.get(key) or self.posted.get(key)
            if message is None:
                return {"ok": False, "error": "thread_not_found"}
            return {"ok": True, "messages": [message]}
        body = super().answer(method, token, params)
        if method in ("chat.postMessage", "chat.update") and body.get("ok"):
            blocks = params.get("blocks")
            blocks = json.loads(blocks) if isinstance(blocks, str) else blocks
            self.posted[(body["channel"], body["ts"])] = {
                "type": "message",
                "ts": body["ts"],
                "text": params.get("text", ""),
                "blocks": blocks,
            }
        return body


@pytest.fixture
def slack_stub():
    stub = MessagesStub(tokens={TOKEN: "T0TEAM"}).start()
    with override_settings(CARDLOOP_SLACK_API_BASE_URL=stub.base_url):
        yield stub
    stub.stop()


@pytest.fixture
def slack_api(make_bot, make_api_key, slack_stub):
    """An APIClient of a bot with a Slack app (token `TOKEN`, policy `FULL_POLICY`);
    `slack_api.deliver(**fields)` posts a final Slack answer to `CHANNEL` for `REQUESTER`."""
    from rest_framework.test import APIClient

    bot = make_bot(app_id="cli_slack_answers", policy=FULL_POLICY)
    app = SlackApp.objects.create(bot=bot, app_id="A0ANSWERS")
    services.set_slack_secret(None, app, "bot_token", TOKEN)
    raw, _key = make_api_key(bot)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    client.bot, client.app, client.stub = bot, app, slack_stub
    turns = itertools.count(1)

    def deliver(**fields):
        body = {
            "chat_id": CHANNEL,
            "requester_user_id": REQUESTER,
            "response_kind": "final",
            "session_id": "sess-slack",
            "turn_id": f"turn-{next(turns)}",
            "blocks": answer_blocks(),
            "text": "The answer",
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


def _posts(stub):
    return [params for method, _token, params in stub.calls if method == "chat.postMessage"]


def test_a_final_answer_is_sent_with_the_feedback_area_and_its_ts_recorded(slack_api):
    response = slack_api.deliver()
    assert response.status_code == 201, response.json()
    body = response.json()
    (post,) = _posts(slack_api.stub)
    assert post["channel"] == CHANNEL and post["text"] == "The answer"
    blocks = json.loads(post["blocks"]) if isinstance(post["blocks"], str) else post["blocks"]
    assert blocks[:2] == answer_blocks()
    assert [b["block_id"] for b in blocks[2:]][:3] == ["fb_divider", "fb_status", "fb_buttons"]
    value = json.loads(blocks[4]["elements"][0]["value"])
    assert value == {
        "kind": "feedback",
        "delivery": body["delivery_id"],
        "key": "conclusive_usable",
        "rev": "",
    }
    delivery = Delivery.objects.get(delivery_id=body["delivery_id"])
    assert (delivery.channel, delivery.status) == ("slack", "sent")
    assert delivery.platform_message_id == body["platform_message_id"] == "1700000000.000001"
    assert delivery.requester_open_id == REQUESTER
    assert delivery.policy_snapshot["audience_open_ids"] == [REQUESTER]
    assert delivery.policy_snapshot["chat_id"] == CHANNEL
    assert delivery.feedback_shown and body["feedback_reason"] == "enabled"


def test_the_answer_blocks_and_text_are_never_stored(slack_api):
    blocks = answer_blocks(f"*{SENTINEL}*")
    blocks[0]["text"]["text"] = f"{SENTINEL} title"
    assert slack_api.deliver(blocks=blocks, text=f"{SENTINEL} fallback").status_code == 201
    dump = []
    with connection.cursor() as cur:
        for table in connection.introspection.table_names():
            cur.execute(f'SELECT * FROM "{table}"')  # noqa: S608 - introspected names
            dump.extend(repr(row) for row in cur.fetchall())
    text = "\n".join(dump)
    assert Delivery.objects.get().delivery_id in text  # the dump does hold the delivery
    assert SENTINEL not in text
    assert SENTINEL in json.dumps(_posts(slack_api.stub))  # it did go to Slack


def test_a_retry_of_the_same_turn_sends_nothing_again(slack_api):
    first = slack_api.deliver(turn_id="t-same")
    again = slack_api.deliver(turn_id="t-same")
    assert (first.status_code, again.status_code) == (201, 200)
    assert again.json()["delivery_id"] == first.json()["delivery_id"]
    assert len(_posts(slack_api.stub)) == 1


def test_slacks_refusal_is_502_and_a_retry_sends_again(slack_api):
    services.set_slack_secret(None, slack_api.app, "bot_token", "xoxb-revoked")
    failed = slack_api.deliver(turn_id="t-fail")
    assert failed.status_code == 502
    detail = failed.json()["detail"]
    assert failed.json()["error"] == "send_failed" and detail["slack_error"] == "invalid_auth"
    assert detail["delivery"]["status"] == "send_failed"
    delivery = Delivery.objects.get()
    assert delivery.error_code == "slack_invalid_auth"
    services.set_slack_secret(None, slack_api.app, "bot_token", TOKEN)
    resent = slack_api.deliver(turn_id="t-fail")
    assert resent.status_code == 200 and resent.json()["status"] == "sent"
    delivery.refresh_from_db()
    assert delivery.platform_message_id and delivery.error_code == ""


def test_without_a_bot_token_the_send_is_a_dry_run_with_a_synthetic_ts(slack_api):
    services.clear_slack_secret(None, slack_api.app, "bot_token")
    response = slack_api.deliver()
    assert response.status_code == 201
    assert _posts(slack_api.stub) == []
    assert Delivery.objects.get().platform_message_id.count(".") == 1


def test_progress_answers_get_no_feedback_area(slack_api):
    slack_api.deliver(response_kind="progress")
    (post,) = _posts(slack_api.stub)
    blocks = json.loads(post["blocks"]) if isinstance(post["blocks"], str) else post["blocks"]
    assert blocks == answer_blocks()


@pytest.mark.parametrize(
    ("fields", "field", "message"),
    [
        ({"blocks": "not a list"}, "blocks", "blocks must be a list of Block Kit blocks."),
        (
            {"blocks": [{"type": "section", "text": {"type": "mrkdwn", "text": "x" * 3001}}]},
            "blocks",
            "$.blocks[0].text: 3001 characters; at most 3000",
        ),
        (
            {"blocks": [{"type": "divider", "block_id": "fb_mine"}]},
            "blocks",
            "$.blocks[0].block_id: 'fb_mine' is reserved for Cardloop's feedback area",
        ),
        (
            {"blocks": [{"type": "divider"}] * 47},
            "blocks",
            "With Cardloop's feedback area added: $.blocks: 52 blocks; Slack allows at most 50",
        ),
        (
            {"requester_user_id": ""},
            "requester_user_id",
            "Required: the policy of this chat lets only the requester give feedback.",
        ),
        (
            {"requester_open_id": "ou_x"},
            "requester_open_id",
            "On Slack the requester is requester_user_id (U…).",
        ),
        (
            {"channel": "slack", "blocks": None, "card": {"schema": "2.0"}},
            "card",
            "A Slack message takes blocks (and text), not a Feishu card.",
        ),
        (
            {"channel": "feishu", "card": {"schema": "2.0", "body": {"elements": []}}},
            "blocks",
            "Only a Slack message (channel slack) takes this field.",
        ),
    ],
)
def test_bad_slack_requests_are_400_naming_the_field_and_send_nothing(
    slack_api, fields, field, message
):
    response = slack_api.deliver(**fields)
    assert response.status_code == 400, response.json()
    assert response.json()["error"] == "invalid"
    assert message in response.json()["detail"][field]
    assert _posts(slack_api.stub) == [] and not Delivery.objects.exists()


@pytest.mark.parametrize(("channel", "field"), [(None, "blocks"), ("slack", "channel")])
def test_a_bot_without_a_slack_app_is_told_so_under_the_field_that_chose_slack(
    slack_api, channel, field
):
    slack_api.app.delete()
    response = slack_api.deliver(channel=channel)
    assert response.status_code == 400
    assert response.json()["detail"][field] == [
        "This bot has no Slack app: add one under Slack apps in the admin first."
    ]
    assert not Delivery.objects.exists()


def test_feedback_area_blocks_of_the_sent_message_are_the_renderers(slack_api):
    body = slack_api.deliver().json()
    (post,) = _posts(slack_api.stub)
    blocks = json.loads(post["blocks"]) if isinstance(post["blocks"], str) else post["blocks"]
    delivery = Delivery.objects.get(delivery_id=body["delivery_id"])
    assert blocks[2:] == slack_cards.feedback_area(
        delivery.policy_snapshot, delivery.delivery_id, None
    )


def _slack_card(delivery):
    """The message record the Slack channel keeps for a sent answer (its `send` makes it)."""
    from interactions.models import CardEntity

    return CardEntity.objects.get_or_create(
        bot=delivery.bot,
        send_uuid=delivery.delivery_id,
        defaults={
            "channel": "slack",
            "purpose": "feedback",
            "address": {"channel": CHANNEL, "ts": delivery.platform_message_id},
        },
    )[0]


def test_a_click_queues_a_render_that_reads_the_message_back_and_replaces_only_the_area(
    slack_api,
):
    from feedback import revisions, slack_delivery
    from interactions.models import CardUpdate

    blocks = answer_blocks(f"*{SENTINEL}*")
    body = slack_api.deliver(blocks=blocks, text=f"{SENTINEL} text").json()
    delivery = Delivery.objects.get(delivery_id=body["delivery_id"])
    card = _slack_card(delivery)
    outcome = revisions.record_choice(
        slack_api.bot,
        delivery_id=delivery.delivery_id,
        operator_open_id=REQUESTER,
        verdict_key="incorrect",
        rev="",
        open_message_id=delivery.platform_message_id,
        open_chat_id=CHANNEL,
    )
    assert outcome.code == revisions.RECORDED
    (queued,) = CardUpdate.objects.filter(card=card)
    assert queued.renderer == slack_delivery.RENDERER and queued.card_json is None
    message = slack_delivery.render_update(card)
    delivery.refresh_from_db()
    assert message["text"] == f"{SENTINEL} text"
    assert message["blocks"][:2] == blocks
    assert message["blocks"][2:] == slack_cards.feedback_area(
        delivery.policy_snapshot,
        delivery.delivery_id,
        revisions.feedback_cards.Choice.of(delivery.current_revision),
    )
    assert message["blocks"][3]["text"]["text"] == "已选择：*结论有误*"
    reads = [m for m, _t, _p in slack_api.stub.calls if m.startswith("conversations.")]
    assert reads == ["conversations.history"]


def test_a_thread_reply_is_read_back_from_the_thread(slack_api):
    from feedback import slack_delivery

    body = slack_api.deliver().json()
    delivery = Delivery.objects.get(delivery_id=body["delivery_id"])
    key = (CHANNEL, delivery.platform_message_id)
    stub = slack_api.stub
    stub.thread_replies[key] = {**stub.posted.pop(key), "thread_ts": "1600000000.000001"}
    message = slack_delivery.render_update(_slack_card(delivery))
    assert message["blocks"][:2] == answer_blocks()
    reads = [m for m, _t, _p in stub.calls if m.startswith("conversations.")]
    assert reads == ["conversations.history", "conversations.replies"]


def test_a_deleted_message_or_a_dry_run_needs_no_read_back(slack_api):
    from feedback import slack_delivery

    body = slack_api.deliver().json()
    delivery = Delivery.objects.get(delivery_id=body["delivery_id"])
    slack_api.stub.posted.clear()
    assert slack_delivery.render_update(_slack_card(delivery)) is None
    services.clear_slack_secret(None, slack_api.app, "bot_token")
    dry = slack_delivery.render_update(_slack_card(delivery))
    assert dry == {
        "blocks": slack_cards.feedback_area(delivery.policy_snapshot, delivery.delivery_id, None),
        "text": "",
    }
