"""`manage.py slack_replay` against a live server over real HTTP: a fixture click signed with
the app's signing secret resolves the interaction it names and queues the update; each replay
is a new click; an unknown app or one without a signing secret is a command error."""

from __future__ import annotations

import io
import json
import time

import pytest
from django.core.management import CommandError, call_command

from interactions.approvals import service as approvals
from interactions.models import CardUpdate, InboundEvent, Interaction
from interactions.tests.ia_helpers import make_interaction  # noqa: F401 - fixture
from interactions.tests.slack_helpers import *  # noqa: F403
from interactions.tests.slack_helpers import APP_ID, CHAT, FIXTURES, OTHER_USER, REQUESTER

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def replay(live_server, slack_app, monkeypatch):
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")

    def run(name: str, *args: str) -> str:
        out = io.StringIO()
        call_command(
            "slack_replay",
            str(FIXTURES / f"{name}.json"),
            "--app",
            APP_ID,
            "--url",
            live_server.url,
            *args,
            stdout=out,
        )
        return out.getvalue()

    return run


@pytest.fixture
def sent(slack_app, slack_stub, make_interaction):  # noqa: F811
    ia = make_interaction(slack_app.bot, channel="slack", chat_id=CHAT, requester_open_id=REQUESTER)
    return approvals.send_to_chat(ia)


def test_a_replayed_click_resolves_the_named_interaction_and_queues_the_update(
    replay, sent, slack_stub
):
    out = replay(
        "block_actions",
        "--set",
        f"response_url={slack_stub.response_url('replayed')}",
        "--interaction",
        sent.public_id,
        "--action",
        "deny",
        "--user",
        REQUESTER,
    )
    assert "200 in" in out
    ia = Interaction.objects.get(pk=sent.pk)
    assert ia.status == Interaction.Status.RESOLVED and ia.resolution["action_id"] == "deny"
    assert CardUpdate.objects.filter(card=ia.card).count() == 1
    # the clicker is told after the answer: the server closes the response after the command
    # read it, so wait for it (bounded)
    for _ in range(100):
        if slack_stub.responses:
            break
        time.sleep(0.05)
    assert [key for key, _body in slack_stub.responses] == ["replayed"]


def test_each_replay_is_a_new_click(replay, sent):
    replay("block_actions", "--interaction", sent.public_id, "--user", OTHER_USER)
    replay("block_actions", "--interaction", sent.public_id, "--user", OTHER_USER)
    assert InboundEvent.objects.count() == 2  # two clicks, each refused (not the requester)
    assert Interaction.objects.get(pk=sent.pk).status == Interaction.Status.PENDING


def test_url_verification_replay_gets_the_challenge(replay):
    out = replay("url_verification")
    assert json.loads(out[out.index("{") :]) == {
        "challenge": "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P"
    }


def test_an_unknown_app_or_one_without_a_signing_secret_is_a_command_error(slack_app):
    from botadmin import services

    with pytest.raises(CommandError, match="No Slack app"):
        call_command("slack_replay", str(FIXTURES / "block_actions.json"), "--app", "A0NOSUCH")
    services.clear_slack_secret(None, slack_app, "signing_secret")
    with pytest.raises(CommandError, match="no signing secret"):
        call_command("slack_replay", str(FIXTURES / "block_actions.json"), "--app", APP_ID)
