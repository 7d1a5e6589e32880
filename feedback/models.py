"""Deliveries, feedback revisions, worker terminals, durable events, webhook destinations and
the webhook outbox.

State changes live in service modules next to these models (`feedback/deliveries.py`,
`feedback/revisions.py`, `feedback/terminals.py`, `feedback/events.py`, `feedback/outbox.py`,
`feedback/destinations.py`), each in one transaction. The answer body is never stored: a delivery keeps `content_hash` of the
caller's card and the ids needed to update Cardloop's own feedback area.
"""

from __future__ import annotations

import hashlib
import json
from datetime import timedelta
from typing import ClassVar

from django.db import connection, models
from django.db.models import Max, Q
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from botadmin.models import Bot, Chat, Team
from plumbing.db.rows import (
    columns_of,
    insert_row,
    insert_statement,
    insert_values,
    quoted_table,
    select_one,
)
from plumbing.workqueue import WorkItem


class Semantic(models.TextChoices):
    """The only meanings the core knows; labels and keys are policy."""

    POSITIVE = "positive", _("positive")
    PROGRESS = "progress", _("progress")
    NEGATIVE = "negative", _("negative")


class InsertQuerySet(models.QuerySet):
    """`insert(obj)` for the rows every feedback click writes (revision, latest feedback,
    event)."""

    def insert(self, obj):
        """INSERT the new instance `obj` in the caller's transaction and return it saved, with
        its `pk`; raises IntegrityError like `obj.save()`.

        Hand-written (`plumbing.db.rows.insert_row`: the model's own INSERT … RETURNING, built
        once per model) because building the INSERT through the ORM cost more CPU than the
        database spent running it: about 0.55 ms a click for the rows a click inserts
        (interleaved A/B in one process, PostgreSQL: 6.61 → 6.02 ms of CPU a click;
        `bench/README.md`, "Hand-written SQL on the click path"). Same values and columns as
        `save(force_insert=True)`; like `bulk_create`, no save signals (none are connected)."""
        return insert_row(obj)


class DeliveryQuerySet(models.QuerySet):
    def interrupted_sends(self, began_before):
        """Still `pending` though their send (or last resend) began before `began_before`."""
        return self.filter(status=Delivery.Status.PENDING, updated_at__lt=began_before)

    def waiting_for_chat(self, chat_id: str):
        """Deliveries sent to `chat_id` while Cardloop had no `Chat` row for it (`chat` empty);
        `sent_chat_id <> ''` and `chat IS NULL` are the `delivery_unlinked_chat` index's
        condition, so only those few rows are read."""
        return self.filter(sent_chat_id=chat_id, chat__isnull=True).exclude(sent_chat_id="")

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

    def lock_for_click(self, bot: Bot, delivery_id: str) -> Delivery | None:
        """The delivery `delivery_id` of `bot`, row-locked until the caller's transaction ends
        (`SELECT … FOR UPDATE` on PostgreSQL; SQLite has one writer at a time), or None.

        Only the delivery row: a join (say, of its current revision) would not be re-read by
        PostgreSQL after waiting for the lock, so the caller reads related rows after this.
        Hand-written, one statement: built by the ORM it cost about 0.6 ms of CPU on every
        click (the click path's hand-written statements together took it from 6.6–7.1 to
        4.6–5.3 ms of CPU a click on PostgreSQL; `bench/README.md`); read by `select_one`, which
        works out the columns' converters once instead of on every call as `raw()` does."""
        lock = " FOR UPDATE" if connection.features.has_select_for_update else ""
        table = quoted_table(Delivery)
        return select_one(
            Delivery,
            f"SELECT {columns_of(Delivery)} FROM {table} "  # noqa: S608
            "WHERE bot_id = %s AND delivery_id = %s "
            f"LIMIT 1{lock}",
            [bot.pk, delivery_id],
        )

    def set_current_revision(self, delivery: Delivery, revision: Revision) -> None:
        """Make `revision` the current one of `delivery` and stamp `updated_at` (now), in the
        row and on the instance; caller's transaction. Equals
        `delivery.save(update_fields=["current_revision", "updated_at"])`.

        Hand-written because it runs on every click and the ORM's UPDATE took more CPU than
        the statement (part of the 6.6–7.1 → 4.6–5.3 ms of CPU a click above)."""
        delivery.current_revision = revision
        delivery.updated_at = timezone.now()
        with connection.cursor() as cursor:
            cursor.execute(
                f"UPDATE {quoted_table(Delivery)} "  # noqa: S608
                "SET current_revision_id = %s, updated_at = %s WHERE id = %s",
                [
                    revision.pk,
                    connection.ops.adapt_datetimefield_value(delivery.updated_at),
                    delivery.pk,
                ],
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

    class Channel(models.TextChoices):
        """The channels Cardloop sends final answers on (`interactions.kinds` names)."""

        FEISHU = "feishu", _("Feishu")
        SLACK = "slack", _("Slack")
        TELEGRAM = "telegram", _("Telegram")

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
    sent_chat_id = models.CharField(
        _("sent to chat_id"),
        max_length=64,
        blank=True,
        default="",
        help_text=_(
            "The chat the card was sent to; `chat` is linked once a chat with this id exists."
        ),
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
    channel = models.CharField(
        _("channel"),
        max_length=12,
        choices=Channel.choices,
        default=Channel.FEISHU,
        help_text=_("The channel the answer was sent on."),
    )
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
            # Analytics: index-only counts of deliveries per range, team and bot.
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
            # `waiting_for_chat`, when a chat is saved: only deliveries still without a chat
            models.Index(
                fields=["sent_chat_id"],
                condition=Q(chat__isnull=True) & ~Q(sent_chat_id=""),
                name="delivery_unlinked_chat",
            ),
        ]

    def __str__(self) -> str:
        return self.delivery_id


class RevisionQuerySet(InsertQuerySet):
    def append(
        self, revision: Revision, delivery: Delivery, event: Event | None = None
    ) -> Revision:
        """INSERT the new `revision` of `delivery`, make it its operator's latest feedback
        (`LatestFeedback.objects.move_to`) and the delivery's current revision
        (`Delivery.objects.set_current_revision`: `updated_at` now, in the row and on the
        instance), and INSERT `event` (a new, unsaved Event: the revision's
        `feedback.revised`, `events.feedback_revised_event`; set saved with its `pk`) in the
        caller's transaction. Returns `revision` saved, with its `pk`.
        Raises IntegrityError like the writes it stands for.

        PostgreSQL: one statement (the revision's INSERT … RETURNING, the latest feedback's
        upsert on `latest_feedback_unique` and the delivery's UPDATE as data-modifying CTEs
        that read the new id from the first), instead of three: every written click makes
        them, and each statement cost the web process 0.1–0.2 ms of CPU, most of it the round
        trip's own (in one process: 0.58–0.63 ms a click for the three, 0.36 for the one). The upsert is an UPDATE of the operator's row when
        there is one, so the analytics triggers (`analytics_rating_counts_*`, AFTER INSERT /
        AFTER UPDATE of `feedback_latestfeedback`) see the same row changes as `move_to`'s.
        The foreign keys are checked at commit (deferred), after all three rows exist.
        The event is one more data-modifying CTE of that statement (no column refers to the
        revision's row): a separate INSERT cost the web process about 0.1 ms of CPU a click
        on PostgreSQL (per section, in one process: the revision write and its event went
        from 20–21 % to 16 % of the handler thread's CPU per click).
        SQLite (statements there cost a tenth as much; data-modifying CTEs do not exist): the
        three statements, and the event's INSERT."""
        values = (
            insert_values(revision)
            if connection.vendor == "postgresql" and revision.pk is None
            else None
        )
        event_values = None
        if values is not None and event is not None:
            event_values = insert_values(event) if event.pk is None else None
            if event_values is None:
                values = None
        if values is None:
            self.insert(revision)
            LatestFeedback.objects.move_to(revision)
            Delivery.objects.set_current_revision(delivery, revision)
            if event is not None:
                Event.objects.insert(event)
            return revision
        insert, columns = insert_statement(Revision)
        latest, table = quoted_table(LatestFeedback), quoted_table(Delivery)
        now = timezone.now()
        if event_values is not None:
            event_cte = f", ev AS ({insert_statement(Event)[0]})"
            select = "SELECT rev.id, (SELECT id FROM ev) FROM rev"
        else:
            event_cte, event_values, select = "", [], "SELECT rev.id, NULL FROM rev"
        with connection.cursor() as cursor:
            cursor.execute(
                f"WITH rev AS ({insert}), "  # noqa: S608 - our table names
                f"latest AS (INSERT INTO {latest} "
                "(delivery_id, operator_open_id, revision_id, semantic, verdict_key, "
                "reason_key, updated_at) SELECT %s, %s, rev.id, %s, %s, %s, %s FROM rev "
                "ON CONFLICT (delivery_id, operator_open_id) DO UPDATE SET "
                "revision_id = EXCLUDED.revision_id, semantic = EXCLUDED.semantic, "
                "verdict_key = EXCLUDED.verdict_key, reason_key = EXCLUDED.reason_key, "
                "updated_at = EXCLUDED.updated_at), "
                f"current AS (UPDATE {table} SET current_revision_id = rev.id, updated_at = %s "
                f"FROM rev WHERE {table}.id = %s){event_cte} "
                f"{select}",
                [
                    *values,
                    delivery.pk,
                    revision.operator_open_id,
                    revision.semantic,
                    revision.verdict_key,
                    revision.reason_key,
                    revision.created_at,
                    now,
                    delivery.pk,
                    *event_values,
                ],
            )
            revision.pk, event_pk = cursor.fetchone()
        for row in (revision, event) if event is not None else (revision,):
            row._state.adding = False
            row._state.db = connection.alias
        if event is not None:
            event.pk = event_pk
        delivery.current_revision = revision
        delivery.updated_at = now
        return revision


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

    objects = RevisionQuerySet.as_manager()

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


class LatestFeedbackQuerySet(InsertQuerySet):
    def move_to(self, revision: Revision) -> None:
        """Make `revision` the latest feedback of its (delivery, operator), in the caller's
        transaction: the row of an operator's earlier revision is updated; a first revision
        (no `supersedes`) has no row yet and gets one, inserted without looking first."""
        updated = revision.supersedes_id is not None and self.filter(
            delivery_id=revision.delivery_id, operator_open_id=revision.operator_open_id
        ).update(
            revision=revision,
            semantic=revision.semantic,
            verdict_key=revision.verdict_key,
            reason_key=revision.reason_key,
            updated_at=revision.created_at,
        )
        if not updated:
            self.insert(
                LatestFeedback(
                    delivery_id=revision.delivery_id,
                    operator_open_id=revision.operator_open_id,
                    revision=revision,
                    semantic=revision.semantic,
                    verdict_key=revision.verdict_key,
                    reason_key=revision.reason_key,
                    updated_at=revision.created_at,
                )
            )


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

    objects = LatestFeedbackQuerySet.as_manager()

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


class WorkerTerminalQuerySet(models.QuerySet):
    def lock_turn(self, bot_id: int, session_id: str, turn_id: str, attempt: int) -> None:
        """Serialize the writers of one turn until the caller's transaction ends: a
        PostgreSQL advisory transaction lock on a 64-bit key derived from (bot, session, turn,
        attempt); nothing on SQLite, whose writers are serialized anyway.

        Hand-written because the ORM has no form for advisory locks; it lets a terminal and
        the turn's deliveries arrive in either order without both missing each other and
        without locking any table."""
        if connection.vendor != "postgresql":
            return
        key = json.dumps(["turn", bot_id, session_id, turn_id, attempt]).encode()
        lock_id = int.from_bytes(hashlib.sha256(key).digest()[:8], "big", signed=True)
        with connection.cursor() as cur:
            cur.execute("SELECT pg_advisory_xact_lock(%s)", [lock_id])


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

    objects = WorkerTerminalQuerySet.as_manager()

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


#: Arbitrary constant naming the feed sequencer's PostgreSQL advisory lock.
_SEQUENCER_LOCK = 0x6361726466656564  # "cardfeed"


class EventQuerySet(InsertQuerySet):
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

    def feed_head(self) -> int:
        """The highest feed position handed out so far (0 for an empty feed)."""
        return self.aggregate(top=Max("seq"))["top"] or 0

    def unsequenced(self):
        """Committed events that have no feed position yet, oldest first."""
        return self.filter(seq__isnull=True).order_by("pk")

    def lock_sequencer(self) -> None:
        """Hold the feed sequencer's lock until the caller's transaction ends (a PostgreSQL
        advisory transaction lock; nothing on SQLite, whose writers are serialized anyway).

        Hand-written because the ORM has no form for advisory locks; unlike a table lock it
        holds back only other sequencers, never the writers of events."""
        if connection.vendor == "postgresql":
            with connection.cursor() as cur:
                cur.execute("SELECT pg_advisory_xact_lock(%s)", [_SEQUENCER_LOCK])


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
        SESSION_CANCEL_REQUESTED = "session.cancel_requested", "session.cancel_requested"
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


class WebhookDestination(models.Model):
    """An outbound webhook target. The set that applies is frozen on each delivery at send time.

    Assignment: a destination with no teams and no bots receives events of every bot; otherwise
    events whose bot is one of `bots` or whose team is one of `teams`.
    """

    EVENT_TYPES: ClassVar[list[tuple[str, str]]] = [
        ("turn.completed", "turn.completed"),
        ("feedback.revised", "feedback.revised"),
        ("interaction.resolved", "interaction.resolved"),
        ("review.completed", "review.completed"),
        ("alert.fired", "alert.fired"),
        ("alert.resolved", "alert.resolved"),
        ("session.cancel_requested", "session.cancel_requested"),
    ]

    name = models.CharField(_("name"), max_length=100, unique=True)
    url = models.URLField(_("URL"), max_length=2000)
    enabled = models.BooleanField(_("enabled"), default=True)
    event_types = models.JSONField(_("event types"), default=list)
    timeout_ms = models.PositiveIntegerField(
        _("timeout (ms)"), default=10_000, help_text=_("100–30000 ms per attempt.")
    )
    include_comment = models.BooleanField(
        _("include comment text"),
        default=False,
        help_text=_(
            "Send feedback comment text in feedback.revised and review.completed (with the "
            "reviewer's note). Off by default."
        ),
    )
    secret_ref = models.CharField(_("secret ref"), max_length=80, blank=True, editable=False)
    previous_secret_ref = models.CharField(
        _("previous secret ref"), max_length=80, blank=True, editable=False
    )
    previous_secret_expires_at = models.DateTimeField(
        _("previous secret expires at"), null=True, blank=True, editable=False
    )
    teams = models.ManyToManyField(
        Team, blank=True, related_name="webhook_destinations", verbose_name=_("teams")
    )
    bots = models.ManyToManyField(
        Bot, blank=True, related_name="webhook_destinations", verbose_name=_("bots")
    )
    disabled_reason = models.CharField(_("disabled reason"), max_length=200, blank=True)
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)
    updated_at = models.DateTimeField(_("updated at"), auto_now=True)

    class Meta:
        # The table keeps the name it was created with in `botadmin`, where the model lived
        # before it moved next to its service (state-only migration, data untouched).
        db_table = "botadmin_webhookdestination"
        ordering = ["name"]
        verbose_name = _("webhook destination")
        verbose_name_plural = _("webhook destinations")

    def __str__(self) -> str:
        return self.name


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


#: The columns `WebhookAttempt.objects.log` writes, in the order of its row tuples.
ATTEMPT_LOG_COLUMNS = (
    "outbox_item_id",
    "destination_id",
    "attempt",
    "started_at",
    "duration_ms",
    "status_code",
    "outcome",
    "error",
    "response_excerpt",
)


class WebhookAttemptQuerySet(models.QuerySet):
    #: Rows per INSERT outside PostgreSQL (9 parameters a row stay under SQLite's oldest
    #: limit of 999 variables a statement).
    LOG_CHUNK = 100

    def log(self, rows: list[tuple]) -> int:
        """Insert attempt-log rows in the caller's transaction; returns how many. Each row is
        a tuple in `ATTEMPT_LOG_COLUMNS` order: (outbox item id, destination id, attempt number,
        started_at (aware datetime), duration in ms, HTTP status or None, outcome, error
        (≤ 500 characters), response excerpt). Same rows as `bulk_create` of
        `WebhookAttempt(**dict(zip(ATTEMPT_LOG_COLUMNS, row)))`, without building the instances.

        Hand-written because every webhook attempt writes a row here, and in the outbox
        worker `bulk_create` spent more CPU preparing each field of each instance than
        PostgreSQL spent inserting them — the largest part of a settlement
        (`bench/outbox_throughput.py`). On PostgreSQL one `INSERT … SELECT FROM unnest(…)`
        with one array per column (a statement of constant text, so the driver parses it
        once); elsewhere a multi-row `VALUES`, at most `LOG_CHUNK` rows per statement."""
        if not rows:
            return 0
        meta = WebhookAttempt._meta
        fields = [meta.get_field(c.removesuffix("_id")) for c in ATTEMPT_LOG_COLUMNS]
        table = quoted_table(WebhookAttempt)
        columns = ", ".join(connection.ops.quote_name(f.column) for f in fields)
        with connection.cursor() as cursor:
            if connection.vendor == "postgresql":
                arrays = ", ".join(f"%s::{f.db_type(connection)}[]" for f in fields)
                cursor.execute(
                    f"INSERT INTO {table} ({columns}) "  # noqa: S608 - names from our models
                    f"SELECT * FROM unnest({arrays})",
                    [list(column) for column in zip(*rows, strict=True)],
                )
                return len(rows)
            adapt = connection.ops.adapt_datetimefield_value
            one = "(" + ", ".join(["%s"] * len(fields)) + ")"
            for start in range(0, len(rows), self.LOG_CHUNK):
                chunk = rows[start : start + self.LOG_CHUNK]
                params = []
                for item, destination, attempt, started_at, *rest in chunk:
                    params += [item, destination, attempt, adapt(started_at), *rest]
                cursor.execute(
                    f"INSERT INTO {table} ({columns}) "  # noqa: S608 - names from our models
                    f"VALUES {', '.join([one] * len(chunk))}",
                    params,
                )
        return len(rows)


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

    objects = WebhookAttemptQuerySet.as_manager()

    class Meta:
        ordering = ["-started_at", "-id"]
        verbose_name = _("webhook attempt")
        verbose_name_plural = _("webhook attempts")

    def __str__(self) -> str:
        return f"{self.outbox_item_id} #{self.attempt} {self.outcome}"


class TelegramCommentPrompt(models.Model):
    """A `force_reply` prompt Cardloop sent under a Telegram answer to take one person's
    comment on it (https://core.telegram.org/bots/api#forcereply): the reply to message
    (`chat_id`, `message_id`) of `bot` from `operator_open_id` (the Telegram user id) is
    recorded as the details of their negative verdict, with `reason_key` (chosen before the
    prompt, or "") and `rev`, the revision the prompt was asked on (the stale-click guard of
    `feedback.revisions.record_details`). Holds no text: the comment is stored on the
    revision only.

    One row per tap (`event_id`, the tap's update id, unique per bot): it is written before
    the prompt is sent, with `message_id` null until Telegram has taken it, so a handler run
    again for the same tap sends no second prompt. Deleted when its reply is recorded, when
    the same person is prompted again on the same delivery, and a day after it was asked
    (`PROMPT_LIFETIME`)."""

    #: How long an unanswered prompt is kept.
    PROMPT_LIFETIME = timedelta(days=1)

    bot = models.ForeignKey(Bot, on_delete=models.CASCADE, related_name="+", verbose_name=_("bot"))
    delivery = models.ForeignKey(
        Delivery,
        on_delete=models.CASCADE,
        related_name="telegram_prompts",
        verbose_name=_("delivery"),
    )
    event_id = models.CharField(_("event_id"), max_length=64, blank=True, default="")
    chat_id = models.CharField(_("Telegram chat id"), max_length=32)
    message_id = models.BigIntegerField(_("Telegram message id"), null=True, blank=True)
    operator_open_id = models.CharField(_("operator"), max_length=64)
    rev = models.CharField(_("revision asked on"), max_length=40, blank=True, default="")
    reason_key = models.CharField(_("reason key"), max_length=64, blank=True, default="")
    created_at = models.DateTimeField(_("created at"), default=timezone.now)

    class Meta:
        verbose_name = _("Telegram comment prompt")
        verbose_name_plural = _("Telegram comment prompts")
        constraints = [
            models.UniqueConstraint(
                fields=["bot", "chat_id", "message_id"], name="feedback_tg_prompt_message"
            ),
            models.UniqueConstraint(
                fields=["bot", "event_id"],
                condition=~Q(event_id=""),
                name="feedback_tg_prompt_tap",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.delivery_id} prompt {self.chat_id}:{self.message_id}"
