"""Slack apps per bot: the Web API adapter (`auth.test`, `chat.postMessage` through the real
slack-sdk client against a loopback stub, dry run without a token) and the admin's app id
checks. Secrets and the "check connection" action, shared with Telegram bots:
`test_channel_app_admins.py`."""

from __future__ import annotations

import logging

import pytest
from django.urls import reverse

from botadmin import services
from botadmin.models import SlackApp
from interactions.channels.slack import webapi
from interactions.tests import channel_app_helpers
from interactions.tests.channel_app_helpers import SLACK, running_stub

staff = channel_app_helpers.staff  # the fixture

TOKEN = SLACK.token


@pytest.fixture
def slack_stub():
    with running_stub(SLACK) as stub:
        yield stub


@pytest.fixture
def app(make_bot):
    return SlackApp.objects.create(bot=make_bot(app_id="cli_slack_bot"), app_id="A0SLACK1")


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
