"""Rebuild and check `DeliveryRatingCounts` (the trigger-maintained rollup, see models.py).

`rebuild()` is idempotent: it replaces the whole table with counts recomputed from
`feedback.LatestFeedback` in one transaction. On PostgreSQL it first takes a SHARE lock on
the latest-rating table so no click can commit between the delete and the insert (clicks wait
for the rebuild, typically seconds at a million deliveries).
"""

from __future__ import annotations

from django.db import transaction
from django.db.models import Count, F, Q

from analytics.models import DeliveryRatingCounts
from feedback.models import LatestFeedback, Semantic


def rebuild() -> int:
    """Recompute every row from the latest ratings in one transaction
    (`DeliveryRatingCounts.objects.recount_all`); returns the number of rows written."""
    with transaction.atomic():
        return DeliveryRatingCounts.objects.recount_all()


def forget_team(sender, instance, **kwargs) -> None:
    """`post_delete` receiver for `botadmin.Team` (connected in `AnalyticsConfig.ready`): the
    deleted team's deliveries lose their team (`Delivery.team` is SET_NULL), and so must their
    rollup rows' copied `team_id`, in the same transaction, or the team's old ratings stay
    counted under its id while its deliveries no longer are."""
    DeliveryRatingCounts.objects.filter(team_id=instance.pk).update(team_id=None)


def mismatches(limit: int = 10) -> list[dict]:
    """Deliveries whose stored counts or copied team differ from a fresh count of their latest
    ratings and their delivery's team (at most `limit`); an empty list means the rollup is
    exact. Rows with all-zero counts and no latest rating are not mismatches."""
    fresh = {
        row["delivery_id"]: row
        for row in LatestFeedback.objects.values("delivery_id", team_id=F("delivery__team_id"))
        .annotate(
            positive=Count("id", filter=Q(semantic=Semantic.POSITIVE)),
            progress=Count("id", filter=Q(semantic=Semantic.PROGRESS)),
            negative=Count("id", filter=Q(semantic=Semantic.NEGATIVE)),
        )
        .order_by()
    }
    stored = {
        row["delivery_id"]: row
        for row in DeliveryRatingCounts.objects.values(
            "delivery_id", "team_id", "positive", "progress", "negative"
        )
    }
    out = []
    zero = {"team_id": None, "positive": 0, "progress": 0, "negative": 0}
    for delivery_id in sorted(set(fresh) | set(stored)):
        have = stored.get(delivery_id, zero)
        # no rating left: only all-zero counts are right, whatever team the row copied
        want = fresh.get(delivery_id, {**zero, "team_id": have["team_id"]})
        if any(want[k] != have[k] for k in ("team_id", "positive", "progress", "negative")):
            out.append({"delivery_id": delivery_id, "stored": have, "fresh": want})
            if len(out) >= limit:
                break
    return out
