"""Slack apps per bot: write-only 0600 secrets (audited as set/not set), the admin form, the
"check connection" action (`auth.test` through the real slack-sdk client against a loopback
stub), and dry run without a token."""

from __future__ import annotations

import logging
import os
import socket
import stat

import pytest
from django.test import override_settings
from django.urls import reverse

from botadmin import services
from botadmin.models import AuditEntry, SlackApp
from interactions.channels.slack import webapi
from plumbing.secretstore import _path
from tests.slack_stub import SlackStub

TOKEN = "xoxb-stub-token-1"


@pytest.fixture
def slack_stub():
    stub = SlackStub(tokens={TOKEN: "T0TEAM"}).start()
    with override_settings(CARDLOOP_SLACK_API_BASE_URL=stub.base_url):
        yield stub
    stub.stop()


@pytest.fixture
def staff(admin_client):
    admin_client.defaults["HTTP_ACCEPT_LANGUAGE"] = "en"
    return admin_client


@pytest.fixture
def app(make_bot):
    return SlackApp.objects.create(bot=make_bot(app_id="cli_slack_bot"), app_id="A0SLACK1")


def test_secrets_are_0600_files_and_the_audit_records_only_set_or_not_set(app):
    services.set_slack_secret(None, app, "signing_secret", "  8f742231b10e8888abcd99yyyzzz85a5  ")
    app.refresh_from_db()
    assert app.secret("signing_secret") == "8f742231b10e8888abcd99yyyzzz85a5"
    mode = stat.S_IMODE(os.stat(_path(app.signing_secret_ref)).st_mode)
    assert mode == 0o600
    entry = AuditEntry.objects.get(action="secret.set", target_id=str(app.pk))
    assert entry.before == {"signing_secret": "not set"}
    assert entry.after == {"signing_secret": "set"}
    assert "8f742231" not in str(entry.before) + str(entry.after)


def test_clearing_a_secret_removes_its_file(app, django_capture_on_commit_callbacks):
    services.set_slack_secret(None, app, "bot_token", TOKEN)
    app.refresh_from_db()
    ref = app.bot_token_ref
    with django_capture_on_commit_callbacks(execute=True):
        services.clear_slack_secret(None, app, "bot_token")
    app.refresh_from_db()
    assert app.bot_token_ref == ""
    assert not _path(ref).exists()


def test_unknown_or_empty_secrets_are_refused(app):
    with pytest.raises(ValueError, match="unknown Slack secret"):
        services.set_slack_secret(None, app, "app_secret", "x")
    with pytest.raises(ValueError, match="cannot be empty"):
        services.set_slack_secret(None, app, "bot_token", "   ")


def test_check_connection_calls_auth_test_with_the_stored_token(slack_stub, app):
    services.set_slack_secret(None, app, "bot_token", TOKEN)
    app.refresh_from_db()
    result = webapi.check_connection(app.secret("bot_token"), slack_stub.base_url)
    assert result.ok and result.team_id == "T0TEAM" and result.user_id == "U0BOT"
    assert slack_stub.calls[-1][:2] == ("auth.test", TOKEN)


def test_check_connection_reports_slacks_error_for_a_wrong_token(slack_stub):
    result = webapi.check_connection("xoxb-wrong", slack_stub.base_url)
    assert not result.ok and result.error == "invalid_auth"


def test_without_a_token_nothing_is_called_and_messages_get_a_synthetic_ts(slack_stub, caplog):
    assert webapi.check_connection("", slack_stub.base_url).dry_run
    with caplog.at_level(logging.INFO, logger="cardloop.slack"):
        sent = webapi.post_message("", "C0CHAN", [{"type": "divider"}], "hi", slack_stub.base_url)
    assert sent["dry_run"] and sent["ts"].count(".") == 1
    assert "chat.postMessage" in caplog.text
    assert slack_stub.calls == []


def test_post_message_sends_blocks_and_stub_limits_are_reported(slack_stub):
    sent = webapi.post_message(TOKEN, "C0CHAN", [{"type": "divider"}], "hi", slack_stub.base_url)
    assert not sent["dry_run"] and sent["ts"].startswith("1700000000.")
    with pytest.raises(webapi.SlackCallError) as err:
        webapi.post_message(TOKEN, "C0CHAN", [{"type": "divider"}] * 51, "hi", slack_stub.base_url)
    assert err.value.error == "invalid_blocks"


def test_admin_form_stores_secrets_write_only_and_never_renders_them(staff, make_bot):
    bot = make_bot(app_id="cli_slack_form")
    resp = staff.post(
        reverse("admin:botadmin_slackapp_add"),
        {"bot": bot.pk, "app_id": "A0FORM1", "bot_token": TOKEN, "signing_secret": "sigsecret"},
    )
    assert resp.status_code == 302, resp.content[:2000]
    app = SlackApp.objects.get(app_id="A0FORM1")
    assert app.secret("bot_token") == TOKEN and app.secret("signing_secret") == "sigsecret"
    page = staff.get(reverse("admin:botadmin_slackapp_change", args=[app.pk])).content.decode()
    assert TOKEN not in page and "sigsecret" not in page
    assert "Set. Leave blank to keep it." in page


def test_admin_refuses_a_new_token_and_clear_in_one_save_and_keeps_the_stored_one(staff, app):
    services.set_slack_secret(None, app, "bot_token", TOKEN)
    resp = staff.post(
        reverse("admin:botadmin_slackapp_change", args=[app.pk]),
        {
            "bot": app.bot.pk,
            "app_id": app.app_id,
            "bot_token": "xoxb-new-token",
            "clear_bot_token": "on",
        },
    )
    assert resp.status_code == 200
    assert "Either enter a new value or clear it, not both." in resp.content.decode()
    app.refresh_from_db()
    assert app.secret("bot_token") == TOKEN


def test_admin_rejects_an_app_id_that_is_not_slacks(staff, make_bot):
    bot = make_bot(app_id="cli_slack_bad")
    resp = staff.post(reverse("admin:botadmin_slackapp_add"), {"bot": bot.pk, "app_id": "cli_x"})
    assert resp.status_code == 200
    assert not SlackApp.objects.exists()


@pytest.mark.parametrize(
    ("language", "expected"),
    [("en", "A Slack app with this app id is already registered."), ("zh-hans", None)],
)
def test_admin_refuses_a_second_app_with_the_same_app_id_in_one_clean_sentence(
    staff, app, make_bot, language, expected
):
    staff.defaults["HTTP_ACCEPT_LANGUAGE"] = language
    bot = make_bot(app_id="cli_slack_dup")
    resp = staff.post(reverse("admin:botadmin_slackapp_add"), {"bot": bot.pk, "app_id": app.app_id})
    assert resp.status_code == 200
    errors = resp.context["adminform"].form.errors["app_id"]
    assert SlackApp.objects.filter(app_id=app.app_id).count() == 1
    if expected is not None:
        assert errors == [expected]
    else:
        assert errors == ["已有一个使用此 App ID 的 Slack 应用。"]


def test_admin_check_connection_action_reports_the_workspace(staff, slack_stub, app):
    services.set_slack_secret(None, app, "bot_token", TOKEN)
    resp = staff.post(
        reverse("admin:botadmin_slackapp_changelist"),
        {"action": "check_connection", "_selected_action": [app.pk]},
        follow=True,
    )
    assert "connected to workspace T0TEAM as U0BOT" in resp.content.decode()
    assert [c[0] for c in slack_stub.calls] == ["auth.test"]


def test_admin_check_connection_without_token_says_dry_run(staff, slack_stub, app):
    resp = staff.post(
        reverse("admin:botadmin_slackapp_changelist"),
        {"action": "check_connection", "_selected_action": [app.pk]},
        follow=True,
    )
    assert "dry run" in resp.content.decode()
    assert slack_stub.calls == []


def test_admin_check_connection_says_slack_was_unreachable_not_that_it_refused(
    staff, app, settings
):
    with socket.socket() as closed:  # a loopback port nothing listens on
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    settings.CARDLOOP_SLACK_API_BASE_URL = f"http://127.0.0.1:{port}/api/"
    services.set_slack_secret(None, app, "bot_token", TOKEN)
    resp = staff.post(
        reverse("admin:botadmin_slackapp_changelist"),
        {"action": "check_connection", "_selected_action": [app.pk]},
        follow=True,
    )
    page = resp.content.decode()
    assert "could not be reached" in page
    assert "refused the token" not in page
