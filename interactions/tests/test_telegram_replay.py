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


@pytest.mark.django_db(transaction=True)
def test_replayed_taps_and_a_prompt_reply_answer_an_ask_on_a_progress_message(live_server, tg):
    """`--progress` aims a tap at the session's progress message and `--reply-to-prompt`
    replies to the "Other…" prompt (both sent in dry run: no bot token)."""
    from interactions.asks import progress as progress_sessions
    from interactions.asks import service as asks_service

    progress_sessions.update_progress(
        tg.bot,
        "s-1",
        status="running",
        title="Deploying",
        receive_id="4242",
        channel="telegram",
        requester_open_id="4242",
    )
    questions = [
        {"question": "Which database?", "options": [{"label": "SQLite"}], "multiSelect": False},
        {"question": "Which checks?", "options": [{"label": "Lint"}], "multiSelect": True},
    ]
    ask = asks_service.register_ask(tg.bot, "s-1", questions=questions).ask
    replay(
        live_server,
        "callback_query.json",
        "--progress",
        "s-1",
        "--set",
        f"callback_query.data=ao:{ask.public_id}:0",
    )
    replay(live_server, "message_command.json", "--reply-to-prompt", "--set", "message.text=DuckDB")
    for data in (f"aq:{ask.public_id}:1:0", f"as:{ask.public_id}"):
        replay(
            live_server,
            "callback_query.json",
            "--progress",
            "s-1",
            "--set",
            f"callback_query.data={data}",
        )
    ask.refresh_from_db()
    assert ask.status == Interaction.Status.RESOLVED
    assert [a["customInput"] for a in ask.resolution["value"]] == ["DuckDB", ""]
    assert ask.resolution["value"][1]["selectedLabels"] == ["Lint"]


@pytest.mark.django_db(transaction=True)
def test_progress_and_prompt_options_say_what_is_missing(live_server, tg):
    with pytest.raises(CommandError, match="no Telegram progress message"):
        replay(live_server, "callback_query.json", "--progress", "nope")
    with pytest.raises(CommandError, match="No 'Other…' prompt"):
        replay(live_server, "message_command.json", "--reply-to-prompt")
