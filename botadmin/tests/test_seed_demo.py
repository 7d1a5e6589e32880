"""`manage.py seed_demo`: idempotent demo data that shows every layer and both failure modes."""

from __future__ import annotations

import io
import re

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.test import override_settings

from botadmin import services
from botadmin.models import AuditEntry, Bot, BotApiKey, Chat, ChatPolicy, Team, TeamChat

KEY_RE = re.compile(r"clk_[0-9a-f]{8}_[A-Za-z0-9_-]{20,}")


def seed(*args) -> str:
    out = io.StringIO()
    call_command("seed_demo", *args, stdout=out)
    return out.getvalue()


def counts():
    return {
        m.__name__: m.objects.count()
        for m in (Team, Bot, Chat, TeamChat, ChatPolicy, BotApiKey, AuditEntry, get_user_model())
    }


@pytest.mark.django_db
@override_settings(DEBUG=True)
def test_seed_demo_twice_is_idempotent_and_prints_the_key_only_once():
    first = seed()
    after_first = counts()
    second = seed()
    assert counts() == after_first
    assert len(KEY_RE.findall(first)) == 1
    assert KEY_RE.findall(second) == []
    assert "exists" in second and "--new-key" in second
    raw = KEY_RE.search(first).group(0)
    key = BotApiKey.find_active(raw)
    assert key is not None and key.bot.app_id == "cli_demo_bot"
    assert raw not in str(list(BotApiKey.objects.values()))


@pytest.mark.django_db
def test_seed_demo_leaves_admin_edits_alone():
    seed()
    bot = Bot.objects.get(app_id="cli_demo_bot")
    services.set_policy_layer("ops", bot, {"enabled": False})
    seed()
    assert Bot.objects.get(pk=bot.pk).policy == {"enabled": False}


@pytest.mark.django_db
def test_seed_demo_layers_show_inheritance_and_both_ways_feedback_fails_closed():
    seed()
    demo = Bot.objects.get(app_id="cli_demo_bot")
    team_chat = services.effective_policy_for(demo, "oc_demo_team_chat")
    assert team_chat.enabled and team_chat.team.name == "Demo team"
    assert team_chat.sources["enabled"] == "team"
    assert team_chat.sources["negative_followup.reasons"] == "team"
    assert team_chat.sources["negative_followup.comment.placeholder"] == "team"
    assert team_chat.sources["negative_followup.comment.max_length"] == "bot"
    assert team_chat.sources["allow_reselect"] == "bot"
    assert team_chat.sources["negative_followup.comment.required"] == "chat"
    assert team_chat.sources["audience"] == "chat"
    assert team_chat.sources["buttons"] == "default"
    assert services.effective_policy_for(demo, "oc_demo_shared").reason == "ambiguous_team"
    p2p = services.effective_policy_for(demo, "oc_demo_p2p")
    assert p2p.enabled and p2p.sources["enabled"] == "chat" and p2p.team is None
    api_only = Bot.objects.get(app_id="cli_demo_api_only")
    assert api_only.api_only and not api_only.has_credentials and not demo.has_credentials
    assert services.effective_policy_for(api_only, "oc_demo_team_chat").reason == "api_only"
    assert AuditEntry.objects.filter(actor_repr="seed_demo").exists()


@pytest.mark.django_db
@override_settings(DEBUG=True)
def test_new_key_option_revokes_the_demo_key_and_prints_a_fresh_one():
    old_raw = KEY_RE.search(seed()).group(0)
    output = seed("--new-key")
    new_raw = KEY_RE.search(output).group(0)
    assert new_raw != old_raw
    assert BotApiKey.find_active(old_raw) is None
    assert BotApiKey.find_active(new_raw) is not None


@pytest.mark.django_db
def test_demo_superuser_only_with_debug():
    with override_settings(DEBUG=False):
        output = seed()
    assert not get_user_model().objects.exists()
    assert "skipped" in output
    with override_settings(DEBUG=True):
        output = seed()
    user = get_user_model().objects.get(username="admin")
    assert user.is_superuser and user.check_password("cardloop-demo")
    assert "login admin / cardloop-demo" in output


@pytest.mark.django_db
def test_demo_api_key_and_callback_secrets_only_with_debug_and_never_printed():
    with override_settings(DEBUG=False):
        output = seed()
    assert KEY_RE.findall(output) == [] and not BotApiKey.objects.exists()
    demo = Bot.objects.get(app_id="cli_demo_bot")
    assert not demo.has_secret("verification_token")
    with override_settings(DEBUG=True):
        output = seed()
    demo.refresh_from_db()
    assert demo.has_secret("verification_token") and demo.has_secret("encrypt_key")
    assert not demo.has_credentials  # still a dry run
    assert demo.secret("verification_token") not in output
    assert demo.secret("encrypt_key") not in output
    services.set_bot_secret("ops", demo, "verification_token", "vt_from_the_admin")
    with override_settings(DEBUG=True):
        seed()
    demo.refresh_from_db()
    assert demo.secret("verification_token") == "vt_from_the_admin"


@pytest.mark.django_db
def test_the_demo_bot_gets_a_dry_run_slack_app_whose_channel_shows_feedback_to_the_requester():
    from botadmin.models import SlackApp

    with override_settings(DEBUG=False):
        seed()
    assert not SlackApp.objects.exists()
    with override_settings(DEBUG=True):
        output = seed()
    app = SlackApp.objects.get(app_id="A0DEMOSLACK")
    assert app.bot.app_id == "cli_demo_bot"
    assert app.has_secret("signing_secret") and not app.has_secret("bot_token")  # dry run
    assert app.secret("signing_secret") not in output
    policy = services.effective_policy_for(app.bot, "C0DEMOSLACK")
    assert policy.enabled and policy.team.name == "Demo team"
    assert policy.policy["audience"] == "requester"
    assert "conclusive_usable" in [b["key"] for b in policy.policy["buttons"]]
    services.set_slack_secret("ops", app, "signing_secret", "from-the-admin")
    with override_settings(DEBUG=True):
        seed()
    app.refresh_from_db()
    assert app.secret("signing_secret") == "from-the-admin"
    assert AuditEntry.objects.filter(action="slack_app.created", actor_repr="seed_demo").exists()


@pytest.mark.django_db
@override_settings(
    DEBUG=True, CARDLOOP_PUBLIC_URL="http://127.0.0.1:8177/", CARDLOOP_METRICS_TOKEN="cmx_demo"
)
def test_seed_demo_prints_the_metrics_curl_for_the_address_the_server_answers_at():
    out = seed()
    assert "curl -H 'Authorization: Bearer cmx_demo' http://127.0.0.1:8177/metrics" in out
    assert ":8000" not in out
