"""Models of the interactions app: every model stays here (one file, no service imports).

- `InboundEvent` (callback dedupe), `CardEntity` (cards Cardloop updates), `CardUpdate` (the
  durable card-update queue);
- `Interaction` (approvals, quick replies, forms, typed commands, asks) with `ApprovalRule`,
  `Ask` (a proxy), `ProgressSession`, `PanelPresence`;
- `TelegramAskState`, `TelegramReplyPrompt` (the keyboard state of asks on Telegram).

State changes live in service modules next to these models: `interactions.callbacks.inbound`
(claim / finish / prune of `InboundEvent`), `interactions.cardqueue.service` (send, register,
enqueue, release holds) and `.worker` (apply queued updates), `interactions.lifecycle.resolve`
(the one interaction state change), `interactions.approvals.service`, `interactions.asks`,
`interactions.presence`, `interactions.channels.telegram.asks`. Hand-written SQL is only in the querysets below, each saying
why.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.db import connection, models
from django.db.models import F, Q
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from botadmin.models import Bot, HashedToken, HashedTokenQuerySet
from interactions.panel_timing import presence_ttl
from plumbing.db.rows import (
    columns_of,
    insert_row,
    insert_row_from,
    quoted_table,
    select_one,
)
from plumbing.workqueue import WorkItem, WorkStatus


class InboundEventQuerySet(models.QuerySet):
    def received_before(self, when):
        """Rows received before `when` (what the retention sweep deletes)."""
        return self.filter(received_at__lt=when)

    def expired_claims(self, now):
        """Card-action claims still `processing` whose lease ran out before `now` and whose
        verified action is stored (what the recovery re-runs), oldest first."""
        return self.filter(
            status=InboundEvent.Status.PROCESSING,
            lease_until__lt=now,
            action__isnull=False,
        ).order_by("lease_until")

    def claim(
        self,
        bot,
        event_id: str,
        event_type: str,
        *,
        action: dict[str, Any] | None = None,
        lease_seconds: float | None = None,
    ) -> tuple[InboundEvent, bool]:
        """Insert the `processing` row of (`bot`, `event_id`) unless one exists; returns
        `(row, created)`, `created` False when another delivery claimed it first. `action`:
        the verified action its handler needs (JSON-safe dict, or None); `lease_seconds`: how
        long the claim is held before another delivery or the recovery may take it over (None:
        no lease, never taken over — ordinary events).

        Hand-written, one statement, `INSERT … ON CONFLICT (bot_id, event_id) DO NOTHING
        RETURNING id` (PostgreSQL; SQLite ≥ 3.35): the unique constraint
        `inbound_event_unique` decides, without a transaction or savepoint of its own, so
        outside a transaction it commits at once and other processes see the claim before
        the handler runs. `get_or_create` needs a savepoint, a SELECT and an INSERT for the
        same decision; every callback makes this claim, and the one-statement claim was part
        of taking the handler thread from 24 to 14 statements a click (bench/README.md,
        "Dedupe claim in one statement")."""
        now = timezone.now()
        lease_until = now + timedelta(seconds=lease_seconds) if lease_seconds else None
        action_field = InboundEvent._meta.get_field("action")
        with connection.cursor() as cursor:
            cursor.execute(
                f"INSERT INTO {quoted_table(InboundEvent)} "  # noqa: S608 - our table name
                "(bot_id, event_id, event_type, status, answer, received_at, finished_at, "
                "action, lease_until, attempts) "
                "VALUES (%s, %s, %s, %s, NULL, %s, NULL, %s, %s, 1) "
                "ON CONFLICT (bot_id, event_id) DO NOTHING RETURNING id",
                [
                    bot.pk,
                    event_id,
                    event_type,
                    InboundEvent.Status.PROCESSING,
                    connection.ops.adapt_datetimefield_value(now),
                    action_field.get_db_prep_save(action, connection),
                    connection.ops.adapt_datetimefield_value(lease_until),
                ],
            )
            inserted = cursor.fetchone()
        if inserted is None:
            return self.get(bot=bot, event_id=event_id), False
        row = InboundEvent(
            id=inserted[0],
            bot=bot,
            event_id=event_id,
            event_type=event_type,
            status=InboundEvent.Status.PROCESSING,
            received_at=now,
            action=action,
            lease_until=lease_until,
            attempts=1,
        )
        row._state.adding = False
        row._state.db = connection.alias
        return row, True

    def take_over(self, pk: int, lease_seconds: float) -> InboundEvent | None:
        """Take over the claim `pk` when it is still `processing` and its lease ran out (or it
        has none: a claim written before leases existed): a new lease of `lease_seconds`,
        `attempts` + 1. Returns the row (with its stored `action`) when this caller took it,
        None when it is answered or another process holds a live lease.

        One conditional UPDATE (autocommit, like `claim`): among processes racing for the same
        expired claim exactly one UPDATE matches, the others see the new lease."""
        now = timezone.now()
        taken = self.filter(
            Q(lease_until__isnull=True) | Q(lease_until__lt=now),
            pk=pk,
            status=InboundEvent.Status.PROCESSING,
        ).update(lease_until=now + timedelta(seconds=lease_seconds), attempts=F("attempts") + 1)
        if not taken:
            return None
        return self.select_related("bot").get(pk=pk)

    def renew(self, pks: list[int], lease_seconds: float) -> int:
        """Extend the leases of the `processing` claims `pks` (a handler is still running them
        in this process) to now + `lease_seconds`. Returns how many rows."""
        if not pks:
            return 0
        return self.filter(pk__in=pks, status=InboundEvent.Status.PROCESSING).update(
            lease_until=timezone.now() + timedelta(seconds=lease_seconds)
        )

    def let_go(self, pk: int) -> int:
        """End the lease of the `processing` claim `pk` now (its handler gave up on a transient
        error), so the next retry or recovery pass may take it over at once."""
        return self.filter(pk=pk, status=InboundEvent.Status.PROCESSING).update(
            lease_until=timezone.now()
        )

    def mark_answered(self, pk: int, toast: dict[str, Any] | None) -> bool:
        """Mark row `pk` answered, keeping only `toast` (the answer's toast, or None); its
        stored action (comment text included) and lease are cleared. Returns False when the row
        was not `processing` any more (another run of the same claim answered it first: the
        caller's transaction must not commit a second effect).

        Hand-written: the same statement as `.filter(pk=pk, status=…).update(status=…,
        answer=…, finished_at=…, action=None, lease_until=None)`. Every callback runs it once,
        and building the UPDATE with the ORM cost more CPU than running it (bench/README.md,
        "Hand-written SQL for the statements every click makes": 6.6–7.1 → 4.6–5.3 ms of CPU
        a click with its siblings)."""
        answer_field = InboundEvent._meta.get_field("answer")
        with connection.cursor() as cursor:
            cursor.execute(
                f"UPDATE {quoted_table(InboundEvent)} "  # noqa: S608
                "SET status = %s, answer = %s, finished_at = %s, action = NULL, "
                "lease_until = NULL WHERE id = %s AND status = %s",
                [
                    InboundEvent.Status.ANSWERED,
                    answer_field.get_db_prep_save({"toast": toast} if toast else {}, connection),
                    connection.ops.adapt_datetimefield_value(timezone.now()),
                    pk,
                    InboundEvent.Status.PROCESSING,
                ],
            )
            return cursor.rowcount == 1


class InboundEvent(models.Model):
    """One Feishu callback or event Cardloop accepted, keyed by (bot, `header.event_id`).

    The unique row is the transport-level dedupe: it is inserted (autocommit) before any handler
    runs, so a redelivered or concurrently duplicated event finds it in every process and gets
    the stored answer instead of a second side effect. Only the toast of the
    answer is kept (`answer`), never a card, a callback token or form input after the answer.

    A card action's claim is durable: `action` holds the verified action its handler needs
    (`registry.CardAction.to_stored()`: ids, the button's value, form input — never the
    callback token) while it is `processing`, and is cleared when it is answered; `lease_until`
    is renewed while a handler runs it; a claim whose lease ran out is taken over
    (`take_over`) by an identical retry or by the recovery, `attempts` counting the runs.
    Rows are deleted after `interactions.callbacks.inbound.RETENTION` by the card worker's sweep.
    """

    class Status(models.TextChoices):
        PROCESSING = "processing", _("processing")
        ANSWERED = "answered", _("answered")

    bot = models.ForeignKey(Bot, on_delete=models.CASCADE, related_name="+", verbose_name=_("bot"))
    event_id = models.CharField(_("event_id"), max_length=64)
    event_type = models.CharField(_("event type"), max_length=100)
    status = models.CharField(
        _("status"), max_length=12, choices=Status.choices, default=Status.PROCESSING
    )
    answer = models.JSONField(_("answer (toast only)"), null=True, blank=True)
    received_at = models.DateTimeField(_("received at"), default=timezone.now, db_index=True)
    finished_at = models.DateTimeField(_("finished at"), null=True, blank=True)
    action = models.JSONField(_("verified action (until answered)"), null=True, blank=True)
    lease_until = models.DateTimeField(_("lease until"), null=True, blank=True)
    attempts = models.PositiveIntegerField(_("attempts"), default=0)

    objects = InboundEventQuerySet.as_manager()

    class Meta:
        verbose_name = _("inbound Feishu event")
        verbose_name_plural = _("inbound Feishu events")
        constraints = [
            models.UniqueConstraint(fields=["bot", "event_id"], name="inbound_event_unique")
        ]
        indexes = [
            # the recovery's scan: only unanswered claims are in it
            models.Index(
                fields=["lease_until"],
                name="inbound_event_lease",
                condition=Q(status="processing"),
            )
        ]

    def __str__(self) -> str:
        return f"{self.event_type} {self.event_id}"


class CardEntityQuerySet(models.QuerySet):
    """Lookups by the partial unique indexes repeat the index's condition (`card_id <> ''`,
    `open_message_id <> ''`): SQLite uses a partial index only for a query whose WHERE
    contains that condition, and otherwise searches every card entity of the bot."""

    def for_message(self, bot: Bot, open_message_id: str):
        """The card shown in message `open_message_id` of `bot` (0 or 1 row; none for "")."""
        return self.filter(bot=bot, open_message_id=open_message_id).exclude(open_message_id="")

    def for_send(self, bot: Bot, send_uuid: str):
        """The card recorded for the send with message `uuid` `send_uuid` of `bot` (0 or 1
        row; none for "")."""
        return self.filter(bot=bot, send_uuid=send_uuid).exclude(send_uuid="")

    def for_card_id(self, bot: Bot, card_id: str):
        """The CardKit card entity `card_id` of `bot` (0 or 1 row; none for "")."""
        return self.filter(bot=bot, card_id=card_id).exclude(card_id="")

    def locked_with_pending(self, card: CardEntity | tuple[Any, str]) -> CardEntity | None:
        """`card` (an entity, or `(bot, card_id)`) read again and locked, with `pending_pk`: the
        id of its pending `CardUpdate` or None (None when there is no such card). Call inside
        a transaction.

        Hand-written, one statement (PostgreSQL: `FOR UPDATE OF` the entity only; SQLite has
        one writer at a time): every card update enqueued makes it, and building it with the
        ORM (`select_for_update(of=…)` plus a `Subquery` annotation) cost about 0.9 ms of CPU
        per click, the statement itself a tenth of that; finding the entity and its pending
        update in one statement took a click from 14 to 12 statements (bench/README.md). Read by
        `select_one` (the columns' converters worked out once, not on every call as `raw()`)."""
        if isinstance(card, CardEntity):
            where, params = "e.id = %s", [card.pk]
        else:
            bot, card_id = card
            # NOT (card_id = ''): the partial unique index's condition (`card_entity_card_id`);
            # without it SQLite searches every card entity of the bot
            where = "e.bot_id = %s AND e.card_id = %s AND NOT (e.card_id = '')"
            params = [bot.pk, card_id]
        lock = " FOR UPDATE OF e" if connection.features.has_select_for_update_of else ""
        sql = (
            f"SELECT {columns_of(CardEntity, 'e')}, "  # noqa: S608 - ours
            f"(SELECT u.id FROM {quoted_table(CardUpdate)} u "
            "WHERE u.card_id = e.id AND u.status = %s LIMIT 1) AS pending_pk "
            f"FROM {quoted_table(CardEntity)} e WHERE {where} LIMIT 1{lock}"
        )
        return select_one(CardEntity, sql, [WorkStatus.PENDING, *params])


class CardEntity(models.Model):
    """A card Cardloop updates after it was sent: a CardKit card entity (`card_id`, updated with
    CardKit's increasing `sequence`) or a plain interactive message (`card_id` empty, updated
    with a whole-card message PATCH). Never stores the card's content.

    - `sequence`: the last CardKit `sequence` Cardloop issued for this card (every request takes
      the next number, so sequences are strictly increasing even across retries).
    - `applied_sequence`: the highest sequence Feishu acknowledged.
    - `state_version`: the highest desired-state version enqueued by a caller that passes
      `version=` (an older version is dropped, so a late update never brings back an old state).
    - `next_send_at`: pacing; Feishu allows 5 updates per second per message.
    - `send_uuid`: the message `uuid` of the send that shows this card (unique per bot; empty
      for a card the bot backend sent itself). The row is written with it *before* the message
      is sent (`interactions.cardqueue.service.send_card`), so a send interrupted after Feishu
      accepted the message is retried with the same entity and `uuid` and Feishu answers with
      the first message; `open_message_id` stays empty until the send's answer was recorded.
    - `channel`: the channel kind showing the card (`interactions.kinds`, default "feishu");
      the card worker applies its updates through that channel's `apply_update`.
    - `address`: where a non-Feishu channel shows the message, a JSON object the channel
      owns (Slack: `{"channel": "C…", "ts": "1700000000.000100"}`); `{}` for Feishu, whose
      ids are `card_id` / `open_message_id`.
    """

    bot = models.ForeignKey(
        Bot, on_delete=models.CASCADE, related_name="card_entities", verbose_name=_("bot")
    )
    card_id = models.CharField(_("card_id"), max_length=64, blank=True, default="")
    open_message_id = models.CharField(_("open_message_id"), max_length=64, blank=True, default="")
    send_uuid = models.CharField(
        _("send uuid"),
        max_length=50,
        blank=True,
        default="",
        help_text=_("Feishu's idempotency key of the message that shows this card."),
    )
    purpose = models.CharField(
        _("purpose"),
        max_length=32,
        blank=True,
        default="",
        help_text=_("Who owns the card: feedback, progress, approval, …"),
    )
    channel = models.CharField(
        _("channel"),
        max_length=16,
        default="feishu",
        help_text=_("The channel kind that shows this card; its updates go through that channel."),
    )
    address = models.JSONField(
        _("address"),
        default=dict,
        blank=True,
        help_text=_("Where the channel shows the message, e.g. Slack {channel, ts}."),
    )
    sequence = models.PositiveIntegerField(_("last sequence issued"), default=0)
    applied_sequence = models.PositiveIntegerField(_("last sequence applied"), default=0)
    state_version = models.BigIntegerField(_("state version"), default=0)
    next_send_at = models.DateTimeField(_("next update not before"), default=timezone.now)
    created_at = models.DateTimeField(_("created at"), default=timezone.now)
    updated_at = models.DateTimeField(_("updated at"), auto_now=True)

    objects = CardEntityQuerySet.as_manager()

    class Meta:
        verbose_name = _("card entity")
        verbose_name_plural = _("card entities")
        constraints = [
            models.UniqueConstraint(
                fields=["bot", "card_id"], condition=~Q(card_id=""), name="card_entity_card_id"
            ),
            models.UniqueConstraint(
                fields=["bot", "open_message_id"],
                condition=~Q(open_message_id=""),
                name="card_entity_message",
            ),
            models.UniqueConstraint(
                fields=["bot", "send_uuid"],
                condition=~Q(send_uuid=""),
                name="card_entity_send_uuid",
            ),
            models.CheckConstraint(
                condition=~Q(card_id="") | ~Q(open_message_id="") | ~Q(send_uuid=""),
                name="card_entity_has_an_id",
            ),
        ]

    def __str__(self) -> str:
        return self.card_id or self.open_message_id or f"send {self.send_uuid}"


class CardUpdateQuerySet(models.QuerySet):
    def insert(self, update: CardUpdate) -> CardUpdate:
        """INSERT the new `update` in the caller's transaction and return it saved.

        Hand-written (`plumbing.db.rows.insert_row`, the same INSERT as `save()`): a click
        that changes a card inserts one; `save()`'s generic path cost more CPU than the
        statement (bench/README.md: −0.55 ms of CPU a click for the click's four inserts)."""
        return insert_row(update)

    def insert_first_pending(self, update: CardUpdate, bot: Bot, card_id: str) -> CardUpdate | None:
        """INSERT the new `update` as the pending update of `bot`'s CardKit entity `card_id`
        when that card has none, in the caller's transaction; returns it saved (`card_id` set
        to the entity's row id), or None when the card has a pending update already or `bot`
        has no such entity (the caller then takes `locked_with_pending`'s path, which merges).

        Hand-written, one statement: `INSERT … SELECT` from the entity row, locked (PostgreSQL:
        `FOR UPDATE OF`, as `locked_with_pending` locks it, so an enqueue still waits for a
        worker that holds the card, `worker.return_to_pending`), `ON CONFLICT` on the
        one-pending-update-per-card index `DO NOTHING`. Every feedback click enqueues the new
        state of its card, almost always for a card with nothing pending; the lookup and the
        insert as two statements (with a `CardEntity` built from the first) took the
        click's enqueue 0.42 ms of CPU on SQLite and 0.61 ms on PostgreSQL, this one
        0.25–0.34 and 0.36–0.41 ms (in one process, the same clicks before and after)."""
        lock = " FOR UPDATE OF e" if connection.features.has_select_for_update_of else ""
        return insert_row_from(
            update,
            "card",
            "e.id",
            f"FROM {quoted_table(CardEntity)} e "  # noqa: S608 - our table name
            # NOT (card_id = ''): the partial unique index's condition (`card_entity_card_id`)
            f"WHERE e.bot_id = %s AND e.card_id = %s AND NOT (e.card_id = ''){lock}",
            [bot.pk, card_id],
            conflict=f"ON CONFLICT (card_id) WHERE status = '{WorkStatus.PENDING}' DO NOTHING",
        )

    def release_holds(self, tokens: list[str]) -> int:
        """Make the pending updates held by any of `tokens` due now (their callbacks' answers
        were sent); returns how many rows. One statement for a whole batch of clicks
        (`interactions.cardqueue.releases`).

        Hand-written: the same columns and WHERE as `.filter(...).update(...)`, run for every
        click that changed a card, where the ORM's UPDATE took more CPU than the statement
        (bench/README.md, "Hand-written SQL for the statements every click makes")."""
        if not tokens:
            return 0
        marks = ", ".join(["%s"] * len(tokens))
        now = connection.ops.adapt_datetimefield_value(timezone.now())
        with connection.cursor() as cursor:
            cursor.execute(
                f"UPDATE {quoted_table(CardUpdate)} SET hold_token = '', "  # noqa: S608
                # due now, or earlier if it already was: a release never makes an update wait
                "next_attempt_at = CASE WHEN next_attempt_at < %s THEN next_attempt_at "
                "ELSE %s END "
                # NOT (hold_token = ''): the `card_update_hold` index's own condition, without
                # which SQLite cannot use that partial index and reads every pending row
                f"WHERE hold_token IN ({marks}) AND NOT (hold_token = '') AND status = %s",
                [now, now, *tokens, WorkStatus.PENDING],
            )
            return cursor.rowcount


class CardUpdate(WorkItem):
    """A queued update of one card: either a whole card (`card_json`) or element replacements
    (`elements`: element_id → full element JSON). At most one *pending* row per card (database
    constraint): a new update merges into it (latest state wins per element, a whole card
    replaces everything), so a burst of clicks becomes one request.

    `hold_token` marks an update enqueued while a Feishu callback was being answered: it is not
    due (`next_attempt_at` in the future) until the answer was sent, when the ingress releases
    it; the time-based fallback makes it due anyway. The payload is cleared once applied.
    """

    card = models.ForeignKey(
        CardEntity, on_delete=models.CASCADE, related_name="updates", verbose_name=_("card")
    )
    card_json = models.JSONField(_("whole card"), null=True, blank=True)
    renderer = models.CharField(
        _("renderer"),
        max_length=32,
        blank=True,
        default="",
        help_text=_(
            "A whole-card update rendered from the database when it is applied "
            "(cards.register_renderer), so it always shows the current state."
        ),
    )
    elements = models.JSONField(_("element updates"), default=dict, blank=True)
    sequence = models.PositiveIntegerField(_("sequence of the last attempt"), null=True, blank=True)
    hold_token = models.CharField(_("hold token"), max_length=32, blank=True, default="")
    error_code = models.BigIntegerField(_("Feishu error code"), null=True, blank=True)
    coalesced_into = models.ForeignKey(
        "self",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        verbose_name=_("coalesced into"),
        help_text=_("Set when this update was retried as part of a newer one."),
    )

    objects = CardUpdateQuerySet.as_manager()

    class Meta:
        verbose_name = _("card update")
        verbose_name_plural = _("card updates")
        constraints = [
            models.UniqueConstraint(
                fields=["card"],
                condition=Q(status=WorkStatus.PENDING),
                name="card_update_one_pending",
            )
        ]
        indexes = [
            models.Index(fields=["status", "next_attempt_at"], name="card_update_due"),
            models.Index(
                fields=["hold_token"], condition=~Q(hold_token=""), name="card_update_hold"
            ),
        ]

    def __str__(self) -> str:
        if self.renderer:
            what = f"render:{self.renderer}"
        elif self.card_json is not None:
            what = "card"
        else:
            what = ",".join(sorted(self.elements)) or "-"
        return f"{self.card} [{what}] {self.status}"


# =============================================================================================
# Interactions across channels: approvals, quick replies, forms, typed commands.
# State changes: `interactions/lifecycle/resolve.py` (one `resolve()` for every path) and
# `interactions/approvals/service.py`; rendering: the channel (`interactions/channels/`).
# =============================================================================================


class InteractionQuerySet(models.QuerySet):
    def pending(self):
        """Interactions still waiting for a person's answer."""
        return self.filter(status=Interaction.Status.PENDING)

    def due_for_expiry(self, now=None):
        """Pending interactions whose `expires_at` has passed (what the sweeper resolves)."""
        return self.pending().filter(expires_at__lte=now or timezone.now())

    def of_bot(self, bot: Bot):
        return self.filter(bot=bot)

    def for_request(self, bot: Bot, request_id: str):
        """The interaction `bot`'s backend registered with idempotency key `request_id` (0 or
        1 row; none for ""). `request_id <> ''` is the partial unique index's condition,
        without which SQLite cannot use that index and searches every interaction of the bot."""
        return self.filter(bot=bot, request_id=request_id).exclude(request_id="")


class Interaction(models.Model):
    """A pending request for a person's input on any channel: an approval of a tool call, a
    quick reply, a small form or a typed command (any channel; rendered by the channel the row
    names).

    - `public_id` (`ia_` + 16 hex) is what buttons and `/_interaction <id> <value>` carry.
    - Who may answer: `allowed_open_ids` when set, else the requester (`requester_open_id`).
    - `body` is the agent's question (≤ 4000 characters), never an answer body.
    - `actions`: `[{id, label, value, style}]`; `fields` (forms): `[{name, label, type,
      options, required, placeholder}]`.
    - `status` moves once, `pending → resolved | expired | cancelled`, only through
      `interactions.lifecycle.resolve.resolve` (a conditional UPDATE … WHERE status='pending'),
      which
      also writes `resolution = {action_id, value, operator, via, at}` (`via`: card | text |
      api | timeout | cancel) and the `interaction.resolved` event.
    - `card` / `open_message_id`: the Feishu message it was rendered to (empty elsewhere).
    - Asks (`kind="ask"`): `public_id` is the API's `requestId`, `questions` the 1–4
      questions, `form_index` the n of the form `ask_<n>` on the session's progress card, and
      `resolution.value` the answers `[{question, selectedLabels, customInput}]`; service
      functions in `interactions/asks/service.py`, which completes them through the same
      `resolve()`.
    """

    #: Longest question (characters) accepted in `body`.
    MAX_BODY = 4000

    class Kind(models.TextChoices):
        APPROVAL = "approval", _("approval")
        QUICK_REPLY = "quick_reply", _("quick reply")
        FORM = "form", _("form")
        COMMAND = "command", _("command")
        ASK = "ask", _("ask_user_questions")

    class Status(models.TextChoices):
        PENDING = "pending", _("pending")
        RESOLVED = "resolved", _("resolved")
        EXPIRED = "expired", _("expired")
        CANCELLED = "cancelled", _("cancelled")

    class Via(models.TextChoices):
        CARD = "card", _("card")
        TEXT = "text", _("text command")
        API = "api", _("API")
        TIMEOUT = "timeout", _("timeout")
        CANCEL = "cancel", _("cancel")
        PANEL = "panel", _("panel")

    class Scope(models.TextChoices):
        SESSION = "session", _("session")
        CHAT = "chat", _("chat")
        BOT = "bot", _("bot")

    public_id = models.CharField(_("interaction id"), max_length=40, unique=True)
    bot = models.ForeignKey(
        Bot, on_delete=models.CASCADE, related_name="interactions", verbose_name=_("bot")
    )
    kind = models.CharField(_("kind"), max_length=12, choices=Kind.choices)
    channel = models.CharField(_("channel kind"), max_length=12)
    chat_id = models.CharField(_("chat_id"), max_length=64)
    requester_open_id = models.CharField(_("requester open_id"), max_length=64, blank=True)
    allowed_open_ids = models.JSONField(_("allowed operators"), default=list, blank=True)
    session_id = models.CharField(_("session_id"), max_length=128, blank=True, default="")
    request_id = models.CharField(
        _("request id"),
        max_length=128,
        blank=True,
        default="",
        help_text=_("The caller's idempotency key: a retried create returns the same row."),
    )
    title = models.CharField(_("title"), max_length=200)
    body = models.TextField(_("question"), blank=True, default="")
    tool = models.CharField(_("tool"), max_length=128, blank=True, default="")
    always_scope = models.CharField(
        _("scope of an 'always' answer"), max_length=8, choices=Scope.choices, blank=True
    )
    actions = models.JSONField(_("actions"), default=list, blank=True)
    fields = models.JSONField(_("form fields"), default=list, blank=True)
    questions = models.JSONField(
        _("questions"),
        default=list,
        blank=True,
        help_text=_("Asks: [{question, header, options: [{label, description}], multiSelect}]."),
    )
    form_index = models.PositiveSmallIntegerField(
        _("form number on the progress card"),
        default=0,
        help_text=_("Asks: n of the card form ask_<n> (stable per session)."),
    )
    expires_at = models.DateTimeField(_("expires at"))
    status = models.CharField(
        _("status"), max_length=10, choices=Status.choices, default=Status.PENDING
    )
    resolution = models.JSONField(_("resolution"), null=True, blank=True)
    resolved_at = models.DateTimeField(_("resolved at"), null=True, blank=True)
    card = models.ForeignKey(
        CardEntity,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        verbose_name=_("card"),
    )
    open_message_id = models.CharField(_("open_message_id"), max_length=64, blank=True, default="")
    created_at = models.DateTimeField(_("created at"), default=timezone.now)

    objects = InteractionQuerySet.as_manager()

    class Meta:
        verbose_name = _("interaction")
        verbose_name_plural = _("interactions")
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["bot", "request_id"],
                condition=~Q(request_id=""),
                name="interaction_request_id",
            ),
        ]
        indexes = [
            models.Index(
                fields=["expires_at"],
                condition=Q(status="pending"),
                name="interaction_pending_expiry",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.public_id} {self.kind} {self.status}"

    @property
    def operators(self) -> list[str]:
        """open_ids allowed to answer: the allow-list, else the requester."""
        if self.allowed_open_ids:
            return list(self.allowed_open_ids)
        return [self.requester_open_id] if self.requester_open_id else []

    @property
    def is_final(self) -> bool:
        return self.status != self.Status.PENDING


class ApprovalRuleQuerySet(models.QuerySet):
    def active(self):
        return self.filter(revoked_at__isnull=True)

    def matching(self, bot: Bot, tool: str, *, session_id: str = "", chat_id: str = ""):
        """Active rules of `bot` for `tool` that cover a request naming `session_id` and
        `chat_id`: bot-wide rules, chat rules of that chat, session rules of that session."""
        scope = Q(scope=Interaction.Scope.BOT)
        if chat_id:
            scope |= Q(scope=Interaction.Scope.CHAT, chat_id=chat_id)
        if session_id:
            scope |= Q(scope=Interaction.Scope.SESSION, session_id=session_id)
        return self.active().filter(bot=bot, tool=tool).filter(scope)


class ApprovalRule(models.Model):
    """ "Always allow `tool`" recorded when someone answered an approval with *always*.

    Scoped to what the approval request named (`Interaction.always_scope`): one session, one
    chat, or the whole bot. `GET /api/v1/approvals/check` returns a matching active rule so the
    backend can skip asking. Revoked in the admin (`revoked_at`), never deleted.
    """

    bot = models.ForeignKey(
        Bot, on_delete=models.CASCADE, related_name="approval_rules", verbose_name=_("bot")
    )
    tool = models.CharField(_("tool"), max_length=128)
    scope = models.CharField(_("scope"), max_length=8, choices=Interaction.Scope.choices)
    session_id = models.CharField(_("session_id"), max_length=128, blank=True, default="")
    chat_id = models.CharField(_("chat_id"), max_length=64, blank=True, default="")
    interaction = models.ForeignKey(
        Interaction,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        verbose_name=_("granted by"),
    )
    granted_by = models.CharField(_("granted by (open_id)"), max_length=64, blank=True)
    created_at = models.DateTimeField(_("created at"), default=timezone.now)
    revoked_at = models.DateTimeField(_("revoked at"), null=True, blank=True)

    objects = ApprovalRuleQuerySet.as_manager()

    class Meta:
        verbose_name = _("approval rule")
        verbose_name_plural = _("approval rules")
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["bot", "tool", "scope", "session_id", "chat_id"],
                condition=Q(revoked_at__isnull=True),
                name="approval_rule_one_active",
            ),
        ]

    def __str__(self) -> str:
        where = {"session": self.session_id, "chat": self.chat_id, "bot": ""}.get(self.scope, "")
        return f"{self.tool} @ {self.scope} {where}".strip()


# ---------------------------------------------------------------------------------------------
# Question panels: presence (interactions.presence)
# ---------------------------------------------------------------------------------------------


class PanelPresenceQuerySet(models.QuerySet):
    def live(self, now=None):
        """Rows whose process refreshed them within `CARDLOOP_PANEL_PRESENCE_TTL` seconds and
        whose desktop token is not revoked (a revoked token's panel shows no new questions,
        even before its consumer has noticed and closed)."""
        return self.filter(
            last_seen_at__gte=(now or timezone.now()) - presence_ttl(),
            token__revoked_at__isnull=True,
        )

    def expired(self, now=None):
        return self.filter(last_seen_at__lt=(now or timezone.now()) - presence_ttl())

    def of_user(self, bot, open_id: str):
        return self.filter(bot=bot, open_id=open_id)


class PanelPresence(models.Model):
    """One live question-panel WebSocket (`/ws/panel/`): which user it shows, which process
    serves it. Any process answers "is this user connected" from these rows
    (`interactions.presence.is_connected`).

    Written only by `interactions.presence`: created on connect, deleted on disconnect, and
    `last_seen_at` refreshed by the serving process every `CARDLOOP_PANEL_HEARTBEAT` seconds.
    A process that dies leaves rows that stop being refreshed: they count as gone after
    `CARDLOOP_PANEL_PRESENCE_TTL` seconds and are swept by the next heartbeat of any process.
    """

    bot = models.ForeignKey(
        Bot, on_delete=models.CASCADE, related_name="panel_presences", verbose_name=_("bot")
    )
    open_id = models.CharField(_("open_id"), max_length=64)
    channel_name = models.CharField(_("channel name"), max_length=200, unique=True)
    token = models.ForeignKey(
        "botadmin.DesktopToken",
        on_delete=models.CASCADE,
        related_name="presences",
        verbose_name=_("desktop token"),
    )
    server = models.CharField(
        _("server"), max_length=64, help_text=_("The process (host:pid:nonce) serving it.")
    )
    via = models.CharField(_("client"), max_length=16, default="desktop")
    connected_at = models.DateTimeField(_("connected at"), default=timezone.now)
    last_seen_at = models.DateTimeField(_("last seen"), default=timezone.now)

    objects = PanelPresenceQuerySet.as_manager()

    class Meta:
        verbose_name = _("panel connection")
        verbose_name_plural = _("panel connections")
        ordering = ["-connected_at"]
        indexes = [
            models.Index(fields=["bot", "open_id", "last_seen_at"], name="panel_presence_user"),
            models.Index(fields=["last_seen_at"], name="panel_presence_seen"),
        ]

    def __str__(self) -> str:
        return f"panel {self.pk} via {self.via} on {self.server}"


# =============================================================================================
# Progress cards and asks. State changes: `interactions/asks/` (service, progress, card);
# rendering: `interactions/render/progress_cards.py`.
# =============================================================================================


class AskQuerySet(InteractionQuerySet):
    def open_for(self, bot: Bot, open_id: str, now=None):
        """Pending, unexpired asks of `bot` whose requester is `open_id`, oldest first."""
        return (
            self.pending()
            .filter(bot=bot, requester_open_id=open_id, expires_at__gt=now or timezone.now())
            .order_by("created_at", "id")
        )

    def of_session(self, bot: Bot, session_id: str):
        return self.filter(bot=bot, session_id=session_id)


class AskManager(models.Manager.from_queryset(AskQuerySet)):
    def get_queryset(self):
        return super().get_queryset().filter(kind=Interaction.Kind.ASK)


class Ask(Interaction):
    """An ask_user_questions request: an `Interaction` of kind `ask` (same table, same one
    `interactions.lifecycle.resolve.resolve()`), seen through this proxy so queries and the
    admin name it."""

    objects = AskManager()

    class Meta:
        proxy = True
        verbose_name = _("question request (ask)")
        verbose_name_plural = _("question requests (asks)")
        ordering = ["-created_at", "-id"]

    def save(self, *args, **kwargs):
        self.kind = Interaction.Kind.ASK
        super().save(*args, **kwargs)


class ProgressSessionQuerySet(models.QuerySet):
    def of_bot(self, bot: Bot):
        return self.filter(bot=bot)

    def for_card(self, card: CardEntity):
        """The session whose progress card is `card` (0 or 1 row)."""
        return self.filter(card=card)

    def for_message(self, bot: Bot, open_message_id: str):
        """The session of `bot` whose progress message is `open_message_id` (0 or 1 row;
        none for "")."""
        return self.filter(bot=bot, card__in=CardEntity.objects.for_message(bot, open_message_id))


class ProgressSession(models.Model):
    """The progress card of one agent session (`PUT /api/v1/sessions/<session_id>/progress`).

    Cardloop owns the whole card and renders it from this row plus the session's pending asks
    (`interactions.render.progress_cards.render`) every time it is updated. `state_version`
    grows with every change (state, asks, cancel request) and is passed to the card queue.

    - `channel`: the channel kind showing the message (`interactions.kinds`; a channel with
      buttons and forms: feishu, slack, telegram); its `render_progress` renders it.
    - `receive_id_type` / `receive_id`: where the card was sent (`chat_id` → `oc_…`, or
      `open_id` → a p2p chat with that user; other channels: their own chat id, `chat_id`).
    - `status`: running | completed | failed | cancelled (terminal) | recovering (the agent
      runtime restarted: pending asks were invalidated, the card shows the recovery text).
    - `tool_lines`: the latest tool lines shown (strings, newest last, ≤ 20).
    - `cancel_requested_at/_by`: the requester pressed "Cancel task" (set once, with the
      `session.cancel_requested` event; the backend also reads it in every progress answer;
      Cardloop does not stop anything itself).
    - `sending_since`: a first send is in progress (another PUT meanwhile only updates state).
    """

    class Status(models.TextChoices):
        RUNNING = "running", _("running")
        COMPLETED = "completed", _("completed")
        FAILED = "failed", _("failed")
        CANCELLED = "cancelled", _("cancelled")
        RECOVERING = "recovering", _("recovering")

    TERMINAL = (Status.COMPLETED, Status.FAILED, Status.CANCELLED)

    bot = models.ForeignKey(
        Bot, on_delete=models.CASCADE, related_name="progress_sessions", verbose_name=_("bot")
    )
    session_id = models.CharField(_("session_id"), max_length=128)
    channel = models.CharField(
        _("channel"),
        max_length=16,
        default="feishu",
        help_text=_(
            "The channel kind that shows the progress message (feishu, slack, telegram); "
            "set by the first update and kept."
        ),
    )
    receive_id_type = models.CharField(
        _("receive_id_type"),
        max_length=8,
        choices=[("chat_id", "chat_id"), ("open_id", "open_id")],
        default="chat_id",
    )
    receive_id = models.CharField(_("chat_id or p2p open_id"), max_length=64)
    chat_id = models.CharField(
        _("chat_id"), max_length=64, blank=True, default="", help_text=_("Known after sending.")
    )
    requester_open_id = models.CharField(_("requester open_id"), max_length=64, blank=True)
    status = models.CharField(
        _("status"), max_length=12, choices=Status.choices, default=Status.RUNNING
    )
    title = models.CharField(_("title"), max_length=200, blank=True, default="")
    summary = models.TextField(_("summary"), blank=True, default="")
    tool_lines = models.JSONField(_("tool lines"), default=list, blank=True)
    details_url = models.URLField(_("session details URL"), max_length=500, blank=True)
    card = models.OneToOneField(
        CardEntity,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="progress",
        verbose_name=_("card"),
    )
    state_version = models.BigIntegerField(_("state version"), default=0)
    sending_since = models.DateTimeField(_("first send started"), null=True, blank=True)
    cancel_requested_at = models.DateTimeField(_("cancel requested at"), null=True, blank=True)
    cancel_requested_by = models.CharField(
        _("cancel requested by (open_id)"), max_length=64, blank=True, default=""
    )
    created_at = models.DateTimeField(_("created at"), default=timezone.now)
    updated_at = models.DateTimeField(_("updated at"), auto_now=True)

    objects = ProgressSessionQuerySet.as_manager()

    class Meta:
        verbose_name = _("progress session")
        verbose_name_plural = _("progress sessions")
        ordering = ["-updated_at", "-id"]
        constraints = [
            models.UniqueConstraint(fields=["bot", "session_id"], name="progress_session_unique")
        ]

    def __str__(self) -> str:
        return f"{self.session_id} {self.status}"

    @property
    def is_terminal(self) -> bool:
        return self.status in self.TERMINAL

    @property
    def shows_forms(self) -> bool:
        """Only a running session's card carries ask forms (terminal / recovering: none)."""
        return self.status == self.Status.RUNNING


# ---------------------------------------------------------------------------------------------
# Telegram: the keyboard state of asks (Telegram has no forms)
# ---------------------------------------------------------------------------------------------


class TelegramAskState(models.Model):
    """What the requester chose so far on the inline keyboard of a pending ask shown on a
    Telegram progress message (Telegram has no form inputs: a tap carries 1-64 bytes of
    `callback_data`, https://core.telegram.org/bots/api#inlinekeyboardbutton, so the choice
    is held here until Submit).

    - `picked`: `{"<question index>": [option index, …]}` (multi-select: the ticked options;
      single-select: the one tapped);
    - `other`: `{"<question index>": "text"}`, the reply to the "Other…" prompt (≤ 1000
      characters, the asks' customInput limit); deleted with the row when the ask is answered;
    - `taps`: the dedupe ids (`tg:<update_id>`) of the last taps applied, so a tap whose
      handler runs again (after a crash) does not toggle twice.

    Changed only by `interactions.channels.telegram.asks` (one transaction, the ask's row
    locked first, the lock order of `resolve()`)."""

    #: How many applied tap ids are remembered.
    MAX_TAPS = 50

    ask = models.OneToOneField(
        Interaction,
        on_delete=models.CASCADE,
        related_name="telegram_state",
        verbose_name=_("ask"),
    )
    picked = models.JSONField(_("options chosen"), default=dict, blank=True)
    other = models.JSONField(_("other text"), default=dict, blank=True)
    taps = models.JSONField(_("applied taps"), default=list, blank=True)
    updated_at = models.DateTimeField(_("updated at"), auto_now=True)

    class Meta:
        verbose_name = _("Telegram ask state")
        verbose_name_plural = _("Telegram ask states")

    def __str__(self) -> str:
        return f"state of {self.ask_id}"


class TelegramReplyPrompt(models.Model):
    """A `force_reply` prompt Cardloop sent for the "Other…" answer of question `question`
    of `ask` (https://core.telegram.org/bots/api#forcereply): a reply to message
    `message_id` in chat `chat_id` of `bot` (`reply_to_message`) becomes that question's
    text. Deleted with the ask's state when it is answered.

    One row per tap (`event_id`, the tap's update id, unique per bot): it is written before
    the prompt is sent, with `message_id` null until Telegram has taken it, so a handler run
    again for the same tap sends no second prompt."""

    bot = models.ForeignKey(Bot, on_delete=models.CASCADE, related_name="+", verbose_name=_("bot"))
    event_id = models.CharField(_("event_id"), max_length=64, blank=True, default="")
    chat_id = models.CharField(_("chat_id"), max_length=64)
    message_id = models.BigIntegerField(_("message id"), null=True, blank=True)
    ask = models.ForeignKey(
        Interaction, on_delete=models.CASCADE, related_name="+", verbose_name=_("ask")
    )
    question = models.PositiveSmallIntegerField(_("question index"))
    created_at = models.DateTimeField(_("created at"), default=timezone.now)

    class Meta:
        verbose_name = _("Telegram reply prompt")
        verbose_name_plural = _("Telegram reply prompts")
        constraints = [
            models.UniqueConstraint(
                fields=["bot", "chat_id", "message_id"], name="telegram_reply_prompt_message"
            ),
            models.UniqueConstraint(
                fields=["bot", "event_id"],
                condition=~Q(event_id=""),
                name="telegram_reply_prompt_tap",
            ),
        ]

    def __str__(self) -> str:
        return f"prompt {self.message_id} → {self.ask_id}:{self.question}"


# ---------------------------------------------------------------------------------------------
# MCP tokens (the `/mcp` tool server)
# ---------------------------------------------------------------------------------------------


class McpTokenQuerySet(HashedTokenQuerySet):
    def usable(self, now=None):
        """Tokens that still authenticate: not revoked and not past `expires_at`."""
        return self.active().filter(expires_at__gt=now or timezone.now())


class McpToken(HashedToken):
    """A short-lived bearer token (`cmt_<lookup>_<secret>`, stored as SHA-256) that lets an
    agent CLI reach the `/mcp` tool server as one agent session of one bot.

    The bot backend issues it (`POST /api/v1/sessions/<session_id>/mcp-tokens` with its bot
    key) and hands the URL and token to the CLI it starts; the CLI never holds the bot key.
    Every tool call of the token acts for `bot` and `session_id` only. `chat_id` (or
    `open_id`, a p2p session) and `requester_open_id` say where approvals go and who answers;
    `subagent`, `project_key` and `workspace` decide the tool list by the rule of
    `GET /api/v1/capabilities`. Refused once `expires_at` passed or `revoked_at` is set.
    """

    PREFIX_TAG = "cmt"

    bot = models.ForeignKey(
        Bot, on_delete=models.CASCADE, related_name="mcp_tokens", verbose_name=_("bot")
    )
    session_id = models.CharField(_("session_id"), max_length=128)
    chat_id = models.CharField(_("chat_id"), max_length=64, blank=True, default="")
    open_id = models.CharField(_("p2p open_id"), max_length=64, blank=True, default="")
    requester_open_id = models.CharField(_("requester open_id"), max_length=64, blank=True)
    subagent = models.BooleanField(_("sub-agent"), default=False)
    project_key = models.CharField(_("project key"), max_length=300, blank=True, default="")
    workspace = models.CharField(_("workspace"), max_length=1000, blank=True, default="")
    expires_at = models.DateTimeField(_("expires at"))

    objects = McpTokenQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["bot", "session_id"], name="mcp_token_session")]
        verbose_name = _("MCP token")
        verbose_name_plural = _("MCP tokens")

    def __str__(self) -> str:
        # Never the open_ids: this string lands in audit entries and admin messages.
        return f"cmt_{self.lookup}_… ({self.session_id[:40]})"

    @property
    def is_usable(self) -> bool:
        return self.revoked_at is None and self.expires_at > timezone.now()


class McpCall(models.Model):
    """Which interaction a blocking MCP tool call of a token is waiting on, keyed by the
    JSON-RPC request id the client gave that call.

    A client on the initialize-handshake protocol cancels a call by POSTing
    `notifications/cancelled` with that id; with several server processes that POST may
    reach another process than the one holding the call, so the cancel finds the interaction
    here (in any process) and withdraws it. Rows are deleted with their token."""

    token = models.ForeignKey(
        McpToken, on_delete=models.CASCADE, related_name="calls", verbose_name=_("MCP token")
    )
    rpc_request_id = models.CharField(_("JSON-RPC request id"), max_length=100)
    interaction = models.ForeignKey(
        Interaction, on_delete=models.CASCADE, related_name="+", verbose_name=_("interaction")
    )
    created_at = models.DateTimeField(_("created at"), default=timezone.now)

    class Meta:
        indexes = [models.Index(fields=["token", "rpc_request_id"], name="mcp_call_request")]
        verbose_name = _("MCP call")
        verbose_name_plural = _("MCP calls")

    def __str__(self) -> str:
        return f"{self.rpc_request_id} → {self.interaction_id}"
