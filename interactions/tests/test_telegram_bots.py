"""Telegram bots per Cardloop bot: the secrets only Telegram checks, the "set webhook"
(`setWebhook` with `secret_token`) action, the zh-hans admin, and the Bot API adapter
(Cardloop's httpx client against the loopback stub): dry run without a token, 429
`retry_after` surfaced as a retryable error. Secrets and the "check connection" action, shared
with Slack apps: `test_channel_app_admins.py`."""

from __future__ import annotations

import logging

import pytest
from django.urls import reverse

from botadmin import services
from botadmin.models import AuditEntry, TelegramBot
from interactions.channels.telegram import botapi
from interactions.tests import channel_app_helpers
from interactions.tests.channel_app_helpers import TELEGRAM, TG_BOT_ID, running_stub

staff = channel_app_helpers.staff  # the fixture

BOT_ID = TG_BOT_ID
TOKEN = TELEGRAM.token


@pytest.fixture
def stub():
    with running_stub(TELEGRAM) as stub:
        yield stub


@pytest.fixture
def tg(make_bot):
    return TelegramBot.objects.create(bot=make_bot(app_id="cli_tg_bot"), bot_user_id=BOT_ID)


def test_a_token_of_another_bot_or_a_webhook_secret_telegram_refuses_is_not_stored(tg):
    with pytest.raises(ValueError, match="does not belong"):
        services.set_telegram_secret(None, tg, "bot_token", "987:AAother")
    with pytest.raises(ValueError, match="A-Z a-z 0-9"):
        services.set_telegram_secret(None, tg, "webhook_secret", "has space")
    with pytest.raises(ValueError, match="unknown Telegram secret"):
        services.set_telegram_secret(None, tg, "app_secret", "x")
    tg.refresh_from_db()
    assert not tg.has_secret("bot_token") and not tg.has_secret("webhook_secret")


def test_check_connection_calls_getme_with_the_stored_token(stub, tg):
    services.set_telegram_secret(None, tg, "bot_token", TOKEN)
    tg.refresh_from_db()
    result = botapi.check_connection(tg.secret("bot_token"), stub.base_url)
    assert result.ok and result.bot_user_id == BOT_ID and result.username == "cardloop_stub_bot"
    assert stub.calls == [("getMe", TOKEN, {})]


def test_check_connection_reports_telegrams_refusal_of_a_wrong_token(stub):
    result = botapi.check_connection(f"{BOT_ID}:wrong", stub.base_url)
    assert not result.ok and result.error == "Unauthorized"


def test_without_a_token_nothing_is_called_and_the_log_names_neither_token_nor_text(stub, caplog):
    with caplog.at_level(logging.INFO, logger="cardloop.telegram"):
        assert botapi.check_connection("", stub.base_url).dry_run
        sent = botapi.send_message("", 42, "the secret question text", None, stub.base_url)
        again = botapi.send_message("", 42, "another", None, stub.base_url)
    assert sent["dry_run"] and sent["message_id"] < 0 and again["message_id"] != sent["message_id"]
    assert "sendMessage" in caplog.text and "secret question" not in caplog.text
    assert stub.calls == []


def test_a_429_is_a_retryable_error_carrying_telegrams_retry_after(stub):
    stub.rate_limit("sendMessage", retry_after=7)
    with pytest.raises(botapi.TelegramApiError) as err:
        botapi.send_message(TOKEN, 42, "hi", None, stub.base_url)
    assert err.value.error_code == 429 and err.value.retryable and err.value.retry_after == 7
    assert TOKEN not in str(err.value)
    sent = botapi.send_message(TOKEN, 42, "hi", None, stub.base_url)
    assert sent["message_id"] > 0


def test_a_refused_message_is_a_permanent_error_and_a_transport_failure_a_retryable_one(stub):
    with pytest.raises(botapi.TelegramApiError) as err:
        botapi.send_message(TOKEN, 42, "x" * 4097, None, stub.base_url)
    assert err.value.error_code == 400 and not err.value.retryable
    with pytest.raises(botapi.TelegramApiError) as err:
        botapi.send_message(TOKEN, 42, "hi", None, "http://127.0.0.1:9")
    assert err.value.error_code == -1 and err.value.retryable and TOKEN not in str(err.value)


def test_admin_form_names_the_field_of_a_token_of_another_bot(staff, make_bot):
    bot = make_bot(app_id="cli_tg_other")
    resp = staff.post(
        reverse("admin:botadmin_telegrambot_add"),
        {"bot": bot.pk, "bot_user_id": BOT_ID, "bot_token": "5:AAother"},
    )
    assert resp.status_code == 200
    assert "bot_token" in resp.context["adminform"].form.errors
    assert not TelegramBot.objects.exists()


def test_admin_set_webhook_generates_a_secret_and_passes_it_as_secret_token(
    staff, stub, tg, settings
):
    settings.CARDLOOP_PUBLIC_URL = "https://cardloop.example.com"
    services.set_telegram_secret(None, tg, "bot_token", TOKEN)
    resp = staff.post(
        reverse("admin:botadmin_telegrambot_changelist"),
        {"action": "set_webhook", "_selected_action": [tg.pk]},
        follow=True,
    )
    tg.refresh_from_db()
    secret = tg.secret("webhook_secret")
    assert secret and stub.webhook["secret_token"] == secret
    url = f"https://cardloop.example.com/telegram/{BOT_ID}/webhook"
    assert stub.webhook["url"] == url
    page = resp.content.decode()
    assert url in page and secret not in page
    assert AuditEntry.objects.filter(action="secret.set", after={"webhook_secret": "set"}).exists()


def test_admin_actions_without_a_token_say_dry_run_and_call_nothing(staff, stub, tg):
    for action in ("check_connection", "set_webhook"):
        resp = staff.post(
            reverse("admin:botadmin_telegrambot_changelist"),
            {"action": action, "_selected_action": [tg.pk]},
            follow=True,
        )
        assert "dry run" in resp.content.decode()
    assert stub.calls == []


def test_the_admin_speaks_zh_hans(staff, tg):
    staff.defaults["HTTP_ACCEPT_LANGUAGE"] = "zh-hans"
    page = staff.get(reverse("admin:botadmin_telegrambot_change", args=[tg.pk])).content.decode()
    assert "Telegram 机器人 ID" in page and "Webhook 密钥" in page
    resp = staff.post(
        reverse("admin:botadmin_telegrambot_changelist"),
        {"action": "check_connection", "_selected_action": [tg.pk]},
        follow=True,
    )
    assert "未设置机器人令牌，试运行" in resp.content.decode()


def test_a_dry_run_never_logs_a_private_chats_id_which_is_the_persons_id(caplog):
    with caplog.at_level(logging.INFO, logger="cardloop.telegram"):
        botapi.send_message("", 4242, "hi")
        botapi.send_message("", -1001234, "hi")
    assert "4242" not in caplog.text and "-1001234" in caplog.text
