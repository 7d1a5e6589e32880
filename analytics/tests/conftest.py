"""Fixtures of the analytics tests: hand-built deliveries and rating chains.

`rate()` writes what the click handler writes (feedback/revisions.py on the feedback branch):
a new Revision superseding the operator's previous one, and the LatestFeedback row moved
forward, in one transaction. Analytics only read these rows.
"""

from __future__ import annotations

import itertools
from datetime import UTC, datetime

import pytest
from django.db import transaction

from analytics.tests.test_dashboard_browser import browser  # noqa: F401 - the Chromium fixture

SNAPSHOT = {
    "enabled": True,
    "buttons": [
        {"key": "conclusive_usable", "label": "有用", "semantic": "positive", "style": "primary"},
        {"key": "partly", "label": "部分可用", "semantic": "progress", "style": "default"},
        {"key": "wrong", "label": "不对", "semantic": "negative", "style": "danger"},
    ],
    "negative_followup": {
        "reasons": [
            {"key": "inaccurate", "label": "不准确"},
            {"key": "too_slow", "label": "太慢"},
        ],
        "comment": {"enabled": True},
    },
}
SEMANTIC_OF = {b["key"]: b["semantic"] for b in SNAPSHOT["buttons"]}

_seq = itertools.count(1)


@pytest.fixture
def world(db, make_bot):
    """Two teams (A, B), one bot, one chat per team."""
    from botadmin.models import Chat, Team

    team_a = Team.objects.create(name="Team A")
    team_b = Team.objects.create(name="Team B")
    bot = make_bot(app_id="cli_analytics")
    chat_a = Chat.objects.create(chat_id="oc_team_a", name="A")
    chat_b = Chat.objects.create(chat_id="oc_team_b", name="B")

    class World:
        pass

    w = World()
    w.team_a, w.team_b, w.bot, w.chat_a, w.chat_b = team_a, team_b, bot, chat_a, chat_b
    return w


@pytest.fixture
def make_delivery(world):
    """Factory: `make_delivery(at=datetime, team=…, **fields)` → Delivery (status sent)."""
    from feedback.models import Delivery

    def make(at: datetime | None = None, team="a", snapshot=SNAPSHOT, **fields):
        n = next(_seq)
        team_obj = {"a": world.team_a, "b": world.team_b, None: None}.get(team, team)
        chat = world.chat_a if team_obj == world.team_a else world.chat_b
        defaults = {
            "delivery_id": f"dlv_{n:08d}",
            "bot": world.bot,
            "chat": chat,
            "team": team_obj,
            "status": Delivery.Status.SENT,
            "response_kind": Delivery.ResponseKind.FINAL,
            "feedback_shown": True,
            "policy_snapshot": snapshot,
            "platform_message_id": f"om_{n}",
            "requester_open_id": "ou_requester_secret",
            "card_id": f"card_{n}",
            "model": "gpt-x",
            "created_at": at or datetime(2025, 3, 10, 4, 0, tzinfo=UTC),
        }
        defaults.update(fields)
        return Delivery.objects.create(**defaults)

    return make


@pytest.fixture
def rate(db):
    """`rate(delivery, operator, verdict_key, reason_key="", comment="", at=None)` → Revision:
    append to the operator's chain and move LatestFeedback, in one transaction."""
    from feedback.models import LatestFeedback, Revision

    def do(delivery, operator, verdict, reason="", comment="", at=None):
        at = at or delivery.created_at
        with transaction.atomic():
            prev = (
                Revision.objects.filter(delivery=delivery, operator_open_id=operator)
                .order_by("-revision")
                .first()
            )
            n = next(_seq)
            rev = Revision.objects.create(
                revision_id=f"rev_{n:08d}",
                delivery=delivery,
                operator_open_id=operator,
                revision=(prev.revision + 1) if prev else 1,
                verdict_key=verdict,
                semantic=SEMANTIC_OF[verdict],
                reason_key=reason,
                comment=comment,
                callback_key=f"cb_{n}",
                supersedes=prev,
                created_at=at,
            )
            LatestFeedback.objects.update_or_create(
                delivery=delivery,
                operator_open_id=operator,
                defaults={
                    "revision": rev,
                    "semantic": rev.semantic,
                    "verdict_key": verdict,
                    "reason_key": reason,
                    "updated_at": at,
                },
            )
        return rev

    return do


@pytest.fixture
def manager_of(db, django_user_model):
    """`manager_of(*teams)` → a user who is a member (manager) of `teams`."""
    from botadmin.models import TeamMembership

    def make(*teams, username=None):
        user = django_user_model.objects.create_user(
            username=username or f"mgr{next(_seq)}", password="pw-for-tests-only"
        )
        for team in teams:
            TeamMembership.objects.create(team=team, user=user)
        return user

    return make


@pytest.fixture
def api(db):
    """`api(user)` → DRF APIClient logged in (session) as `user`."""
    from rest_framework.test import APIClient

    def make(user=None):
        client = APIClient()
        if user is not None:
            client.force_login(user)
        return client

    return make


@pytest.fixture
def superuser(db, django_user_model):
    return django_user_model.objects.create_superuser("root", "root@example.com", "pw-tests")


@pytest.fixture
def reviewer_of(db, django_user_model):
    """`reviewer_of(*teams, username=None, manager=False)` → a user with the reviewer
    permission for `teams` (and a manager of them with `manager=True`)."""
    from analytics.models import Reviewer
    from botadmin.models import TeamMembership

    def make(*teams, username=None, manager=False):
        user = django_user_model.objects.create_user(
            username=username or f"rev{next(_seq)}", password="pw-for-tests-only"
        )
        for team in teams:
            Reviewer.objects.create(team=team, user=user)
            if manager:
                TeamMembership.objects.create(team=team, user=user)
        return user

    return make


@pytest.fixture
def make_queue(world):
    """`make_queue(*teams, filters={"semantic": "negative"}, **fields)` → ReviewQueue."""
    from analytics.models import ReviewQueue

    def make(*teams, filters=None, name=None, **fields):
        queue = ReviewQueue.objects.create(
            name=name or f"queue {next(_seq)}",
            filters={"semantic": "negative"} if filters is None else filters,
            **fields,
        )
        queue.teams.set(teams or [world.team_a])
        return queue

    return make
