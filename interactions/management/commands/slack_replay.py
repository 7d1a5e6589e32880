"""`python manage.py slack_replay <fixture.json> --app <A…> [--interaction ia_… --action approve] [--user U…] [--set path=value …] [--url …]`

Post a real-format Slack payload to a running Cardloop exactly as Slack would: signed with the
app's signing secret (`X-Slack-Signature`, `X-Slack-Request-Timestamp` now; slack-sdk's
`SignatureVerifier`). A `block_actions` / `view_submission` payload goes form-encoded
(`payload=…`) to `/slack/<app>/interactivity`, anything else as JSON to `/slack/<app>/events`.
Each run is a new click or event (a fresh `action_ts` / `event_id`) unless `--set` says
otherwise. Prints the status, the milliseconds and the answer body; exit status 1 when the
answer is not 2xx.

    python manage.py slack_replay tests/fixtures/slack/block_actions.json \\
        --app A0123456789 --interaction ia_3f… --action approve --user U0REQUESTER

`--interaction` / `--action` fill in the button of that interaction's message (its value, the
message's channel and `ts`); `--user` the clicker (`user.id`, or `event.user` of a message).
`--set` paths are dotted, as in `lark_replay`.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any
from urllib.parse import urlencode

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import CommandError
from slack_sdk.signature import SignatureVerifier

from botadmin.models import SlackApp
from interactions.channels.slack import blocks
from interactions.management.replay import (
    ReplayCommand,
    apply_assignments,
    load_fixture,
    set_path,
)
from interactions.models import Interaction

INTERACTIVE = ("block_actions", "view_submission")


#: The documented `block_actions` payload the click replays start from.
BLOCK_ACTIONS_FIXTURE = settings.BASE_DIR / "tests" / "fixtures" / "slack" / "block_actions.json"


def replay_click(app_id: str, user: str, url: str, assignments: list[str], *, stdout, stderr):
    """Run `slack_replay` on the `block_actions` fixture for Slack app `app_id` as `user`
    against Cardloop at `url`, with `assignments` (`path=value` strings, applied in order) —
    what the commands replaying a click on a feedback area or an ask form send. Raises
    CommandError like `slack_replay` (a refused or failed request)."""
    call_command(
        "slack_replay",
        str(BLOCK_ACTIONS_FIXTURE),
        "--app",
        app_id,
        "--user",
        user,
        "--url",
        url,
        *[arg for item in assignments for arg in ("--set", item)],
        stdout=stdout,
        stderr=stderr,
    )


def fill_click(payload: dict[str, Any], ia: Interaction, action_id: str) -> None:
    """Point `block_actions` `payload` at button `action_id` of `ia`'s Slack message.
    Raises ValueError for an unknown action or an interaction without a Slack message."""
    card = ia.card
    if card is None or not (card.address or {}).get("ts"):
        raise ValueError(f"{ia.public_id} has no Slack message yet")
    if action_id == "submit":
        action = {"id": "submit", "value": "submit"}
    else:
        action = next((a for a in ia.actions if a["id"] == action_id), None)
        if action is None:
            raise ValueError(f"{ia.public_id} has no action {action_id!r}")
    channel, ts = card.address["channel"], card.address["ts"]
    payload.setdefault("container", {}).update(message_ts=ts, channel_id=channel)
    payload.setdefault("channel", {})["id"] = channel
    payload.setdefault("message", {})["ts"] = ts
    first = (payload.get("actions") or [{}])[0]
    first.update(action_id=f"ia_{action_id}", value=blocks.button_value(ia, action))
    payload["actions"] = [first]


def fresh(payload: dict[str, Any], app_id: str) -> None:
    """A new click / event each run: fresh `action_ts` and `event_id`, the app's id."""
    now = time.time()
    payload["api_app_id"] = app_id
    for action in payload.get("actions") or []:
        if isinstance(action, dict):
            action["action_ts"] = f"{int(now)}.{int((now % 1) * 1_000_000):06d}"
    if payload.get("type") == "event_callback":
        payload["event_id"] = "Ev" + uuid.uuid4().hex[:16].upper()
        payload["event_time"] = int(now)


class Command(ReplayCommand):
    help = "Sign and post a Slack payload (fixture) to a running Cardloop."

    def add_target_arguments(self, parser):
        parser.add_argument("--app", required=True, help="Slack app id (A…) to post as.")
        parser.add_argument("--interaction", default="", help="Fill in a button of ia_….")
        parser.add_argument("--action", default="", help="The button's action id (approve, …).")
        parser.add_argument("--user", default="", help="The clicker's Slack user id (U…).")

    def handle(self, *args, fixture, app, interaction, action, user, url, set, timeout, **o):  # noqa: A002
        slack_app = SlackApp.objects.select_related("bot").filter(app_id=app).first()
        if slack_app is None:
            raise CommandError(f"No Slack app {app!r}.")
        secret = slack_app.secret("signing_secret")
        if not secret:
            raise CommandError(f"Slack app {app!r} has no signing secret.")
        payload = load_fixture(fixture)
        try:
            fresh(payload, app)
            if interaction:
                ia = (
                    Interaction.objects.select_related("card")
                    .filter(bot=slack_app.bot, public_id=interaction)
                    .first()
                )
                if ia is None:
                    raise ValueError(f"No interaction {interaction!r} of this app's bot.")
                fill_click(payload, ia, action or "approve")
            if user:
                if payload.get("type") == "event_callback":
                    set_path(payload, "event.user", user)
                else:
                    set_path(payload, "user.id", user)
            apply_assignments(payload, set)
        except ValueError as exc:
            raise CommandError(str(exc)) from None
        kind = str(payload.get("type") or "?")
        if kind in INTERACTIVE:
            body = urlencode({"payload": json.dumps(payload, ensure_ascii=False)}).encode()
            target, content_type = (
                f"{url.rstrip('/')}/slack/{app}/interactivity",
                ("application/x-www-form-urlencoded"),
            )
        else:
            body = json.dumps(payload, ensure_ascii=False).encode()
            target, content_type = f"{url.rstrip('/')}/slack/{app}/events", "application/json"
        timestamp = str(int(time.time()))
        headers = {
            "Content-Type": content_type,
            "X-Slack-Request-Timestamp": timestamp,
            "X-Slack-Signature": SignatureVerifier(secret).generate_signature(
                timestamp=timestamp, body=body
            ),
        }
        self.stdout.write(f"POST {target} ({kind})")
        self.post(target, timeout, content=body, headers=headers)
