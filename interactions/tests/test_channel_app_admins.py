"""What Slack apps and Telegram bots share (one implementation: `botadmin.services.set_secret` /
`clear_secret` and `botadmin.admin.WriteOnlySecretsAdmin`), once per channel: write-only 0600
secrets audited as set/not set, the admin form that never renders them back, and the "check
connection" action through the real clients against the loopback stubs (connected, dry run,
unreachable). What only one channel has stays in `test_slack_apps.py` / `test_telegram_bots.py`."""

from __future__ import annotations

import os
import socket
import stat

import pytest
from django.urls import reverse

from botadmin import services
from botadmin.models import AuditEntry
from interactions.tests import channel_app_helpers
from interactions.tests.channel_app_helpers import (
    SLACK,
    TELEGRAM,
    TG_BOT_ID,
    Channel,
    running_stub,
)
from plumbing.secretstore import _path

staff = channel_app_helpers.staff  # the fixture


def check_connection(staff, channel: Channel, obj) -> str:
    """Run the admin's "check connection" action on `obj`; the page it ends on."""
    resp = staff.post(
        reverse(f"admin:botadmin_{channel.admin}_changelist"),
        {"action": "check_connection", "_selected_action": [obj.pk]},
        follow=True,
    )
    return resp.content.decode()


@pytest.fixture(params=[SLACK, TELEGRAM], ids=["slack", "telegram"])
def channel(request) -> Channel:
    return request.param


@pytest.fixture
def stub(channel):
    with running_stub(channel) as stub:
        yield stub


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
    page = check_connection(staff, channel, obj)
    assert channel.connected in page
    assert [c[0] for c in stub.calls] == [channel.check_method]


def test_admin_check_connection_without_token_says_dry_run(channel, staff, stub, obj):
    page = check_connection(staff, channel, obj)
    assert "dry run" in page
    assert stub.calls == []


def test_admin_check_connection_says_the_platform_was_unreachable_not_that_it_refused(
    channel, staff, obj, settings
):
    with socket.socket() as closed:  # a loopback port nothing listens on
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    setattr(settings, channel.base_url_setting, channel.unreachable_url(port))
    services.set_secret(None, obj, "bot_token", channel.token)
    page = check_connection(staff, channel, obj)
    assert "could not be reached" in page
    assert "refused the token" not in page


def test_admin_check_connection_reports_the_platforms_refusal_of_the_token(
    channel, staff, stub, obj
):
    wrong = "xoxb-wrong" if channel is SLACK else f"{TG_BOT_ID}:wrong"
    services.set_secret(None, obj, "bot_token", wrong)
    page = check_connection(staff, channel, obj)
    error = "invalid_auth" if channel is SLACK else "Unauthorized"
    assert f"refused the token ({error})" in page and wrong not in page
