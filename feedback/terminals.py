"""Worker terminals and `turn.completed`: the agent runtime's "this turn ended" signal,
reconciled with the deliveries of that turn in either arrival order.

Rules:
- a terminal is keyed by (bot, session_id, turn_id, attempt) and has one status
  (completed / failed / cancelled / ambiguous); the same status again is an idempotent no-op,
  a different status raises TerminalConflict and changes nothing;
- every delivery of that turn (same bot, session_id, turn_id and dispatch_attempt; several
  deliveries are told apart by native_session_id / discriminator) that has been sent gets
  exactly one `turn.completed` event, id `stable_event_id(delivery_id, status)`, unique per
  delivery (also a database constraint), fanned out to the delivery's frozen destinations;
- proactive sends (no session_id or turn_id) never get one;
- on reconcile the delivery takes the terminal's status and completion time; duration_ms and
  usage are copied only when the terminal has them (COALESCE: values recorded at send time
  survive a terminal that lacks them).

Either side may arrive first: `record_terminal` reconciles the turn's sent deliveries, and the
deliveries code calls `reconcile_delivery` right after it records a delivery as sent. Both take
a per-turn lock (PostgreSQL advisory transaction lock; SQLite writers are serialized anyway),
so two concurrent transactions cannot both miss each other.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from botadmin.models import Bot
from feedback.envelopes import stable_event_id
from feedback.events import emit, require_transaction, turn_completed_data
from feedback.models import Delivery, Event, WorkerTerminal


class TerminalConflict(Exception):
    """A terminal with another status was already recorded for this (bot, session, turn,
    attempt). `stored` and `requested` are the two statuses."""

    def __init__(self, stored: str, requested: str):
        super().__init__(f"turn already ended with status {stored!r}, not {requested!r}")
        self.stored = stored
        self.requested = requested


@dataclass(frozen=True)
class TerminalResult:
    """Outcome of `record_terminal`: the stored terminal, whether this call created it, and
    the `turn.completed` events of the turn's deliveries (all of them, new or earlier)."""

    terminal: WorkerTerminal
    created: bool
    events: list[Event] = field(default_factory=list)


def record_terminal(
    bot: Bot,
    *,
    session_id: str,
    turn_id: str,
    status: str,
    attempt: int = 0,
    completed_at: datetime | None = None,
    duration_ms: int | None = None,
    usage: dict[str, Any] | None = None,
) -> TerminalResult:
    """Store the worker terminal of (bot, session_id, turn_id, attempt) and emit
    `turn.completed` for each sent delivery of that turn, in one transaction.

    `status`: a WorkerTerminal.Status value; `completed_at` defaults to now; `duration_ms`
    (milliseconds ≥ 0) and `usage` (JSON object, e.g. token counts) are optional.
    Raises TerminalConflict when the terminal exists with another status (nothing is
    written). A repeat with the same status returns `created=False` and writes nothing new.
    """
    if status not in WorkerTerminal.Status.values:
        raise ValueError(f"unknown terminal status {status!r}")
    key = {"bot": bot, "session_id": session_id, "turn_id": turn_id, "attempt": attempt}
    with transaction.atomic():
        WorkerTerminal.objects.lock_turn(bot.pk, session_id, turn_id, attempt)
        terminal = WorkerTerminal.objects.filter(**key).first()
        created = False
        if terminal is None:
            try:
                with transaction.atomic():
                    terminal = WorkerTerminal.objects.create(
                        **key,
                        status=status,
                        completed_at=completed_at or timezone.now(),
                        duration_ms=duration_ms,
                        usage=usage,
                    )
                    created = True
            except IntegrityError:
                terminal = WorkerTerminal.objects.get(**key)
        if terminal.status != status:
            raise TerminalConflict(terminal.status, status)
        turn = Delivery.objects.for_turn(bot, session_id, turn_id, attempt)
        for delivery in _lock_rows(turn.filter(status=Delivery.Status.SENT)):
            _complete(delivery, terminal)
        events = list(
            Event.objects.filter(type=Event.Type.TURN_COMPLETED, delivery__in=turn)
            .select_related("delivery")
            .order_by("pk")
        )
    return TerminalResult(terminal, created, events)


def reconcile_delivery(delivery: Delivery) -> Event | None:
    """Emit `turn.completed` for `delivery` if its worker terminal is already stored.

    Call inside the deliveries transaction right after the delivery is saved with status
    `sent` (raises events.NotInTransaction otherwise). Returns the delivery's `turn.completed`
    event (new or existing), or None when it has no session/turn (proactive send), is not
    sent, or no terminal has arrived yet (then `record_terminal` will emit it later).
    """
    require_transaction("reconcile_delivery()")
    if not delivery.session_id or not delivery.turn_id:
        return None
    WorkerTerminal.objects.lock_turn(
        delivery.bot_id, delivery.session_id, delivery.turn_id, delivery.dispatch_attempt
    )
    terminal = WorkerTerminal.objects.filter(
        bot_id=delivery.bot_id,
        session_id=delivery.session_id,
        turn_id=delivery.turn_id,
        attempt=delivery.dispatch_attempt,
    ).first()
    if terminal is None:
        return None
    current = _lock_rows(Delivery.objects.filter(pk=delivery.pk))
    if not current:
        return None
    fresh = current[0]
    if fresh.status == Delivery.Status.SENT:
        event = _complete(fresh, terminal)
    else:
        event = Event.objects.filter(type=Event.Type.TURN_COMPLETED, delivery=fresh).first()
    for name in ("status", "completed_at", "duration_ms", "usage", "updated_at"):
        setattr(delivery, name, getattr(fresh, name))
    return event


def _lock_rows(qs) -> list[Delivery]:
    qs = qs.select_related("bot", "chat").order_by("pk")
    if connection.vendor == "postgresql":
        qs = qs.select_for_update(of=("self",))
    return list(qs)


def _complete(delivery: Delivery, terminal: WorkerTerminal) -> Event:
    """Copy the terminal onto a sent delivery (COALESCE for duration/usage) and emit its
    `turn.completed`, fanned out to the delivery's frozen destinations."""
    delivery.status = terminal.status
    delivery.completed_at = terminal.completed_at
    if terminal.duration_ms is not None:
        delivery.duration_ms = terminal.duration_ms
    if terminal.usage is not None:
        delivery.usage = terminal.usage
    delivery.save(update_fields=["status", "completed_at", "duration_ms", "usage", "updated_at"])
    event, _created = emit(
        Event.Type.TURN_COMPLETED,
        stable_event_id(delivery.delivery_id, terminal.status),
        turn_completed_data(delivery),
        bot=delivery.bot,
        team=delivery.team,
        delivery=delivery,
        destination_ids=list(delivery.webhook_destination_ids or []),
    )
    return event
