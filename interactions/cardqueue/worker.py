"""Applying queued card updates (`CardUpdate`): the logic behind `manage.py card_worker`.

Each update goes out through its card's own channel (`CardEntity.channel` → the applier the
channel registered, `interactions.channels.base.Channel.apply_update`), which makes the
platform call and raises `UpdateFailed` (retryable or not, `retry_after` seconds for a rate
limit). What follows is said for Feishu; another channel sets its own `update_interval`.

Per card at most one update is in flight and at most one is pending (newer state merged into
it), so updates reach Feishu in the order their states were enqueued. Each request takes the
card's next CardKit `sequence` (strictly increasing, retries included), and requests to one
card are spaced `MESSAGE_INTERVAL` apart (Feishu: 5 QPS per message). Rate limits, HTTP
429/5xx and network errors are retried with exponential backoff up to `MAX_ATTEMPTS`
(then `dead`), never sooner than a `Retry-After` the server sent (capped at 5 min); other
Feishu errors are permanent (`failed`, with code, message and log_id).
Claiming, fencing and stale recovery come from `plumbing.workqueue`; a retried or recovered
update that meets a newer pending one is folded into it instead of going back to the queue.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable
from datetime import timedelta

from django.db import transaction
from django.db.models import Exists, F, OuterRef, Q
from django.utils import timezone

from interactions.cardqueue import releases
from interactions.cardqueue.service import UpdateFailed, applier_for, next_sequence, render_now
from interactions.lark.cardjson import merge_updates
from interactions.models import CardEntity, CardUpdate
from plumbing import metrics
from plumbing.workqueue import WorkStatus, claim_due, leased, reschedule, settle

log = logging.getLogger(__name__)

MAX_ATTEMPTS = 10
#: Feishu allows 5 updates per second per message.
MESSAGE_INTERVAL = timedelta(milliseconds=200)
#: An in-flight claim not renewed for this long belongs to a dead worker: a live `card_worker`
#: renews its claims every second (`plumbing.workqueue.ClaimLease`), so a killed one's updates
#: go back to the queue within this plus the recovery period, and newer updates of the same
#: card stop waiting behind them.
STALE_AFTER = timedelta(seconds=5)
#: Longest wait a server's Retry-After can impose on one retry.
MAX_RETRY_AFTER = timedelta(minutes=5)
#: Finished rows are kept this long for the admin / debugging, then deleted.
FINISHED_RETENTION = timedelta(days=7)


def backoff(attempts: int) -> timedelta:
    """Delay before retry number `attempts` (1-based): 1 s, 2 s, 4 s … capped at 120 s, plus up
    to 25 % jitter so many cards rate-limited together do not retry in lockstep."""
    base = min(120.0, 2.0 ** max(0, attempts - 1))
    return timedelta(seconds=base * (1 + random.random() / 4))


def _claimable(now) -> Q:
    in_flight = CardUpdate.objects.filter(card=OuterRef("card"), status=WorkStatus.INFLIGHT)
    return Q(card__next_send_at__lte=now) & ~Exists(in_flight)


def run_due(limit: int = 10, *, should_stop: Callable[[], bool] | None = None) -> int:
    """Claim up to `limit` due updates (of different cards) and apply them one by one.

    When `should_stop()` turns true, the claimed updates not started yet go back to the queue
    untouched. The claim is leased (renewed while the worker loop runs). When applying raises
    (e.g. the database went away), every update still claimed goes back to the queue with its
    attempts kept (`release_updates`) and the error propagates. Returns how many updates were
    attempted.
    """
    # Releases this process noted (a worker thread beside the web server, tests) are written
    # first, so an update whose answer was sent here is never passed over; in a worker
    # process of its own there are none and this returns at once.
    releases.RELEASES.flush(timeout=1.0)
    now = timezone.now()
    token, rows = claim_due(CardUpdate, limit=limit, now=now, where=_claimable(now))
    attempted = 0
    with leased(CardUpdate, token):
        try:
            for index, row in enumerate(rows):
                if should_stop is not None and should_stop():
                    for rest in rows[index:]:
                        return_to_pending(rest, token, timezone.now(), attempts=F("attempts") - 1)
                    break
                metrics.count_card_update(apply_update(row, token))
                attempted += 1
        except BaseException:
            release_updates(rows, token)
            raise
    return attempted


def release_updates(rows: list[CardUpdate], token: str) -> int:
    """Return the `rows` still claimed with `token` to the queue, due now, attempts kept
    (folded into a newer pending update of the same card when there is one). Rows already
    settled are untouched (fenced). A failure here is logged, not raised: the lease then
    expires and recovery returns them. Returns how many were released."""
    released = 0
    try:
        for row in rows:
            if return_to_pending(row, token, timezone.now(), error="released: the tick raised"):
                released += 1
    except Exception:  # noqa: BLE001 - the caller is already raising; recovery takes the rest
        log.warning("releasing %d claimed card update(s) failed", len(rows), exc_info=True)
    if released:
        log.warning("released %d claimed card update(s) after an error", released)
    return released


def apply_update(row: CardUpdate, token: str) -> str:
    """Apply one claimed update through its card's own channel (`CardEntity.channel`, the
    channel's `apply_update`) and settle it; returns "done", "retry" or "failed"."""
    card = CardEntity.objects.select_related("bot").get(pk=row.card_id)
    if row.renderer:  # rendered now, from the current state (cards.enqueue_render)
        try:
            rendered = render_now(card, row.renderer)
        except Exception as exc:  # noqa: BLE001 - a renderer bug must not lose the update
            log.exception("card %s: renderer %s raised", card.pk, row.renderer)
            return _failed(
                row, token, card, exc, retryable=True, code=None, rate_limited=False, sequence=None
            )
        if rendered is None:
            settle(row, token, WorkStatus.DONE, renderer="")
            return "done"
        row.card_json = rendered
    if row.card_json is None and not row.elements:
        settle(row, token, WorkStatus.DONE)
        return "done"
    if row.card_json is None and not card.card_id:
        settle(row, token, WorkStatus.FAILED, error="element updates need a CardKit card_id")
        return "failed"
    try:
        applier = applier_for(card)
    except LookupError as exc:
        settle(row, token, WorkStatus.FAILED, error=str(exc)[:500])
        return "failed"
    interval = getattr(applier, "update_interval", MESSAGE_INTERVAL)
    try:
        sequence = applier.apply_update(card, row)
    except UpdateFailed as exc:
        if exc.unexpected:
            log.error("card %s: update %s raised", card.pk, row.pk, exc_info=exc.__cause__)
        return _failed(
            row,
            token,
            card,
            exc,
            retryable=exc.retryable,
            code=exc.code,
            rate_limited=exc.rate_limited,
            sequence=exc.sequence,
            interval=interval,
        )
    except Exception as exc:  # noqa: BLE001 - unexpected library/bug: keep the update, retry
        log.exception("card %s: update %s raised", card.pk, row.pk)
        return _failed(
            row,
            token,
            card,
            exc,
            retryable=True,
            code=None,
            rate_limited=False,
            sequence=None,
            interval=interval,
        )
    _pace(card, interval)
    with transaction.atomic():
        if settle(
            row,
            token,
            WorkStatus.DONE,
            sequence=sequence,
            card_json=None,
            elements={},
            renderer="",
            error_code=None,
        ):
            if sequence is not None:
                CardEntity.objects.filter(pk=card.pk, applied_sequence__lt=sequence).update(
                    applied_sequence=sequence
                )
        else:
            log.warning("card %s: update %s applied after its claim was recovered", card.pk, row.pk)
    return "done"


def _failed(
    row, token, card, exc, *, retryable, code, rate_limited, sequence, interval=MESSAGE_INTERVAL
) -> str:
    error = str(exc)[:500]
    delay = backoff(row.attempts)
    retry_after = getattr(exc, "retry_after", None)
    if retry_after is not None:  # never sooner than the server asked, capped
        delay = max(delay, min(timedelta(seconds=retry_after), MAX_RETRY_AFTER))
    _pace(card, delay if rate_limited else interval)
    if retryable and row.attempts < MAX_ATTEMPTS:
        log.info(
            "card %s: update %s will retry in %.1fs (%s)",
            card.pk,
            row.pk,
            delay.total_seconds(),
            error,
        )
        return_to_pending(
            row, token, timezone.now() + delay, error=error, error_code=code, sequence=sequence
        )
        return "retry"
    status = WorkStatus.DEAD if retryable else WorkStatus.FAILED
    log.warning(
        "card %s: update %s %s after %d attempt(s): %s",
        card.pk,
        row.pk,
        status,
        row.attempts,
        error,
    )
    settle(row, token, status, error=error, error_code=code, sequence=sequence)
    return "failed"


#: Kept for callers of the old name: `interactions.cardqueue.service.next_sequence`.
_next_sequence = next_sequence


def _pace(card: CardEntity, delay: timedelta) -> None:
    CardEntity.objects.filter(pk=card.pk).update(next_send_at=timezone.now() + delay)


def return_to_pending(row: CardUpdate, token: str, when, *, error: str = "", **fields) -> bool:
    """Put claimed `row` back in the queue, due at `when` — or, when a newer update of the same
    card is already pending, fold `row`'s content under it (the newer state wins) and mark
    `row` done with `coalesced_into`. Fenced by `token` like `workqueue.reschedule`."""
    with transaction.atomic():
        CardEntity.objects.select_for_update().get(pk=row.card_id)  # serialize with enqueuers
        pending = (
            CardUpdate.objects.select_for_update()
            .filter(card_id=row.card_id, status=WorkStatus.PENDING)
            .exclude(pk=row.pk)
            .first()
        )
        if pending is None:
            return reschedule(row, token, when, error=error, **fields)
        if not settle(
            row,
            token,
            WorkStatus.DONE,
            error=f"coalesced into #{pending.pk}: {error}",
            coalesced_into=pending,
            card_json=None,
            elements={},
            **fields,
        ):
            return False
        if pending.renderer or pending.card_json is not None:
            pass  # the newer whole card (rendered or given) replaces the older content
        elif row.renderer:  # older rendered card + newer element updates: render wins
            pending.renderer, pending.card_json, pending.elements = row.renderer, None, {}
        else:
            card_json, elements, _dropped = merge_updates(
                row.card_json, row.elements, pending.card_json, pending.elements
            )
            pending.card_json, pending.elements = card_json, elements
        pending.next_attempt_at = max(pending.next_attempt_at, when)
        pending.save(
            update_fields=["card_json", "elements", "renderer", "next_attempt_at", "updated_at"]
        )
        return True


def recover_stale_updates(*, stale_after: timedelta = STALE_AFTER, now=None) -> int:
    """Return updates claimed more than `stale_after` ago (their worker died or hung) to the
    queue, folding them into a newer pending update of the same card when there is one.
    Returns how many were recovered."""
    now = now or timezone.now()
    stale = CardUpdate.objects.filter(
        status=WorkStatus.INFLIGHT, claimed_at__lte=now - stale_after
    ).order_by("id")
    count = 0
    for row in stale:
        if return_to_pending(row, row.claim_token, now, error="recovered: claim went stale"):
            count += 1
    if count:
        log.warning("recovered %d stale card update(s)", count)
    return count


def prune_finished(*, now=None) -> int:
    """Delete finished updates older than `FINISHED_RETENTION`; returns how many."""
    now = now or timezone.now()
    deleted, _per_model = CardUpdate.objects.filter(
        status__in=[WorkStatus.DONE, WorkStatus.FAILED, WorkStatus.DEAD],
        updated_at__lt=now - FINISHED_RETENTION,
    ).delete()
    return deleted
