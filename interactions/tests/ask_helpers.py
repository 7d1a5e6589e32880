"""Shared helpers and fixtures of the progress-card / ask tests. Import into a test
module with `from interactions.tests.ask_helpers import *  # noqa: F403`."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.utils import timezone

from interactions import presence as panel_presence
from interactions.asks import progress as progress_sessions
from interactions.cardqueue import worker as cardworker
from interactions.models import CardEntity

REQUESTER = "ou_requester"
OTHER = "ou_other"
CHAT = "oc_group_chat"
SESSION = "sess_PLACEHOLDER"

#: One single-select and one multi-select question (the shape of card_action_ask_submit.json).
QUESTIONS = [
    {
        "question": "Which database should the service use?",
        "header": "Database",
        "options": [
            {"label": "SQLite", "description": "Single file, zero setup"},
            {"label": "PostgreSQL", "description": "Production grade"},
        ],
        "multiSelect": False,
    },
    {
        "question": "Which checks should run before the deploy?",
        "header": "Checks",
        "options": [
            {"label": "Unit tests", "description": "pytest"},
            {"label": "Lint", "description": "ruff"},
            {"label": "Migrations", "description": "makemigrations --check"},
        ],
        "multiSelect": True,
    },
]


class PanelRecorder:
    """Monkeypatched `interactions.panels.service`: who is connected, and every push made."""

    def __init__(self):
        self.connected: set[str] = set()
        self.pushes: list[tuple[str, dict]] = []

    def is_connected(self, bot, open_id):
        return open_id in self.connected

    def push(self, bot, open_id, message):
        self.pushes.append((open_id, message))

    def of_type(self, type_):
        return [m for _o, m in self.pushes if m["type"] == type_]


@pytest.fixture
def panel(monkeypatch):
    recorder = PanelRecorder()
    monkeypatch.setattr(panel_presence, "is_connected", recorder.is_connected)
    monkeypatch.setattr(panel_presence, "push", recorder.push)
    return recorder


@pytest.fixture
def progress(lark_stub, lark_bot):
    """A running progress session of `lark_bot` whose card was sent to the stub."""
    result = progress_sessions.update_progress(
        lark_bot,
        SESSION,
        status="running",
        title="Deploying the service",
        summary="Step 2 of 5",
        tool_lines=["bash: make build"],
        receive_id=CHAT,
        requester_open_id=REQUESTER,
    )
    return result.session


def run_queue():
    """Apply every due card update now (pacing skipped)."""
    total = 0
    while True:
        CardEntity.objects.update(next_send_at=timezone.now() - timedelta(seconds=1))
        done = cardworker.run_due(10)
        total += done
        if not done:
            return total


def forms_of(card) -> list[dict]:
    return [e for e in card["body"]["elements"] if e.get("tag") == "form"]


def has_form(card) -> bool:
    return bool(forms_of(card))


def card_text(card) -> str:
    return json.dumps(card, ensure_ascii=False)
