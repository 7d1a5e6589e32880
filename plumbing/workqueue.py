"""Durable work queues in the database: claim, fence, settle, retry, recover — written once.

Used by the CardKit card-update queue (`interactions`) and the webhook outbox (`feedback`).
A queue is a concrete model inheriting `WorkItem`. The life of a row:

    pending ──claim_due()──▶ inflight ──settle()──▶ done | failed | dead
       ▲                        │
       └──── reschedule() ──────┘   (retry later, attempts kept)
       └──── recover_stale() ───┘   (the worker died: claim older than `stale_after`)

Rules:
- Claiming is atomic: on PostgreSQL `SELECT … FOR UPDATE SKIP LOCKED` so N workers never take
  the same row; on SQLite the transaction is `BEGIN IMMEDIATE` (settings) so claims serialize.
- Every claim stamps a fresh random `claim_token`; a worker may only settle or reschedule rows
  that still carry its token (the fence). A worker whose claim was recovered and re-claimed by
  another worker cannot overwrite the newer outcome: its update touches zero rows.
- `attempts` counts claims; recovery does not increment it again.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
import uuid
from collections.abc import Callable
from datetime import datetime, timedelta

from django.db import close_old_connections, connection, models, transaction
from django.db.models import F, Q
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

log = logging.getLogger(__name__)


class WorkStatus(models.TextChoices):
    PENDING = "pending", _("pending")
    INFLIGHT = "inflight", _("in flight")
    DONE = "done", _("done")
    FAILED = "failed", _("failed")
    DEAD = "dead", _("dead (gave up)")


class WorkItem(models.Model):
    """Abstract base of a durable queue row (see module docstring for the life cycle)."""

    status = models.CharField(
        _("status"), max_length=10, choices=WorkStatus.choices, default=WorkStatus.PENDING
    )
    attempts = models.PositiveIntegerField(_("attempts"), default=0)
    next_attempt_at = models.DateTimeField(_("next attempt"), default=timezone.now)
    claimed_at = models.DateTimeField(_("claimed at"), null=True, blank=True)
    claim_token = models.CharField(_("claim token"), max_length=32, blank=True, default="")
    last_error = models.CharField(_("last error"), max_length=500, blank=True, default="")
    created_at = models.DateTimeField(_("created at"), default=timezone.now)
    updated_at = models.DateTimeField(_("updated at"), auto_now=True)

    class Meta:
        abstract = True


def claim_due(
    model: type[WorkItem],
    *,
    limit: int = 10,
    now: datetime | None = None,
    where: Q | None = None,
    select_related: tuple[str, ...] = (),
    wait_for_flush: bool = True,
) -> tuple[str, list[WorkItem]]:
    """Claim up to `limit` (clamped to 1..100) due pending rows of `model`.

    Returns `(claim_token, rows)`; rows are ordered by (next_attempt_at, id) and are `inflight`
    with `attempts` incremented. `where` narrows the candidates (e.g. one destination);
    `select_related` names relations loaded with the returned rows (one query).
    `wait_for_flush=False` lets the claim commit without waiting for the WAL flush on
    PostgreSQL (`SET LOCAL synchronous_commit TO OFF`, this transaction only): an OS crash may
    then forget the claim, which only means the row is claimed again — use it where a repeated
    attempt is acceptable (at-least-once queues).
    """
    limit = max(1, min(int(limit), 100))
    now = now or timezone.now()
    token = uuid.uuid4().hex
    with transaction.atomic():
        if not wait_for_flush:
            skip_flush_wait()
        qs = model.objects.filter(status=WorkStatus.PENDING, next_attempt_at__lte=now)
        if where is not None:
            qs = qs.filter(where)
        qs = qs.order_by("next_attempt_at", "id")
        if connection.vendor == "postgresql":
            qs = qs.select_for_update(skip_locked=True, of=("self",))
        ids = list(qs.values_list("id", flat=True)[:limit])
        if not ids:
            return token, []
        model.objects.filter(id__in=ids, status=WorkStatus.PENDING).update(
            status=WorkStatus.INFLIGHT,
            claim_token=token,
            claimed_at=now,
            attempts=F("attempts") + 1,
        )
    rows = list(
        model.objects.filter(id__in=ids, claim_token=token)
        .select_related(*select_related)
        .order_by("next_attempt_at", "id")
    )
    return token, rows


def skip_flush_wait() -> None:
    """Inside the outermost `atomic()`: let this transaction commit without waiting for the WAL
    flush (PostgreSQL `SET LOCAL synchronous_commit TO OFF`). The transaction stays atomic and
    crash-safe; only its last moments may be lost in an OS crash. A no-op on SQLite and inside
    a nested block (there it would weaken the caller's whole transaction)."""
    if connection.vendor == "postgresql" and not connection.savepoint_ids:
        with connection.cursor() as cursor:
            cursor.execute("SET LOCAL synchronous_commit TO OFF")


def settle(
    row: WorkItem, token: str, status: str = WorkStatus.DONE, *, error: str = "", **fields
) -> bool:
    """Finish a claimed row with `status` (done / failed / dead) and extra column values.

    Returns False (and changes nothing) when the row no longer carries `token`.
    """
    updated = (
        type(row)
        .objects.filter(pk=row.pk, status=WorkStatus.INFLIGHT, claim_token=token)
        .update(status=status, claim_token="", last_error=error[:500], **fields)
    )
    return updated == 1


def settle_many(
    model: type[WorkItem],
    pks: list[int],
    token: str,
    status: str = WorkStatus.DONE,
    *,
    error: str = "",
    **fields,
) -> int:
    """`settle()` for several rows claimed with the same `token`, in one UPDATE.

    Returns how many rows still carried `token` (and were settled); the others are untouched.
    """
    if not pks:
        return 0
    return model.objects.filter(pk__in=pks, status=WorkStatus.INFLIGHT, claim_token=token).update(
        status=status, claim_token="", last_error=error[:500], **fields
    )


def reschedule(
    row: WorkItem, token: str, next_attempt_at: datetime, *, error: str = "", **fields
) -> bool:
    """Put a claimed row back to pending, due at `next_attempt_at`. Fenced like `settle`."""
    updated = (
        type(row)
        .objects.filter(pk=row.pk, status=WorkStatus.INFLIGHT, claim_token=token)
        .update(
            status=WorkStatus.PENDING,
            claim_token="",
            next_attempt_at=next_attempt_at,
            last_error=error[:500],
            **fields,
        )
    )
    return updated == 1


def recover_stale(
    model: type[WorkItem], *, stale_after: timedelta = timedelta(seconds=60), now=None
) -> int:
    """Return in-flight rows claimed more than `stale_after` ago to pending (their worker died
    or hung). Returns how many rows were recovered."""
    now = now or timezone.now()
    count = model.objects.filter(
        status=WorkStatus.INFLIGHT, claimed_at__lte=now - stale_after
    ).update(status=WorkStatus.PENDING, claim_token="", next_attempt_at=now)
    if count:
        log.warning("recovered %d stale %s row(s)", count, model._meta.label)
    return count


class WorkerLoop:
    """A polling loop for a management command, safe to run in N copies.

    `tick()` is called repeatedly; it returns how many rows it handled (0 → sleep
    `idle_sleep` seconds before the next tick). `periodic` callables run every `period`
    seconds (stale recovery, sweepers). SIGTERM / SIGINT stop the loop after the current tick;
    the tick itself is responsible for finishing its in-flight attempts within its budget.
    """

    def __init__(
        self,
        tick: Callable[[], int],
        *,
        name: str,
        idle_sleep: float = 0.5,
        periodic: list[Callable[[], object]] | None = None,
        period: float = 5.0,
    ):
        self.tick = tick
        self.name = name
        self.idle_sleep = idle_sleep
        self.periodic = periodic or []
        self.period = period
        self.stop_event = threading.Event()

    def install_signal_handlers(self) -> None:
        def _stop(signum, frame):
            if self.stop_event.is_set():
                return  # one line per stop: `serve` forwards the signal its group also got
            log.info("%s: signal %s received, finishing the current batch", self.name, signum)
            self.stop_event.set()

        signal.signal(signal.SIGTERM, _stop)
        signal.signal(signal.SIGINT, _stop)

    def run_periodic(self) -> None:
        for job in self.periodic:
            try:
                job()
            except Exception:
                log.exception("%s: periodic job %r failed", self.name, job)

    def run(self, *, once: bool = False) -> None:
        """Loop until stopped (or one tick with `once`)."""
        self.run_periodic()
        last_periodic = time.monotonic()
        while not self.stop_event.is_set():
            close_old_connections()
            try:
                handled = self.tick()
            except Exception:
                log.exception("%s: tick failed", self.name)
                handled = 0
            if once:
                break
            if time.monotonic() - last_periodic >= self.period:
                self.run_periodic()
                last_periodic = time.monotonic()
            if not handled:
                self.stop_event.wait(self.idle_sleep)
        close_old_connections()
