"""The per-delivery rating rollup, kept exact by database triggers.

`DeliveryRatingCounts` holds, for every delivery with at least one latest rating, how many of
its latest ratings (`feedback.LatestFeedback` rows) are positive, progress and negative, plus
copies of the delivery's frozen `created_at`, `team_id` and `bot_id`. It exists for speed: the
summary, trend and reasons queries read this narrow table instead of joining the latest ratings
to the wide delivery rows and counting distinct deliveries (bench/README.md has the numbers).

Who writes it: nobody in Python. Triggers on `feedback_latestfeedback` (migration
`0002_rating_counts_triggers`, PostgreSQL and SQLite) add and subtract in the same statement
that inserts, updates or deletes a latest rating, so the click handler needs to know nothing
about it and no `save()` of a stale object can overwrite it. `analytics.rollups.rebuild()`
recomputes it from the latest ratings (idempotent; `manage.py analytics_rebuild`), and the
tests check that both give exactly the raw numbers.
"""

from __future__ import annotations

from django.db import connection, models
from django.db.models import Q
from django.utils.translation import gettext_lazy as _

from feedback.models import Delivery, LatestFeedback
from plumbing.db.rows import quoted_table


class DeliveryRatingCountsQuerySet(models.QuerySet):
    def recount_all(self) -> int:
        """Replace every row with counts recomputed from the latest ratings, in the caller's
        transaction; returns the number of rows written (deliveries with a latest rating).

        On PostgreSQL the latest-rating table is first locked in SHARE mode, so no click can
        commit between the DELETE and the INSERT (clicks wait for the recount). Hand-written:
        one `INSERT … SELECT … GROUP BY` runs the whole recount inside the database, where the
        ORM would read every latest rating into Python and write the rollup back row by row;
        this is a maintenance path (`manage.py analytics_rebuild`), its time was not benched."""
        counts, latest = quoted_table(DeliveryRatingCounts), quoted_table(LatestFeedback)
        delivery = quoted_table(Delivery)
        with connection.cursor() as cur:
            if connection.vendor == "postgresql":
                cur.execute(f"LOCK TABLE {latest} IN SHARE MODE")
            cur.execute(f"DELETE FROM {counts}")  # noqa: S608
            cur.execute(
                f"""
INSERT INTO {counts} (delivery_id, created_at, team_id, bot_id, positive, progress, negative)
SELECT d.id, d.created_at, d.team_id, d.bot_id,
       SUM(CASE WHEN lf.semantic = 'positive' THEN 1 ELSE 0 END),
       SUM(CASE WHEN lf.semantic = 'progress' THEN 1 ELSE 0 END),
       SUM(CASE WHEN lf.semantic = 'negative' THEN 1 ELSE 0 END)
  FROM {latest} lf JOIN {delivery} d ON d.id = lf.delivery_id
 GROUP BY d.id, d.created_at, d.team_id, d.bot_id
"""  # noqa: S608 - table names from _meta; no parameters
            )
            return cur.rowcount


class DeliveryRatingCounts(models.Model):
    """Counts of the latest ratings of one delivery, by semantic (trigger-maintained)."""

    delivery = models.OneToOneField(
        Delivery,
        primary_key=True,
        on_delete=models.CASCADE,
        related_name="+",
        verbose_name=_("delivery"),
    )
    created_at = models.DateTimeField(
        _("created at"), help_text=_("Copy of the delivery's send time.")
    )
    team_id = models.BigIntegerField(
        _("team id"), null=True, help_text=_("Copy of the delivery's team id.")
    )
    bot_id = models.BigIntegerField(_("bot id"), help_text=_("Copy of the delivery's bot id."))
    positive = models.IntegerField(_("positive"), default=0)
    progress = models.IntegerField(_("progress"), default=0)
    negative = models.IntegerField(_("negative"), default=0)

    objects = DeliveryRatingCountsQuerySet.as_manager()

    class Meta:
        verbose_name = _("delivery rating counts")
        verbose_name_plural = _("delivery rating counts")
        indexes = [
            models.Index(
                fields=["created_at"],
                include=["team_id", "bot_id", "positive", "progress", "negative"],
                name="rating_counts_time",
            ),
            models.Index(
                fields=["team_id", "created_at"],
                include=["bot_id", "positive", "progress", "negative"],
                name="rating_counts_team_time",
            ),
            models.Index(
                fields=["created_at"],
                include=["delivery", "team_id", "bot_id"],
                condition=Q(negative__gt=0),
                name="rating_counts_negative_time",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.delivery_id}: +{self.positive} ~{self.progress} -{self.negative}"
