"""Transport-level dedupe of callbacks and events on their event id (Feishu: `header.event_id`):
a redelivered or concurrently repeated event gets the first delivery's answer, never a second
side effect.

`claim_event` inserts the `InboundEvent` row in one autocommit statement *before* any
handler runs: the unique constraint (bot, event_id) decides, across processes and machines,
which delivery of an event does the work. Every other delivery gets `duplicate_answer`: the
stored toast when the first one finished, an info toast while it is still running.

A card action's claim is durable (`claim_card_action`): it stores the verified action its handler
needs and carries a lease (`CARDLOOP_CLICK_LEASE`, 15 s) that `LEASES` renews every third of it
while the handler runs in this process. A claim whose lease ran out — its process died, or its
handler gave up on a transient database error — is taken over by an identical retry of the same
event (Feishu's or the user's) and by the recovery in `card_worker`
(`interactions.callbacks.recovery`), until its answer is recorded.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import connections, transaction
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from interactions.callbacks.registry import Toast
from interactions.models import InboundEvent

log = logging.getLogger(__name__)

#: How long event ids are remembered. Signed requests older than `MAX_REQUEST_AGE` are refused
#: by the ingress, so a replay can never outlive its dedupe row.
RETENTION = timedelta(days=3)
MAX_REQUEST_AGE = timedelta(days=1)


def claim_event(bot, event_id: str, event_type: str) -> tuple[InboundEvent, bool]:
    """Record that `event_id` of `bot` is being handled. Returns `(row, created)`; `created`
    is False when another delivery of the same event got there first (in any process).

    The unique constraint (bot, event_id) decides in one statement
    (`InboundEvent.objects.claim`), without a transaction of its own: outside a transaction
    it commits at once, so other processes see the claim before the handler runs; inside one
    (tests) it joins it.
    """
    return InboundEvent.objects.claim(bot, event_id[:64], event_type[:100])


#: `claim_card_action` outcomes.
CREATED, TAKEN_OVER, DUPLICATE = "created", "taken_over", "duplicate"


def lease_seconds() -> float:
    """Seconds a card-action claim's lease lasts (`CARDLOOP_CLICK_LEASE`, 15)."""
    return float(settings.CARDLOOP_CLICK_LEASE)


def claim_card_action(
    bot, event_id: str, action: dict[str, Any] | None
) -> tuple[InboundEvent, str]:
    """Claim card action `event_id` of `bot` for this delivery, storing `action` (the verified
    action its handler needs, `CardAction.to_stored()`; None when it has no handler to run).
    Returns `(row, outcome)`: `CREATED` (a new claim), `TAKEN_OVER` (an earlier claim of the
    same event whose lease ran out: this delivery runs it now) or `DUPLICATE` (another delivery
    holds it or answered it). Database errors propagate (nothing is claimed when the first
    statement fails)."""
    row, created = InboundEvent.objects.claim(
        bot, event_id[:64], "card.action.trigger", action=action, lease_seconds=lease_seconds()
    )
    if created:
        return row, CREATED
    if row.status == InboundEvent.Status.PROCESSING:
        taken = InboundEvent.objects.take_over(row.pk, lease_seconds())
        if taken is not None:
            return taken, TAKEN_OVER
    return row, DUPLICATE


def take_over(pk: int) -> InboundEvent | None:
    """Take over the expired claim `pk` for the recovery (`InboundEvent.objects.take_over`);
    None when it is answered or alive elsewhere."""
    return InboundEvent.objects.take_over(pk, lease_seconds())


def expired_claim_ids(limit: int, now=None) -> list[int]:
    """Ids of at most `limit` card-action claims whose lease ran out (oldest first)."""
    now = now or timezone.now()
    return list(InboundEvent.objects.expired_claims(now).values_list("pk", flat=True)[:limit])


def finish_claim(pk: int, answer: dict[str, Any] | None) -> bool:
    """Record the final answer of claim `pk` (its toast only) and clear its stored action and
    lease. Returns False when the claim was answered already (another run got there first).
    Inside a transaction it joins it (`run_and_finish`); outside it is one statement of its
    own."""
    return InboundEvent.objects.mark_answered(pk, (answer or {}).get("toast"))


def run_and_finish(pk: int, run: Callable[[], dict[str, Any]]) -> dict[str, Any] | None:
    """Run `run()` (a handler marked `registry.answered_in_transaction`, returning its answer
    dict) and record that answer as claim `pk`'s final answer, in **one** transaction: the
    handler's effects and the claim's answer commit together or not at all. Returns the
    answer, or None when the claim was answered already by another run (nothing of this run
    is kept then). Raises what `run` raises (its effects rolled back, the claim unanswered)."""
    with transaction.atomic():
        answer = run()
        if not finish_claim(pk, answer):
            transaction.set_rollback(True)
            return None
    return answer


def let_go(pk: int) -> None:
    """The handler of claim `pk` gave up on a transient database error: end its lease now so
    the next retry or recovery pass runs it. Best effort — with the database still gone the
    lease simply runs out."""
    try:
        InboundEvent.objects.let_go(pk)
    except Exception as exc:  # noqa: BLE001 - best effort, see the docstring
        log.info("claim %s: lease not ended early (%s); it runs out", pk, type(exc).__name__)


def stored_answer(pk: int) -> dict[str, Any]:
    """The answer claim `pk` was given (its toast), or the info toast while it is running."""
    return duplicate_answer(InboundEvent.objects.get(pk=pk))


def release_event(row: InboundEvent) -> None:
    """Forget the claim of event `row` whose handler failed on a transient database error, so
    the platform's redelivery is handled instead of being taken for a duplicate. Best effort:
    with the database still gone the claim stays (logged)."""
    try:
        InboundEvent.objects.filter(pk=row.pk, status=InboundEvent.Status.PROCESSING).delete()
    except Exception as exc:  # noqa: BLE001 - best effort, see the docstring
        log.warning("event claim %s not let go (%s)", row.pk, type(exc).__name__)


def finish_event(row: InboundEvent, answer: dict[str, Any] | None) -> None:
    """Mark `row` answered and keep the toast of `answer` (never its card)."""
    InboundEvent.objects.mark_answered(row.pk, (answer or {}).get("toast"))


class LeaseKeeper:
    """Renews the leases of the claims whose handlers run in this process: one daemon thread,
    started on first use, renews every held claim every `lease_seconds() / 3` seconds in one
    UPDATE on a connection of its own (closed after each pass). `hold(pk)` / `drop(pk)` around
    a handler run; thread-safe. A renewal that fails (database gone) is logged and tried again
    next period: a lease that then runs out lets a retry or the recovery run the claim again,
    whose answer only one run can record (`finish_claim`)."""

    def __init__(self) -> None:
        self._held: dict[int, int] = {}
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def hold(self, pk: int) -> None:
        """Keep claim `pk`'s lease alive until `drop(pk)`."""
        with self._lock:
            self._held[pk] = self._held.get(pk, 0) + 1
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="click-lease", daemon=True)
                self._thread.start()

    def drop(self, pk: int) -> None:
        """Stop renewing claim `pk` (its handler is done)."""
        with self._lock:
            count = self._held.get(pk, 0) - 1
            if count > 0:
                self._held[pk] = count
            else:
                self._held.pop(pk, None)

    def held(self) -> list[int]:
        """The claims renewed now (a copy)."""
        with self._lock:
            return list(self._held)

    def renew_now(self) -> int:
        """One renewal pass (the thread's loop body); returns how many leases were renewed."""
        pks = self.held()
        if not pks:
            return 0
        try:
            return InboundEvent.objects.renew(pks, lease_seconds())
        except Exception as exc:  # noqa: BLE001 - logged; the next period tries again
            log.warning("could not renew %d click lease(s): %s", len(pks), type(exc).__name__)
            return 0
        finally:
            for connection in connections.all(initialized_only=True):
                connection.close()

    def _run(self) -> None:
        stop = threading.Event()
        while not stop.wait(lease_seconds() / 3):
            self.renew_now()


#: The process's lease keeper.
LEASES = LeaseKeeper()


def duplicate_answer(row: InboundEvent) -> dict[str, Any]:
    """The answer for a repeated delivery of `row`'s event: the first answer's toast, or an
    info toast while the first delivery is still being handled."""
    row.refresh_from_db(fields=["status", "answer"])
    if row.status == InboundEvent.Status.ANSWERED:
        return dict(row.answer or {})
    return {"toast": Toast.of("info", _("Already received; it is being processed.")).to_json()}


def prune_events(now=None) -> int:
    """Delete dedupe rows older than `RETENTION`; returns how many."""
    now = now or timezone.now()
    deleted, _per_model = InboundEvent.objects.received_before(now - RETENTION).delete()
    if deleted:
        log.info("pruned %d inbound event row(s)", deleted)
    return deleted
