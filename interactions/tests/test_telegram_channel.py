"""Telegram as a registered channel, end to end against the loopback Bot API stub through
Cardloop's httpx client: `POST /api/v1/interactions` with `channel: "telegram"` sends the
inline keyboard and records the message; a tap is answered (`answerCallbackQuery`) before the
card worker edits the message to its final state without a keyboard; a 429 is retried no
sooner than Telegram's `retry_after`; timeout = deny; 20 concurrent taps write one revision
(PostgreSQL); a dry run without a token works end to end."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from botadmin import services
from interactions.cardqueue import worker
from interactions.lifecycle import resolve as lifecycle
from interactions.models import CardEntity, CardUpdate, Interaction
from interactions.tests.telegram_helpers import *  # noqa: F403 - the stub fixture
from interactions.tests.telegram_helpers import (
    BOT_ID,
    TOKEN,
    api_client,
    run_worker,
    telegram_bot,
)
from plumbing.workqueue import WorkStatus
from tests import telegram_updates as tu

pytestmark = pytest.mark.django_db(transaction=True)

SECRET = "wh-secret_channel"


@pytest.fixture
def tg(make_bot):
    return telegram_bot(make_bot, "cli_tg_channel", SECRET)


@pytest.fixture
def api(tg, make_api_key):
    return api_client(make_api_key, tg.bot)


def create(api, **overrides):
    body = {
        "kind": "approval",
        "channel": "telegram",
        "chat_id": str(tu.GROUP_CHAT_ID),
        "requester_open_id": str(tu.REQUESTER_ID),
        "session_id": "sess_1",
        "title": "Run a shell command?",
        "body": "rm -rf build/",
        "tool": "bash",
        **overrides,
    }
    resp = api.post("/api/v1/interactions", body, format="json")
    assert resp.status_code == 201, resp.content
    return Interaction.objects.select_related("card").get(
        public_id=resp.json()["interaction"]["id"]
    )


def post(update):
    return Client().post(
        f"/telegram/{BOT_ID}/webhook",
        data=json.dumps(update),
        content_type="application/json",
        HTTP_X_TELEGRAM_BOT_API_SECRET_TOKEN=SECRET,
    )


def tap(ia, n, **kwargs):
    return tu.callback_query(
        f"ia:{ia.public_id}:{n}", message_id=ia.card.address["message_id"], **kwargs
    )


def test_an_approval_is_sent_with_its_inline_keyboard_and_its_message_recorded(stub, api):
    ia = create(api)
    ((method, token, params),) = stub.calls
    assert method == "sendMessage" and token == TOKEN
    assert params["chat_id"] == str(tu.GROUP_CHAT_ID)
    rows = params["reply_markup"]["inline_keyboard"]
    assert [b["callback_data"] for row in rows for b in row] == [
        f"ia:{ia.public_id}:0",
        f"ia:{ia.public_id}:1",
        f"ia:{ia.public_id}:2",
    ]
    assert ia.card.channel == "telegram"
    assert ia.card.address == {"chat_id": str(tu.GROUP_CHAT_ID), "message_id": 1001}


def test_a_tap_is_answered_first_then_the_worker_replaces_the_keyboard_with_the_state(stub, api):
    ia = create(api)
    post(tap(ia, 0))
    assert stub.methods()[-1] == "answerCallbackQuery"
    assert run_worker() == 1
    assert stub.methods() == ["sendMessage", "answerCallbackQuery", "editMessageText"]
    shown = stub.messages[(str(tu.GROUP_CHAT_ID), 1001)]
    assert shown["reply_markup"] is None and "Approved" in shown["text"]


def test_a_429_is_retried_no_sooner_than_telegrams_retry_after(stub, api):
    ia = create(api)
    post(tap(ia, 1))
    stub.rate_limit("editMessageText", retry_after=30)
    before = timezone.now()
    CardEntity.objects.update(next_send_at=before)
    worker.run_due()
    row = CardUpdate.objects.get()
    assert row.status == WorkStatus.PENDING and row.attempts == 1
    card = CardEntity.objects.get(pk=ia.card.pk)
    assert card.next_send_at >= before + timedelta(seconds=30)
    assert worker.run_due() == 0  # not due yet
    run_worker()
    assert CardUpdate.objects.get().status == WorkStatus.DONE
    assert "Denied" in stub.messages[(str(tu.GROUP_CHAT_ID), 1001)]["text"]


def test_timeout_is_deny_and_the_keyboard_goes(stub, api):
    ia = create(api)
    outcome = lifecycle.expire(ia, now=ia.expires_at + timedelta(seconds=1))
    assert outcome.won
    run_worker()
    shown = stub.messages[(str(tu.GROUP_CHAT_ID), 1001)]
    assert shown["reply_markup"] is None and "Expired without an answer: denied." in shown["text"]


def test_a_refused_send_is_a_502_and_the_interaction_is_cancelled(stub, api):
    stub.tokens.clear()  # the token was revoked: Telegram answers 401
    resp = api.post(
        "/api/v1/interactions",
        {
            "kind": "approval",
            "channel": "telegram",
            "chat_id": "2",
            "title": "y",
            "tool": "bash",
            "requester_open_id": "1",
            "session_id": "s",
        },
        format="json",
    )
    assert resp.status_code == 502
    assert resp.json()["detail"]["feishu_code"] == 401
    assert Interaction.objects.get(chat_id="2").status == Interaction.Status.CANCELLED


def test_a_feishu_open_id_is_refused_on_telegram_and_a_number_on_feishu(api):
    resp = api.post(
        "/api/v1/interactions",
        {
            "kind": "approval",
            "channel": "telegram",
            "chat_id": "2",
            "title": "y",
            "tool": "bash",
            "requester_open_id": "ou_abc",
        },
        format="json",
    )
    assert resp.status_code == 400 and "requester_open_id" in resp.json()["detail"]
    resp = api.post(
        "/api/v1/interactions",
        {
            "kind": "approval",
            "channel": "feishu",
            "chat_id": "oc_x",
            "title": "y",
            "tool": "bash",
            "allowed_open_ids": ["4242"],
        },
        format="json",
    )
    assert resp.status_code == 400 and "allowed_open_ids" in resp.json()["detail"]
    assert not Interaction.objects.exists()


def test_without_a_token_the_whole_flow_is_a_dry_run(stub, api, tg):
    services.clear_telegram_secret(None, tg, "bot_token")
    ia = create(api)
    assert ia.card.address["message_id"] < 0
    post(tap(ia, 0))
    assert run_worker() == 1
    ia.refresh_from_db()
    assert ia.status == Interaction.Status.RESOLVED
    assert CardUpdate.objects.get().status == WorkStatus.DONE
    assert stub.calls == []


@pytest.mark.postgres
def test_twenty_concurrent_identical_taps_write_one_resolution_and_one_revision(stub, api):
    from concurrent.futures import ThreadPoolExecutor

    from django.db import connections

    ia = create(api)

    def one(update):
        try:
            return post(update).status_code
        finally:
            connections.close_all()

    with ThreadPoolExecutor(max_workers=20) as pool:
        assert list(pool.map(one, [tap(ia, 0) for _ in range(20)])) == [200] * 20
    ia.refresh_from_db()
    assert ia.status == Interaction.Status.RESOLVED
    assert CardUpdate.objects.count() == 1
    assert run_worker() == 1
    assert stub.methods().count("editMessageText") == 1


def test_a_tap_names_telegram_as_its_channel_so_no_answer_card_goes_anywhere(tg):
    from interactions.callbacks import registry
    from interactions.channels.telegram.ingress import card_action_payload

    update = tu.callback_query("pg:c")
    payload = card_action_payload(update["update_id"], update["callback_query"])
    action = registry.CardAction.from_payload(tg.bot, payload)
    assert action.channel == "telegram"
    assert action.operator_open_id == str(update["callback_query"]["from"]["id"])


def test_dry_run_message_ids_never_repeat_after_a_restart():
    """A dry run's message ids come from the clock, not a counter a restarted process would
    start again (its first send would collide with the message recorded before)."""
    import subprocess
    import sys

    code = (
        "from interactions.channels.telegram import botapi;"
        "print(botapi.dry_run_result('sendMessage', {'chat_id': -100})['message_id'])"
    )
    ids = [
        int(
            subprocess.run(
                [sys.executable, "-c", code], capture_output=True, text=True, check=True
            ).stdout
        )
        for _ in range(2)
    ]
    assert ids[0] < 0 and ids[1] < 0 and ids[0] != ids[1]
