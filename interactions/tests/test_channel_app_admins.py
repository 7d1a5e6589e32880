"""What Slack apps and Telegram bots share (one implementation: `botadmin.services.set_secret` /
`clear_secret` and `botadmin.admin.WriteOnlySecretsAdmin`), once per channel: write-only 0600
secrets audited as set/not set, the admin form that never renders them back, and the "check
connection" action through the real clients against the loopback stubs (connected, dry run,
unreachable). What only one channel has stays in `test_slack_apps.py` / `test_telegram_bots.py`."""

from __future__ import annotations

import os
import socket
import stat
from collections.abc import Callable
from dataclasses import dataclass

import pytest
from django.test import override_settings
from django.urls import reverse

from botadmin import services
from botadmin.models import AuditEntry, SlackApp, TelegramBot
from plumbing.secretstore import _path
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


@pytest.fixture(params=[SLACK, TELEGRAM], ids=["slack", "telegram"])
def channel(request) -> Channel:
    return request.param


@pytest.fixture
def stub(channel):
    stub = channel.start_stub()
    with override_settings(**{channel.base_url_setting: stub.base_url}):
        yield stub
    stub.stop()


@pytest.fixture
def staff(admin_client):
    admin_client.defaults["HTTP_ACCEPT_LANGUAGE"] = "en"
    return admin_client


@pytest.fixture
def obj(channel, make_bot):
    return channel.create(make_bot)


@pytest.mark.parametrize("which", ["token", "other"])
def test_secrets_are_0600_files_and_the_audit_records_only_set_or_not_set(channel, obj, which):
    name, value = (
        ("bot_token", channel.token)
        if which == "token"
        else (channel.other_secret, channel.other_value)
    )
    services.set_secret(None, obj, name, f"  {value}  ")
    obj.refresh_from_db()
    assert obj.secret(name) == value
    ref = getattr(obj, obj.SECRET_FIELDS[name])
    assert stat.S_IMODE(os.stat(_path(ref)).st_mode) == 0o600
    entry = AuditEntry.objects.get(action="secret.set", target_id=str(obj.pk))
    assert entry.before == {name: "not set"} and entry.after == {name: "set"}
    assert value[-8:] not in str(entry.before) + str(entry.after)


def test_clearing_a_secret_removes_its_file(channel, obj, django_capture_on_commit_callbacks):
    services.set_secret(None, obj, "bot_token", channel.token)
    obj.refresh_from_db()
    ref = obj.bot_token_ref
    with django_capture_on_commit_callbacks(execute=True):
        services.clear_secret(None, obj, "bot_token")
    obj.refresh_from_db()
    assert obj.bot_token_ref == "" and not _path(ref).exists()
    assert AuditEntry.objects.filter(
        action="secret.cleared", target_id=str(obj.pk), after={"bot_token": "not set"}
    ).exists()


def test_unknown_or_empty_secrets_are_refused_and_nothing_is_stored(channel, obj):
    label = "Slack" if channel is SLACK else "Telegram"
    with pytest.raises(ValueError, match=f"unknown {label} secret"):
        services.set_secret(None, obj, "app_secret", "x")
    with pytest.raises(ValueError, match="cannot be empty"):
        services.set_secret(None, obj, "bot_token", "   ")
    obj.refresh_from_db()
    assert not obj.has_secret("bot_token") and not obj.has_secret(channel.other_secret)


def test_admin_form_stores_secrets_write_only_and_never_renders_them(channel, staff, make_bot):
    bot = make_bot(app_id="cli_form")
    resp = staff.post(
        reverse(f"admin:botadmin_{channel.admin}_add"),
        {
            "bot": bot.pk,
            channel.id_field: channel.id_value,
            "bot_token": channel.token,
            channel.other_secret: channel.other_value,
        },
    )
    assert resp.status_code == 302, resp.content[:2000]
    obj = channel.model.objects.get(**{channel.id_field: channel.id_value})
    assert obj.secret("bot_token") == channel.token
    assert obj.secret(channel.other_secret) == channel.other_value
    change = reverse(f"admin:botadmin_{channel.admin}_change", args=[obj.pk])
    page = staff.get(change).content.decode()
    assert channel.token not in page and channel.other_value not in page
    assert "Set. Leave blank to keep it." in page
    listing = staff.get(reverse(f"admin:botadmin_{channel.admin}_changelist")).content.decode()
    assert f"bot_token: set, {channel.other_secret}: set" in listing


def test_admin_refuses_a_new_token_and_clear_in_one_save_and_keeps_the_stored_one(
    channel, staff, obj
):
    services.set_secret(None, obj, "bot_token", channel.token)
    new_token = "xoxb-new-token" if channel is SLACK else f"{TG_BOT_ID}:AAnew"
    resp = staff.post(
        reverse(f"admin:botadmin_{channel.admin}_change", args=[obj.pk]),
        {
            "bot": obj.bot.pk,
            channel.id_field: channel.id_value,
            "bot_token": new_token,
            "clear_bot_token": "on",
        },
    )
    assert resp.status_code == 200
    assert "Either enter a new value or clear it, not both." in resp.content.decode()
    obj.refresh_from_db()
    assert obj.secret("bot_token") == channel.token


def test_admin_check_connection_action_reports_who_it_connected_as(channel, staff, stub, obj):
    services.set_secret(None, obj, "bot_token", channel.token)
    resp = staff.post(
        reverse(f"admin:botadmin_{channel.admin}_changelist"),
        {"action": "check_connection", "_selected_action": [obj.pk]},
        follow=True,
    )
    assert channel.connected in resp.content.decode()
    assert [c[0] for c in stub.calls] == [channel.check_method]


def test_admin_check_connection_without_token_says_dry_run(channel, staff, stub, obj):
    resp = staff.post(
        reverse(f"admin:botadmin_{channel.admin}_changelist"),
        {"action": "check_connection", "_selected_action": [obj.pk]},
        follow=True,
    )
    assert "dry run" in resp.content.decode()
    assert stub.calls == []


def test_admin_check_connection_says_the_platform_was_unreachable_not_that_it_refused(
    channel, staff, obj, settings
):
    with socket.socket() as closed:  # a loopback port nothing listens on
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    setattr(settings, channel.base_url_setting, channel.unreachable_url(port))
    services.set_secret(None, obj, "bot_token", channel.token)
    resp = staff.post(
        reverse(f"admin:botadmin_{channel.admin}_changelist"),
        {"action": "check_connection", "_selected_action": [obj.pk]},
        follow=True,
    )
    page = resp.content.decode()
    assert "could not be reached" in page
    assert "refused the token" not in page


def test_admin_check_connection_reports_the_platforms_refusal_of_the_token(
    channel, staff, stub, obj
):
    wrong = "xoxb-wrong" if channel is SLACK else f"{TG_BOT_ID}:wrong"
    services.set_secret(None, obj, "bot_token", wrong)
    resp = staff.post(
        reverse(f"admin:botadmin_{channel.admin}_changelist"),
        {"action": "check_connection", "_selected_action": [obj.pk]},
        follow=True,
    )
    error = "invalid_auth" if channel is SLACK else "Unauthorized"
    page = resp.content.decode()
    assert f"refused the token ({error})" in page and wrong not in page
