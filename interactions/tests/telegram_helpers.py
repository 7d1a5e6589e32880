"""Shared helpers of the Telegram tests: the loopback Bot API stub (tests/telegram_stub.py)
as a fixture, a Telegram bot with its secrets, a bot API client, and a card-worker pass
with every queued update due."""

from __future__ import annotations

import pytest
from django.test import override_settings
from django.utils import timezone
from rest_framework.test import APIClient

BOT_ID = 123456789
TOKEN = f"{BOT_ID}:AAStubTokenStubTokenStubTokenStub0"


@pytest.fixture
def stub():
    """The loopback Bot API, knowing TOKEN, with Cardloop's client pointed at it."""
    from tests.telegram_stub import TelegramStub

    stub = TelegramStub(tokens={TOKEN: "cl_bot"}).start()
    with override_settings(CARDLOOP_TELEGRAM_API_BASE_URL=stub.base_url):
        yield stub
    stub.stop()


def telegram_bot(make_bot, app_id: str, webhook_secret: str):
    """A bot (`card_language` en) with a Telegram bot BOT_ID whose token is TOKEN."""
    from botadmin import services
    from botadmin.models import TelegramBot

    tg = TelegramBot.objects.create(
        bot=make_bot(app_id=app_id, card_language="en"), bot_user_id=BOT_ID
    )
    services.set_telegram_secret(None, tg, "bot_token", TOKEN)
    services.set_telegram_secret(None, tg, "webhook_secret", webhook_secret)
    return tg


def api_client(make_api_key, bot) -> APIClient:
    """An English bot API client authenticated with a new key of `bot`."""
    raw, _key = make_api_key(bot)
    client = APIClient(HTTP_ACCEPT_LANGUAGE="en")
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    return client


def run_worker() -> int:
    """One card-worker pass with every queued update and every card due now."""
    from interactions.cardqueue import worker
    from interactions.models import CardEntity, CardUpdate

    CardUpdate.objects.update(next_attempt_at=timezone.now())
    CardEntity.objects.update(next_send_at=timezone.now())
    return worker.run_due()


def rerun_every_handler(monkeypatch) -> list[str]:
    """Make the dispatcher run each claimed tap's handler twice: recording the first run's
    answer fails with a transient database error (`ConnectionError`), so `run_claim` tries
    the handler again (as after a database blip). Returns the list of claim ids that failed."""
    from interactions.callbacks import inbound

    finish = inbound.finish_claim
    failed: list[str] = []

    def finish_once(pk, answer):
        if pk not in failed:
            failed.append(pk)
            raise ConnectionError("the database went away")
        return finish(pk, answer)

    monkeypatch.setattr(inbound, "finish_claim", finish_once)
    return failed
