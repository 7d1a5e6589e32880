"""The analytics query layer: the only place that counts. API, dashboard and CSV call it.

Definitions (numbers below are for one `AnalyticsQuery` and one `Scope`; a delivery belongs
to the range by its `created_at`, the time it was sent):
- **delivered**: deliveries sent in the range that match the delivery dimensions, any status;
- **latest rating**: the newest revision of one (delivery, operator) — a `LatestFeedback` row;
- **ratings**: latest ratings of delivered deliveries that match the rating dimensions;
- **rated deliveries**: delivered deliveries with ≥1 such latest rating;
- **coverage** = rated deliveries ÷ delivered;
- **positive rate** = positive ÷ ratings (progress and negative stay in the denominator, unrated
  deliveries do not: an unrated answer is not a bad one);
- every rate is `{"numerator", "denominator", "value"}` with `value=None` when the denominator is
  0.

Rating dimensions (`semantic`, `verdict`, `reason`) select *ratings*; they never shrink
`delivered`, so under `semantic=negative` coverage reads "share of deliveries with a negative
latest rating". The drill-down list and the CSV list deliveries with ≥1 matching rating and show
only the matching ratings.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import json
from collections.abc import Callable, Hashable, Iterator
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any

from django.db import connection
from django.db.models import (
    BooleanField,
    Count,
    DateTimeField,
    DurationField,
    ExpressionWrapper,
    F,
    Func,
    Max,
    Q,
    QuerySet,
    Sum,
    Value,
)
from django.db.models.functions import Coalesce, TruncDate
from django.db.models.lookups import GreaterThan

from analytics import periods
from analytics.access import Scope
from analytics.filters import DELIVERY_DIMENSIONS, RATING_DIMENSIONS, AnalyticsQuery
from analytics.models import DeliveryRatingCounts
from botadmin.models import Bot
from feedback.cards import localized
from feedback.models import Delivery, LatestFeedback, OutboxItem, Semantic
from plumbing.db.statements import Slot, StatementCache
from plumbing.workqueue import WorkStatus

#: Statuses counted as "deliveries that failed".
FAILED_STATUSES = (Delivery.Status.SEND_FAILED, Delivery.Status.FAILED)
#: Outbox statuses counted as failures.
FAILED_OUTBOX_STATUSES = (WorkStatus.FAILED, WorkStatus.DEAD)
#: Largest drill-down page (a page holds 1–100 rows).
MAX_PAGE_SIZE = 100
DEFAULT_PAGE_SIZE = 50
SEMANTICS = (Semantic.POSITIVE, Semantic.PROGRESS, Semantic.NEGATIVE)
SEMANTIC_KEYS = tuple(s.value for s in SEMANTICS)
#: The counts of a trend bucket, in the order of the response.
TREND_COUNTS = ("delivered", "ratings", "rated_deliveries", *SEMANTIC_KEYS)
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def rate(numerator: int, denominator: int) -> dict[str, Any]:
    """`{"numerator", "denominator", "value"}`; `value` is None when `denominator` is 0."""
    return {
        "numerator": numerator,
        "denominator": denominator,
        "value": (numerator / denominator) if denominator else None,
    }


# ---------------------------------------------------------------------------------------------
# Base querysets (scope + filters + time range), the only entry to the data
# ---------------------------------------------------------------------------------------------


def delivered(query: AnalyticsQuery, scope: Scope, start: datetime, end: datetime) -> QuerySet:
    """Deliveries sent in `[start, end)` visible in `scope` matching the delivery dimensions."""
    return Delivery.objects.filter(
        scope.q(), query.delivery_q(), created_at__gte=start, created_at__lt=end
    )


def latest_ratings(query: AnalyticsQuery, scope: Scope, start: datetime, end: datetime) -> QuerySet:
    """Latest ratings (LatestFeedback) of `delivered(query, scope, start, end)` that match the
    rating dimensions."""
    return LatestFeedback.objects.filter(
        scope.q("delivery__"),
        query.delivery_q("delivery__"),
        query.rating_q(),
        delivery__created_at__gte=start,
        delivery__created_at__lt=end,
    )


#: Filters the rollup can answer: it carries team and bot copies and counts per semantic.
ROLLUP_DELIVERY_DIMENSIONS = frozenset({"team", "bot"})
ROLLUP_RATING_DIMENSIONS = frozenset({"semantic"})


def answerable_from_rollup(query: AnalyticsQuery) -> bool:
    """True when `DeliveryRatingCounts` holds every number the query needs (only team, bot
    and semantic filters); otherwise the latest ratings are joined to the deliveries."""
    return (
        set(query.delivery_filters) <= ROLLUP_DELIVERY_DIMENSIONS
        and set(query.rating_filters) <= ROLLUP_RATING_DIMENSIONS
    )


def rating_counts(query: AnalyticsQuery, scope: Scope, start: datetime, end: datetime) -> QuerySet:
    """Rollup rows of rated deliveries sent in `[start, end)` in `scope` matching team/bot
    (use only when `answerable_from_rollup(query)`)."""
    qs = DeliveryRatingCounts.objects.filter(scope.q(), created_at__gte=start, created_at__lt=end)
    if "team" in query.delivery_filters:
        qs = qs.filter(team_id=query.delivery_filters["team"])
    if "bot" in query.delivery_filters:
        qs = qs.filter(
            bot_id__in=Bot.objects.filter(app_id=query.delivery_filters["bot"]).values("id")
        )
    return qs


def _rollup_terms(query: AnalyticsQuery) -> dict[str, Any]:
    """Expressions over the rollup: per-semantic counts (zero for semantics a `semantic`
    filter excludes) and their total."""
    wanted = query.rating_filters.get("semantic")
    per = {s.value: (F(s.value) if wanted in (None, s.value) else Value(0)) for s in SEMANTICS}
    total = per["positive"] + per["progress"] + per["negative"]
    return {"per": per, "total": total}


def _gt0(expression) -> Any:
    """`expression > 0` as a boolean expression usable in a Q / aggregate filter."""
    return ExpressionWrapper(GreaterThan(expression, 0), output_field=BooleanField())


def listed_deliveries(query: AnalyticsQuery, scope: Scope) -> QuerySet:
    """The drill-down population: delivered deliveries of the range, narrowed to those with a
    matching latest rating when a rating dimension is given."""
    qs = delivered(query, scope, query.start, query.end)
    if query.rating_filters:
        qs = qs.filter(query.has_matching_rating())
    return qs


# ---------------------------------------------------------------------------------------------
# Statements compiled once per shape
# ---------------------------------------------------------------------------------------------

#: The summary, trend, verdict and reason statements, compiled once per shape and process
#: (`plumbing.db.statements`): building them through the ORM — a dozen filtered aggregates
#: resolved and rendered per call — took more CPU than running them on a month of data.
#: The SQL is the ORM's, checked on first use; `plain=True` on the functions below skips it.
STATEMENTS = StatementCache("analytics")

#: Filters whose *value* changes a statement's text, not only its parameters (`semantic`
#: picks the rollup columns summed, see `_rollup_terms`): part of the shape, never a slot.
SHAPING_FILTERS = frozenset({"semantic"})

_TIME_FIELD = Delivery._meta.get_field("created_at")
_TEAM_FIELD = Delivery._meta.get_field("team")
#: The rollup's copy of the team id is a plain bigint column, which the ORM passes to
#: PostgreSQL typed as such (`Int8`), unlike a foreign key's value.
_ROLLUP_TEAM_FIELD = DeliveryRatingCounts._meta.get_field("team_id")


def _on_rollup(slots: dict[str, Slot]) -> dict[str, Slot]:
    """`slots` for a statement over `DeliveryRatingCounts`: team ids adapted as its column."""
    return {
        name: Slot(_ROLLUP_TEAM_FIELD, slot.value) if name in ("teams", "d_team") else slot
        for name, slot in slots.items()
    }


def _lookup_field(model, path: str):
    """The model field at the end of a lookup path (`"bot__app_id"` → `Bot.app_id`)."""
    *relations, name = path.split("__")
    for relation in relations:
        model = model._meta.get_field(relation).related_model
    return model._meta.get_field(name)


def _statement(
    query: AnalyticsQuery, scope: Scope, extra: tuple = (), **times: datetime
) -> tuple[Hashable, dict[str, Slot], Callable[[dict[str, Any]], tuple[AnalyticsQuery, Scope]]]:
    """What `STATEMENTS` needs to run a statement built from `query` and `scope`:
    `(shape, slots, rebuild)`. The shape names the filters present (and the values of
    `SHAPING_FILTERS`), whether the scope is everything, and `extra`; the slots hold `times`
    (name → datetime), every other filter value and the scope's team ids; `rebuild(values)`
    makes the `(AnalyticsQuery, Scope)` those values stand for, with the datetimes under
    their names in `values`, so a statement's builder reads everything from it."""
    slots: dict[str, Slot] = {name: Slot(_TIME_FIELD, when) for name, when in times.items()}
    for key, value in query.delivery_filters.items():
        slots[f"d_{key}"] = Slot(_lookup_field(Delivery, DELIVERY_DIMENSIONS[key]), value)
    shaping = tuple(sorted((k, v) for k, v in query.rating_filters.items() if k in SHAPING_FILTERS))
    for key, value in query.rating_filters.items():
        if key not in SHAPING_FILTERS:
            slots[f"r_{key}"] = Slot(_lookup_field(LatestFeedback, RATING_DIMENSIONS[key]), value)
    if scope.team_ids is not None:
        slots["teams"] = Slot(_TEAM_FIELD, tuple(sorted(scope.team_ids)))
    shape = (
        tuple(sorted(query.delivery_filters)),
        tuple(sorted(query.rating_filters)),
        shaping,
        scope.is_everything,
        extra,
    )
    fixed = dict(shaping)

    def rebuild(values: dict[str, Any]) -> tuple[AnalyticsQuery, Scope]:
        rebuilt = dataclasses.replace(
            query,
            start=values.get("start", query.start),
            end=values.get("end", query.end),
            delivery_filters={k: values[f"d_{k}"] for k in query.delivery_filters},
            rating_filters={
                k: fixed[k] if k in fixed else values[f"r_{k}"] for k in query.rating_filters
            },
        )
        teams = None if scope.team_ids is None else frozenset(values["teams"])
        return rebuilt, Scope(team_ids=teams)

    return shape, slots, rebuild


# ---------------------------------------------------------------------------------------------
# Summary
# ---------------------------------------------------------------------------------------------


def _figures(d: dict[str, int], r: dict[str, int], suffix: str) -> dict[str, Any]:
    delivered_n = d[f"delivered{suffix}"] or 0
    ratings_n = r[f"ratings{suffix}"] or 0
    rated_n = r[f"rated{suffix}"] or 0
    per = {s.value: r[f"{s.value}{suffix}"] or 0 for s in SEMANTICS}
    return {
        "delivered": delivered_n,
        "feedback_shown": d[f"shown{suffix}"] or 0,
        "ratings": ratings_n,
        "rated_deliveries": rated_n,
        **per,
        "coverage": rate(rated_n, delivered_n),
        "positive_rate": rate(per[Semantic.POSITIVE], ratings_n),
    }


def _delta(current: dict[str, Any], previous: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key in ("delivered", "feedback_shown", "ratings", "rated_deliveries", *SEMANTICS):
        out[str(key)] = current[key] - previous[key]
    for key in ("coverage", "positive_rate"):
        a, b = current[key]["value"], previous[key]["value"]
        out[key] = None if a is None or b is None else a - b
    return out


def summary(query: AnalyticsQuery, scope: Scope, *, plain: bool = False) -> dict[str, Any]:
    """The KPI figures of the range and of the previous period of equal length.

    Returns `{"range": {from, to, tz}, "previous_range": {from, to}, "current": F,
    "previous": F, "delta": D, "verdicts": [per key, see `verdicts`]}` where F = `{delivered,
    feedback_shown, ratings, rated_deliveries, positive, progress, negative, coverage: rate,
    positive_rate: rate}` and D holds current − previous (counts; rate values, None when
    either side is None).
    Two queries: one joining the aggregate over deliveries and the one over latest ratings
    (or their rollup), each covering both periods, and the per-key `verdicts` of the range
    with the snapshots that label them. Their SQL is compiled once per shape (`STATEMENTS`);
    `plain=True` builds it through the ORM (four queries: the aggregates one by one, the
    snapshots after the verdict counts).
    """
    prev_start, _prev_end = query.previous
    shape, slots, rebuild = _statement(
        query, scope, start=query.start, end=query.end, prev=prev_start
    )

    def deliveries(values: dict[str, Any]) -> tuple[QuerySet, dict[str, Any]]:
        q, sc = rebuild(values)
        now = Q(created_at__gte=q.start)
        before = Q(created_at__lt=q.start)
        shown = Q(feedback_shown=True)
        # Counting `created_at` (never null) instead of `id` keeps these index-only scans of
        # the covering indexes (delivery_analytics_time / _team, rating_counts_time / _team_time).
        return delivered(q, sc, values["prev"], q.end), {
            "delivered": Count("created_at", filter=now),
            "delivered_prev": Count("created_at", filter=before),
            "shown": Count("created_at", filter=now & shown),
            "shown_prev": Count("created_at", filter=before & shown),
        }

    def rollup(values: dict[str, Any]) -> tuple[QuerySet, dict[str, Any]]:
        q, sc = rebuild(values)
        now = Q(created_at__gte=q.start)
        before = Q(created_at__lt=q.start)
        terms = _rollup_terms(q)
        aggregates: dict[str, Any] = {}
        for suffix, when in (("", now), ("_prev", before)):
            aggregates[f"c_ratings{suffix}"] = Coalesce(Sum(terms["total"], filter=when), 0)
            aggregates[f"c_rated{suffix}"] = Count(
                "created_at", filter=when & Q(_gt0(terms["total"]))
            )
            for s in SEMANTICS:
                aggregates[f"c_{s.value}{suffix}"] = Coalesce(
                    Sum(terms["per"][s.value], filter=when), 0
                )
        return rating_counts(q, sc, values["prev"], q.end), aggregates

    def joined(values: dict[str, Any]) -> tuple[QuerySet, dict[str, Any]]:
        q, sc = rebuild(values)
        r_now = Q(delivery__created_at__gte=q.start)
        r_before = Q(delivery__created_at__lt=q.start)
        aggregates = {
            "ratings": Count("id", filter=r_now),
            "ratings_prev": Count("id", filter=r_before),
            "rated": Count("delivery_id", filter=r_now, distinct=True),
            "rated_prev": Count("delivery_id", filter=r_before, distinct=True),
        }
        for s in SEMANTICS:
            aggregates[s.value] = Count("id", filter=r_now & Q(semantic=s))
            aggregates[f"{s.value}_prev"] = Count("id", filter=r_before & Q(semantic=s))
        return latest_ratings(q, sc, values["prev"], q.end), aggregates

    # Both aggregates in one statement (one round trip), each still the ORM's.
    if answerable_from_rollup(query):
        d, raw = STATEMENTS.aggregates(
            (("summary.delivered", shape), slots, deliveries),
            (("summary.rollup", shape), _on_rollup(slots), rollup),
            plain=plain,
        )
        r = {key.removeprefix("c_"): value for key, value in raw.items()}
    else:
        d, r = STATEMENTS.aggregates(
            (("summary.delivered", shape), slots, deliveries),
            (("summary.ratings", shape), slots, joined),
            plain=plain,
        )
    current, previous = _figures(d, r, ""), _figures(d, r, "_prev")
    return {
        "range": range_dict(query),
        "previous_range": {"from": prev_start, "to": query.start},
        "current": current,
        "previous": previous,
        "delta": _delta(current, previous),
        "verdicts": verdicts(query, scope, plain=plain),
    }


def range_dict(query: AnalyticsQuery) -> dict[str, Any]:
    return {"from": query.start, "to": query.end, "tz": query.tz.key}


# ---------------------------------------------------------------------------------------------
# Trend
# ---------------------------------------------------------------------------------------------


def trend(
    query: AnalyticsQuery, scope: Scope, granularity: str = "day", *, plain: bool = False
) -> dict[str, Any]:
    """Per local day or ISO week (Monday) of the report zone, by the delivery's send time.

    Returns `{"range", "granularity", "buckets": [{"date": local start date, "from", "to",
    "delivered", "ratings", "rated_deliveries", "positive", "progress", "negative"}]}` with
    every bucket of the range present (zeros when empty); the buckets add up to `summary`'s
    current figures. Raises `ValueError` for a granularity other than day/week. Two queries,
    compiled once per shape (`STATEMENTS`); `plain=True` builds them through the ORM.
    """
    plan = periods.buckets(query.start, query.end, query.tz, granularity)
    # local day → [delivered, ratings, rated_deliveries, positive, progress, negative]
    per_day: dict[date, list[int]] = {}

    def slot(day: date) -> list[int]:
        counts = per_day.get(day)
        if counts is None:
            counts = per_day[day] = [0] * len(TREND_COUNTS)
        return counts

    seconds = _slot_seconds(query, plan)
    times = {"start": query.start, "end": query.end}
    if seconds is not None:
        times["origin"] = plan[0].start
    grouping = (seconds,) if seconds is not None else ("local", query.tz.key)
    shape, slots, rebuild = _statement(query, scope, grouping, **times)

    local_days: dict[Any, date] = {}

    def local_day(value) -> date:
        if seconds is None:
            return value
        day = local_days.get(value)
        if day is None:
            day = local_days[value] = value.astimezone(query.tz).date()
        return day

    def day_of(values: dict[str, Any], q: AnalyticsQuery):
        if seconds is not None:
            return lambda field: DateBin(seconds, field, values["origin"])
        return lambda field: TruncDate(field, tzinfo=q.tz)

    def deliveries(values: dict[str, Any]) -> QuerySet:
        q, sc = rebuild(values)
        return (
            delivered(q, sc, q.start, q.end)
            .annotate(day=day_of(values, q)("created_at"))
            .values("day")
            .annotate(n=Count("*"))
            .order_by()
        )

    def rollup(values: dict[str, Any]) -> QuerySet:
        q, sc = rebuild(values)
        terms = _rollup_terms(q)
        return (
            rating_counts(q, sc, q.start, q.end)
            .annotate(day=day_of(values, q)("created_at"))
            .values("day")
            .annotate(
                n=Coalesce(Sum(terms["total"]), 0),
                rated=Count("created_at", filter=Q(_gt0(terms["total"]))),
                **{f"c_{s.value}": Coalesce(Sum(terms["per"][s.value]), 0) for s in SEMANTICS},
            )
            .order_by()
        )

    def joined(values: dict[str, Any]) -> QuerySet:
        q, sc = rebuild(values)
        # A delivery lies in exactly one group, so distinct counts per group add up.
        return (
            latest_ratings(q, sc, q.start, q.end)
            .annotate(day=day_of(values, q)("delivery__created_at"))
            .values("day")
            .annotate(
                n=Count("id"),
                rated=Count("delivery_id", distinct=True),
                **{s.value: Count("id", filter=Q(semantic=s)) for s in SEMANTICS},
            )
            .order_by()
        )

    for row in STATEMENTS.values(("trend.delivered", shape), slots, deliveries, plain=plain):
        slot(local_day(row["day"]))[0] += row["n"]
    if answerable_from_rollup(query):
        rating_rows = [
            {key.removeprefix("c_"): value for key, value in row.items()}
            for row in STATEMENTS.values(
                ("trend.rollup", shape), _on_rollup(slots), rollup, plain=plain
            )
        ]
    else:
        rating_rows = STATEMENTS.values(("trend.ratings", shape), slots, joined, plain=plain)
    for row in rating_rows:
        counts = slot(local_day(row["day"]))
        counts[1] += row["n"]
        counts[2] += row["rated"]
        counts[3] += row[SEMANTIC_KEYS[0]]
        counts[4] += row[SEMANTIC_KEYS[1]]
        counts[5] += row[SEMANTIC_KEYS[2]]
    out = []
    width = range(len(TREND_COUNTS))
    for bucket in plan:
        totals = [0] * len(TREND_COUNTS)
        for day in bucket.days:
            counts = per_day.get(day)
            if counts is not None:
                for k in width:
                    totals[k] += counts[k]
        out.append(
            {
                "date": bucket.label,
                "from": bucket.start,
                "to": bucket.end,
                **dict(zip(TREND_COUNTS, totals, strict=True)),
            }
        )
    return {"range": range_dict(query), "granularity": granularity, "buckets": out}


class DateBin(Func):
    """PostgreSQL `date_bin(stride, column, origin)`: the start of the fixed-width slot (counted
    from `origin`) that a timestamp falls in."""

    function = "date_bin"
    output_field = DateTimeField()

    def __init__(self, seconds: int, expression, origin: datetime):
        super().__init__(
            Value(timedelta(seconds=seconds), output_field=DurationField()),
            expression,
            Value(origin, output_field=DateTimeField()),
        )


#: Slot widths tried for trend grouping, widest first: a day (zones without a DST change in the
#: range), an hour, a quarter hour (every modern UTC offset is a whole number of quarters).
SLOT_SECONDS = (86400, 3600, 900)


def _slot_seconds(query: AnalyticsQuery, plan: list[periods.Bucket]) -> int | None:
    """The width of the fixed UTC slots a trend groups rows by, or None to group by each
    row's local date.

    Converting every row to local time in SQL is the slow part of a year-long trend, so on
    PostgreSQL rows are grouped by fixed slots counted from the first bucket's start when every
    bucket boundary and the range's end fall on slot boundaries — then each slot lies inside one
    local day and is mapped to it in Python, exactly (Asia/Shanghai days are one-day slots; a
    range across a DST change uses hours). Otherwise (a zone with an odd historical offset,
    SQLite) each row's local date is computed by the database.
    """
    if connection.vendor == "postgresql" and plan:
        edges = [b.start for b in plan] + [query.end]
        origin = edges[0]
        for seconds in SLOT_SECONDS:
            if all(((edge - origin) // timedelta(seconds=1)) % seconds == 0 for edge in edges):
                return seconds
    return None


# ---------------------------------------------------------------------------------------------
# Reasons
# ---------------------------------------------------------------------------------------------


def snapshot_labels(snapshot: Any) -> tuple[dict[str, str], dict[str, str]]:
    """`(verdict labels, reason labels)` by key from a delivery's frozen policy snapshot
    (`buttons: [{key, label, label_en?, …}]`, `negative_followup.reasons: [{key, label,
    label_en?}]`), in the active language (`feedback.cards.localized`: the English form for an
    English reader when the snapshot has one). Tolerates missing or malformed parts (returns
    what it can read)."""
    verdicts: dict[str, str] = {}
    reasons: dict[str, str] = {}
    if not isinstance(snapshot, dict):
        return verdicts, reasons
    for button in snapshot.get("buttons") or []:
        if isinstance(button, dict) and isinstance(button.get("key"), str):
            verdicts[button["key"]] = str(localized(button) or button["key"])
    followup = snapshot.get("negative_followup")
    if isinstance(followup, dict):
        for reason in followup.get("reasons") or []:
            if isinstance(reason, dict) and isinstance(reason.get("key"), str):
                reasons[reason["key"]] = str(localized(reason) or reason["key"])
    return verdicts, reasons


def _snapshots(ids: list[int], *, plain: bool = False) -> dict[int, Any]:
    """Delivery id → its policy snapshot, for the deliveries `ids` (one query, none when
    `ids` is empty; compiled once per number of distinct ids, `STATEMENTS`)."""
    unique = tuple(sorted(set(ids)))
    if not unique:
        return {}

    def rows(values: dict[str, Any]) -> QuerySet:
        return Delivery.objects.filter(id__in=values["ids"]).values("id", "policy_snapshot")

    slots = {"ids": Slot(Delivery._meta.pk, unique)}
    return {
        row["id"]: row["policy_snapshot"]
        for row in STATEMENTS.values("snapshots", slots, rows, plain=plain)
    }


def _with_snapshots(shape, slots: dict[str, Slot], counts, *, plain: bool) -> list[dict]:
    """The rows of the values-statement `counts` (grouped, each with the id of its `newest`
    delivery), each with that delivery's `policy_snapshot`, which labels it: joined in the
    same statement when it is kept (`StatementCache.values_joined`), else read in a second
    query (`_snapshots`)."""
    rows = STATEMENTS.values_joined(
        shape,
        slots,
        counts,
        key="newest",
        model=Delivery,
        fields=("policy_snapshot",),
        plain=plain,
    )
    if rows is not None:
        return rows
    rows = STATEMENTS.values(shape, slots, counts, plain=plain)
    snapshots = _snapshots([row["newest"] for row in rows], plain=plain)
    return [{**row, "policy_snapshot": snapshots.get(row["newest"])} for row in rows]


def verdicts(query: AnalyticsQuery, scope: Scope, *, plain: bool = False) -> list[dict[str, Any]]:
    """Latest ratings of the range per (verdict key, semantic), most frequent first (ties by
    key): `[{"key", "label", "semantic", "count"}]`. A key's label comes from the policy
    snapshot of the newest delivery that carries it (configured or proposed by the agent for
    that answer), in the reader's language; the counts of one semantic add up to that
    semantic's total in `summary`, so figures grouped by semantic stay comparable whatever
    options each answer offered. One query (the counts with the snapshots joined, see
    `_with_snapshots`), compiled once per shape (`STATEMENTS`); `plain=True` builds the counts
    through the ORM and reads the snapshots in a second query."""
    shape, slots, rebuild = _statement(query, scope, start=query.start, end=query.end)

    def counts(values: dict[str, Any]) -> QuerySet:
        q, sc = rebuild(values)
        return (
            latest_ratings(q, sc, q.start, q.end)
            .values("verdict_key", "semantic")
            .annotate(n=Count("id"), newest=Max("delivery_id"))
            .order_by()
        )

    rows = _with_snapshots(("verdicts", shape), slots, counts, plain=plain)
    snapshots = {row["newest"]: row["policy_snapshot"] for row in rows}
    items = [
        {
            "key": row["verdict_key"],
            "label": snapshot_labels(snapshots.get(row["newest"]))[0].get(row["verdict_key"])
            or row["verdict_key"],
            "semantic": row["semantic"],
            "count": row["n"],
        }
        for row in rows
    ]
    items.sort(key=lambda item: (-item["count"], item["key"], item["semantic"]))
    return items


def reasons(query: AnalyticsQuery, scope: Scope, *, plain: bool = False) -> dict[str, Any]:
    """Negative latest ratings by reason key, most frequent first (ties by key).

    Returns `{"range", "negative_ratings", "without_reason", "reasons": [{"key", "label",
    "count", "share": rate(count, negative_ratings)}]}`. A reason's label comes from the policy
    snapshot of the newest delivery (highest id) that carries the key in the range, so a
    renamed label shows its latest wording and the series stays keyed by the stable key.
    One query (the counts with the snapshots joined, see `_with_snapshots`), compiled once
    per shape (`STATEMENTS`); `plain=True` builds the counts through the ORM and reads the
    snapshots in a second query.
    """
    shape, slots, rebuild = _statement(query, scope, start=query.start, end=query.end)
    from_rollup = answerable_from_rollup(query)

    def counts(values: dict[str, Any]) -> QuerySet:
        q, sc = rebuild(values)
        if from_rollup:
            negatives = LatestFeedback.objects.filter(
                q.rating_q(),
                delivery_id__in=rating_counts(q, sc, q.start, q.end)
                .filter(negative__gt=0)
                .values("delivery_id"),
            )
        else:
            negatives = latest_ratings(q, sc, q.start, q.end)
        return (
            negatives.filter(semantic=Semantic.NEGATIVE)
            .values("reason_key")
            .annotate(n=Count("id"), newest=Max("delivery_id"))
            .order_by()
        )

    if from_rollup:
        slots = _on_rollup(slots)
    rows = _with_snapshots(("reasons", from_rollup, shape), slots, counts, plain=plain)
    total = sum(row["n"] for row in rows)
    keyed = [row for row in rows if row["reason_key"]]
    snapshots = {row["newest"]: row["policy_snapshot"] for row in keyed}
    items = []
    for row in keyed:
        label = snapshot_labels(snapshots.get(row["newest"]))[1].get(row["reason_key"])
        items.append(
            {
                "key": row["reason_key"],
                "label": label or row["reason_key"],
                "count": row["n"],
                "share": rate(row["n"], total),
            }
        )
    items.sort(key=lambda item: (-item["count"], item["key"]))
    return {
        "range": range_dict(query),
        "negative_ratings": total,
        "without_reason": total - sum(item["count"] for item in items),
        "reasons": items,
    }


# ---------------------------------------------------------------------------------------------
# Failures
# ---------------------------------------------------------------------------------------------


def failed_outbox_items(query: AnalyticsQuery, scope: Scope) -> QuerySet:
    """Outbox rows in status failed/dead created in the range, matched through their event's
    delivery against every filter; rows of events without a delivery match on the event's team
    and bot only, and never under a filter they cannot carry."""
    through_delivery = Q(event__delivery__isnull=False) & query.delivery_q("event__delivery__")
    if query.rating_filters:
        through_delivery &= Q(query.has_matching_rating("event__delivery_id"))
    without = query.event_without_delivery_q()
    match = through_delivery
    if without is not None:
        match |= Q(event__delivery__isnull=True) & without
    return OutboxItem.objects.filter(
        scope.outbox_q(),
        match,
        status__in=FAILED_OUTBOX_STATUSES,
        created_at__gte=query.start,
        created_at__lt=query.end,
    )


def failures(query: AnalyticsQuery, scope: Scope) -> dict[str, Any]:
    """Deliveries that failed (`send_failed`, `failed`) and outbox rows failed/dead.

    Returns `{"range", "deliveries": {"failed", "by_status": {send_failed, failed},
    "rate": rate(failed, delivered), "top_error_codes": [{"error_code", "count"}]},
    "outbox": {"failed", "by_status": {failed, dead}, "by_destination": [{"destination_id",
    "name", "count"}], "by_event_type": [{"event_type", "count"}]}}`. Top lists hold ≤10.
    """
    base = delivered(query, scope, query.start, query.end)
    failed_q = Q(status__in=FAILED_STATUSES)
    if query.rating_filters:
        failed_q &= Q(query.has_matching_rating())
    agg = base.aggregate(
        delivered=Count("*"),
        **{s.value: Count("created_at", filter=failed_q & Q(status=s)) for s in FAILED_STATUSES},
    )
    by_status = {s.value: agg[s.value] or 0 for s in FAILED_STATUSES}
    failed_total = sum(by_status.values())
    codes = list(
        base.filter(failed_q)
        .values("error_code")
        .annotate(count=Count("created_at"))  # index-only on delivery_analytics_failed
        .order_by("-count", "error_code")[:10]
    )
    # One grouped query; the per-status, per-destination and per-type views are sums of it.
    outbox_rows = list(
        failed_outbox_items(query, scope)
        .values("status", "destination_id", "destination__name", "event__type")
        .annotate(n=Count("id"))
        .order_by()
    )
    outbox_status = {s.value: 0 for s in FAILED_OUTBOX_STATUSES}
    by_destination: dict[int, dict[str, Any]] = {}
    by_type: dict[str, int] = {}
    for row in outbox_rows:
        outbox_status[row["status"]] += row["n"]
        dest = by_destination.setdefault(
            row["destination_id"],
            {"destination_id": row["destination_id"], "name": row["destination__name"], "count": 0},
        )
        dest["count"] += row["n"]
        by_type[row["event__type"]] = by_type.get(row["event__type"], 0) + row["n"]
    return {
        "range": range_dict(query),
        "deliveries": {
            "failed": failed_total,
            "by_status": by_status,
            "rate": rate(failed_total, agg["delivered"] or 0),
            "top_error_codes": [
                {"error_code": row["error_code"], "count": row["count"]} for row in codes
            ],
        },
        "outbox": {
            "failed": sum(outbox_status.values()),
            "by_status": outbox_status,
            "by_destination": sorted(
                by_destination.values(), key=lambda d: (-d["count"], d["destination_id"])
            )[:10],
            "by_event_type": [
                {"event_type": t, "count": n}
                for t, n in sorted(by_type.items(), key=lambda item: (-item[1], item[0]))[:10]
            ],
        },
    }


# ---------------------------------------------------------------------------------------------
# Drill-down: keyset pages over the total order (created_at, id), newest first
# ---------------------------------------------------------------------------------------------


class InvalidCursor(ValueError):
    """A cursor that was not issued by `deliveries_page` (or was altered)."""


@dataclass(frozen=True)
class Cursor:
    """A position between two rows of the total order (created_at DESC, id DESC).

    `direction="next"`: rows strictly after (older than) `(time, id)`; `"previous"`: rows
    strictly before (newer than) it. Encoded as base64url JSON `{"t": µs since epoch, "i": id,
    "d": "n"|"p"}` — opaque to clients.
    """

    time: datetime
    id: int
    direction: str

    def encode(self) -> str:
        micros = (self.time - EPOCH) // timedelta(microseconds=1)
        raw = json.dumps({"t": micros, "i": self.id, "d": self.direction[0]}, separators=(",", ":"))
        return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")

    @classmethod
    def decode(cls, token: str) -> Cursor:
        """Parse a token; raises `InvalidCursor`."""
        try:
            padded = token + "=" * (-len(token) % 4)
            data = json.loads(base64.urlsafe_b64decode(padded.encode("ascii")))
            micros, ident, direction = int(data["t"]), int(data["i"]), data["d"]
            if direction not in ("n", "p") or ident < 0:
                raise ValueError(direction)
            when = EPOCH + timedelta(microseconds=micros)
        except (ValueError, TypeError, KeyError, UnicodeError, binascii.Error, OverflowError):
            raise InvalidCursor(token) from None
        return cls(time=when, id=ident, direction="next" if direction == "n" else "previous")


#: Columns of a drill-down row (an allowlist: no comment, operator or requester open_id, card,
#: content hash or secret ever leaves the database through this list).
ROW_FIELDS = (
    "id",
    "delivery_id",
    "created_at",
    "status",
    "channel",
    "team_id",
    "team__name",
    "bot__app_id",
    "bot__name",
    "chat__chat_id",
    "topic_id",
    "model",
    "cli_id",
    "cli_version",
    "skill_name",
    "skill_version",
    "workflow_id",
    "task_id",
    "session_id",
    "turn_id",
    "response_kind",
    "feedback_shown",
    "error_code",
    "policy_snapshot",
)


@dataclass
class Page:
    """One drill-down page: `rows` (dicts, see `_row`), and the cursors of the neighbouring
    pages (None at either end)."""

    rows: list[dict[str, Any]]
    next: str | None
    previous: str | None


def _after(cursor: Cursor) -> Q:
    # (created_at, id) < (t, i) in DESC order; the redundant bound lets the index range-scan.
    return Q(created_at__lte=cursor.time) & (
        Q(created_at__lt=cursor.time) | Q(created_at=cursor.time, id__lt=cursor.id)
    )


def _before(cursor: Cursor) -> Q:
    return Q(created_at__gte=cursor.time) & (
        Q(created_at__gt=cursor.time) | Q(created_at=cursor.time, id__gt=cursor.id)
    )


def _ratings_by_delivery(query: AnalyticsQuery, ids: list[int]) -> dict[int, list[dict]]:
    out: dict[int, list[dict]] = {i: [] for i in ids}
    rows = (
        LatestFeedback.objects.filter(query.rating_q(), delivery_id__in=ids)
        .values(
            "delivery_id",
            "semantic",
            "verdict_key",
            "reason_key",
            "updated_at",
            "revision__revision",
        )
        .order_by("delivery_id", "updated_at", "id")
    )
    for row in rows:
        out[row["delivery_id"]].append(row)
    return out


def _row(raw: dict[str, Any], ratings: list[dict]) -> dict[str, Any]:
    verdict_labels, reason_labels = snapshot_labels(raw["policy_snapshot"])
    return {
        "delivery_id": raw["delivery_id"],
        "sent_at": raw["created_at"],
        "status": raw["status"],
        "channel": raw["channel"],
        "team": {"id": raw["team_id"], "name": raw["team__name"]} if raw["team_id"] else None,
        "bot": {"app_id": raw["bot__app_id"], "name": raw["bot__name"]},
        "chat_id": raw["chat__chat_id"] or "",
        "topic_id": raw["topic_id"],
        "model": raw["model"],
        "cli_id": raw["cli_id"],
        "cli_version": raw["cli_version"],
        "skill_name": raw["skill_name"],
        "skill_version": raw["skill_version"],
        "workflow_id": raw["workflow_id"],
        "task_id": raw["task_id"],
        "session_id": raw["session_id"],
        "turn_id": raw["turn_id"],
        "response_kind": raw["response_kind"],
        "feedback_shown": raw["feedback_shown"],
        "error_code": raw["error_code"],
        "ratings": [
            {
                "semantic": r["semantic"],
                "verdict_key": r["verdict_key"],
                "verdict_label": verdict_labels.get(r["verdict_key"], r["verdict_key"]),
                "reason_key": r["reason_key"],
                "reason_label": reason_labels.get(r["reason_key"], r["reason_key"])
                if r["reason_key"]
                else "",
                "revision": r["revision__revision"],
                "rated_at": r["updated_at"],
            }
            for r in ratings
        ],
    }


def deliveries_page(
    query: AnalyticsQuery,
    scope: Scope,
    *,
    cursor: Cursor | None = None,
    page_size: int = DEFAULT_PAGE_SIZE,
) -> Page:
    """One page of `listed_deliveries` newest first, with their (matching) latest ratings.

    Keyset pagination on the unique total order (created_at DESC, id DESC): following `next`
    to the end and `previous` back visits every row once, also across tied timestamps
    (ordering by a non-unique column would skip or repeat them). `page_size` is 1..MAX_PAGE_SIZE (callers validate; here it is clamped).
    Two queries: the page, then its ratings.
    """
    size = max(1, min(int(page_size), 10_000))
    qs = listed_deliveries(query, scope)
    backwards = cursor is not None and cursor.direction == "previous"
    if cursor is not None:
        qs = qs.filter(_before(cursor) if backwards else _after(cursor))
    order = ("created_at", "id") if backwards else ("-created_at", "-id")
    raw = list(qs.order_by(*order).values(*ROW_FIELDS)[: size + 1])
    more = len(raw) > size
    raw = raw[:size]
    if backwards:
        raw.reverse()
    ratings = _ratings_by_delivery(query, [r["id"] for r in raw])
    rows = [_row(r, ratings[r["id"]]) for r in raw]
    if not raw:
        return Page(rows=[], next=None, previous=None)
    first, last = raw[0], raw[-1]
    has_newer = more if backwards else cursor is not None
    has_older = True if backwards else more
    return Page(
        rows=rows,
        next=Cursor(last["created_at"], last["id"], "next").encode() if has_older else None,
        previous=Cursor(first["created_at"], first["id"], "previous").encode()
        if has_newer
        else None,
    )


def iter_delivery_rows(query: AnalyticsQuery, scope: Scope, *, chunk: int = 1000) -> Iterator[dict]:
    """Every row of `listed_deliveries`, newest first, in keyset chunks of `chunk` (for the CSV
    export: memory stays flat however long the range)."""
    cursor = None
    while True:
        page = deliveries_page(query, scope, cursor=cursor, page_size=chunk)
        yield from page.rows
        if page.next is None:
            return
        cursor = Cursor.decode(page.next)
