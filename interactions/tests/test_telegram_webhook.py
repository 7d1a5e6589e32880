"""The Telegram webhook, end to end through Django and the dispatcher: the secret-token header
(constant time; wrong or missing → 401 and nothing written), dedupe on `update_id`, a tap on
an inline button resolving an approval (operator = `callback_query.from.id`; in a group only
the requester), `answerCallbackQuery` with the toast in the reader's language, and typed
`/_interaction` commands replied to. Bot API calls go to the loopback stub (tests/telegram_stub.py)
through Cardloop's httpx client; updates follow Telegram's documented shapes
(tests/telegram_updates.py)."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.test import Client, override_settings
from django.utils import timezone

from botadmin import services
from botadmin.models import TelegramBot
from feedback.models import Event
from interactions.models import InboundEvent, Interaction
from interactions.render.interaction_cards import approval_actions
from tests import telegram_updates as tu
from tests.telegram_stub import TelegramStub

pytestmark = pytest.mark.django_db(transaction=True)

BOT_ID = 123456789
TOKEN = f"{BOT_ID}:AAStubTokenStubTokenStubTokenStub0"
SECRET = "wh-secret_0123456789"
URL = f"/telegram/{BOT_ID}/webhook"


@pytest.fixture
def stub():
    stub = TelegramStub(tokens={TOKEN: "cl_bot"}).start()
    with override_settings(CARDLOOP_TELEGRAM_API_BASE_URL=stub.base_url):
        yield stub
    stub.stop()


@pytest.fixture
def tg(make_bot):
    tg = TelegramBot.objects.create(bot=make_bot(app_id="cli_tg_hook"), bot_user_id=BOT_ID)
    services.set_telegram_secret(None, tg, "bot_token", TOKEN)
    services.set_telegram_secret(None, tg, "webhook_secret", SECRET)
    tg.refresh_from_db()
    return tg


@pytest.fixture
def approval(tg):
    """A pending approval shown in the Telegram group (not sent: the webhook does not need the
    message, and a tap's message edit is the card queue's)."""
    now = timezone.now()
    return Interaction.objects.create(
        public_id="ia_00000000000000aa",
        bot=tg.bot,
        kind=Interaction.Kind.APPROVAL,
        channel="telegram",
        chat_id=str(tu.GROUP_CHAT_ID),
        requester_open_id=str(tu.REQUESTER_ID),
        title="Run a shell command?",
        tool="bash",
        always_scope="session",
        session_id="sess_1",
        actions=approval_actions(),
        expires_at=now + timedelta(minutes=5),
    )


def post(update: dict, secret: str | None = SECRET, client: Client | None = None):
    headers = {} if secret is None else {"HTTP_X_TELEGRAM_BOT_API_SECRET_TOKEN": secret}
    return (client or Client()).post(
        URL, data=json.dumps(update), content_type="application/json", **headers
    )


def tap(ia: Interaction, n: int, **kwargs) -> dict:
    return tu.callback_query(f"ia:{ia.public_id}:{n}", **kwargs)


@pytest.mark.parametrize("secret", [None, "", "wrong-secret", SECRET + "x", SECRET.upper()])
def test_a_missing_or_wrong_secret_token_is_401_and_nothing_is_written(stub, tg, approval, secret):
    resp = post(tap(approval, 0), secret=secret)
    assert resp.status_code == 401
    assert resp.json()["error"] == "unauthorized"
    assert resp.json()["field"] == "X-Telegram-Bot-Api-Secret-Token"
    assert not InboundEvent.objects.exists()
    approval.refresh_from_db()
    assert approval.status == Interaction.Status.PENDING
    assert stub.calls == []


def test_a_bot_without_a_stored_webhook_secret_accepts_no_update(stub, tg, approval):
    services.clear_telegram_secret(None, tg, "webhook_secret")
    assert post(tap(approval, 0), secret="").status_code == 401
    assert post(tap(approval, 0), secret=SECRET).status_code == 401
    assert not InboundEvent.objects.exists()


def test_an_unknown_bot_id_is_404_and_a_malformed_update_400_naming_the_field(stub, tg):
    resp = Client().post("/telegram/999/webhook", data="{}", content_type="application/json")
    assert resp.status_code == 404 and resp.json()["field"] == "bot_id"
    bad = Client().post(
        URL,
        data="not json",
        content_type="application/json",
        HTTP_X_TELEGRAM_BOT_API_SECRET_TOKEN=SECRET,
    )
    assert bad.status_code == 400 and bad.json()["field"] == "body"
    resp = post({"update_id": "7", "message": {}})
    assert resp.status_code == 400 and resp.json()["field"] == "update_id"


def test_the_requesters_tap_on_approve_resolves_it_and_the_query_is_answered_with_a_toast(
    stub, tg, approval
):
    resp = post(tap(approval, 0))
    assert resp.status_code == 200 and resp.json() == {}
    approval.refresh_from_db()
    assert approval.status == Interaction.Status.RESOLVED
    assert approval.resolution["action_id"] == "approve"
    assert approval.resolution["operator"] == str(tu.REQUESTER_ID)
    assert approval.resolution["via"] == "card"
    (answer,) = [c for c in stub.calls if c[0] == "answerCallbackQuery"]
    assert answer[2]["text"] and "Approved" in answer[2]["text"]


def test_the_toast_is_in_the_readers_language(stub, tg, approval):
    post(tap(approval, 1, language_code="zh-hans"))
    (answer,) = [c for c in stub.calls if c[0] == "answerCallbackQuery"]
    assert any("\u4e00" <= ch <= "\u9fff" for ch in answer[2]["text"])


def test_in_a_group_another_members_tap_is_refused_and_nothing_is_written(stub, tg, approval):
    post(tap(approval, 0, from_id=tu.OTHER_ID))
    approval.refresh_from_db()
    assert approval.status == Interaction.Status.PENDING
    (answer,) = [c for c in stub.calls if c[0] == "answerCallbackQuery"]
    assert answer[2]["text"]


def test_a_tap_from_another_chat_is_refused(stub, tg, approval):
    post(tap(approval, 0, chat_id=-100999))
    approval.refresh_from_db()
    assert approval.status == Interaction.Status.PENDING


def test_a_repeated_update_id_is_handled_once(stub, tg, approval):
    update = tap(approval, 1)
    assert post(update).status_code == 200
    assert post(update).status_code == 200
    approval.refresh_from_db()
    assert approval.resolution["action_id"] == "deny"
    assert InboundEvent.objects.filter(event_id=f"tg:{update['update_id']}").count() == 1
    assert Event.objects.filter(type="interaction.resolved").count() == 1


def test_a_button_that_is_not_cardloops_gets_a_warning_toast(stub, tg, approval):
    post(tu.callback_query('{"kind": "interaction"}'))
    (answer,) = [c for c in stub.calls if c[0] == "answerCallbackQuery"]
    assert "understands" in answer[2]["text"]
    approval.refresh_from_db()
    assert approval.status == Interaction.Status.PENDING


def test_a_typed_command_resolves_it_and_is_replied_to(stub, tg, approval):
    resp = post(tu.text_message(f"/_interaction {approval.public_id} approve"))
    assert resp.status_code == 200
    approval.refresh_from_db()
    assert approval.status == Interaction.Status.RESOLVED
    assert approval.resolution["via"] == "text"
    (reply,) = [c for c in stub.calls if c[0] == "sendMessage"]
    assert reply[2]["chat_id"] == tu.GROUP_CHAT_ID and reply[2]["reply_parameters"]


def test_other_messages_are_acknowledged_and_ignored(stub, tg, approval):
    assert post(tu.text_message("hello there")).status_code == 200
    assert post({"update_id": 5, "edited_message": {}}).status_code == 200
    assert [c for c in stub.calls if c[0] == "sendMessage"] == []


def test_without_a_token_the_answer_is_a_dry_run_and_the_tap_still_counts(stub, tg, approval):
    services.clear_telegram_secret(None, tg, "bot_token")
    assert post(tap(approval, 0)).status_code == 200
    approval.refresh_from_db()
    assert approval.status == Interaction.Status.RESOLVED
    assert stub.calls == []


def _concurrently(updates: list[dict]) -> list[int]:
    from concurrent.futures import ThreadPoolExecutor

    from django.db import connections

    def one(update):
        try:
            return post(update).status_code
        finally:
            connections.close_all()

    with ThreadPoolExecutor(max_workers=len(updates)) as pool:
        return list(pool.map(one, updates))


@pytest.mark.postgres
def test_twenty_concurrent_taps_on_one_button_resolve_it_once(stub, tg, approval):
    statuses = _concurrently([tap(approval, 0) for _ in range(20)])
    assert statuses == [200] * 20
    approval.refresh_from_db()
    assert approval.status == Interaction.Status.RESOLVED
    assert Event.objects.filter(type="interaction.resolved").count() == 1
    assert len([c for c in stub.calls if c[0] == "answerCallbackQuery"]) == 20


@pytest.mark.postgres
def test_twenty_concurrent_deliveries_of_one_update_are_handled_once(stub, tg, approval):
    update = tap(approval, 2)
    assert _concurrently([update] * 20) == [200] * 20
    approval.refresh_from_db()
    assert approval.resolution["action_id"] == "always"
    assert InboundEvent.objects.filter(event_id=f"tg:{update['update_id']}").count() == 1
    assert Event.objects.filter(type="interaction.resolved").count() == 1


def test_a_message_whose_handler_finds_the_database_gone_is_refused_503_then_handled_again(
    stub, tg, register_card_handler
):
    """Telegram delivers an update again until it gets a 2xx: a message that could not be
    recorded is answered 503, its claim let go, and the redelivery is handled."""
    import sqlite3

    from interactions.channels.telegram import handlers
    from interactions.models import InboundEvent

    runs = []

    def flaky(event):
        runs.append(event.event_id)
        if len(runs) == 1:
            raise sqlite3.OperationalError("database is locked")

    register_card_handler.event(handlers.MESSAGE_EVENT, flaky)
    update = tu.text_message("hello there")
    first = post(update)
    assert first.status_code == 503 and first.json()["error"] == "database_unavailable"
    assert first["Retry-After"] == "2"
    assert InboundEvent.objects.count() == 0  # the claim was let go
    again = post(update)  # Telegram's redelivery: the same update_id
    assert again.status_code == 200 and len(runs) == 2
    assert InboundEvent.objects.count() == 1
    assert post(update).status_code == 200 and len(runs) == 2  # now a duplicate
