"""Metric definitions (coverage, positive rate, deltas, reasons) on small hand-built data."""

from __future__ import annotations

import zoneinfo
from datetime import UTC, datetime

import pytest

from analytics import queries
from analytics.access import Scope
from analytics.filters import AnalyticsQuery

UTCZ = zoneinfo.ZoneInfo("UTC")
EVERYTHING = Scope(team_ids=None)


def q(start="2025-03-10", end="2025-03-11", delivery=None, rating=None, tz=UTCZ):
    def at(text):
        return datetime.fromisoformat(text).replace(tzinfo=tz).astimezone(UTC)

    return AnalyticsQuery(at(start), at(end), tz, delivery or {}, rating or {})


@pytest.fixture
def scenario(make_delivery, rate):
    """Range 2025-03-10 (UTC): d1 rated by two operators (op1 reselected wrong→usable), d2
    progress, d3 unrated, d4 send_failed and unrated; previous day: d5 positive; team B: d6."""
    d1 = make_delivery(at=datetime(2025, 3, 10, 1, tzinfo=UTC))
    d2 = make_delivery(at=datetime(2025, 3, 10, 2, tzinfo=UTC))
    d3 = make_delivery(at=datetime(2025, 3, 10, 3, tzinfo=UTC), feedback_shown=False)
    d4 = make_delivery(at=datetime(2025, 3, 10, 4, tzinfo=UTC), status="send_failed")
    d5 = make_delivery(at=datetime(2025, 3, 9, 12, tzinfo=UTC))
    d6 = make_delivery(at=datetime(2025, 3, 10, 5, tzinfo=UTC), team="b")
    rate(d1, "ou_op1", "wrong", reason="too_slow")
    rate(d1, "ou_op1", "conclusive_usable")  # reselect: only this one counts
    rate(d1, "ou_op2", "wrong", reason="inaccurate", comment="秘密 comment")
    rate(d2, "ou_op1", "partly")
    rate(d5, "ou_op1", "conclusive_usable")
    rate(d6, "ou_op9", "wrong", reason="inaccurate")
    return {"d1": d1, "d2": d2, "d3": d3, "d4": d4, "d5": d5, "d6": d6}


def test_summary_counts_latest_ratings_per_operator_and_keeps_progress_in_the_denominator(
    scenario, world
):
    scope = Scope(team_ids=frozenset({world.team_a.id}))
    cur = queries.summary(q(), scope)["current"]
    assert cur["delivered"] == 4
    assert cur["feedback_shown"] == 3
    assert cur["ratings"] == 3  # op1 latest on d1, op2 on d1, op1 on d2; op1's first is superseded
    assert cur["rated_deliveries"] == 2
    assert (cur["positive"], cur["progress"], cur["negative"]) == (1, 1, 1)
    assert cur["coverage"] == {"numerator": 2, "denominator": 4, "value": 0.5}
    assert cur["positive_rate"] == {"numerator": 1, "denominator": 3, "value": pytest.approx(1 / 3)}


def test_previous_period_of_equal_length_and_its_delta(scenario, world):
    scope = Scope(team_ids=frozenset({world.team_a.id}))
    body = queries.summary(q(), scope)
    assert body["previous_range"] == {
        "from": datetime(2025, 3, 9, tzinfo=UTC),
        "to": datetime(2025, 3, 10, tzinfo=UTC),
    }
    prev = body["previous"]
    assert (prev["delivered"], prev["ratings"], prev["rated_deliveries"]) == (1, 1, 1)
    assert prev["coverage"]["value"] == 1.0
    assert prev["positive_rate"]["value"] == 1.0
    assert body["delta"]["delivered"] == 3
    assert body["delta"]["coverage"] == pytest.approx(-0.5)
    assert body["delta"]["positive_rate"] == pytest.approx(1 / 3 - 1)


def test_zero_denominators_give_null_not_zero(db):
    body = queries.summary(q("2030-01-01", "2030-01-02"), EVERYTHING)
    cur = body["current"]
    assert cur["delivered"] == 0
    assert cur["coverage"] == {"numerator": 0, "denominator": 0, "value": None}
    assert cur["positive_rate"] == {"numerator": 0, "denominator": 0, "value": None}
    assert body["delta"]["coverage"] is None and body["delta"]["positive_rate"] is None


def test_two_delivered_with_one_negative_is_half_coverage_and_zero_positive_rate(
    make_delivery, rate
):
    # The smallest worked example: two answers delivered, one rated negative.
    d1 = make_delivery(at=datetime(2025, 3, 10, 1, tzinfo=UTC))
    make_delivery(at=datetime(2025, 3, 10, 2, tzinfo=UTC))
    rate(d1, "ou_x", "wrong")
    cur = queries.summary(q(), EVERYTHING)["current"]
    assert cur["coverage"]["value"] == 0.5
    assert cur["positive_rate"] == {"numerator": 0, "denominator": 1, "value": 0.0}


def test_superuser_scope_includes_every_team_and_deliveries_without_team(scenario, make_delivery):
    make_delivery(at=datetime(2025, 3, 10, 6, tzinfo=UTC), team=None)
    cur = queries.summary(q(), EVERYTHING)["current"]
    assert cur["delivered"] == 6
    assert cur["ratings"] == 4


def test_rating_filters_select_ratings_but_never_shrink_delivered(scenario, world):
    scope = Scope(team_ids=frozenset({world.team_a.id}))
    cur = queries.summary(q(rating={"semantic": "negative"}), scope)["current"]
    assert cur["delivered"] == 4
    assert (cur["ratings"], cur["negative"], cur["positive"]) == (1, 1, 0)
    assert cur["coverage"] == {"numerator": 1, "denominator": 4, "value": 0.25}
    by_reason = queries.summary(q(rating={"reason": "too_slow"}), scope)["current"]
    assert by_reason["ratings"] == 0  # op1's too_slow was superseded by a reselect


def test_delivery_dimension_filters_apply_to_deliveries_and_their_ratings(
    scenario, make_delivery, rate
):
    other = make_delivery(at=datetime(2025, 3, 10, 7, tzinfo=UTC), model="claude-y")
    rate(other, "ou_op1", "wrong", reason="too_slow")
    cur = queries.summary(q(delivery={"model": "claude-y"}), EVERYTHING)["current"]
    assert (cur["delivered"], cur["ratings"], cur["negative"]) == (1, 1, 1)
    failed = queries.summary(q(delivery={"status": "send_failed"}), EVERYTHING)["current"]
    assert (failed["delivered"], failed["ratings"]) == (1, 0)


def test_trend_buckets_add_up_to_the_summary(scenario):
    query = q("2025-03-08", "2025-03-12")
    days = queries.trend(query, EVERYTHING, "day")["buckets"]
    assert [str(b["date"]) for b in days] == [
        "2025-03-08",
        "2025-03-09",
        "2025-03-10",
        "2025-03-11",
    ]
    assert [b["delivered"] for b in days] == [0, 1, 5, 0]
    cur = queries.summary(query, EVERYTHING)["current"]
    for key in ("delivered", "ratings", "rated_deliveries", "positive", "progress", "negative"):
        assert sum(b[key] for b in days) == cur[key], key
    mar10 = days[2]
    assert (mar10["positive"], mar10["progress"], mar10["negative"]) == (1, 1, 2)


def test_reasons_are_keyed_by_key_counted_on_latest_ratings_and_labelled_from_snapshots(
    scenario, make_delivery, rate
):
    renamed = {
        **scenario["d1"].policy_snapshot,
        "negative_followup": {"reasons": [{"key": "inaccurate", "label": "事实错误"}]},
    }
    newest = make_delivery(at=datetime(2025, 3, 10, 9, tzinfo=UTC), snapshot=renamed)
    rate(newest, "ou_op3", "wrong", reason="inaccurate")
    rate(newest, "ou_op4", "wrong")  # negative without a reason
    body = queries.reasons(q(), EVERYTHING)
    assert body["negative_ratings"] == 4
    assert body["without_reason"] == 1
    assert body["reasons"] == [
        {
            "key": "inaccurate",
            "label": "事实错误",  # the newest snapshot's wording; one series per key
            "count": 3,
            "share": {"numerator": 3, "denominator": 4, "value": 0.75},
        }
    ]


def test_reason_without_a_label_in_the_snapshot_falls_back_to_its_key(make_delivery, rate):
    d = make_delivery(at=datetime(2025, 3, 10, 1, tzinfo=UTC), snapshot={"buttons": "broken"})
    rate(d, "ou_x", "wrong", reason="gone_key")
    assert queries.reasons(q(), EVERYTHING)["reasons"][0]["label"] == "gone_key"


def _outbox_row(delivery, status, destination, *, team=None, bot=None, n=[0]):  # noqa: B006
    from feedback.models import Event, OutboxItem

    n[0] += 1
    event = Event.objects.create(
        event_id=f"evt_test_{n[0]}",
        # feedback.revised: a delivery may have many (only one turn.completed per delivery).
        type="feedback.revised" if delivery else "interaction.resolved",
        delivery=delivery,
        team=team if team is not None else (delivery.team if delivery else None),
        bot=bot if bot is not None else (delivery.bot if delivery else None),
        body="{}",
    )
    return OutboxItem.objects.create(
        event=event,
        destination=destination,
        body="{}",
        status=status,
        created_at=datetime(2025, 3, 10, 8, tzinfo=UTC),
    )


def test_failures_count_failed_deliveries_and_failed_or_dead_outbox_rows_by_dimension(
    scenario, world, make_delivery
):
    from feedback.models import WebhookDestination

    dest = WebhookDestination.objects.create(name="ops", url="https://hooks.example.com/x")
    make_delivery(
        at=datetime(2025, 3, 10, 6, tzinfo=UTC),
        status="failed",
        error_code="worker_crash",
        model="claude-y",
    )
    _outbox_row(scenario["d1"], "dead", dest)
    _outbox_row(scenario["d2"], "failed", dest)
    _outbox_row(scenario["d2"], "done", dest)  # delivered fine: not a failure
    _outbox_row(scenario["d6"], "dead", dest)  # team B
    _outbox_row(None, "failed", dest, team=world.team_a, bot=world.bot)  # no delivery

    body = queries.failures(q(), EVERYTHING)
    assert body["deliveries"]["by_status"] == {"send_failed": 1, "failed": 1}
    assert body["deliveries"]["rate"] == {"numerator": 2, "denominator": 6, "value": 2 / 6}
    assert {"error_code": "worker_crash", "count": 1} in body["deliveries"]["top_error_codes"]
    assert body["outbox"]["by_status"] == {"failed": 2, "dead": 2}
    assert body["outbox"]["by_destination"] == [
        {"destination_id": dest.id, "name": "ops", "count": 4}
    ]

    team_a = Scope(team_ids=frozenset({world.team_a.id}))
    assert queries.failures(q(), team_a)["outbox"]["by_status"] == {"failed": 2, "dead": 1}
    by_model = queries.failures(q(delivery={"model": "claude-y"}), EVERYTHING)
    assert by_model["deliveries"]["failed"] == 1
    assert by_model["outbox"]["failed"] == 0  # the event without a delivery has no model
    by_team = queries.failures(q(delivery={"team": world.team_b.id}), EVERYTHING)
    assert by_team["outbox"]["by_status"] == {"failed": 0, "dead": 1}
    negative = queries.failures(q(rating={"semantic": "negative"}), EVERYTHING)
    assert negative["outbox"]["by_status"] == {"failed": 0, "dead": 2}  # d1 and d6


@pytest.mark.parametrize(
    ("call", "count"),
    [
        # Its two aggregates in one statement, the verdict counts with their snapshots joined.
        (lambda query: queries.summary(query, EVERYTHING), 2),
        (lambda query: queries.trend(query, EVERYTHING, "week"), 2),
        (lambda query: queries.reasons(query, EVERYTHING), 1),  # snapshots joined
        (lambda query: queries.failures(query, EVERYTHING), 3),
        (lambda query: queries.deliveries_page(query, EVERYTHING, page_size=100), 2),
    ],
)
def test_each_figure_costs_a_fixed_number_of_queries_however_many_rows(
    scenario, make_delivery, rate, django_assert_num_queries, call, count
):
    for i in range(30):
        rate(
            make_delivery(at=datetime(2025, 3, 10, 8, i, tzinfo=UTC)),
            "ou_x",
            "wrong",
            reason="too_slow",
        )
    with django_assert_num_queries(count):
        call(q())
