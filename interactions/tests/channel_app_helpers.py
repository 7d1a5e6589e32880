"""Slack apps and Telegram bots side by side, for the tests of what their admins share
(`test_channel_app_admins.py`) and of each channel (`test_slack_apps.py`,
`test_telegram_bots.py`): one `Channel` description each, `running_stub(channel)` (its loopback
stub, with the client's base URL setting pointed at it) and the `staff` fixture (an admin
client reading English)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import pytest
from django.test import override_settings

from botadmin.models import SlackApp, TelegramBot
from tests.slack_stub import SlackStub
from tests.telegram_stub import TelegramStub

SLACK_TOKEN = "xoxb-stub-token-1"
TG_BOT_ID = 123456789
TG_TOKEN = f"{TG_BOT_ID}:AAStubTokenStubTokenStubTokenStub0"


@dataclass(frozen=True)
class Channel:
    model: type
    #: the admin's URL name part (`admin:botadmin_<admin>_add`).
    admin: str
    #: the field naming the platform's app / bot, and a value of it.
    id_field: str
    id_value: object
    token: str
    #: a second secret and a value the platform accepts.
    other_secret: str
    other_value: str
    #: the message "check connection" shows on success, and the method it calls.
    connected: str
    check_method: str
    base_url_setting: str
    start_stub: Callable[[], object]
    #: the base URL of a loopback port nothing listens on.
    unreachable_url: Callable[[int], str]

    def create(self, make_bot):
        return self.model.objects.create(
            bot=make_bot(app_id=f"cli_{self.admin}"), **{self.id_field: self.id_value}
        )


SLACK = Channel(
    model=SlackApp,
    admin="slackapp",
    id_field="app_id",
    id_value="A0SLACK1",
    token=SLACK_TOKEN,
    other_secret="signing_secret",
    other_value="8f742231b10e8888abcd99yyyzzz85a5",
    connected="connected to workspace T0TEAM as U0BOT",
    check_method="auth.test",
    base_url_setting="CARDLOOP_SLACK_API_BASE_URL",
    start_stub=lambda: SlackStub(tokens={SLACK_TOKEN: "T0TEAM"}).start(),
    unreachable_url=lambda port: f"http://127.0.0.1:{port}/api/",
)
TELEGRAM = Channel(
    model=TelegramBot,
    admin="telegrambot",
    id_field="bot_user_id",
    id_value=TG_BOT_ID,
    token=TG_TOKEN,
    other_secret="webhook_secret",
    other_value="s3cr-t_x",
    connected="connected as @cardloop_stub_bot",
    check_method="getMe",
    base_url_setting="CARDLOOP_TELEGRAM_API_BASE_URL",
    start_stub=lambda: TelegramStub(tokens={TG_TOKEN: "cardloop_stub_bot"}).start(),
    unreachable_url=lambda port: f"http://127.0.0.1:{port}",
)


@contextmanager
def running_stub(channel: Channel) -> Iterator:
    """`channel`'s loopback stub, started, with its base URL setting pointing at it."""
    stub = channel.start_stub()
    with override_settings(**{channel.base_url_setting: stub.base_url}):
        yield stub
    stub.stop()


@pytest.fixture
def staff(admin_client):
    admin_client.defaults["HTTP_ACCEPT_LANGUAGE"] = "en"
    return admin_client
