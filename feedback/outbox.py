"""The webhook outbox: one row per (event, destination), written with the event, and the worker
that delivers rows through `feedback.webhooks`.

Writing (inside the fact's transaction, from `feedback.events.emit`):
- `effective_destinations(bot, team)` → ids the deliveries code freezes on a delivery at send
  time (`Delivery.webhook_destination_ids`); events of that delivery fan out to that frozen set.
  Events without a delivery (`interaction.resolved`) use the current set of their bot/team.
- `fan_out(event, envelope, destination_ids=…, private=…)` inserts one pending row per
  destination of the set that is enabled now and subscribed to the event's type. The row body
  is the event's stored text, or — for destinations opted in to a private field such as the
  feedback comment — a variant serialized once here and stored on the row. Every attempt sends
  the stored bytes.

Delivering (`OutboxWorker`, run by `manage.py outbox_worker`, safe in N copies):
- rows are claimed through `plumbing.workqueue` (SKIP LOCKED on PostgreSQL, immediate
  transactions on SQLite) with a claim token, only for enabled destinations; results are settled
  only with that token (a worker whose claim was recovered changes nothing);
- attempts run concurrently on the sender's threads; results are settled in small
  transactions together with their attempt log rows;
- 2xx → done; 408/429/5xx/timeout/network → retry after a full-jitter exponential backoff
  (base 1 s, cap 5 min) floored by Retry-After (≤ 1 h), or dead after `max_attempts` (setting
  CARDLOOP_WEBHOOK_MAX_ATTEMPTS, default 15); 3xx, other 4xx, blocked or invalid destination,
  oversized body, missing secret → failed; 410 → failed and the destination is disabled;
- stale claims (a worker died) go back to pending at start and periodically; at SIGTERM the
  worker claims nothing new, waits for in-flight attempts within a budget, and puts the rest
  back to pending (`interrupted`).
Delivery is at least once and unordered: receivers dedupe on `webhook-id`.
"""

from __future__ import annotations

import concurrent.futures
import logging
import queue
import random
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from botadmin import audit
from botadmin.models import Bot, Team
from feedback import destinations as destinations_service
from feedback import webhooks
from feedback.envelopes import PRIVATE_FIELDS, envelope, serialize, stable_event_id, with_private
from feedback.models import Event, OutboxItem, WebhookAttempt, WebhookDestination
from feedback.webhooks import AttemptResult, Outcome, WebhookRequest
from plumbing import metrics
from plumbing.db import transient
from plumbing.parsers import storable_text
from plumbing.workqueue import (
    WorkStatus,
    claim_due,
    drop_claim,
    hold_claim,
    recover_stale,
    reschedule,
    settle,
    settle_many,
    skip_flush_wait,
)

log = logging.getLogger(__name__)

BACKOFF_BASE_S = 1.0
BACKOFF_CAP_S = 300.0
DEFAULT_MAX_ATTEMPTS = 15
DEFAULT_STALE_AFTER = timedelta(seconds=60)


# ---------------------------------------------------------------------------------------------
# Destinations and fan-out
# ---------------------------------------------------------------------------------------------


def effective_destinations(bot: Bot | None, team: Team | None) -> list[int]:
    """Ids (ascending) of the enabled destinations that take events of `bot` / `team`.

    A destination with no teams and no bots takes every bot's events; otherwise it takes
    events whose bot is one of its bots or whose team is one of its teams. Event types are not
    considered here (they are applied per event at fan-out). The deliveries code stores this
    list on `Delivery.webhook_destination_ids` when it sends.
    """
    unassigned = Q(teams__isnull=True, bots__isnull=True)
    match = unassigned
    if bot is not None:
        match |= Q(bots=bot)
    if team is not None:
        match |= Q(teams=team)
    return sorted(
        set(
            WebhookDestination.objects.filter(enabled=True)
            .filter(match)
            .values_list("pk", flat=True)
        )
    )


def fan_out(
    event: Event,
    body: dict[str, Any],
    *,
    destination_ids: list[int] | None = None,
    private: dict[str, Any] | None = None,
) -> int:
    """Insert one pending OutboxItem per destination that takes `event`; returns how many.

    `body`: the event's envelope (dict) as stored in `event.body`. `destination_ids`: the
    frozen set (None = `effective_destinations(event.bot, event.team)`). Of that set, only
    destinations that are enabled now and subscribed to `event.type` get a row. `private`
    fields are merged into `data` for destinations whose opt-in flag (envelopes.PRIVATE_FIELDS)
    is on; each distinct body is serialized once. Runs inside the event's transaction.
    """
    if destination_ids is None:
        destination_ids = effective_destinations(event.bot, event.team)
    if not destination_ids:
        return 0
    candidates = WebhookDestination.objects.filter(pk__in=set(destination_ids), enabled=True)
    private = private or {}
    variants: dict[tuple[str, ...], str] = {(): event.body}
    rows = []
    for destination in candidates.order_by("pk"):
        if event.type not in (destination.event_types or []):
            continue
        opted = tuple(k for k in sorted(private) if getattr(destination, PRIVATE_FIELDS[k]))
        if opted not in variants:
            variants[opted] = with_private(body, private, opted)
        rows.append(
            OutboxItem(
                event=event,
                destination=destination,
                body=variants[opted],
                next_attempt_at=event.created_at,
                created_at=event.created_at,
            )
        )
    OutboxItem.objects.bulk_create(rows)
    return len(rows)


# ---------------------------------------------------------------------------------------------
# Retry policy (pure)
# ---------------------------------------------------------------------------------------------


def backoff_delay(attempts: int, *, retry_after_s: float | None, rng: random.Random) -> float:
    """Seconds until the next attempt after `attempts` attempts (≥ 1).

    Full jitter: uniform(0, min(cap 300 s, base 1 s × 2^(attempts−1))); a Retry-After value is
    a floor the jitter never goes below: max(jitter, retry_after_s). Sources: AWS
    "Exponential Backoff And Jitter"; a receiver that asks for a pause with Retry-After gets at
    least that pause, jitter never undercuts it (svix#2203).
    """
    ceiling = min(BACKOFF_CAP_S, BACKOFF_BASE_S * 2 ** min(max(attempts, 1) - 1, 30))
    delay = rng.uniform(0, ceiling)
    if retry_after_s is not None:
        delay = max(delay, retry_after_s)
    return delay


@dataclass(frozen=True)
class Decision:
    """What to do with a row after an attempt: its next `status`, when it is due again
    (pending only) and whether the destination must be disabled (410)."""

    status: str
    next_attempt_at: datetime | None = None
    disable_destination: bool = False


def decide(
    result: AttemptResult,
    *,
    attempts: int,
    max_attempts: int,
    now: datetime,
    rng: random.Random,
) -> Decision:
    """The row's fate after `result` of its `attempts`-th attempt (pure)."""
    if result.outcome is Outcome.DELIVERED:
        return Decision(WorkStatus.DONE)
    if result.outcome is Outcome.INTERRUPTED:
        return Decision(WorkStatus.PENDING, next_attempt_at=now)
    if result.outcome in webhooks.RETRYABLE_OUTCOMES:
        if attempts >= max_attempts:
            return Decision(WorkStatus.DEAD)
        delay = backoff_delay(attempts, retry_after_s=result.retry_after_s, rng=rng)
        return Decision(WorkStatus.PENDING, next_attempt_at=now + timedelta(seconds=delay))
    return Decision(WorkStatus.FAILED, disable_destination=result.outcome is Outcome.GONE)


# ---------------------------------------------------------------------------------------------
# Worker
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ClaimedItem:
    """The columns of a claimed outbox row an attempt and its settlement read: the row's `pk`,
    its `attempts` (this claim included), `destination_id`, `body` (text, sent as UTF-8),
    `claimed_at`, and its event's public id (`webhook_id`, the `webhook-id` header) and
    `event_type`."""

    pk: int
    attempts: int
    destination_id: int
    body: str
    claimed_at: datetime | None
    webhook_id: str
    event_type: str


#: `claim_due` field names in `ClaimedItem` order …
_CLAIMED_FIELDS = (
    "id",
    "attempts",
    "destination_id",
    "body",
    "claimed_at",
    "event__event_id",
    "event__type",
)
#: … then the destination columns an attempt reads (`_request_for`, `signing_secrets`), in
#: the destination's field order; the destination's other fields stay deferred.
_DESTINATION_FIELDS = (
    "url",
    "timeout_ms",
    "secret_ref",
    "previous_secret_ref",
    "previous_secret_expires_at",
)


def claim_for_delivery(
    *, limit: int, now: datetime, where: Q | None = None, wait_for_flush: bool = True
) -> tuple[str, list[ClaimedItem], dict[int, WebhookDestination]]:
    """Claim up to `limit` due outbox rows matching `where` (`plumbing.workqueue.claim_due`:
    SKIP LOCKED on PostgreSQL, fenced by the returned token; `wait_for_flush=False` commits
    without waiting for the WAL flush, where a lost claim only means one more attempt).

    Returns `(claim_token, rows, destinations by id)`: the rows' columns an attempt needs (no
    model instances: a claim of many rows spent more CPU building them than the database
    spent claiming) and each of their destinations with the columns an attempt reads (url,
    timeout, secret refs; the others deferred), read with the rows — so a changed URL,
    secret or timeout applies from the next claim on."""
    token, rows = claim_due(
        OutboxItem,
        limit=limit,
        now=now,
        where=where,
        fields=_CLAIMED_FIELDS + tuple(f"destination__{f}" for f in _DESTINATION_FIELDS),
        wait_for_flush=wait_for_flush,
    )
    width = len(_CLAIMED_FIELDS)
    items = []
    destinations: dict[int, WebhookDestination] = {}
    for row in rows:
        item = ClaimedItem(*row[:width])
        items.append(item)
        if item.destination_id not in destinations:
            destinations[item.destination_id] = WebhookDestination.from_db(
                OutboxItem.objects.db,
                ["id", *_DESTINATION_FIELDS],
                [item.destination_id, *row[width:]],
            )
    return token, items, destinations


@dataclass(frozen=True, slots=True)
class _InFlight:
    item: ClaimedItem
    token: str


class OutboxWorker:
    """Claims due outbox rows and delivers them, keeping up to `concurrency` attempts in
    flight. Drive it with `tick()` (from `plumbing.workqueue.WorkerLoop`), then `drain()`
    and `close()`; or `run_until_idle()` in tests and tools.

    Injectable for tests: `now()` (scheduling clock: due times, claims, backoff, secret grace;
    the signature timestamp is always the real time), `rng` (jitter), `sender`.
    """

    def __init__(
        self,
        *,
        concurrency: int = 32,
        max_attempts: int | None = None,
        stale_after: timedelta = DEFAULT_STALE_AFTER,
        now: Callable[[], datetime] = timezone.now,
        rng: random.Random | None = None,
        sender: webhooks.WebhookSender | None = None,
        stop_event: threading.Event | None = None,
        idle_wait: float = 0.5,
        settle_window: float = 0.025,
    ):
        self.concurrency = max(1, min(int(concurrency), 100))
        self.max_attempts = max_attempts or getattr(
            settings, "CARDLOOP_WEBHOOK_MAX_ATTEMPTS", DEFAULT_MAX_ATTEMPTS
        )
        self.stale_after = stale_after
        self.now = now
        self.rng = rng or random.SystemRandom()
        self._own_sender = sender is None
        self.sender = sender or webhooks.WebhookSender(threads=self.concurrency)
        self.stop_event = stop_event or threading.Event()
        self.idle_wait = idle_wait
        self.settle_window = settle_window
        self.refill_at = max(1, self.concurrency // 2)
        self.in_flight: dict[concurrent.futures.Future, _InFlight] = {}
        #: Futures of finished attempts, in the order they finished (their done callbacks).
        self._finished: queue.SimpleQueue[concurrent.futures.Future] = queue.SimpleQueue()

    # -- loop hooks --------------------------------------------------------------------------

    def tick(self) -> int:
        """One step of the loop: settle finished attempts; unless stopping, claim due rows
        when at least half the capacity is free (or nothing is in flight); if nothing
        happened while attempts are in flight, wait up to `idle_wait` for one to finish.

        Returns rows settled + claimed, or the in-flight count when it only waited (so the
        caller does not sleep on top of that wait); 0 means idle.
        """
        handled = self._settle_finished(wait=0)
        if not self.stop_event.is_set():
            free = self.concurrency - len(self.in_flight)
            if free >= self.refill_at or not self.in_flight:
                handled += self.claim_and_start(limit=free)
        if not handled and self.in_flight:
            handled = self._settle_finished(wait=self.idle_wait)
        return handled or len(self.in_flight)

    def recover_stale(self) -> int:
        """Return rows whose claim is older than `stale_after` to pending (periodic job)."""
        return recover_stale(OutboxItem, stale_after=self.stale_after, now=self.now())

    def purge_expired_secrets(self) -> int:
        """Forget rotated secrets past their grace period (periodic job)."""
        return destinations_service.purge_expired_secrets(self.now())

    def drain(self, budget: float) -> None:
        """Wait up to `budget` seconds for in-flight attempts and settle them; cancel what is
        left and put those rows back to pending (`interrupted`)."""
        deadline = time.monotonic() + max(0.0, budget)
        while self.in_flight and time.monotonic() < deadline:
            self._settle_finished(wait=min(0.1, max(0.0, deadline - time.monotonic())))
        if self.in_flight:
            leftovers = list(self.in_flight.items())
            self.in_flight.clear()
            for future, _entry in leftovers:
                future.cancel()
            now = timezone.now()
            results = []
            for future, entry in leftovers:
                result = None
                if future.done() and not future.cancelled():
                    result = self._result_of(future)
                if result is None:
                    result = AttemptResult(
                        Outcome.INTERRUPTED,
                        error="interrupted: the worker shut down",
                        started_at=entry.item.claimed_at or now,
                    )
                results.append((entry, result))
            self._record(results)
            log.info("outbox: %d attempt(s) interrupted at shutdown", len(leftovers))

    def close(self) -> None:
        """Release the sender (if this worker created it)."""
        if self._own_sender:
            self.sender.close()

    def run_until_idle(self, *, max_ticks: int = 100_000) -> int:
        """Tick until nothing is due and nothing is in flight (tests, tools, `--once`).
        Returns how many ticks did something."""
        busy = 0
        for _ in range(max_ticks):
            if not self.tick() and not self.in_flight:
                break
            busy += 1
        return busy

    # -- claiming ----------------------------------------------------------------------------

    def claim_and_start(self, *, limit: int, where: Q | None = None) -> int:
        """Claim up to `limit` due rows of enabled destinations and start their attempts."""
        condition = Q(destination__enabled=True)
        if where is not None:
            condition &= where
        now = self.now()
        token, items, destinations = claim_for_delivery(
            limit=limit, now=now, where=condition, wait_for_flush=False
        )
        if items:
            hold_claim(OutboxItem, token)  # renewed while attempts run (workqueue.ClaimLease)
        immediate = []
        secrets_cache: dict[int, tuple[str, ...]] = {}
        for item in items:
            request = self._request_for(item, destinations[item.destination_id], now, secrets_cache)
            entry = _InFlight(item, token)
            if isinstance(request, AttemptResult):
                immediate.append((entry, request))
            else:
                future = self.sender.submit(request)
                self.in_flight[future] = entry
                future.add_done_callback(self._finished.put)
        if immediate:
            self._record(immediate)
        return len(items)

    def _request_for(
        self,
        item: ClaimedItem,
        destination: WebhookDestination,
        now: datetime,
        cache: dict[int, tuple[str, ...]] | None = None,
    ) -> WebhookRequest | AttemptResult:
        """The attempt for a claimed row of `destination`; `cache` holds signing secrets per
        destination for the rows of one claim. An unreadable secret store yields a retryable
        result."""
        body = item.body.encode("utf-8")
        cache = {} if cache is None else cache
        try:
            secrets = cache.get(destination.pk)
            if secrets is None:
                secrets = tuple(destinations_service.signing_secrets(destination, now))
                cache[destination.pk] = secrets
        except Exception as exc:  # noqa: BLE001 - unreadable secret store: the row waits
            log.error("outbox: cannot read the secret of destination %s: %s", destination.pk, exc)
            return AttemptResult(Outcome.NETWORK_ERROR, error="secret store unreadable")
        return WebhookRequest(
            url=destination.url,
            event_id=item.webhook_id,
            event_type=item.event_type,
            body=body,
            secrets=secrets,
            timeout_s=destination.timeout_ms / 1000.0,
        )

    # -- settling ----------------------------------------------------------------------------

    def _result_of(self, future: concurrent.futures.Future) -> AttemptResult:
        try:
            return future.result()
        except concurrent.futures.CancelledError:
            return AttemptResult(Outcome.INTERRUPTED, error="interrupted: the worker shut down")
        except Exception as exc:  # noqa: BLE001 - a bug in an attempt must not kill the worker
            log.exception("outbox: attempt crashed")
            return AttemptResult(
                Outcome.NETWORK_ERROR, error=f"internal error: {type(exc).__name__}"
            )

    def _settle_finished(self, *, wait: float) -> int:
        """Wait up to `wait` s for a finished attempt; then keep collecting finished attempts
        for up to `settle_window` s (or until `refill_at` of them) and settle them all in one
        transaction. Returns how many were settled."""
        if not self.in_flight:
            return 0
        done: dict[concurrent.futures.Future, None] = {}
        if not self._collect_finished(done, wait):
            return 0
        window_end = time.monotonic() + self.settle_window
        while len(done) < min(self.refill_at, len(self.in_flight)):
            left = window_end - time.monotonic()
            if left <= 0 or not self._collect_finished(done, left):
                break
        results = [(self.in_flight.pop(f), self._result_of(f)) for f in done]
        self._settle(results)
        return len(results)

    def _settle(self, results: list[tuple[_InFlight, AttemptResult]]) -> None:
        """`_record(results)`, tried again once when its transaction failed for a transient
        reason (a deadlock with another worker's statements, a lost connection). If it still
        fails, the rows are put back to pending in a transaction of their own (they are tried
        again: at-least-once; their attempt log is lost), and if even that fails their claims
        stop being renewed, so `recover_stale` takes them back. A settlement that fails must
        never leave rows in flight for as long as the worker lives. Never raises."""
        for attempt in (1, 2):
            try:
                self._record(results)
                return
            except Exception as exc:  # noqa: BLE001 - logged; the rows must not stay in flight
                failure = exc
                if attempt == 1 and transient.is_transient(exc):
                    continue
                break
        log.warning(
            "outbox: settling %d attempt(s) failed (%s); they are tried again",
            len(results),
            type(failure).__name__,
        )
        retry_at = self.now() + timedelta(
            seconds=backoff_delay(1, retry_after_s=None, rng=self.rng)
        )
        try:
            with transaction.atomic():
                for entry, _result in sorted(results, key=lambda r: r[0].item.pk):
                    reschedule(
                        OutboxItem(pk=entry.item.pk),
                        entry.token,
                        retry_at,
                        error=f"settling the attempt failed ({type(failure).__name__})",
                        last_status_code=None,
                    )
        except Exception as exc:  # noqa: BLE001 - logged; the lease's end gives them back
            log.warning(
                "outbox: putting %d attempt(s) back failed too (%s); recovered when stale",
                len(results),
                type(exc).__name__,
            )
        finally:
            self._drop_settled_claims(results)

    def _drop_settled_claims(self, results: list[tuple[_InFlight, AttemptResult]]) -> None:
        live = {e.token for e in self.in_flight.values()}
        for token in {entry.token for entry, _result in results} - live:
            drop_claim(token)  # every row of that claim is settled

    def _collect_finished(self, done: dict, wait: float) -> bool:
        """Add to `done` the in-flight attempts that have finished, waiting up to `wait` s for
        the first one; False when none finished in time. Finished attempts arrive on
        `_finished` (their futures' done callbacks), so a wait costs the same however many
        attempts are in flight; futures no longer in flight (cancelled at shutdown) are
        skipped."""
        deadline = time.monotonic() + wait
        found = False
        while True:
            try:
                if found:
                    future = self._finished.get_nowait()
                else:
                    left = deadline - time.monotonic()
                    future = self._finished.get(block=left > 0, timeout=max(left, 0.0))
            except queue.Empty:
                return found
            if future in self.in_flight and future not in done:
                done[future] = None
                found = True

    def _record(self, results: Iterable[tuple[_InFlight, AttemptResult]]) -> None:
        """Settle rows (fenced by their claim token) and write their attempt log, in one
        transaction; disable destinations that answered 410."""
        now = self.now()
        # rows in id order, the order other workers' statements lock them in: settling in
        # the order attempts finished deadlocked with the lease renewal's UPDATE
        results = sorted(results, key=lambda r: r[0].item.pk)
        delivered: dict[tuple[str, int | None], list[int]] = {}
        to_disable: dict[int, str] = {}
        attempts = []
        with transaction.atomic():
            skip_flush_wait()  # a settlement lost in an OS crash only means one more attempt
            for entry, result in results:
                item = entry.item
                error = storable_text(result.error)  # receiver text may hold a NUL
                decision = decide(
                    result,
                    attempts=item.attempts,
                    max_attempts=self.max_attempts,
                    now=now,
                    rng=self.rng,
                )
                attempts.append(
                    (  # feedback.models.ATTEMPT_LOG_COLUMNS
                        item.pk,
                        item.destination_id,
                        item.attempts,
                        result.started_at,
                        result.duration_ms,
                        result.status_code,
                        str(result.outcome),
                        error[:500],
                        storable_text(result.response_excerpt),
                    )
                )
                if decision.status == WorkStatus.DONE:
                    delivered.setdefault((entry.token, result.status_code), []).append(item.pk)
                elif decision.status == WorkStatus.PENDING:
                    reschedule(
                        OutboxItem(pk=item.pk),
                        entry.token,
                        decision.next_attempt_at,
                        error=error,
                        last_status_code=result.status_code,
                    )
                else:
                    if decision.status == WorkStatus.DEAD:
                        error = f"gave up after {item.attempts} attempts; last: {error}"
                    settle(
                        OutboxItem(pk=item.pk),
                        entry.token,
                        decision.status,
                        error=error,
                        last_status_code=result.status_code,
                    )
                if decision.disable_destination:
                    to_disable[item.destination_id] = (
                        f"HTTP 410 Gone from the receiver at {now:%Y-%m-%d %H:%M:%S} UTC"
                    )
                log.log(
                    logging.DEBUG if decision.status == WorkStatus.DONE else logging.INFO,
                    "outbox: event %s → destination %s, attempt %d: %s → %s",
                    item.webhook_id,
                    item.destination_id,
                    item.attempts,
                    result.error or result.outcome,
                    decision.status,
                )
            for (token, status_code), pks in delivered.items():
                settle_many(
                    OutboxItem,
                    pks,
                    token,
                    WorkStatus.DONE,
                    last_status_code=status_code,
                    delivered_at=now,
                )
            WebhookAttempt.objects.log(attempts)
            for destination_id, reason in to_disable.items():
                destinations_service.disable_destination(destination_id, reason=reason)
        for entry, result in results:
            metrics.observe_webhook_attempt(
                entry.item.destination_id, str(result.outcome), result.duration_ms / 1000
            )
        self._drop_settled_claims(results)


# ---------------------------------------------------------------------------------------------
# Admin operations
# ---------------------------------------------------------------------------------------------


def requeue(items: Iterable[OutboxItem], *, actor: Any, now: datetime | None = None) -> int:
    """Put dead or failed rows back to pending, due now, with a fresh attempt budget
    (attempts = 0). Audited per destination (`outbox.requeued`). Returns how many rows."""
    now = now or timezone.now()
    pks = [i.pk for i in items]
    with transaction.atomic():
        rows = list(
            OutboxItem.objects.select_for_update()
            .filter(pk__in=pks, status__in=[WorkStatus.DEAD, WorkStatus.FAILED])
            .select_related("destination")
        )
        by_destination: dict[int, list[OutboxItem]] = {}
        for row in rows:
            by_destination.setdefault(row.destination_id, []).append(row)
        OutboxItem.objects.filter(pk__in=[r.pk for r in rows]).update(
            status=WorkStatus.PENDING,
            attempts=0,
            next_attempt_at=now,
            claim_token="",
            last_error="",
        )
        for group in by_destination.values():
            audit.record(
                actor,
                "outbox.requeued",
                group[0].destination,
                {"outbox_items": [{"id": r.pk, "status": r.status} for r in group][:100]},
                {"status": WorkStatus.PENDING, "count": len(group)},
            )
    return len(rows)


def send_test_event(
    destination: WebhookDestination, *, actor: Any, sender: webhooks.WebhookSender | None = None
) -> tuple[OutboxItem, AttemptResult]:
    """Send a `webhook.test` event to `destination` now, once, whatever its subscriptions
    (admin action). The event (kept out of the feed), its outbox row and the attempt log are
    stored like any other; the row ends `done` or `failed` (never retried). Audited
    (`webhook_destination.test_sent`). Returns the row and the attempt's result."""
    now = timezone.now()
    with transaction.atomic():
        event_id = stable_event_id("webhook.test", destination.pk, uuid.uuid4().hex)
        body = serialize(
            envelope(
                event_id,
                Event.Type.WEBHOOK_TEST,
                now,
                {"message": "Cardloop test event", "destination": destination.name},
            )
        )
        event = Event.objects.create(
            event_id=event_id, type=Event.Type.WEBHOOK_TEST, body=body, created_at=now
        )
        item = OutboxItem.objects.create(
            event=event, destination=destination, body=body, next_attempt_at=now
        )
        audit.record(
            actor, "webhook_destination.test_sent", destination, None, {"event_id": event_id}
        )
    worker = OutboxWorker(concurrency=1, max_attempts=1, sender=sender)
    try:
        token, claimed, destinations = claim_for_delivery(limit=1, now=now, where=Q(pk=item.pk))
        if not claimed:  # a worker took it first; it will deliver it
            return item, AttemptResult(Outcome.INTERRUPTED, error="claimed by a worker")
        request = worker._request_for(claimed[0], destinations[claimed[0].destination_id], now)
        result = request if isinstance(request, AttemptResult) else worker.sender.send(request)
        worker._record([(_InFlight(claimed[0], token), result)])
    finally:
        worker.close()
    item.refresh_from_db()
    return item, result
