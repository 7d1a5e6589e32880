"""The analytics statements compiled once per shape (`queries.STATEMENTS`) return exactly what
the same statements built through the ORM return, for every scope, filter, period and zone —
also when a kept statement is run again with other values than the ones it was compiled
with."""

from __future__ import annotations

import zoneinfo
from datetime import timedelta

import pytest
from django.db.models import Count, F, Max

from analytics import queries
from analytics.access import Scope
from analytics.filters import AnalyticsQuery
from analytics.tests.test_rollups import random_history  # noqa: F401 - the fixture
from feedback.models import Delivery
from plumbing.db import statements
from plumbing.db.statements import Slot, StatementCache

FILTERS = [
    ({}, {}),
    ({"team": "A"}, {}),
    ({"bot": "cli_analytics"}, {}),
    ({"model": "m1"}, {}),
    ({"chat": "oc_team_b", "status": "sent"}, {}),
    ({}, {"semantic": "negative"}),
    ({"team": "B"}, {"semantic": "progress"}),
    ({}, {"verdict": "wrong"}),
    ({"model": "m2"}, {"reason": "inaccurate"}),
    ({}, {"semantic": "negative", "reason": "too_slow"}),
]
# (first day after the history's start, length in days)
PERIODS = [(3, 6), (0, 10), (5, 1), (2, 7)]
ZONES = ["UTC", "Asia/Shanghai", "America/New_York", "Asia/Kathmandu"]


def _figures(query, scope, *, plain):
    return (
        queries.summary(query, scope, plain=plain),
        queries.trend(query, scope, "day", plain=plain),
        queries.trend(query, scope, "week", plain=plain),
        queries.reasons(query, scope, plain=plain),
    )


def _uncached_shapes():
    return [
        key for key, plan in queries.STATEMENTS._plans.items() if plan is statements._UNCACHEABLE
    ]


@pytest.mark.parametrize(("delivery", "rating"), FILTERS)
def test_kept_statements_return_what_the_orm_returns(random_history, world, delivery, rating):  # noqa: F811
    team_ids = {"A": world.team_a.id, "B": world.team_b.id}
    delivery = {k: team_ids.get(v, v) for k, v in delivery.items()}
    scopes = [
        Scope(team_ids=None),
        Scope(team_ids=frozenset({world.team_a.id})),
        Scope(team_ids=frozenset({world.team_b.id})),
        Scope(team_ids=frozenset({world.team_a.id, world.team_b.id})),
    ]
    queries.STATEMENTS.clear()
    compared = 0
    # Each zone and period runs every shape again with new values: the first call of a shape
    # compiles it, the later ones reuse it with other dates, zones and teams.
    for tz in ZONES:
        zone = zoneinfo.ZoneInfo(tz)
        for first, days in PERIODS:
            start = random_history + timedelta(days=first)
            query = AnalyticsQuery(start, start + timedelta(days=days), zone, delivery, rating)
            for scope in scopes:
                assert _figures(query, scope, plain=False) == _figures(query, scope, plain=True)
                compared += 1
    assert compared == len(ZONES) * len(PERIODS) * len(scopes)
    assert len(queries.STATEMENTS) > 0
    assert _uncached_shapes() == []


def test_the_figures_are_not_empty_so_the_comparison_means_something(random_history, world):  # noqa: F811
    query = AnalyticsQuery(
        random_history, random_history + timedelta(days=10), zoneinfo.ZoneInfo("Asia/Shanghai")
    )
    summary = queries.summary(query, Scope(team_ids=None))
    assert summary["current"]["ratings"] > 0
    assert summary["current"]["negative"] > 0
    assert summary["verdicts"]
    assert queries.reasons(query, Scope(team_ids=None))["reasons"]


def test_a_value_that_changes_the_sql_is_never_kept(world, make_delivery):
    cache = StatementCache("test")
    make_delivery(model="m1")
    make_delivery(model="m2")
    make_delivery(model="m2")

    def build(values):
        # Wrong on purpose: "m1" turns the filter into a column comparison (every row), any
        # other value into a parameter, so the value changes the SQL and is no slot.
        wanted = F("model") if values["model"] == "m1" else values["model"]
        return (
            Delivery.objects.filter(model=wanted)
            .values("model")
            .annotate(n=Count("id"))
            .order_by("model")
        )

    slot = Delivery._meta.get_field("model")
    assert cache.values("by-model", {"model": Slot(slot, "m1")}, build) == [
        {"model": "m1", "n": 1},
        {"model": "m2", "n": 2},
    ]
    assert list(cache._plans.values()) == [statements._UNCACHEABLE]
    # Every later call of the shape runs through the ORM, so its different SQL is still right.
    assert cache.values("by-model", {"model": Slot(slot, "m2")}, build) == [{"model": "m2", "n": 2}]


def test_a_kept_statement_runs_with_new_values_and_converts_like_the_orm(world, make_delivery):
    cache = StatementCache("test")
    first = make_delivery(model="m1")
    second = make_delivery(model="m2")

    def build(values):
        return Delivery.objects.filter(id__in=values["ids"]).values("id", "policy_snapshot")

    pk = Delivery._meta.pk
    assert cache.values("snap", {"ids": Slot(pk, (first.id,))}, build) == [
        {"id": first.id, "policy_snapshot": first.policy_snapshot}
    ]
    assert cache.values("snap", {"ids": Slot(pk, (second.id,))}, build) == [
        {"id": second.id, "policy_snapshot": second.policy_snapshot}
    ]
    assert len(cache) == 1 and statements._UNCACHEABLE not in cache._plans.values()
    # A list of another length is another shape.
    both = cache.values("snap", {"ids": Slot(pk, (first.id, second.id))}, build)
    assert sorted(row["id"] for row in both) == [first.id, second.id]
    assert len(cache) == 2


def test_the_setting_turns_the_cache_off(world, make_delivery, settings):
    settings.CARDLOOP_STATEMENT_CACHE = False
    cache = StatementCache("test")
    make_delivery(model="m1")

    def build(values):
        return (
            Delivery.objects.filter(model=values["model"])
            .values("model")
            .annotate(n=Count("id"))
            .order_by()
        )

    slots = {"model": Slot(Delivery._meta.get_field("model"), "m1")}
    assert cache.values("off", slots, build) == [{"model": "m1", "n": 1}]
    assert len(cache) == 0


def test_a_summary_is_two_round_trips_and_reasons_one_once_their_shapes_are_kept(
    random_history,  # noqa: F811
    world,
    django_assert_num_queries,
):
    query = AnalyticsQuery(
        random_history, random_history + timedelta(days=10), zoneinfo.ZoneInfo("UTC")
    )
    scope = Scope(team_ids=frozenset({world.team_a.id}))
    expected = queries.summary(query, scope, plain=True), queries.reasons(query, scope, plain=True)
    assert expected[0]["verdicts"] and expected[1]["reasons"]
    queries.summary(query, scope)
    queries.reasons(query, scope)
    # Both aggregates in one statement, then the verdict counts with their snapshots joined.
    with django_assert_num_queries(2):
        summary = queries.summary(query, scope)
    with django_assert_num_queries(1):
        reasons = queries.reasons(query, scope)
    assert (summary, reasons) == expected


def test_joined_rows_carry_the_joined_fields_converted_like_the_orm(world, make_delivery):
    cache = StatementCache("test")
    first = make_delivery(model="m1")
    make_delivery(model="m1", snapshot={"buttons": [{"key": "ok", "label": "OK"}]})
    make_delivery(model="m2")

    def build(values):
        return (
            Delivery.objects.filter(model__in=values["models"])
            .values("model")
            .annotate(n=Count("id"), newest=Max("id"))
            .order_by("model")
        )

    slots = {"models": Slot(Delivery._meta.get_field("model"), ("m1", "m2"))}
    rows = cache.values_joined(
        "joined", slots, build, key="newest", model=Delivery, fields=("policy_snapshot",)
    )
    expected = [
        {**row, "policy_snapshot": Delivery.objects.get(id=row["newest"]).policy_snapshot}
        for row in build({"models": ("m1", "m2")})
    ]
    assert rows == expected
    assert rows[0]["policy_snapshot"] == {"buttons": [{"key": "ok", "label": "OK"}]}
    assert rows[1]["policy_snapshot"] == first.policy_snapshot
    # The plain path, and a key the rows do not have, leave it to the caller.
    assert (
        cache.values_joined(
            "joined",
            slots,
            build,
            key="newest",
            model=Delivery,
            fields=("policy_snapshot",),
            plain=True,
        )
        is None
    )
    assert (
        cache.values_joined(
            "joined", slots, build, key="nope", model=Delivery, fields=("policy_snapshot",)
        )
        is None
    )
