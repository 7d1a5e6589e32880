"""Deliveries, feedback revisions, worker terminals, durable events and the webhook outbox.

State changes live in service modules next to these models (`feedback/deliveries.py`,
`feedback/revisions.py`, `feedback/terminals.py`, `feedback/events.py`, `feedback/outbox.py`),
each in one transaction. The answer body is never stored: a delivery keeps `content_hash` of the
caller's card and the ids needed to update Cardloop's own feedback area.
"""

from __future__ import annotations

from django.db import models
from django.db.models import Q
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from botadmin.models import Bot, Chat, Team, WebhookDestination
from plumbing.workqueue import WorkItem


class Semantic(models.TextChoices):
    """The only meanings the core knows; labels and keys are policy."""

    POSITIVE = "positive", _("positive")
    PROGRESS = "progress", _("progress")
    NEGATIVE = "negative", _("negative")


class DeliveryQuerySet(models.QuerySet):
    def sent_between(self, start, end):
        """Deliveries created in [start, end)."""
        return self.filter(created_at__gte=start, created_at__lt=end)

    def interrupted_sends(self, began_before):
        """Still `pending` though their send (or last resend) began before `began_before`."""
        return self.filter(status=Delivery.Status.PENDING, updated_at__lt=began_before)

    def for_platform_message(self, bot: Bot, open_message_id: str):
        """The delivery shown in message `open_message_id` of `bot` (0 or 1 row; none for "").
        `platform_message_id <> ''` is the partial unique index's condition, without which
        SQLite cannot use that index and searches every delivery of the bot."""
        return self.filter(bot=bot, platform_message_id=open_message_id).exclude(
            platform_message_id=""
        )

    def for_turn(self, bot: Bot, session_id: str, turn_id: str, attempt: int):
        return self.filter(
            bot=bot, session_id=session_id, turn_id=turn_id, dispatch_attempt=attempt
        )


class Delivery(models.Model):
    """One canonical final answer sent to one platform message.

    Identity: (bot, session_id, turn_id, native_session_id, dispatch_attempt, discriminator)
    when session and turn are given (unique, so a retry returns the same delivery); proactive
    sends outside a worker turn have no correlation and never get `turn.completed`.
    """

    class Status(models.TextChoices):
        PENDING = "pending", _("sending")
        SENT = "sent", _("sent")
        SEND_FAILED = "send_failed", _("send failed")
        COMPLETED = "completed", _("completed")
        FAILED = "failed", _("failed")
        CANCELLED = "cancelled", _("cancelled")
        AMBIGUOUS = "ambiguous", _("ambiguous")

    class ResponseKind(models.TextChoices):
        FINAL = "final", _("final answer")
        PROGRESS = "progress", _("progress")

    delivery_id = models.CharField(_("delivery id"), max_length=40, unique=True)
    bot = models.ForeignKey(
        Bot, on_delete=models.PROTECT, related_name="deliveries", verbose_name=_("bot")
    )
    chat = models.ForeignKey(
        Chat,
        on_delete=models.PROTECT,
        related_name="deliveries",
        null=True,
        blank=True,
        verbose_name=_("chat"),
    )
    team = models.ForeignKey(
        Team,
        on_delete=models.SET_NULL,
        related_name="deliveries",
        null=True,
        blank=True,
        verbose_name=_("team"),
        help_text=_("The chat's team at send time (frozen)."),
    )
    # Correlation
    session_id = models.CharField(_("session_id"), max_length=128, blank=True, default="")
    turn_id = models.CharField(_("turn_id"), max_length=128, blank=True, default="")
    native_session_id = models.CharField(
        _("native_session_id"), max_length=128, blank=True, default=""
    )
    dispatch_attempt = models.PositiveIntegerField(_("dispatch attempt"), default=0)
    discriminator = models.CharField(_("discriminator"), max_length=64, blank=True, default="")
    requester_open_id = models.CharField(
        _("requester open_id"), max_length=64, blank=True, default=""
    )
    topic_id = models.CharField(_("topic"), max_length=128, blank=True, default="")
    response_kind = models.CharField(
        _("response kind"),
        max_length=10,
        choices=ResponseKind.choices,
        default=ResponseKind.PROGRESS,
    )
    # Platform
    platform_message_id = models.CharField(
        _("platform_message_id"), max_length=64, blank=True, default=""
    )
    card_id = models.CharField(_("card_id"), max_length=64, blank=True, default="")
    content_hash = models.CharField(_("content hash"), max_length=71, blank=True, default="")
    # Runtime metadata (dimensions for analytics, frozen at send time)
    model = models.CharField(_("model"), max_length=100, blank=True, default="")
    cli_id = models.CharField(_("CLI id"), max_length=100, blank=True, default="")
    cli_version = models.CharField(_("CLI version"), max_length=50, blank=True, default="")
    skill_name = models.CharField(_("skill name"), max_length=100, blank=True, default="")
    skill_version = models.CharField(_("skill version"), max_length=50, blank=True, default="")
    workflow_id = models.CharField(_("workflow id"), max_length=128, blank=True, default="")
    task_id = models.CharField(_("task id"), max_length=128, blank=True, default="")
    parent_task_id = models.CharField(_("parent task id"), max_length=128, blank=True, default="")
    reasoning_effort = models.CharField(
        _("reasoning effort"), max_length=20, blank=True, default=""
    )
    content_ref = models.URLField(
        _("content link"),
        max_length=500,
        blank=True,
        default="",
        help_text=_("The backend's link to the answer (shown to reviewers); never the answer."),
    )
    # Feedback
    feedback_shown = models.BooleanField(_("feedback shown"), default=False)
    feedback_reason = models.CharField(
        _("feedback reason"),
        max_length=20,
        blank=True,
        default="",
        help_text=_(
            "enabled | disabled | api_only | ambiguous_team | invalid_policy | not_final | no_card"
        ),
    )
    policy_snapshot = models.JSONField(_("policy snapshot"), null=True, blank=True)
    current_revision = models.ForeignKey(
        "Revision",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        verbose_name=_("current revision"),
    )
    webhook_destination_ids = models.JSONField(
        _("webhook destination ids"),
        default=list,
        blank=True,
        help_text=_("Destinations frozen at send time."),
    )
    # State
    status = models.CharField(
        _("status"), max_length=12, choices=Status.choices, default=Status.PENDING
    )
    error_code = models.CharField(_("error code"), max_length=64, blank=True, default="")
    duration_ms = models.PositiveBigIntegerField(_("duration (ms)"), null=True, blank=True)
    usage = models.JSONField(_("usage"), null=True, blank=True)
    completed_at = models.DateTimeField(_("completed at"), null=True, blank=True)
    created_at = models.DateTimeField(_("created at"), default=timezone.now)
    updated_at = models.DateTimeField(_("updated at"), auto_now=True)

    objects = DeliveryQuerySet.as_manager()

    class Meta:
        verbose_name = _("delivery")
        verbose_name_plural = _("deliveries")
        constraints = [
            models.UniqueConstraint(
                fields=[
                    "bot",
                    "session_id",
                    "turn_id",
                    "native_session_id",
                    "dispatch_attempt",
                    "discriminator",
                ],
                condition=~Q(session_id="") & ~Q(turn_id=""),
                name="delivery_correlation_unique",
            ),
            models.UniqueConstraint(
                fields=["bot", "platform_message_id"],
                condition=~Q(platform_message_id=""),
                name="delivery_platform_message_unique",
            ),
        ]
        indexes = [
            models.Index(fields=["created_at", "id"], name="delivery_time"),
            models.Index(
                fields=["bot", "session_id", "turn_id", "dispatch_attempt"], name="delivery_turn"
            ),
            # Analytics (issue 5): index-only counts of deliveries per range, team and bot.
            models.Index(
                fields=["created_at"],
                include=["team", "bot", "feedback_shown", "status"],
                name="delivery_analytics_time",
            ),
            models.Index(
                fields=["team", "created_at"],
                include=["bot", "feedback_shown", "status"],
                name="delivery_analytics_team",
            ),
            models.Index(
                fields=["created_at"],
                include=["team", "bot", "status", "error_code"],
                condition=Q(status__in=["send_failed", "failed"]),
                name="delivery_analytics_failed",
            ),
            # `interrupted_sends`, every few seconds per outbox worker: the few pending rows,
            # not a scan of every delivery
            models.Index(
                fields=["updated_at"], condition=Q(status="pending"), name="delivery_pending"
            ),
        ]

    def __str__(self) -> str:
        return self.delivery_id


class Revision(models.Model):
    """One immutable feedback record. A chain per (delivery, operator) linked by `supersedes`.

    Append-only: rows are never updated or deleted by Cardloop. `callback_key` (unique) makes a
    repeated or concurrent click a no-op that returns the first write's answer.
    """

    class Source(models.TextChoices):
        CARD = "card", _("Feishu card")
        API = "api", _("API")

    revision_id = models.CharField(_("revision id"), max_length=40, unique=True)
    delivery = models.ForeignKey(
        Delivery, on_delete=models.CASCADE, related_name="revisions", verbose_name=_("delivery")
    )
    operator_open_id = models.CharField(_("operator open_id"), max_length=64)
    revision = models.PositiveIntegerField(_("revision number"))
    verdict_key = models.CharField(_("verdict key"), max_length=64)
    semantic = models.CharField(_("semantic"), max_length=10, choices=Semantic.choices)
    reason_key = models.CharField(_("reason key"), max_length=64, blank=True, default="")
    comment = models.TextField(_("comment"), blank=True, default="")
    callback_key = models.CharField(_("callback key"), max_length=80, unique=True)
    supersedes = models.OneToOneField(
        "self",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="superseded_by",
        verbose_name=_("supersedes"),
    )
    source = models.CharField(
        _("source"), max_length=8, choices=Source.choices, default=Source.CARD
    )
    created_at = models.DateTimeField(_("created at"), default=timezone.now)

    class Meta:
        verbose_name = _("feedback revision")
        verbose_name_plural = _("feedback revisions")
        constraints = [
            models.UniqueConstraint(
                fields=["delivery", "operator_open_id", "revision"], name="revision_chain_unique"
            )
        ]
        indexes = [models.Index(fields=["created_at", "delivery"], name="revision_time")]

    def __str__(self) -> str:
        return f"{self.revision_id} ({self.verdict_key})"


class LatestFeedback(models.Model):
    """The newest revision of each (delivery, operator): one row, moved forward in the same
    transaction that appends a revision. Analytics count these ("latest ratings")."""

    delivery = models.ForeignKey(
        Delivery,
        on_delete=models.CASCADE,
        related_name="latest_feedback",
        verbose_name=_("delivery"),
    )
    operator_open_id = models.CharField(_("operator open_id"), max_length=64)
    revision = models.OneToOneField(
        Revision, on_delete=models.CASCADE, related_name="+", verbose_name=_("revision")
    )
    semantic = models.CharField(_("semantic"), max_length=10, choices=Semantic.choices)
    verdict_key = models.CharField(_("verdict key"), max_length=64)
    reason_key = models.CharField(_("reason key"), max_length=64, blank=True, default="")
    updated_at = models.DateTimeField(_("updated at"), default=timezone.now)

    class Meta:
        verbose_name = _("latest feedback")
        verbose_name_plural = _("latest feedback")
        constraints = [
            models.UniqueConstraint(
                fields=["delivery", "operator_open_id"], name="latest_feedback_unique"
            )
        ]

    def __str__(self) -> str:
        return f"{self.delivery_id}: {self.verdict_key}"


class WorkerTerminal(models.Model):
    """The agent runtime's signal that a turn ended, keyed by (bot, session, turn, attempt)."""

    class Status(models.TextChoices):
        COMPLETED = "completed", _("completed")
        FAILED = "failed", _("failed")
        CANCELLED = "cancelled", _("cancelled")
        AMBIGUOUS = "ambiguous", _("ambiguous")

    bot = models.ForeignKey(
        Bot, on_delete=models.PROTECT, related_name="worker_terminals", verbose_name=_("bot")
    )
    session_id = models.CharField(_("session_id"), max_length=128)
    turn_id = models.CharField(_("turn_id"), max_length=128)
    attempt = models.PositiveIntegerField(_("dispatch attempt"), default=0)
    status = models.CharField(_("status"), max_length=10, choices=Status.choices)
    completed_at = models.DateTimeField(_("completed at"), default=timezone.now)
    duration_ms = models.PositiveBigIntegerField(_("duration (ms)"), null=True, blank=True)
    usage = models.JSONField(_("usage"), null=True, blank=True)
    created_at = models.DateTimeField(_("created at"), default=timezone.now)

    class Meta:
        verbose_name = _("worker terminal")
        verbose_name_plural = _("worker terminals")
        constraints = [
            models.UniqueConstraint(
                fields=["bot", "session_id", "turn_id", "attempt"], name="worker_terminal_unique"
            )
        ]

    def __str__(self) -> str:
        return f"{self.session_id}/{self.turn_id}#{self.attempt} {self.status}"


class EventQuerySet(models.QuerySet):
    def in_feed(self):
        """Events that belong to the public feed (facts; not admin test pings)."""
        return self.exclude(type=Event.Type.WEBHOOK_TEST)

    def for_bot(self, bot: Bot):
        return self.filter(bot=bot)

    def of_types(self, types: list[str]):
        return self.filter(type__in=types)

    def after_position(self, seq: int):
        """Sequenced events after feed position `seq`, in feed order."""
        return self.filter(seq__gt=seq).order_by("seq")

    def unsequenced(self):
        """Committed events that have no feed position yet, oldest first."""
        return self.filter(seq__isnull=True).order_by("pk")


class Event(models.Model):
    """A durable fact for the outside world. `body` is the envelope
    `{"id","type","version":1,"time","data"}` serialized once; `event_id` is the stable public
    id derived from what the event describes.

    Feed order is `seq`, assigned after commit, in commit order, by
    `feedback.events.sequence_events` (ids are allocated at insert, so id order is not commit
    order on PostgreSQL and a reader paging by id could skip an event that commits late).
    Private data (feedback comment text) is never part of `body`: it only goes into the outbox
    bodies of destinations that opted in.
    """

    class Type(models.TextChoices):
        TURN_COMPLETED = "turn.completed", "turn.completed"
        FEEDBACK_REVISED = "feedback.revised", "feedback.revised"
        INTERACTION_RESOLVED = "interaction.resolved", "interaction.resolved"
        REVIEW_COMPLETED = "review.completed", "review.completed"
        ALERT_FIRED = "alert.fired", "alert.fired"
        ALERT_RESOLVED = "alert.resolved", "alert.resolved"
        WEBHOOK_TEST = "webhook.test", "webhook.test"

    event_id = models.CharField(_("event id"), max_length=40, unique=True)
    type = models.CharField(_("type"), max_length=32, choices=Type.choices, db_index=True)
    version = models.PositiveSmallIntegerField(_("version"), default=1)
    bot = models.ForeignKey(
        Bot,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        verbose_name=_("bot"),
    )
    team = models.ForeignKey(
        Team,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        verbose_name=_("team"),
    )
    delivery = models.ForeignKey(
        Delivery,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="events",
        verbose_name=_("delivery"),
    )
    body = models.TextField(_("body"))
    seq = models.BigIntegerField(
        _("feed position"),
        null=True,
        blank=True,
        unique=True,
        editable=False,
        help_text=_("Feed position, assigned after commit in commit order."),
    )
    created_at = models.DateTimeField(_("created at"), default=timezone.now)

    objects = EventQuerySet.as_manager()

    class Meta:
        verbose_name = _("event")
        verbose_name_plural = _("events")
        constraints = [
            models.UniqueConstraint(
                fields=["delivery"],
                condition=Q(type="turn.completed"),
                name="event_one_turn_completed_per_delivery",
            )
        ]
        indexes = [
            models.Index(fields=["id"], condition=Q(seq__isnull=True), name="event_unsequenced")
        ]

    def __str__(self) -> str:
        return f"{self.type} {self.event_id}"


class OutboxItem(WorkItem):
    """One (event, destination) delivery obligation. `body` is serialized once, when the row is
    written, and sent byte-identical on every attempt."""

    event = models.ForeignKey(
        Event, on_delete=models.CASCADE, related_name="outbox_items", verbose_name=_("event")
    )
    destination = models.ForeignKey(
        WebhookDestination,
        on_delete=models.CASCADE,
        related_name="outbox_items",
        verbose_name=_("destination"),
    )
    body = models.TextField(_("body"))
    last_status_code = models.PositiveSmallIntegerField(
        _("last status code"), null=True, blank=True
    )
    delivered_at = models.DateTimeField(_("delivered at"), null=True, blank=True)

    class Meta:
        verbose_name = _("outbox item")
        verbose_name_plural = _("outbox items")
        constraints = [
            models.UniqueConstraint(
                fields=["event", "destination"], name="outbox_event_destination"
            )
        ]
        indexes = [
            models.Index(fields=["status", "next_attempt_at"], name="outbox_due"),
            models.Index(fields=["status", "created_at", "id"], name="outbox_status_time"),
        ]

    def __str__(self) -> str:
        return f"{self.event_id} → {self.destination_id} ({self.status})"


class WebhookAttempt(models.Model):
    """One HTTP attempt of an outbox item: the destination's attempt log."""

    outbox_item = models.ForeignKey(
        OutboxItem,
        on_delete=models.CASCADE,
        related_name="attempt_log",
        verbose_name=_("outbox item"),
    )
    destination = models.ForeignKey(
        WebhookDestination,
        on_delete=models.CASCADE,
        related_name="attempts",
        verbose_name=_("destination"),
    )
    attempt = models.PositiveIntegerField(_("attempt"))
    started_at = models.DateTimeField(_("started at"), default=timezone.now)
    duration_ms = models.PositiveIntegerField(_("duration (ms)"), default=0)
    status_code = models.PositiveSmallIntegerField(_("status code"), null=True, blank=True)
    outcome = models.CharField(_("outcome"), max_length=24)
    error = models.CharField(_("error"), max_length=500, blank=True, default="")
    response_excerpt = models.TextField(_("response excerpt"), blank=True, default="")

    class Meta:
        ordering = ["-started_at", "-id"]
        verbose_name = _("webhook attempt")
        verbose_name_plural = _("webhook attempts")

    def __str__(self) -> str:
        return f"{self.outbox_item_id} #{self.attempt} {self.outcome}"
