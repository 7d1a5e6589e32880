"""The Slack channel through the real slack-sdk client against the loopback stub: updates go
out with `chat.update` from the card queue, a 429's `Retry-After` is honoured, an approval's
timeout denies it and updates the message, a message breaking Block Kit's limits is never
sent, and without a bot token everything is a dry run with a synthetic `ts`."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.utils import timezone

from botadmin import services
from interactions import channels
from interactions.approvals import service as approvals
from interactions.cardqueue import worker as cardworker
from interactions.channels.base import ChannelSendError
from interactions.lifecycle import resolve as lifecycle
from interactions.models import CardEntity, CardUpdate, Interaction
from interactions.tests.ia_helpers import make_interaction  # noqa: F401 - fixture
from interactions.tests.slack_helpers import *  # noqa: F403
from interactions.tests.slack_helpers import CHAT, REQUESTER
from plumbing.workqueue import WorkStatus


def _due():
    past = timezone.now() - timedelta(seconds=1)
    CardUpdate.objects.filter(status=WorkStatus.PENDING).update(next_attempt_at=past)
    CardEntity.objects.update(next_send_at=past)


@pytest.fixture
def sent(slack_app, slack_stub, make_interaction):  # noqa: F811
    ia = make_interaction(slack_app.bot, channel="slack", chat_id=CHAT, requester_open_id=REQUESTER)
    return Interaction.objects.select_related("card").get(pk=approvals.send_to_chat(ia).pk)


def test_an_approvals_timeout_denies_it_and_updates_the_message_without_buttons(sent, slack_stub):
    lifecycle.expire(sent, now=sent.expires_at + timedelta(seconds=1))
    _due()
    assert cardworker.run_due(10) == 1
    method, _token, params = slack_stub.calls[-1]
    assert method == "chat.update"
    shown = slack_stub.messages[(CHAT, sent.card.address["ts"])]
    assert "actions" not in [b["type"] for b in shown]
    assert Interaction.objects.get(pk=sent.pk).status == Interaction.Status.EXPIRED


def test_a_429_from_chat_update_is_retried_no_sooner_than_its_retry_after(sent, slack_stub):
    slack_stub.rate_limit(42)
    lifecycle.cancel(sent, reason="test")
    _due()
    before = timezone.now()
    assert cardworker.run_due(10) == 1
    row = CardUpdate.objects.get()
    assert row.status == WorkStatus.PENDING and row.error_code == 429
    assert row.next_attempt_at >= before + timedelta(seconds=42)
    _due()
    assert cardworker.run_due(10) == 1
    assert CardUpdate.objects.get().status == WorkStatus.DONE


def test_a_message_breaking_block_kits_limits_is_never_sent(slack_app, slack_stub):
    too_many = {"text": "t", "blocks": [{"type": "divider"}] * 51}
    with pytest.raises(ChannelSendError) as refused:
        channels.get("slack").send(slack_app.bot, too_many, receive_id=CHAT, uuid="u1")
    assert refused.value.code == "invalid_blocks"
    assert slack_stub.calls == []


def test_the_stub_itself_refuses_what_slack_would(slack_stub):
    from interactions.channels.slack import webapi

    with pytest.raises(webapi.SlackCallError, match="invalid_blocks"):
        webapi.post_message(
            "xoxb-stub-token-1", CHAT, [{"type": "divider"}] * 51, "t", slack_stub.base_url
        )


def test_a_retried_send_with_the_same_uuid_posts_once(slack_app, slack_stub):
    channel = channels.get("slack")
    message = {
        "text": "t",
        "blocks": [{"type": "section", "text": {"type": "mrkdwn", "text": "x"}}],
    }
    first = channel.send(slack_app.bot, message, receive_id=CHAT, uuid="same")
    again = channel.send(slack_app.bot, message, receive_id=CHAT, uuid="same")
    assert first.pk == again.pk
    assert [c[0] for c in slack_stub.calls] == ["chat.postMessage"]


def test_a_send_interrupted_after_slacks_answer_is_found_by_its_send_key_not_posted_again(
    slack_app, slack_stub
):
    channel = channels.get("slack")
    message = {
        "text": "t",
        "blocks": [{"type": "section", "text": {"type": "mrkdwn", "text": "x"}}],
    }
    first = channel.send(slack_app.bot, message, receive_id=CHAT, uuid="interrupted")
    ts = first.address["ts"]
    # the process died after Slack answered, before the address was recorded (the row was
    # written just before the message: the stub's clock says 1700000000)
    written = datetime.fromtimestamp(float(ts) - 1, UTC)
    CardEntity.objects.filter(pk=first.pk).update(
        address={}, open_message_id="", created_at=written
    )
    again = channel.send(slack_app.bot, message, receive_id=CHAT, uuid="interrupted")
    assert again.pk == first.pk and again.address == {"channel": CHAT, "ts": ts}
    assert CardEntity.objects.get(pk=first.pk).open_message_id == ts
    methods = [c[0] for c in slack_stub.calls]
    assert methods == ["chat.postMessage", "conversations.history"]  # no second message
    # a send that never reached Slack is posted on its retry
    CardEntity.objects.create(
        bot=slack_app.bot, channel="slack", send_uuid="never-sent", created_at=written
    )
    third = channel.send(slack_app.bot, message, receive_id=CHAT, uuid="never-sent")
    assert third.address["ts"] != ts
    assert [c[0] for c in slack_stub.calls][2:] == ["conversations.history", "chat.postMessage"]


def test_without_a_bot_token_sends_and_updates_are_a_dry_run(
    slack_app,
    slack_stub,
    make_interaction,  # noqa: F811
    caplog,
):
    services.clear_slack_secret(None, slack_app, "bot_token")
    slack_app.bot.refresh_from_db()
    ia = make_interaction(slack_app.bot, channel="slack", chat_id=CHAT, requester_open_id=REQUESTER)
    ia = Interaction.objects.select_related("card").get(pk=approvals.send_to_chat(ia).pk)
    ts = ia.card.address["ts"]
    assert ts.count(".") == 1 and len(ts.split(".")[1]) == 6
    lifecycle.cancel(ia, reason="test")
    _due()
    with caplog.at_level("INFO", logger="cardloop.slack"):
        assert cardworker.run_due(10) == 1
    assert CardUpdate.objects.get().status == WorkStatus.DONE
    assert slack_stub.calls == []
    assert "dry run: chat.update" in caplog.text


def test_a_send_slack_refuses_cancels_the_interaction_with_slacks_error(
    slack_app,
    slack_stub,
    make_interaction,  # noqa: F811
):
    services.set_slack_secret(None, slack_app, "bot_token", "xoxb-not-known-to-the-stub")
    ia = make_interaction(slack_app.bot, channel="slack", chat_id=CHAT, requester_open_id=REQUESTER)
    with pytest.raises(approvals.SendFailed) as failed:
        approvals.send_to_chat(Interaction.objects.select_related("bot__slack_app").get(pk=ia.pk))
    assert failed.value.code == "invalid_auth"
    assert Interaction.objects.get(pk=ia.pk).status == Interaction.Status.CANCELLED


def test_a_bot_without_a_slack_app_is_refused_before_anything_is_sent(
    make_bot,
    slack_stub,
    make_interaction,  # noqa: F811
):
    ia = make_interaction(
        make_bot(app_id="cli_no_slack"), channel="slack", chat_id=CHAT, requester_open_id=REQUESTER
    )
    with pytest.raises(approvals.SendFailed) as failed:
        approvals.send_to_chat(ia)
    assert failed.value.code == "no_slack_app"
    assert slack_stub.calls == []
