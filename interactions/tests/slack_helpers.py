"""Shared fixtures of the Slack tests: a Slack app with both secrets, the loopback Web API
stub (real slack-sdk client), payloads from `tests/fixtures/slack/` and signing with the
app's signing secret (slack-sdk's `SignatureVerifier.generate_signature`). Import with
`from interactions.tests.slack_helpers import *  # noqa: F403`."""

from __future__ import annotations

import copy
import json
import time
from pathlib import Path
from urllib.parse import urlencode

import pytest
from django.test import override_settings
from slack_sdk.signature import SignatureVerifier

from tests.slack_stub import SlackStub

FIXTURES = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "slack"
APP_ID = "A0SLACK1"
OTHER_APP_ID = "A0SLACK2"
TOKEN = "xoxb-stub-token-1"
SIGNING_SECRET = "8f742231b10e8888abcd99yyyzzz85a5"
OTHER_SECRET = "0000000000aaaaaaaaaa1111111111bb"
REQUESTER = "U0REQUESTER"
OTHER_USER = "U0OTHER"
CHAT = "C0CHAT"


def fixture(name: str) -> dict:
    return json.loads((FIXTURES / f"{name}.json").read_text())


def sign(body: bytes, secret: str = SIGNING_SECRET, timestamp: int | None = None) -> dict:
    """The two headers Slack sends with `body`, signed with `secret`."""
    ts = str(int(time.time()) if timestamp is None else timestamp)
    return {
        "X-Slack-Request-Timestamp": ts,
        "X-Slack-Signature": SignatureVerifier(secret).generate_signature(timestamp=ts, body=body),
    }


def form_body(payload: dict) -> bytes:
    """An interactivity request body: form-encoded `payload` (JSON)."""
    return urlencode({"payload": json.dumps(payload)}).encode()


def click_payload(
    ia,
    entity,
    action_id: str,
    *,
    user: str = REQUESTER,
    action_ts: str = "1700000005.123456",
    response_url: str = "",
    state=None,
) -> dict:
    """The documented `block_actions` fixture for a click on button `action_id` of `ia`'s
    message `entity` (a `CardEntity` with a Slack address)."""
    from interactions.channels.slack import blocks

    payload = copy.deepcopy(fixture("block_actions"))
    action = (
        next(a for a in ia.actions if a["id"] == action_id)
        if action_id != "submit"
        else {
            "id": "submit",
            "value": "submit",
        }
    )
    payload["user"]["id"] = user
    payload["container"]["message_ts"] = entity.address["ts"]
    payload["container"]["channel_id"] = entity.address["channel"]
    payload["channel"]["id"] = entity.address["channel"]
    payload["message"]["ts"] = entity.address["ts"]
    payload["actions"][0].update(
        action_id=f"ia_{action_id}", value=blocks.button_value(ia, action), action_ts=action_ts
    )
    if response_url:
        payload["response_url"] = response_url
    if state is not None:
        payload["state"] = {"values": state}
    return payload


@pytest.fixture
def slack_stub():
    stub = SlackStub(tokens={TOKEN: "T0TEAM"}).start()
    with override_settings(CARDLOOP_SLACK_API_BASE_URL=stub.base_url):
        yield stub
    stub.stop()


@pytest.fixture
def slack_app(make_bot):
    from botadmin import services
    from botadmin.models import SlackApp

    app = SlackApp.objects.create(bot=make_bot(app_id="cli_slack_bot"), app_id=APP_ID)
    services.set_slack_secret(None, app, "bot_token", TOKEN)
    services.set_slack_secret(None, app, "signing_secret", SIGNING_SECRET)
    other = SlackApp.objects.create(bot=make_bot(app_id="cli_slack_other"), app_id=OTHER_APP_ID)
    services.set_slack_secret(None, other, "signing_secret", OTHER_SECRET)
    return SlackApp.objects.select_related("bot").get(pk=app.pk)
