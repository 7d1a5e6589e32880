"""Measuring a rule's figure and deciding whether it fires or resolves.

`measure(rule, now)` reads the figure over `[now - window, now)` through the analytics query
layer (the same definitions as the dashboard); `decide(...)` is pure. Units:

| kind | figure | breached when | clear when |
|---|---|---|---|
| positive_rate_below | positive ÷ ratings, percent | < X | ≥ X + margin |
| negatives_above | negative latest ratings | > N | ≤ N − margin |
| negatives_growth | negatives ÷ max(1, previous window's negatives) | > k | ≤ k − margin |
| failure_rate_above | failed deliveries ÷ delivered, percent | > Y | ≤ Y − margin |
| dead_items_above | outbox items and card updates that went dead in the window | > Z | ≤ Z − margin |

A reading below the rule's minimum sample (ratings, negatives, deliveries — see
`AlertRule.min_ratings`) is "not enough data": the rule neither fires nor resolves then, so a
quiet night does not resolve or fire anything. Between the breach and the clear line nothing
changes either: that band is the hysteresis that keeps an alert from flapping.
"""

from __future__ import annotations

import datetime as dt
import zoneinfo
from dataclasses import dataclass
from typing import Any

from analytics import queries
from analytics.access import Scope
from analytics.filters import AnalyticsQuery
from analytics.models import AlertRule
from feedback.models import OutboxItem
from interactions.models import CardUpdate
from plumbing.workqueue import WorkStatus

UTC = zoneinfo.ZoneInfo("UTC")
FIRE = "fire"
RESOLVE = "resolve"

#: Kinds whose figure is a percentage.
PERCENT_KINDS = frozenset({AlertRule.Kind.POSITIVE_RATE_BELOW, AlertRule.Kind.FAILURE_RATE_ABOVE})


@dataclass(frozen=True)
class Reading:
    """The figure of one rule over `[start, end)`: `value` (None when undefined: no ratings
    or deliveries), `sample` (what it was computed from), `enough` (sample ≥ the minimum)."""

    value: float | None
    sample: int
    enough: bool
    start: dt.datetime
    end: dt.datetime


def _query(rule: AlertRule, start: dt.datetime, end: dt.datetime) -> tuple[AnalyticsQuery, Scope]:
    filters: dict[str, Any] = {}
    if rule.bot_id:
        filters["bot"] = rule.bot.app_id
    scope = Scope(team_ids=frozenset({rule.team_id}) if rule.team_id else None)
    return AnalyticsQuery(start=start, end=end, tz=UTC, delivery_filters=filters), scope


def dead_items(rule: AlertRule, start: dt.datetime, end: dt.datetime) -> int:
    """Outbox items (matched like the failures panel: through the event's delivery, or the
    event's own team/bot) and, for a bot or global rule, card updates of the rule's bots,
    that became dead in `[start, end)` (their last change lies in the window). A team rule
    counts outbox items only: a card update carries no team."""
    query, scope = _query(rule, start, end)
    outbox = OutboxItem.objects.filter(
        scope.outbox_q(), status=WorkStatus.DEAD, updated_at__gte=start, updated_at__lt=end
    )
    if rule.bot_id:
        outbox = outbox.filter(event__bot_id=rule.bot_id)
    count = outbox.count()
    if not rule.team_id:
        cards = CardUpdate.objects.filter(
            status=WorkStatus.DEAD, updated_at__gte=start, updated_at__lt=end
        )
        if rule.bot_id:
            cards = cards.filter(card__bot_id=rule.bot_id)
        count += cards.count()
    return count


def measure(rule: AlertRule, now: dt.datetime) -> Reading:
    """The rule's figure over the window ending at `now` (see the module docstring)."""
    end = now
    start = now - dt.timedelta(minutes=rule.window_minutes)
    kind = rule.kind
    if kind == AlertRule.Kind.DEAD_ITEMS_ABOVE:
        n = dead_items(rule, start, end)
        return Reading(float(n), n, True, start, end)
    query, scope = _query(rule, start, end)
    if kind == AlertRule.Kind.FAILURE_RATE_ABOVE:
        failed = queries.failures(query, scope)["deliveries"]["rate"]
        value = None if failed["value"] is None else failed["value"] * 100
        sample = failed["denominator"]
        return Reading(value, sample, sample >= rule.min_ratings, start, end)
    figures = queries.summary(query, scope)
    current, previous = figures["current"], figures["previous"]
    if kind == AlertRule.Kind.POSITIVE_RATE_BELOW:
        rate = current["positive_rate"]
        value = None if rate["value"] is None else rate["value"] * 100
        sample = rate["denominator"]
        return Reading(value, sample, sample >= rule.min_ratings, start, end)
    negatives = current["negative"]
    if kind == AlertRule.Kind.NEGATIVES_ABOVE:
        return Reading(float(negatives), negatives, True, start, end)
    if kind == AlertRule.Kind.NEGATIVES_GROWTH:
        ratio = negatives / max(1, previous["negative"])
        return Reading(ratio, negatives, negatives >= rule.min_ratings, start, end)
    raise ValueError(f"unknown alert kind {kind!r}")


def is_breached(kind: str, threshold: float, value: float) -> bool:
    if kind == AlertRule.Kind.POSITIVE_RATE_BELOW:
        return value < threshold
    return value > threshold


def is_clear(kind: str, threshold: float, margin: float, value: float) -> bool:
    if kind == AlertRule.Kind.POSITIVE_RATE_BELOW:
        return value >= threshold + margin
    return value <= threshold - margin


def decide(
    kind: str, threshold: float, margin: float, reading: Reading, *, firing: bool
) -> str | None:
    """FIRE, RESOLVE or None (no change) for a rule in state `firing` given `reading`.

    Pure. Not enough data or an undefined figure → None; while firing only a clear reading
    resolves; while quiet only a breach fires; readings in the hysteresis band change nothing.
    """
    if not reading.enough or reading.value is None:
        return None
    if firing:
        return RESOLVE if is_clear(kind, threshold, margin, reading.value) else None
    return FIRE if is_breached(kind, threshold, reading.value) else None
