"""The analytics part of `manage.py seed_demo`: a small history with comments and an
incident, a filled review queue, an alert rule whose replayed history holds the incident's
alert — and a second run changes nothing."""

from __future__ import annotations

import io
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.test import override_settings
from django.utils import timezone

from analytics import demo, seed
from analytics.models import Alert, AlertRule, Reviewer, ReviewItem, ReviewQueue
from feedback.models import Delivery, Event, LatestFeedback, Revision


def _counts():
    return {
        m.__name__: m.objects.count()
        for m in (
            Delivery,
            Revision,
            LatestFeedback,
            Event,
            ReviewQueue,
            ReviewItem,
            AlertRule,
            Alert,
            Reviewer,
        )
    }


@pytest.mark.django_db
@override_settings(DEBUG=True)
def test_seed_demo_builds_a_history_a_queue_and_an_alert_once():
    out = io.StringIO()
    call_command("seed_demo", stdout=out)
    text = out.getvalue()
    assert seed.seed_delivery_count() == demo.DEMO_DELIVERIES
    assert "3000/3000 deliveries" in text  # progress is printed
    assert Revision.objects.exclude(comment="").exists()
    queue = ReviewQueue.objects.get(name=demo.QUEUE_NAME)
    assert (
        queue.items.count()
        == LatestFeedback.objects.filter(
            semantic="negative", delivery__team__in=queue.teams.all()
        ).count()
        > 0
    )
    rule = AlertRule.objects.get(name=demo.RULE_NAME)
    now = timezone.now()
    start, end = (now - timedelta(days=d) for d in demo.INCIDENT)
    # the incident fired an alert (its 24-hour window reaches into the incident) that resolved
    incident = Alert.objects.get(
        rule=rule, fired_at__gt=start, fired_at__lt=end + timedelta(days=1)
    )
    assert incident.resolved_at is not None and incident.value < rule.threshold
    assert incident.notice == Alert.Notice.NONE  # replayed history sends no card
    assert Reviewer.objects.filter(user__username="admin").count() == 5
    before = _counts()
    again = io.StringIO()
    call_command("seed_demo", stdout=again)
    assert _counts() == before
    assert "3000 deliveries exist, left as is" in again.getvalue()


@pytest.mark.django_db
@override_settings(DEBUG=True)
def test_the_seeders_reset_also_removes_the_demo_queues_items():
    call_command("seed_demo", stdout=io.StringIO())
    assert ReviewItem.objects.exists()
    deleted = seed.reset()
    assert deleted["analytics.ReviewItem"] > 0
    assert seed.seed_delivery_count() == 0 and not ReviewItem.objects.exists()
    assert ReviewQueue.objects.filter(name=demo.QUEUE_NAME).exists()  # the queue itself stays


@pytest.mark.django_db
def test_seeded_events_and_outbox_rows_carry_the_envelope_of_their_type():
    import json

    seed.build(3000, days=30)
    events = list(Event.objects.select_related("delivery", "bot"))
    assert {e.type for e in events} == {"turn.completed", "interaction.resolved"}
    for event in events:
        body = json.loads(event.body)
        assert (body["id"], body["type"], body["version"]) == (event.event_id, event.type, 1)
        assert body["data"]["bot_app_id"] == event.bot.app_id
        if event.type == "turn.completed":
            assert body["data"]["delivery_id"] == event.delivery.delivery_id
            assert body["data"]["status"] == event.delivery.status
        else:
            assert body["data"]["resolution"]["via"] == "card"
        assert {o.body for o in event.outbox_items.all()} == {event.body}
