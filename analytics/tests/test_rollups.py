"""The per-delivery rating-count rollup: exact under every kind of write, rebuildable, and
giving the same answers as counting the latest ratings directly."""

from __future__ import annotations

import random
import zoneinfo
from datetime import UTC, datetime, timedelta

import pytest
from django.core.management import call_command
from django.db import connection

from analytics import queries, rollups
from analytics.access import Scope
from analytics.filters import AnalyticsQuery
from analytics.models import DeliveryRatingCounts
from feedback.models import Delivery, LatestFeedback

EVERYTHING = Scope(team_ids=None)


def counts_of(delivery):
    row = DeliveryRatingCounts.objects.filter(delivery=delivery).first()
    return (row.positive, row.progress, row.negative) if row else None


def test_triggers_follow_inserts_reselects_and_deletes(make_delivery, rate):
    d = make_delivery()
    assert counts_of(d) is None
    rate(d, "ou_1", "wrong", reason="too_slow")
    assert counts_of(d) == (0, 0, 1)
    rate(d, "ou_2", "conclusive_usable")
    assert counts_of(d) == (1, 0, 1)
    rate(d, "ou_1", "partly")  # reselect moves the latest rating: negative → progress
    assert counts_of(d) == (1, 1, 0)
    rate(d, "ou_1", "partly")  # same semantic again: nothing moves
    assert counts_of(d) == (1, 1, 0)
    row = DeliveryRatingCounts.objects.get(delivery=d)
    assert (row.created_at, row.team_id, row.bot_id) == (d.created_at, d.team_id, d.bot_id)
    LatestFeedback.objects.filter(delivery=d, operator_open_id="ou_2").delete()
    assert counts_of(d) == (0, 1, 0)
    assert rollups.mismatches() == []


def test_triggers_follow_queryset_updates_and_raw_sql(make_delivery, rate):
    a, b = make_delivery(), make_delivery()
    rate(a, "ou_1", "wrong")
    rate(b, "ou_2", "wrong")
    LatestFeedback.objects.filter(delivery=a).update(
        semantic="positive", verdict_key="conclusive_usable"
    )
    assert counts_of(a) == (1, 0, 0)
    with connection.cursor() as cur:
        cur.execute(
            "UPDATE feedback_latestfeedback SET delivery_id = %s WHERE delivery_id = %s",
            [a.id, b.id],
        )
    assert counts_of(a) == (1, 0, 1) and counts_of(b) == (0, 0, 0)
    assert rollups.mismatches() == []


def test_deleting_a_delivery_removes_its_counts(make_delivery, rate):
    from feedback.models import Revision

    d = make_delivery()
    rate(d, "ou_1", "wrong")
    rate(d, "ou_1", "partly")
    LatestFeedback.objects.filter(delivery=d).delete()
    Revision.objects.filter(delivery=d, supersedes__isnull=False).delete()
    Revision.objects.filter(delivery=d).delete()
    d.delete()
    assert DeliveryRatingCounts.objects.count() == 0


def test_deleting_a_team_takes_its_ratings_out_of_its_numbers(world, make_delivery, rate):
    """Delivery.team is SET_NULL: the rollup's copied team_id must follow, or the deleted
    team's id kept 207 ratings of 0 deliveries (break-it pass)."""
    from botadmin import services

    d = make_delivery(team="a")
    rate(d, "ou_1", "wrong")
    team_id = world.team_a.pk
    services.delete_team(None, world.team_a)
    d.refresh_from_db()
    assert d.team_id is None
    assert DeliveryRatingCounts.objects.get(delivery=d).team_id is None
    assert rollups.mismatches() == []
    assert not DeliveryRatingCounts.objects.filter(team_id=team_id).exists()


def test_the_check_finds_a_copied_team_that_differs_from_the_delivery(make_delivery, rate, world):
    d = make_delivery(team="a")
    rate(d, "ou_1", "wrong")
    DeliveryRatingCounts.objects.filter(delivery=d).update(team_id=world.team_b.pk)
    (found,) = rollups.mismatches()
    assert found["delivery_id"] == d.pk
    rollups.rebuild()
    assert rollups.mismatches() == []


def test_rebuild_repairs_damage_and_is_idempotent(make_delivery, rate):
    for i in range(5):
        d = make_delivery()
        rate(d, "ou_1", ["wrong", "partly", "conclusive_usable"][i % 3])
        if i % 2:
            rate(d, "ou_2", "wrong")
    DeliveryRatingCounts.objects.update(positive=7, negative=0)
    DeliveryRatingCounts.objects.filter(pk=d.pk).delete()
    assert rollups.mismatches() != []
    assert rollups.rebuild() == 5
    assert rollups.mismatches() == []
    before = list(DeliveryRatingCounts.objects.order_by("pk").values())
    assert rollups.rebuild() == 5
    assert list(DeliveryRatingCounts.objects.order_by("pk").values()) == before
    call_command("analytics_rebuild", "--check")


@pytest.fixture
def random_history(world, make_delivery, rate):
    """60 deliveries over 10 days in both teams, random raters, reselects and reasons."""
    rng = random.Random(5)
    start = datetime(2025, 3, 1, tzinfo=UTC)
    for i in range(60):
        d = make_delivery(
            at=start + timedelta(hours=rng.randrange(240), minutes=rng.randrange(60)),
            team=rng.choice(["a", "b", None]),
            model=rng.choice(["m1", "m2"]),
        )
        for op in rng.sample(["ou_1", "ou_2", "ou_3"], rng.choice([0, 0, 1, 1, 2, 3])):
            for _ in range(rng.choice([1, 1, 2])):
                verdict = rng.choice(["wrong", "partly", "conclusive_usable"])
                reason = rng.choice(["", "inaccurate", "too_slow"]) if verdict == "wrong" else ""
                rate(d, op, verdict, reason=reason)
        if i % 17 == 0:
            LatestFeedback.objects.filter(delivery=d).delete()
    return start


@pytest.mark.parametrize(
    ("delivery", "rating"),
    [
        ({}, {}),
        ({"team": "A"}, {}),
        ({"bot": "cli_analytics"}, {}),
        ({}, {"semantic": "negative"}),
        ({"team": "B"}, {"semantic": "progress"}),
        ({"bot": "cli_nope"}, {}),
    ],
)
@pytest.mark.parametrize("tz", ["UTC", "Asia/Shanghai", "America/New_York", "Asia/Kathmandu"])
def test_rollup_and_slot_grouping_equal_the_raw_latest_ratings(
    random_history, world, monkeypatch, delivery, rating, tz
):
    zone = zoneinfo.ZoneInfo(tz)
    team_ids = {"A": world.team_a.id, "B": world.team_b.id}
    delivery = {k: team_ids.get(v, v) for k, v in delivery.items()}
    query = AnalyticsQuery(
        random_history + timedelta(days=3),
        random_history + timedelta(days=9),
        zone,
        delivery,
        rating,
    )
    assert queries.answerable_from_rollup(query)
    scopes = [EVERYTHING, Scope(team_ids=frozenset({world.team_a.id}))]
    fast = [
        (queries.summary(query, s), queries.trend(query, s, "day"), queries.reasons(query, s))
        for s in scopes
    ]
    # The reference: latest ratings joined to deliveries, local dates computed row by row.
    monkeypatch.setattr(queries, "answerable_from_rollup", lambda q: False)
    monkeypatch.setattr(queries, "SLOT_SECONDS", ())
    raw = [
        (queries.summary(query, s), queries.trend(query, s, "day"), queries.reasons(query, s))
        for s in scopes
    ]
    assert fast == raw
    assert fast[0][0]["current"]["ratings"] > 0 or delivery.get("bot") == "cli_nope" or rating


def test_seed_command_is_idempotent_resettable_and_exact(db):
    call_command("seed_analytics", deliveries=400, days=30, verbosity=0)
    n = Delivery.objects.count()
    rated = DeliveryRatingCounts.objects.count()
    assert n == 400
    assert 0.3 < rated / n < 0.5  # about 40% of deliveries rated
    assert LatestFeedback.objects.filter(semantic="negative").exclude(reason_key="").exists()
    assert LatestFeedback.objects.filter(revision__revision__gt=1).exists()  # reselect chains
    assert Delivery.objects.filter(status__in=["send_failed", "failed"]).exists()
    assert rollups.mismatches() == []
    call_command("seed_analytics", deliveries=400, days=30, verbosity=0)  # nothing to do
    assert Delivery.objects.count() == 400
    call_command("seed_analytics", deliveries=300, days=30, reset=True, verbosity=0)
    assert Delivery.objects.count() == 300
    assert rollups.mismatches() == []


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_concurrent_first_ratings_of_one_delivery_are_all_counted(world, make_delivery):
    """Eight operators rate the same delivery at the same moment, each in its own transaction:
    the triggers' upsert must neither lose an increment nor fail on the first-row race."""
    import threading

    from django.db import connection as thread_connection
    from django.db import transaction

    from feedback.models import Revision

    d = make_delivery()
    barrier = threading.Barrier(8)
    failures = []

    def click(i):
        try:
            barrier.wait(timeout=10)
            with transaction.atomic():
                rev = Revision.objects.create(
                    revision_id=f"rev_c{i}",
                    delivery_id=d.id,
                    operator_open_id=f"ou_c{i}",
                    revision=1,
                    verdict_key="wrong" if i % 2 else "conclusive_usable",
                    semantic="negative" if i % 2 else "positive",
                    callback_key=f"cb_c{i}",
                )
                LatestFeedback.objects.create(
                    delivery_id=d.id,
                    operator_open_id=f"ou_c{i}",
                    revision=rev,
                    semantic=rev.semantic,
                    verdict_key=rev.verdict_key,
                )
        except Exception as exc:  # noqa: BLE001 - reported below
            failures.append(repr(exc))
        finally:
            thread_connection.close()

    threads = [threading.Thread(target=click, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert failures == []
    assert counts_of(d) == (4, 0, 4)
    assert rollups.mismatches() == []
