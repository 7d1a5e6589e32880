"""Slack's request URLs through the real ASGI app (`cardloop.asgi.application`), signed with
slack-sdk's `SignatureVerifier`, messages sent and updated through the real slack-sdk client
against the loopback stub: a verified click resolves the interaction, the update goes out with
`chat.update` after the answer and the clicker is told through `response_url`; every refused
request (wrong, missing or re-serialised signature, stale timestamp, another app's secret) is
a JSON 401/400 with nothing written; a retried event and a repeated click run once."""

from __future__ import annotations

import json
from datetime import timedelta
from urllib.parse import urlencode

import pytest
from asgiref.sync import async_to_sync
from channels.testing import HttpCommunicator
from django.utils import timezone, translation

from interactions.approvals import service as approvals
from interactions.cardqueue import worker as cardworker
from interactions.models import CardEntity, CardUpdate, InboundEvent, Interaction
from interactions.tests.ia_helpers import make_interaction  # noqa: F401 - fixture
from interactions.tests.slack_helpers import *  # noqa: F403
from interactions.tests.slack_helpers import (
    APP_ID,
    CHAT,
    OTHER_SECRET,
    OTHER_USER,
    REQUESTER,
    click_payload,
    fixture,
    form_body,
    sign,
)
from plumbing.workqueue import WorkStatus

pytestmark = pytest.mark.django_db(transaction=True)
S = Interaction.Status


async def _request(path: str, body: bytes, headers: dict, content_type: str):
    from cardloop.asgi import application

    sent = {"Host": "testserver", "Content-Type": content_type, **headers}
    communicator = HttpCommunicator(
        application,
        "POST",
        path,
        body=body,
        headers=[
            (k.lower().encode(), v if isinstance(v, bytes) else str(v).encode())
            for k, v in sent.items()
        ],
    )
    response = await communicator.get_response(timeout=10)
    await communicator.wait(timeout=10)
    return response["status"], json.loads(response["body"] or b"{}")


def post_interactivity(body: bytes, headers: dict, app_id: str = APP_ID):
    return async_to_sync(_request)(
        f"/slack/{app_id}/interactivity", body, headers, "application/x-www-form-urlencoded"
    )


def post_event(body: bytes, headers: dict, app_id: str = APP_ID):
    return async_to_sync(_request)(f"/slack/{app_id}/events", body, headers, "application/json")


def drain():
    CardUpdate.objects.filter(status=WorkStatus.PENDING).update(
        next_attempt_at=timezone.now() - timedelta(seconds=1)
    )
    CardEntity.objects.update(next_send_at=timezone.now() - timedelta(seconds=1))
    return cardworker.run_due(10)


@pytest.fixture
def sent_approval(slack_app, slack_stub, make_interaction):  # noqa: F811
    ia = make_interaction(slack_app.bot, channel="slack", chat_id=CHAT, requester_open_id=REQUESTER)
    ia = approvals.send_to_chat(ia)
    return Interaction.objects.select_related("card").get(pk=ia.pk)


def test_sending_an_approval_posts_block_kit_and_records_the_slack_address(
    sent_approval, slack_stub
):
    method, token, params = slack_stub.calls[-1]
    assert method == "chat.postMessage" and params["channel"] == CHAT
    card = sent_approval.card
    assert card.channel == "slack" and card.address["channel"] == CHAT
    assert slack_stub.messages[(CHAT, card.address["ts"])]  # the blocks it holds


def test_a_signed_click_resolves_then_updates_with_chat_update_and_tells_the_clicker(
    sent_approval, slack_stub
):
    payload = click_payload(
        sent_approval, sent_approval.card, "approve", response_url=slack_stub.response_url("r1")
    )
    body = form_body(payload)
    status, answer = post_interactivity(body, sign(body))
    assert (status, answer) == (200, {})
    ia = Interaction.objects.get(pk=sent_approval.pk)
    assert ia.status == S.RESOLVED and ia.resolution["operator"] == REQUESTER
    assert drain() == 1
    method, _token, params = slack_stub.calls[-1]
    assert method == "chat.update" and params["ts"] == sent_approval.card.address["ts"]
    updated = slack_stub.messages[(CHAT, params["ts"])]
    assert "actions" not in [b["type"] for b in updated]  # the buttons are gone
    with translation.override("zh-hans"):
        approved = str(approvals.success_message(approvals.Outcome(True, ia)))
    assert slack_stub.responses == [
        ("r1", {"text": approved, "response_type": "ephemeral", "replace_original": False})
    ]


def test_someone_else_clicking_is_told_ephemerally_and_nothing_is_resolved(
    sent_approval, slack_stub
):
    payload = click_payload(
        sent_approval,
        sent_approval.card,
        "approve",
        user=OTHER_USER,
        response_url=slack_stub.response_url("r2"),
    )
    body = form_body(payload)
    assert post_interactivity(body, sign(body)) == (200, {})
    assert Interaction.objects.get(pk=sent_approval.pk).status == S.PENDING
    assert [key for key, _body in slack_stub.responses] == ["r2"]


def test_the_same_click_delivered_twice_resolves_once(sent_approval, slack_stub):
    body = form_body(click_payload(sent_approval, sent_approval.card, "deny"))
    assert post_interactivity(body, sign(body))[0] == 200
    assert post_interactivity(body, sign(body))[0] == 200
    assert InboundEvent.objects.count() == 1
    ia = Interaction.objects.get(pk=sent_approval.pk)
    assert ia.status == S.RESOLVED and ia.resolution["action_id"] == "deny"


def _refused_without_writes(status_answer, status, code, ia):
    got_status, answer = status_answer
    assert (got_status, answer["error"]) == (status, code)
    assert InboundEvent.objects.count() == 0
    assert Interaction.objects.get(pk=ia.pk).status == S.PENDING
    assert CardUpdate.objects.count() == 0


def test_a_wrong_signature_is_refused_401_and_nothing_is_written(sent_approval):
    body = form_body(click_payload(sent_approval, sent_approval.card, "approve"))
    headers = sign(body)
    headers["X-Slack-Signature"] = "v0=" + "0" * 64
    _refused_without_writes(post_interactivity(body, headers), 401, "bad_signature", sent_approval)


def test_a_missing_signature_is_refused_401_and_nothing_is_written(sent_approval):
    body = form_body(click_payload(sent_approval, sent_approval.card, "approve"))
    headers = sign(body)
    del headers["X-Slack-Signature"]
    _refused_without_writes(post_interactivity(body, headers), 401, "bad_signature", sent_approval)


def test_a_signature_over_re_serialised_json_is_refused(sent_approval):
    payload = click_payload(sent_approval, sent_approval.card, "approve")
    signed_body = form_body(payload)
    from urllib.parse import urlencode

    sent_body = urlencode({"payload": json.dumps(payload, separators=(",", ":"))}).encode()
    assert sent_body != signed_body
    result = post_interactivity(sent_body, sign(signed_body))
    _refused_without_writes(result, 401, "bad_signature", sent_approval)


def test_a_stale_timestamp_is_refused_even_when_correctly_signed(sent_approval):
    body = form_body(click_payload(sent_approval, sent_approval.card, "approve"))
    old = int(timezone.now().timestamp()) - 6 * 60
    _refused_without_writes(
        post_interactivity(body, sign(body, timestamp=old)), 401, "stale_request", sent_approval
    )


def test_a_request_signed_with_another_apps_secret_is_refused(sent_approval):
    body = form_body(click_payload(sent_approval, sent_approval.card, "approve"))
    _refused_without_writes(
        post_interactivity(body, sign(body, secret=OTHER_SECRET)),
        401,
        "bad_signature",
        sent_approval,
    )


def test_a_malformed_timestamp_or_body_is_refused_400(sent_approval):
    body = form_body(click_payload(sent_approval, sent_approval.card, "approve"))
    headers = sign(body)
    headers["X-Slack-Request-Timestamp"] = "yesterday"
    _refused_without_writes(post_interactivity(body, headers), 400, "bad_timestamp", sent_approval)
    junk = b"payload=%7Bnot-json"
    _refused_without_writes(post_interactivity(junk, sign(junk)), 400, "bad_payload", sent_approval)


def test_an_unknown_app_is_refused_404(sent_approval):
    body = form_body(click_payload(sent_approval, sent_approval.card, "approve"))
    _refused_without_writes(
        post_interactivity(body, sign(body), app_id="A0NOSUCH"), 404, "unknown_app", sent_approval
    )


def test_a_view_submission_is_acknowledged_and_changes_nothing(sent_approval):
    body = form_body(fixture("view_submission"))
    assert post_interactivity(body, sign(body)) == (200, {})
    assert Interaction.objects.get(pk=sent_approval.pk).status == S.PENDING


def test_url_verification_echoes_the_challenge(slack_app):
    body = json.dumps(fixture("url_verification")).encode()
    status, answer = post_event(body, sign(body))
    assert (status, answer) == (200, {"challenge": fixture("url_verification")["challenge"]})


def test_a_typed_command_resolves_and_is_answered_once_even_when_slack_retries(
    sent_approval, slack_stub
):
    event = fixture("message")
    event["event"]["text"] = f"/_interaction {sent_approval.public_id} approve"
    body = json.dumps(event).encode()
    assert post_event(body, sign(body)) == (200, {})
    retried = {**sign(body), "X-Slack-Retry-Num": "1", "X-Slack-Retry-Reason": "http_timeout"}
    assert post_event(body, retried) == (200, {})
    ia = Interaction.objects.get(pk=sent_approval.pk)
    assert ia.status == S.RESOLVED and ia.resolution["operator"] == REQUESTER
    replies = [c for c in slack_stub.calls if c[0] == "chat.postMessage" and c[2].get("thread_ts")]
    assert len(replies) == 1 and replies[0][2]["thread_ts"] == event["event"]["ts"]
    assert InboundEvent.objects.filter(event_id="Ev0MESSAGE01").count() == 1


def test_a_refused_event_writes_nothing(sent_approval):
    event = fixture("message")
    event["event"]["text"] = f"/_interaction {sent_approval.public_id} approve"
    body = json.dumps(event).encode()
    _refused_without_writes(
        post_event(body, sign(body, secret=OTHER_SECRET)), 401, "bad_signature", sent_approval
    )


def test_the_ephemeral_message_follows_the_clickers_slack_locale_looked_up_once(
    sent_approval, slack_stub
):
    slack_stub.locales[OTHER_USER] = "en-US"  # the bot's cards are in Chinese

    def click(key):
        payload = click_payload(
            sent_approval,
            sent_approval.card,
            "approve",
            user=OTHER_USER,
            response_url=slack_stub.response_url(key),
        )
        payload["actions"][0]["action_ts"] = f"1700000100.00000{key[-1]}"
        body = form_body(payload)
        assert post_interactivity(body, sign(body)) == (200, {})

    click("e1")
    click("e2")
    texts = [body["text"] for _key, body in slack_stub.responses]
    assert len(texts) == 2 and texts[0] == texts[1]
    assert texts[0].isascii() and texts[0]  # English, not the bot's Chinese
    lookups = [p for m, _t, p in slack_stub.calls if m == "users.info"]
    assert [p["user"] for p in lookups] == [OTHER_USER]  # once per person and process
    assert lookups[0]["include_locale"] in ("1", "true", "True")


def test_a_clicker_whose_locale_slack_does_not_tell_gets_the_bots_language(
    sent_approval, slack_stub
):
    payload = click_payload(
        sent_approval,
        sent_approval.card,
        "approve",
        user=OTHER_USER,
        response_url=slack_stub.response_url("z1"),
    )
    body = form_body(payload)
    assert post_interactivity(body, sign(body)) == (200, {})
    ((_key, told),) = slack_stub.responses
    assert not told["text"].isascii()  # the bot's card language (Chinese)


@pytest.mark.parametrize(
    "timestamp",
    [b"\xb2", "9" * 5000, "\u0661\u0662"],  # latin-1 superscript two, huge, Arabic-Indic digits
    ids=["superscript", "5000_digits", "other_digits"],
)
def test_a_timestamp_of_other_digits_or_thousands_of_them_is_refused_400(sent_approval, timestamp):
    body = form_body(click_payload(sent_approval, sent_approval.card, "approve"))
    headers = {**sign(body), "X-Slack-Request-Timestamp": timestamp}
    _refused_without_writes(post_interactivity(body, headers), 400, "bad_timestamp", sent_approval)


def test_a_body_that_is_not_utf8_is_refused_400_on_both_urls(sent_approval):
    body = b"payload=\xff\xfe"
    headers = {**sign(b""), "X-Slack-Signature": "v0=" + "0" * 64}
    _refused_without_writes(post_interactivity(body, headers), 400, "bad_payload", sent_approval)
    status, answer = post_event(body, headers)
    assert (status, answer["error"]) == (400, "bad_payload")


@pytest.mark.parametrize(
    "change",
    [
        {"user": "U0STRING"},
        {"team": ["T0"]},
        {"container": ["x"]},
        {"state": {"values": ["x"]}},
        {"actions": {"action_id": "approve"}},
        {"user": {"id": "U\ud800"}},
    ],
    ids=["user_str", "team_list", "container_list", "values_list", "actions_dict", "surrogate"],
)
def test_a_signed_payload_slack_would_never_send_is_refused_400(sent_approval, change):
    payload = {**click_payload(sent_approval, sent_approval.card, "approve"), **change}
    body = urlencode({"payload": json.dumps(payload)}).encode()
    _refused_without_writes(post_interactivity(body, sign(body)), 400, "bad_payload", sent_approval)


def test_deeply_nested_json_on_the_events_url_is_refused_400(slack_app):
    body = b'{"a": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    status, answer = post_event(body, sign(body))
    assert (status, answer["error"]) == (400, "bad_payload")
    assert InboundEvent.objects.count() == 0


def test_a_body_over_the_upload_limit_is_a_413_json_refusal(sent_approval, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1024
    body = (
        form_body(click_payload(sent_approval, sent_approval.card, "approve"))
        + b"&x="
        + (b"y" * 4096)
    )
    _refused_without_writes(post_interactivity(body, sign(body)), 413, "too_large", sent_approval)
