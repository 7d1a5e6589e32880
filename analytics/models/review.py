"""Review queues: negative (or otherwise selected) latest ratings that a reviewer works through.

- `ReviewQueue`: defined by ops staff in the admin — a name, the teams it covers, a filter in
  the analytics filter terms (`{"semantic": "negative", "bot": "cli_…"}`), the outcomes a
  reviewer may record and how long a claim lasts.
- `ReviewItem`: one latest rating (`feedback.LatestFeedback`, i.e. one (delivery, operator))
  in one queue, at most once (unique). Its life: open → claimed (by one reviewer until
  `claim_expires_at`; an expired claim counts as open again) → done; a skip puts it back at the
  end of the line.
- `Reviewer`: the reviewer permission, per team like the managers' `TeamMembership`. Only a
  reviewer of an item's team sees the item, and only there is the rater's comment shown.

Every state change is a function of `analytics.review.service`, each in one transaction.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from botadmin.models import Team
from feedback.models import Delivery, LatestFeedback

#: Outcomes a new queue offers (editable per queue): key → English label (translated on use).
DEFAULT_OUTCOMES = [
    {"key": "confirmed_defect", "label": "Confirmed defect"},
    {"key": "missing_context", "label": "Missing context"},
    {"key": "model_error", "label": "Model error"},
    {"key": "not_actionable", "label": "Not actionable"},
    {"key": "feedback_wrong", "label": "Feedback was wrong"},
]


#: The default outcomes' labels, translated: shown instead of the stored English label while a
#: queue keeps it unchanged.
DEFAULT_OUTCOME_LABELS = {
    "confirmed_defect": _("Confirmed defect"),
    "missing_context": _("Missing context"),
    "model_error": _("Model error"),
    "not_actionable": _("Not actionable"),
    "feedback_wrong": _("Feedback was wrong"),
}


def outcome_label(key: str, stored: str) -> str:
    """What people see for outcome `key` whose stored label is `stored`: the translation of a
    default outcome's unchanged label, otherwise the label as ops staff wrote it."""
    default = next((o["label"] for o in DEFAULT_OUTCOMES if o["key"] == key), None)
    if default is not None and stored == default:
        return str(DEFAULT_OUTCOME_LABELS[key])
    return stored


def default_outcomes() -> list[dict[str, str]]:
    return [dict(o) for o in DEFAULT_OUTCOMES]


def default_filters() -> dict[str, str]:
    return {"semantic": "negative"}


class Reviewer(models.Model):
    """The reviewer permission of one user for one team: they may claim and complete that
    team's review items and read their comments (every view is written to the audit log)."""

    team = models.ForeignKey(
        Team, on_delete=models.CASCADE, related_name="reviewers", verbose_name=_("team")
    )
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.CASCADE,
        related_name="reviewer_of",
        verbose_name=_("user"),
    )
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)

    class Meta:
        verbose_name = _("reviewer")
        verbose_name_plural = _("reviewers")
        constraints = [
            models.UniqueConstraint(fields=["team", "user"], name="reviewer_team_user_unique")
        ]

    def __str__(self) -> str:
        return f"{self.user} @ {self.team}"


class ReviewQueue(models.Model):
    """A queue of latest ratings to review (see the module docstring)."""

    name = models.CharField(_("name"), max_length=100, unique=True)
    description = models.TextField(
        _("description"), blank=True, help_text=_("What reviewers of this queue look for.")
    )
    enabled = models.BooleanField(
        _("enabled"),
        default=True,
        help_text=_("A disabled queue takes no new ratings; its items stay."),
    )
    teams = models.ManyToManyField(
        Team,
        related_name="review_queues",
        verbose_name=_("teams"),
        help_text=_("Ratings of deliveries of these teams enter the queue (at least one)."),
    )
    filters = models.JSONField(
        _("filter"),
        default=default_filters,
        blank=True,
        help_text=_(
            "Which latest ratings enter, in the dashboard's filter terms, e.g. "
            '{"semantic": "negative", "reason": "inaccurate", "bot": "cli_…", "model": "gpt-5", '
            '"skill": "search"}. Keys: bot, chat, topic, model, cli, cli_version, skill, '
            "skill_version, workflow, task, status, semantic, verdict, reason."
        ),
    )
    outcomes = models.JSONField(
        _("outcomes"),
        default=default_outcomes,
        help_text=_(
            'What a reviewer can record: a list of {"key": "confirmed_defect", "label": '
            '"Confirmed defect"} (keys: lowercase letters, digits, _ and -; at most 9, one '
            "keyboard digit each)."
        ),
    )
    claim_minutes = models.PositiveIntegerField(
        _("claim duration (minutes)"),
        default=15,
        help_text=_("An item claimed and not finished within this time returns to the queue."),
    )
    filled_until = models.DateTimeField(
        _("filled until"),
        null=True,
        blank=True,
        editable=False,
        help_text=_("Ratings up to this time have been considered for the queue."),
    )
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)
    updated_at = models.DateTimeField(_("updated at"), auto_now=True)

    class Meta:
        ordering = ["name"]
        verbose_name = _("review queue")
        verbose_name_plural = _("review queues")

    def __str__(self) -> str:
        return self.name

    def outcome_label(self, key: str) -> str:
        """The label of outcome `key` as stored ("" for an unknown key)."""
        for outcome in self.outcomes or []:
            if isinstance(outcome, dict) and outcome.get("key") == key:
                return str(outcome.get("label") or key)
        return ""

    def outcome_choices(self) -> list[dict[str, str]]:
        """`[{"key", "label"}]` of the valid outcomes, labels in the active language where
        they are the unchanged defaults."""
        return [
            {
                "key": str(o["key"]),
                "label": outcome_label(o["key"], str(o.get("label") or o["key"])),
            }
            for o in self.outcomes or []
            if isinstance(o, dict) and isinstance(o.get("key"), str) and o["key"]
        ]


class ReviewItemQuerySet(models.QuerySet):
    def claimable(self, now):
        """Items nobody holds now: open, or claimed with a claim that expired."""
        return self.filter(
            Q(status=ReviewItem.Status.OPEN)
            | Q(status=ReviewItem.Status.CLAIMED, claim_expires_at__lte=now)
        )

    def in_review(self, now):
        """Items claimed by someone whose claim has not expired."""
        return self.filter(status=ReviewItem.Status.CLAIMED, claim_expires_at__gt=now)


class ReviewItem(models.Model):
    """One latest rating in one queue (see the module docstring for its life)."""

    class Status(models.TextChoices):
        OPEN = "open", _("open")
        CLAIMED = "claimed", _("in review")
        DONE = "done", _("done")

    queue = models.ForeignKey(
        ReviewQueue, on_delete=models.CASCADE, related_name="items", verbose_name=_("queue")
    )
    latest = models.ForeignKey(
        LatestFeedback,
        on_delete=models.CASCADE,
        related_name="+",
        verbose_name=_("latest rating"),
        help_text=_("The rating reviewed; its current revision is shown."),
    )
    delivery = models.ForeignKey(
        Delivery, on_delete=models.CASCADE, related_name="+", verbose_name=_("delivery")
    )
    team = models.ForeignKey(
        Team,
        on_delete=models.CASCADE,
        related_name="+",
        verbose_name=_("team"),
        help_text=_("The delivery's team (frozen at send time): who may review it."),
    )
    status = models.CharField(
        _("status"), max_length=8, choices=Status.choices, default=Status.OPEN
    )
    queued_at = models.DateTimeField(
        _("in line since"),
        default=timezone.now,
        help_text=_("Order of the queue: oldest first; a skip moves the item to the end."),
    )
    claimed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        verbose_name=_("claimed by"),
    )
    claim_expires_at = models.DateTimeField(_("claim expires at"), null=True, blank=True)
    assigned_to = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        verbose_name=_("assigned to"),
        help_text=_("Only this reviewer gets the item (empty: any reviewer of its team)."),
    )
    outcome = models.CharField(_("outcome"), max_length=64, blank=True, default="")
    note = models.TextField(_("note"), blank=True, default="")
    external_link = models.URLField(_("external link"), max_length=500, blank=True, default="")
    skips = models.PositiveIntegerField(_("skips"), default=0)
    completed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        verbose_name=_("completed by"),
    )
    completed_at = models.DateTimeField(_("completed at"), null=True, blank=True)
    created_at = models.DateTimeField(_("created at"), default=timezone.now)

    objects = ReviewItemQuerySet.as_manager()

    class Meta:
        verbose_name = _("review item")
        verbose_name_plural = _("review items")
        constraints = [
            models.UniqueConstraint(fields=["queue", "latest"], name="review_item_once_per_queue")
        ]
        indexes = [
            models.Index(fields=["queue", "status", "queued_at", "id"], name="review_item_line"),
            models.Index(fields=["queue", "completed_by"], name="review_item_reviewer"),
        ]

    def __str__(self) -> str:
        return f"{self.queue_id}#{self.pk} ({self.status})"
