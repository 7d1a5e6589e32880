"""`manage.py telegram_replay` against a live server over real HTTP: the fixture Update is
posted with the bot's webhook secret, a tap resolves the interaction it names, a repeated
`update_id` is handled once, and a wrong secret is answered 401 (exit status 1)."""

from __future__ import annotations

import io
from datetime import timedelta

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from botadmin import services
from botadmin.models import TelegramBot
from interactions.models import InboundEvent, Interaction
from interactions.render.interaction_cards import approval_actions

BOT_ID = 123456789
FIXTURES = "tests/fixtures/telegram"


@pytest.fixture
def tg(make_bot):
    tg = TelegramBot.objects.create(bot=make_bot(app_id="cli_tg_replay"), bot_user_id=BOT_ID)
    services.set_telegram_secret(None, tg, "webhook_secret", "replay-secret")
    return tg


@pytest.fixture
def approval(tg):
    return Interaction.objects.create(
        public_id="ia_0000000000000000",
        bot=tg.bot,
        kind=Interaction.Kind.APPROVAL,
        channel="telegram",
        chat_id="4242",
        requester_open_id="4242",
        title="Run a shell command?",
        actions=approval_actions(),
        expires_at=timezone.now() + timedelta(minutes=5),
    )


@pytest.fixture(autouse=True)
def _server_ready(monkeypatch):
    # the live server thread would import lark-oapi (several seconds, through the dispatcher)
    # on its first request; a server process does it at startup
    import interactions.channels.feishu.ingress  # noqa: F401

    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")


def replay(live_server, fixture, *extra):
    out = io.StringIO()
    call_command(
        "telegram_replay",
        f"{FIXTURES}/{fixture}",
        "--bot",
        str(BOT_ID),
        "--url",
        live_server.url,
        "--timeout",
        "30",
        *extra,
        stdout=out,
    )
    return out.getvalue()


@pytest.mark.django_db(transaction=True)
def test_a_replayed_tap_resolves_the_interaction_once(live_server, tg, approval):
    out = replay(live_server, "callback_query.json", "--set", "update_id=77")
    assert "200 in" in out
    replay(live_server, "callback_query.json", "--set", "update_id=77")
    approval.refresh_from_db()
    assert approval.status == Interaction.Status.RESOLVED and approval.resolution["via"] == "card"
    assert InboundEvent.objects.filter(event_id="tg:77").count() == 1


@pytest.mark.django_db(transaction=True)
def test_a_replayed_typed_command_resolves_the_interaction(live_server, tg, approval):
    replay(
        live_server,
        "message_command.json",
        "--set",
        "message.text=/_interaction ia_0000000000000000 deny",
    )
    approval.refresh_from_db()
    assert approval.resolution["action_id"] == "deny" and approval.resolution["via"] == "text"


@pytest.mark.django_db(transaction=True)
def test_a_wrong_secret_is_answered_401_and_the_command_fails(live_server, tg, approval):
    with pytest.raises(CommandError, match="401"):
        replay(live_server, "callback_query.json", "--secret", "not-it")
    approval.refresh_from_db()
    assert approval.status == Interaction.Status.PENDING
