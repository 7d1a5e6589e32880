"""Durable work queues in the database: claim, fence, settle, retry, recover — written once.

Used by the CardKit card-update queue (`interactions`) and the webhook outbox (`feedback`).
A queue is a concrete model inheriting `WorkItem`. The life of a row:

    pending ──claim_due()──▶ inflight ──settle()──▶ done | failed | dead
       ▲                        │
       └──── reschedule() ──────┘   (retry later, attempts kept)
       └──── recover_stale() ───┘   (the worker died: claim not renewed for `stale_after`)
       └──── release_claims() ──┘   (the tick raised: back to pending, attempts kept)

Rules:
- Claiming is atomic: on PostgreSQL `SELECT … FOR UPDATE SKIP LOCKED` so N workers never take
  the same row; on SQLite the transaction is `BEGIN IMMEDIATE` (settings) so claims serialize.
- Every claim stamps a fresh random `claim_token`; a worker may only settle or reschedule rows
  that still carry its token (the fence). A worker whose claim was recovered and re-claimed by
  another worker cannot overwrite the newer outcome: its update touches zero rows.
- `attempts` counts claims; recovery does not increment it again.
- A claim is a lease: while its worker is alive, a `ClaimLease` heartbeat thread started by
  `WorkerLoop` bumps `claimed_at` of the rows carrying the tokens it holds every
  `LEASE_RENEW_EVERY` seconds (`renew_claims`). `claimed_at` is therefore "last renewed at", and
  `recover_stale(stale_after=…)` takes claims whose worker stopped renewing them — a killed
  process loses its lease within `stale_after`, however long its attempts may take.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta

from django.db import close_old_connections, connection, models, transaction
from django.db.models import F, Q
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

log = logging.getLogger(__name__)

#: Seconds between two renewals of a live worker's claims (`ClaimLease`).
LEASE_RENEW_EVERY = 1.0


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
    fields: tuple[str, ...] = (),
    wait_for_flush: bool = True,
) -> tuple[str, list]:
    """Claim up to `limit` (clamped to 1..100) due pending rows of `model`.

    Returns `(claim_token, rows)`; rows are ordered by (next_attempt_at, id) and are `inflight`
    with `attempts` incremented. `where` narrows the candidates (e.g. one destination);
    `select_related` names relations loaded with the returned rows (one query). With
    `fields` (names as `values_list` takes them, `event__type` included) the rows are tuples
    of those values instead of model instances — for a caller that reads a few columns of
    many rows and would otherwise pay for building every instance.
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
    claimed = model.objects.filter(id__in=ids, claim_token=token).order_by("next_attempt_at", "id")
    if fields:
        return token, list(claimed.values_list(*fields))
    return token, list(claimed.select_related(*select_related))


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


def renew_claims(model: type[WorkItem], tokens: list[str], *, now=None) -> int:
    """Renew the lease of the in-flight rows of `model` carrying one of `tokens`: set their
    `claimed_at` to `now`. Returns how many rows were renewed (rows settled, rescheduled or
    recovered meanwhile no longer carry the token and are untouched)."""
    if not tokens:
        return 0
    return model.objects.filter(status=WorkStatus.INFLIGHT, claim_token__in=tokens).update(
        claimed_at=now or timezone.now()
    )


def release_claims(model: type[WorkItem], token: str, *, now=None) -> int:
    """Put every row still carrying `token` back to pending, due `now`, `attempts` kept (the
    claiming tick raised; a later claim counts as a new attempt). Returns how many."""
    now = now or timezone.now()
    count = model.objects.filter(status=WorkStatus.INFLIGHT, claim_token=token).update(
        status=WorkStatus.PENDING, claim_token="", next_attempt_at=now
    )
    if count:
        log.warning("released %d %s claim(s) of a failed tick", count, model._meta.label)
    return count


class ClaimLease:
    """A daemon thread renewing this process's claims every `every` seconds (`renew_claims`).

    `hold(model, token)` adds a claim token, `drop(token)` removes it (call it once the rows of
    that claim are settled or released). A renewal that fails (database unreachable) is logged
    and retried at the next beat; the thread uses its own database connection and closes it
    when stopped. The heartbeat proves the *process* is alive; a hung attempt is bounded by the
    HTTP timeouts of the adapters, not by the lease.
    """

    def __init__(self, *, every: float = LEASE_RENEW_EVERY):
        self.every = every
        self._tokens: dict[str, type[WorkItem]] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def hold(self, model: type[WorkItem], token: str) -> None:
        with self._lock:
            self._tokens[token] = model

    def drop(self, token: str) -> None:
        with self._lock:
            self._tokens.pop(token, None)

    def held(self) -> dict[type[WorkItem], list[str]]:
        """The tokens held now, per model."""
        with self._lock:
            by_model: dict[type[WorkItem], list[str]] = {}
            for token, model in self._tokens.items():
                by_model.setdefault(model, []).append(token)
            return by_model

    def renew_now(self) -> int:
        """Renew every held claim once; returns how many rows were renewed."""
        return sum(renew_claims(model, tokens) for model, tokens in self.held().items())

    def start(self) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=self._beat, name="claim-lease", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def _beat(self) -> None:
        try:
            while not self._stop.wait(self.every):
                try:
                    self.renew_now()
                except Exception:  # noqa: BLE001 - next beat retries; recovery covers a long outage
                    log.warning("claim lease: renewal failed", exc_info=True)
                    connection.close()  # a broken connection is reopened at the next beat
        finally:
            connection.close()


_active_lease: ClaimLease | None = None


@contextmanager
def leased(model: type[WorkItem], token: str) -> Iterator[None]:
    """Keep the claim `token` renewed by the running `WorkerLoop`'s lease while the block runs
    (a no-op outside a worker loop, e.g. in a request or a test calling the tick itself)."""
    lease = _active_lease
    if lease is None:
        yield
        return
    lease.hold(model, token)
    try:
        yield
    finally:
        lease.drop(token)


def hold_claim(model: type[WorkItem], token: str) -> None:
    """`leased()` for claims that outlive one call (the webhook outbox): hold until `drop_claim`."""
    if _active_lease is not None:
        _active_lease.hold(model, token)


def drop_claim(token: str) -> None:
    """Stop renewing `token` (see `hold_claim`)."""
    if _active_lease is not None:
        _active_lease.drop(token)


class WorkerLoop:
    """A polling loop for a management command, safe to run in N copies.

    `tick()` is called repeatedly; it returns how many rows it handled (0 → sleep
    `idle_sleep` seconds before the next tick). `periodic` callables run every `period`
    seconds (sweepers); `recovery` callables every `recovery_period` seconds (taking the
    expired leases of dead workers, so it runs often). While `run()` runs (also with `once`), a
    `ClaimLease` renews the claims the tick holds through `leased()` / `hold_claim()`.
    SIGTERM / SIGINT stop the loop after the current tick; the tick itself is responsible for
    finishing its in-flight attempts within its budget.
    """

    def __init__(
        self,
        tick: Callable[[], int],
        *,
        name: str,
        idle_sleep: float = 0.5,
        periodic: list[Callable[[], object]] | None = None,
        period: float = 5.0,
        recovery: list[Callable[[], object]] | None = None,
        recovery_period: float = 1.0,
        lease_every: float = LEASE_RENEW_EVERY,
    ):
        self.tick = tick
        self.name = name
        self.idle_sleep = idle_sleep
        self.periodic = periodic or []
        self.period = period
        self.recovery = recovery or []
        self.recovery_period = recovery_period
        self.lease_every = lease_every
        self.stop_event = threading.Event()

    def install_signal_handlers(self) -> None:
        def _stop(signum, frame):
            if self.stop_event.is_set():
                return  # one line per stop: `serve` forwards the signal its group also got
            log.info("%s: signal %s received, finishing the current batch", self.name, signum)
            self.stop_event.set()

        signal.signal(signal.SIGTERM, _stop)
        signal.signal(signal.SIGINT, _stop)

    def run_periodic(self, jobs: list[Callable[[], object]] | None = None) -> None:
        for job in self.periodic if jobs is None else jobs:
            try:
                job()
            except Exception:
                log.exception("%s: periodic job %r failed", self.name, job)

    def run(self, *, once: bool = False) -> None:
        """Loop until stopped (or one tick with `once`)."""
        global _active_lease
        lease = ClaimLease(every=self.lease_every)
        lease.start()
        _active_lease = lease
        try:
            self._loop(once)
        finally:
            _active_lease = None
            lease.stop()

    def _loop(self, once: bool) -> None:
        self.run_periodic(self.recovery + self.periodic)
        last_periodic = last_recovery = time.monotonic()
        while not self.stop_event.is_set():
            close_old_connections()
            try:
                handled = self.tick()
            except Exception:
                log.exception("%s: tick failed", self.name)
                handled = 0
            if once:
                break
            if self.recovery and time.monotonic() - last_recovery >= self.recovery_period:
                self.run_periodic(self.recovery)
                last_recovery = time.monotonic()
            if time.monotonic() - last_periodic >= self.period:
                self.run_periodic()
                last_periodic = time.monotonic()
            if not handled:
                self.stop_event.wait(self.idle_sleep)
        close_old_connections()
