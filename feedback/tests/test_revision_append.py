"""`Revision.objects.append`: a new revision, its operator's latest feedback and its delivery's
current revision written together (one statement on PostgreSQL, three on SQLite), with the
same rows, rating counts and instance state as the three separate writes."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.db import IntegrityError, connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from analytics.models import DeliveryRatingCounts
from feedback.envelopes import stable_event_id
from feedback.events import feedback_revised_event
from feedback.models import Delivery, Event, LatestFeedback, Revision

pytestmark = pytest.mark.django_db


def _revision(delivery, operator, n, semantic, *, previous=None, reason="", comment=""):
    return Revision(
        revision_id=f"fb_append_{operator}_{n}",
        delivery=delivery,
        operator_open_id=operator,
        revision=n,
        verdict_key={"positive": "good", "negative": "wrong"}[semantic],
        semantic=semantic,
        reason_key=reason,
        comment=comment,
        callback_key=f"cb_append_{operator}_{n}",
        supersedes=previous,
        created_at=timezone.now() - timedelta(seconds=10 - n),
    )


def _counts(delivery):
    row = DeliveryRatingCounts.objects.get(delivery=delivery)
    return row.positive, row.progress, row.negative


def test_append_writes_the_revision_moves_latest_feedback_and_the_delivery_forward(
    make_bot, make_delivery
):
    delivery = make_delivery(make_bot())
    before = Delivery.objects.get(pk=delivery.pk).updated_at
    with transaction.atomic(), CaptureQueriesContext(connection) as seen:
        first = Revision.objects.append(_revision(delivery, "ou_a", 1, "negative"), delivery)
    assert len(seen.captured_queries) == (1 if connection.vendor == "postgresql" else 3)
    assert first.pk is not None and not first._state.adding
    stored = Delivery.objects.get(pk=delivery.pk)
    assert stored.current_revision_id == first.pk == delivery.current_revision.pk
    assert stored.updated_at == delivery.updated_at and stored.updated_at > before
    latest = LatestFeedback.objects.get(delivery=delivery, operator_open_id="ou_a")
    assert (latest.revision_id, latest.semantic, latest.updated_at) == (
        first.pk,
        "negative",
        first.created_at,
    )
    assert _counts(delivery) == (0, 0, 1)

    with transaction.atomic():
        second = Revision.objects.append(
            _revision(delivery, "ou_a", 2, "negative", previous=first, reason="too_slow"),
            delivery,
        )
        other = Revision.objects.append(_revision(delivery, "ou_b", 1, "positive"), delivery)
        third = Revision.objects.append(
            _revision(delivery, "ou_a", 3, "positive", previous=second, comment="好 'x' %s"),
            delivery,
        )
    rows = {r.pk: r for r in Revision.objects.filter(delivery=delivery)}
    assert rows[third.pk].supersedes_id == second.pk and rows[third.pk].comment == "好 'x' %s"
    assert rows[second.pk].reason_key == "too_slow"
    assert Delivery.objects.get(pk=delivery.pk).current_revision_id == third.pk
    latest = dict(
        LatestFeedback.objects.filter(delivery=delivery).values_list(
            "operator_open_id", "revision_id"
        )
    )
    assert latest == {"ou_a": third.pk, "ou_b": other.pk}  # one row per operator, moved
    assert _counts(delivery) == (2, 0, 0)  # ou_a moved negative → positive, ou_b positive


def test_a_taken_callback_key_fails_the_whole_append_and_writes_nothing(make_bot, make_delivery):
    delivery = make_delivery(make_bot())
    with transaction.atomic():
        first = Revision.objects.append(_revision(delivery, "ou_a", 1, "positive"), delivery)
    clash = _revision(delivery, "ou_b", 1, "negative")
    clash.callback_key = first.callback_key
    with pytest.raises(IntegrityError), transaction.atomic():
        Revision.objects.append(clash, delivery)
    assert list(Revision.objects.values_list("pk", flat=True)) == [first.pk]
    assert list(LatestFeedback.objects.values_list("operator_open_id", flat=True)) == ["ou_a"]
    assert Delivery.objects.get(pk=delivery.pk).current_revision_id == first.pk
    assert _counts(delivery) == (1, 0, 0)


def test_append_inserts_the_revisions_event_in_the_same_statement_on_postgresql(
    make_bot, make_delivery
):
    delivery = make_delivery(make_bot())
    with transaction.atomic(), CaptureQueriesContext(connection) as seen:
        revision = _revision(delivery, "ou_a", 1, "positive")
        fresh = feedback_revised_event(revision)
        Revision.objects.append(revision, delivery, fresh.event)
    assert len(seen.captured_queries) == (1 if connection.vendor == "postgresql" else 4)
    event = fresh.event
    assert event.pk is not None and not event._state.adding
    stored = Event.objects.get(pk=event.pk)
    assert (stored.event_id, stored.type, stored.delivery_id, stored.bot_id) == (
        stable_event_id("feedback.revised", revision.revision_id),
        "feedback.revised",
        delivery.pk,
        delivery.bot_id,
    )
    assert json.loads(stored.body)["data"]["revision_id"] == revision.revision_id
    assert stored.created_at == revision.created_at
    assert Revision.objects.get(pk=revision.pk).delivery_id == delivery.pk
    assert Delivery.objects.get(pk=delivery.pk).current_revision_id == revision.pk
    assert _counts(delivery) == (1, 0, 0)


def test_a_taken_event_id_fails_the_whole_append_and_writes_nothing(make_bot, make_delivery):
    delivery = make_delivery(make_bot())
    revision = _revision(delivery, "ou_a", 1, "positive")
    with transaction.atomic():
        Event.objects.insert(feedback_revised_event(revision).event)
    with pytest.raises(IntegrityError), transaction.atomic():
        Revision.objects.append(revision, delivery, feedback_revised_event(revision).event)
    assert not Revision.objects.exists() and not LatestFeedback.objects.exists()
    assert Event.objects.count() == 1
    assert Delivery.objects.get(pk=delivery.pk).current_revision_id is None
