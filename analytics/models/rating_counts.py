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

from django.db import models
from django.db.models import Q
from django.utils.translation import gettext_lazy as _

from feedback.models import Delivery


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
