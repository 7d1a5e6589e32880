"""Shared helpers and fixtures of the interaction tests. Import the fixtures into a
test module with `from interactions.tests.ia_helpers import *  # noqa: F403`."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from interactions.approvals import service as approvals
from interactions.models import Interaction

REQUESTER = "ou_requester"
OTHER = "ou_other"
CHAT = "oc_group_chat"


def build(**overrides) -> Interaction:
    """An unsaved interaction (for the pure renderers)."""
    now = timezone.now()
    values = {
        "public_id": "ia_0123456789abcdef",
        "kind": Interaction.Kind.APPROVAL,
        "channel": "feishu",
        "chat_id": CHAT,
        "requester_open_id": REQUESTER,
        "title": "Run a shell command?",
        "body": "The agent wants to run `rm -rf build/`.",
        "tool": "bash",
        "always_scope": "session",
        "session_id": "sess_1",
        "created_at": now,
        "expires_at": now + timedelta(minutes=5),
    }
    values.update(overrides)
    if values["kind"] == Interaction.Kind.APPROVAL and "actions" not in overrides:
        from interactions.render.interaction_cards import approval_actions

        values["actions"] = approval_actions()
    return Interaction(**values)


QUICK_ACTIONS = [
    {"id": "yes", "label": "Yes please", "value": "yes", "style": "primary"},
    {"id": "no", "label": "No", "value": "no", "style": "default"},
    {"id": "later", "label": "Later", "value": "later", "style": "default"},
]

FORM_FIELDS = [
    {
        "name": "env",
        "label": "Environment",
        "type": "select",
        "required": True,
        "options": [{"label": "Staging", "value": "staging"}, {"label": "Prod", "value": "prod"}],
    },
    {"name": "note", "label": "Note", "type": "text", "required": False},
]


@pytest.fixture
def make_interaction(db):
    """`make_interaction(bot, kind="approval", **fields)` → a saved pending interaction (not
    sent)."""

    def make(bot, kind="approval", **fields):
        defaults = {
            "channel": "feishu",
            "chat_id": CHAT,
            "title": "Run a shell command?",
            "body": "The agent wants to run a command.",
            "requester_open_id": REQUESTER,
            "session_id": "sess_1",
        }
        if kind == "approval":
            defaults["tool"] = "bash"
        if kind == "quick_reply":
            defaults["actions"] = QUICK_ACTIONS
        if kind == "form":
            defaults["fields"] = FORM_FIELDS
        defaults.update(fields)
        ia, _created = approvals.create_interaction(bot, kind=kind, **defaults)
        return ia

    return make
