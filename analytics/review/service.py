"""Every state change of review queues, each one function in one transaction.

- `fill_queue(queue)`: add the latest ratings that match the queue and are not in it yet.
  New ratings enter **as the alert worker and every queue read call it** — feedback writes its
  latest ratings without knowing analytics exists (and without model signals: the click path
  inserts them with plain SQL), so the queue pulls: each call looks at ratings updated since
  the previous call (minus `FILL_OVERLAP`, for transactions that committed late) and inserts
  the missing ones; the unique (queue, latest rating) makes repeated and concurrent calls
  harmless. `fill_queue(queue, since=None)` looks at every rating (`manage.py review_backfill`).
- `claim_next(queue, user)`: the reviewer's next item, locked for `queue.claim_minutes`
  (PostgreSQL: `SELECT … FOR UPDATE SKIP LOCKED`, so two reviewers never get the same item;
  SQLite: one writer at a time). A reviewer who already holds a claim in the queue gets it
  back. Items assigned to them come first; items assigned to someone else never come.
- `complete_item`, `skip_item`, `assign_item`: the reviewer's decisions; completing emits
  `review.completed` (outcome, never the comment unless the destination opts in).
- `view_item(item, user)`: the reviewer's view with the rater's comment; each call writes a
  `review.comment_viewed` audit entry (the entry holds no comment text).

Errors are `ReviewError(code, field, message, status)`; the API answers them as 4xx JSON.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from django.core.exceptions import ValidationError
from django.core.validators import URLValidator
from django.db import connection, transaction
from django.db.models import Case, Count, Exists, IntegerField, OuterRef, Q, Value, When
from django.utils import timezone
from django.utils.translation import gettext as _

from analytics.models import Reviewer, ReviewItem, ReviewQueue
from analytics.review import payloads
from analytics.review.access import reviewer_team_ids
from analytics.review.matching import filter_errors, latest_rating_q
from botadmin import audit
from feedback.envelopes import stable_event_id
from feedback.events import emit
from feedback.models import Event, LatestFeedback

log = logging.getLogger(__name__)

#: How far back each fill looks again before its previous run (rating transactions that
#: committed after the previous fill but carry an earlier time).
FILL_OVERLAP = timedelta(minutes=10)
MAX_NOTE = 2000
MAX_LINK = 500
_AUTO = object()


class ReviewError(Exception):
    """A refused review action: `code` (machine-readable), `field` (the request field it is
    about), `message` (translated), `status` (HTTP: 400, 403, 404 or 409)."""

    def __init__(self, code: str, field: str, message: str, status: int = 400):
        super().__init__(f"{code}: {field}")
        self.code, self.field, self.message, self.status = code, field, message, status


# ---------------------------------------------------------------------------------------------
# Configuration (admin), audited
# ---------------------------------------------------------------------------------------------


def queue_snapshot(queue: ReviewQueue) -> dict[str, Any]:
    """The audit form of a queue: every setting, teams as ids."""
    data = {
        "name": queue.name,
        "enabled": queue.enabled,
        "filters": queue.filters,
        "outcomes": queue.outcomes,
        "claim_minutes": queue.claim_minutes,
    }
    if queue.pk:
        data["teams"] = sorted(queue.teams.values_list("pk", flat=True))
    return data


def save_queue(actor, queue: ReviewQueue, teams) -> ReviewQueue:
    """Create or change `queue` (its field values as the caller set them) and its teams, in one
    transaction with an audit entry (`review_queue.created` / `.changed`). The caller has
    validated the values (`ReviewQueueForm`)."""
    with transaction.atomic():
        stored = ReviewQueue.objects.filter(pk=queue.pk).first() if queue.pk else None
        before = queue_snapshot(stored) if stored else None
        queue.save()
        queue.teams.set(teams)
        action = "review_queue.created" if before is None else "review_queue.changed"
        audit.record(actor, action, queue, before, queue_snapshot(queue))
    return queue


def add_reviewer(actor, reviewer: Reviewer) -> Reviewer:
    """Grant the reviewer permission (`reviewer.added`, audited): the user may then read the
    comments of the team's review items."""
    with transaction.atomic():
        reviewer.save()
        audit.record(
            actor,
            "reviewer.added",
            reviewer,
            None,
            {"team": reviewer.team_id, "user": reviewer.user_id},
        )
    return reviewer


def remove_reviewer(actor, reviewer: Reviewer) -> None:
    """Withdraw the reviewer permission (`reviewer.removed`, audited). Their live claims stay
    until they expire; they can no longer claim, read or complete."""
    with transaction.atomic():
        audit.record(
            actor,
            "reviewer.removed",
            reviewer,
            {"team": reviewer.team_id, "user": reviewer.user_id},
            None,
        )
        reviewer.delete()


# ---------------------------------------------------------------------------------------------
# Filling
# ---------------------------------------------------------------------------------------------


def missing_ratings(queue: ReviewQueue, since: datetime | None = None):
    """Latest ratings that match `queue` (its teams and filter), are not in it yet, and were
    updated at or after `since` (None: any time). An empty queryset for a disabled queue, a
    queue without teams or with an invalid filter."""
    teams = list(queue.teams.values_list("id", flat=True))
    if not queue.enabled or not teams or filter_errors(queue.filters or {}):
        return LatestFeedback.objects.none()
    qs = LatestFeedback.objects.filter(
        latest_rating_q(queue.filters or {}), delivery__team_id__in=teams
    ).exclude(Exists(ReviewItem.objects.filter(queue=queue, latest_id=OuterRef("pk"))))
    if since is not None:
        qs = qs.filter(updated_at__gte=since)
    return qs


def fill_queue(
    queue: ReviewQueue,
    *,
    since: Any = _AUTO,
    now: datetime | None = None,
    batch: int = 1000,
    progress: Callable[[int], None] | None = None,
) -> int:
    """Add the missing matching ratings to `queue` (see the module docstring); returns how many
    items were added. `since`: default = the previous fill minus `FILL_OVERLAP` (everything on
    the first fill); None = every rating. Batches of `batch` rows, each in its own transaction;
    `progress(n)` after each batch. Safe to run concurrently (duplicates are ignored)."""
    now = now or timezone.now()
    if since is _AUTO:
        since = queue.filled_until - FILL_OVERLAP if queue.filled_until else None
    candidates = missing_ratings(queue, since)
    added = 0
    last_id = 0
    while True:
        rows = list(
            candidates.filter(id__gt=last_id)
            .order_by("id")
            .values("id", "delivery_id", "delivery__team_id", "updated_at")[:batch]
        )
        if not rows:
            break
        with transaction.atomic():
            before = ReviewItem.objects.filter(queue=queue).count()
            ReviewItem.objects.bulk_create(
                [
                    ReviewItem(
                        queue=queue,
                        latest_id=row["id"],
                        delivery_id=row["delivery_id"],
                        team_id=row["delivery__team_id"],
                        queued_at=row["updated_at"],
                        created_at=now,
                    )
                    for row in rows
                ],
                ignore_conflicts=True,
            )
            added += ReviewItem.objects.filter(queue=queue).count() - before
        last_id = rows[-1]["id"]
        if progress is not None:
            progress(len(rows))
    ReviewQueue.objects.filter(pk=queue.pk).filter(
        Q(filled_until__isnull=True) | Q(filled_until__lt=now)
    ).update(filled_until=now)
    if added:
        log.info("review queue %s: %d item(s) added", queue.pk, added)
    return added


def fill_all(now: datetime | None = None) -> int:
    """`fill_queue` for every enabled queue (the alert worker's tick). Returns items added."""
    return sum(fill_queue(q, now=now) for q in ReviewQueue.objects.filter(enabled=True))


# ---------------------------------------------------------------------------------------------
# Reviewer actions
# ---------------------------------------------------------------------------------------------


def visible_queues(user):
    """Queues covering at least one team `user` reviews (ordered by name)."""
    teams = reviewer_team_ids(user)
    return ReviewQueue.objects.filter(teams__in=teams).distinct().order_by("name")


def queue_for(user, queue_id: int) -> tuple[ReviewQueue, frozenset[int]]:
    """`(queue, teams)` where `teams` are the queue's teams that `user` reviews; raises
    ReviewError 404 when the queue does not exist or none of its teams is theirs (the same
    answer, so ids of other teams' queues reveal nothing)."""
    teams = reviewer_team_ids(user)
    queue = ReviewQueue.objects.filter(pk=queue_id).first()
    covered = frozenset(queue.teams.values_list("id", flat=True)) & teams if queue else frozenset()
    if queue is None or not covered:
        raise ReviewError("not_found", "queue", _("No such review queue."), 404)
    return queue, covered


def claim_next(
    queue: ReviewQueue, user, *, now: datetime | None = None, assigned_only: bool = False
) -> ReviewItem | None:
    """The next item of `queue` for `user`, claimed until now + `queue.claim_minutes`, or None
    when nothing is left for them. Raises ReviewError 404 if they review none of its teams.

    Order: their own live claim first (a reload resumes it), then items assigned to them, then
    the line (`queued_at`, id). Claimable: open items, and claimed items whose claim expired.
    `assigned_only`: only items assigned to `user`.
    """
    now = now or timezone.now()
    queue, teams = queue_for(user, queue.pk)
    fill_queue(queue, now=now)
    with transaction.atomic():
        mine = (
            ReviewItem.objects.in_review(now)
            .filter(queue=queue, claimed_by=user, team_id__in=teams)
            .order_by("claim_expires_at", "id")
            .first()
        )
        if mine is not None:
            return mine
        candidates = (
            ReviewItem.objects.claimable(now)
            .filter(queue=queue, team_id__in=teams)
            .filter(
                Q(assigned_to=user)
                if assigned_only
                else Q(assigned_to__isnull=True) | Q(assigned_to=user)
            )
            .order_by(
                Case(
                    When(assigned_to=user, then=Value(0)),
                    default=Value(1),
                    output_field=IntegerField(),
                ),
                "queued_at",
                "id",
            )
        )
        if connection.vendor == "postgresql":
            candidates = candidates.select_for_update(skip_locked=True, of=("self",))
        item = candidates.first()
        if item is None:
            return None
        item.status = ReviewItem.Status.CLAIMED
        item.claimed_by = user
        item.claim_expires_at = now + timedelta(minutes=max(1, queue.claim_minutes))
        item.save(update_fields=["status", "claimed_by", "claim_expires_at"])
    return item


def _locked_item(user, item_id: int) -> ReviewItem:
    """The item, row-locked, if `user` reviews its team; ReviewError 404 otherwise."""
    teams = reviewer_team_ids(user)
    qs = ReviewItem.objects.filter(pk=item_id, team_id__in=teams)
    if connection.vendor == "postgresql":
        qs = qs.select_for_update(of=("self",))
    item = qs.first()
    if item is None:
        raise ReviewError("not_found", "item", _("No such review item."), 404)
    return item


def _require_claim(item: ReviewItem, user) -> None:
    if item.status == ReviewItem.Status.DONE:
        raise ReviewError("already_done", "item", _("This item has already been reviewed."), 409)
    if item.status != ReviewItem.Status.CLAIMED or item.claimed_by_id != user.pk:
        raise ReviewError(
            "not_claimed", "item", _("Claim this item first (someone else may hold it)."), 409
        )


def check_external_link(value: str) -> str:
    """The trimmed link, "" for none; raises ReviewError(field external_link) unless it is an
    http(s) URL of at most 500 characters."""
    value = (value or "").strip()
    if not value:
        return ""
    if len(value) > MAX_LINK:
        raise ReviewError("invalid_link", "external_link", _("At most 500 characters."))
    try:
        URLValidator(schemes=["http", "https"])(value)
    except ValidationError:
        raise ReviewError(
            "invalid_link", "external_link", _("Use an http(s) link, e.g. to the issue tracker.")
        ) from None
    return value


def complete_item(
    item_id: int,
    user,
    *,
    outcome: str,
    note: str = "",
    external_link: str = "",
    now: datetime | None = None,
) -> ReviewItem:
    """Record `user`'s outcome for a claimed item, with an optional note (≤ 2000 characters)
    and link; emits `review.completed` and an audit entry in the same transaction.

    Raises ReviewError: 404 not their team's item; 409 `already_done` / `not_claimed` (the
    claim must be theirs — an expired claim nobody else took still counts); 400
    `invalid_outcome` (field outcome), `invalid_note`, `invalid_link`.
    """
    now = now or timezone.now()
    note = (note or "").strip()
    if len(note) > MAX_NOTE:
        raise ReviewError("invalid_note", "note", _("The note may be at most 2000 characters."))
    link = check_external_link(external_link)
    with transaction.atomic():
        item = _locked_item(user, item_id)
        _require_claim(item, user)
        queue = ReviewQueue.objects.get(pk=item.queue_id)
        if not isinstance(outcome, str) or not queue.outcome_label(outcome):
            keys = ", ".join(str(o.get("key")) for o in queue.outcomes or [] if isinstance(o, dict))
            raise ReviewError(
                "invalid_outcome", "outcome", _("Choose one of: %(keys)s.") % {"keys": keys}
            )
        item.status = ReviewItem.Status.DONE
        item.outcome = outcome
        item.note = note
        item.external_link = link
        item.completed_by = user
        item.completed_at = now
        item.claim_expires_at = None
        item.save(
            update_fields=[
                "status",
                "outcome",
                "note",
                "external_link",
                "completed_by",
                "completed_at",
                "claim_expires_at",
            ]
        )
        latest = LatestFeedback.objects.select_related(
            "revision", "delivery__bot", "delivery__team"
        ).get(pk=item.latest_id)
        data, private = payloads.review_completed_payload(item, queue, latest, user)
        emit(
            Event.Type.REVIEW_COMPLETED,
            stable_event_id("review.completed", item.pk),
            data,
            bot=latest.delivery.bot,
            team=latest.delivery.team,
            delivery=latest.delivery,
            destination_ids=list(latest.delivery.webhook_destination_ids or []),
            time=now,
            private=private,
        )
        audit.record(
            user,
            "review.completed",
            item,
            None,
            {"queue": queue.pk, "outcome": outcome, "has_note": bool(note), "has_link": bool(link)},
        )
    log.info("review item %s: completed (%s)", item.pk, outcome)
    return item


def skip_item(item_id: int, user, *, now: datetime | None = None) -> ReviewItem:
    """Give back a claimed item: it is open again at the end of the line. Raises ReviewError
    404 / 409 like `complete_item`."""
    now = now or timezone.now()
    with transaction.atomic():
        item = _locked_item(user, item_id)
        _require_claim(item, user)
        item.status = ReviewItem.Status.OPEN
        item.claimed_by = None
        item.claim_expires_at = None
        item.queued_at = now
        item.skips += 1
        item.save(update_fields=["status", "claimed_by", "claim_expires_at", "queued_at", "skips"])
    return item


def assign_item(item_id: int, actor, assignee_username: str | None) -> ReviewItem:
    """Assign an open or claimed item to a reviewer of its team (None/"" = unassign), audited
    as `review.assigned`. Raises ReviewError 404 (not `actor`'s team), 409 `already_done`,
    400 `invalid_assignee` (field assignee: not a reviewer of the item's team)."""
    with transaction.atomic():
        item = _locked_item(actor, item_id)
        if item.status == ReviewItem.Status.DONE:
            raise ReviewError(
                "already_done", "item", _("This item has already been reviewed."), 409
            )
        assignee = None
        if assignee_username:
            reviewer = (
                Reviewer.objects.select_related("user")
                .filter(
                    team_id=item.team_id, user__username=assignee_username, user__is_active=True
                )
                .first()
            )
            if reviewer is None:
                raise ReviewError(
                    "invalid_assignee",
                    "assignee",
                    _("Assign to a reviewer of the item's team."),
                )
            assignee = reviewer.user
        before = item.assigned_to.get_username() if item.assigned_to_id else None
        item.assigned_to = assignee
        item.save(update_fields=["assigned_to"])
        audit.record(
            actor,
            "review.assigned",
            item,
            {"assigned_to": before},
            {"assigned_to": assignee.get_username() if assignee else None},
        )
    return item


def view_item(item: ReviewItem, user) -> dict[str, Any]:
    """The reviewer's view of `item` (`payloads.item_view`), comment included, and a
    `review.comment_viewed` audit entry (one per call, in its own transaction). The caller has
    checked that `user` reviews the item's team (`claim_next`, `item_for`)."""
    latest = LatestFeedback.objects.select_related(
        "revision", "delivery__bot", "delivery__chat", "delivery__team"
    ).get(pk=item.latest_id)
    queue = ReviewQueue.objects.get(pk=item.queue_id)
    view = payloads.item_view(item, queue, latest)
    with transaction.atomic():
        audit.record(
            user,
            "review.comment_viewed",
            item,
            None,
            {"queue": queue.pk, "has_comment": bool(latest.revision.comment)},
        )
    return view


def item_for(user, item_id: int) -> ReviewItem:
    """The item if `user` reviews its team; ReviewError 404 otherwise."""
    item = ReviewItem.objects.filter(pk=item_id, team_id__in=reviewer_team_ids(user)).first()
    if item is None:
        raise ReviewError("not_found", "item", _("No such review item."), 404)
    return item


# ---------------------------------------------------------------------------------------------
# Progress
# ---------------------------------------------------------------------------------------------


def progress(
    queue: ReviewQueue, teams: frozenset[int], now: datetime | None = None
) -> dict[str, Any]:
    """`{"open", "in_review", "done", "total", "reviewers": [{"username", "done",
    "in_review"}]}` over the queue's items of `teams` (expired claims count as open)."""
    now = now or timezone.now()
    items = ReviewItem.objects.filter(queue=queue, team_id__in=teams)
    live = Q(status=ReviewItem.Status.CLAIMED, claim_expires_at__gt=now)
    counts = items.aggregate(
        total=Count("id"),
        done=Count("id", filter=Q(status=ReviewItem.Status.DONE)),
        in_review=Count("id", filter=live),
    )
    per: dict[str, dict[str, Any]] = {}
    for row in (
        items.filter(status=ReviewItem.Status.DONE)
        .values("completed_by__username")
        .annotate(n=Count("id"))
        .order_by()
    ):
        name = row["completed_by__username"] or ""
        per.setdefault(name, {"username": name, "done": 0, "in_review": 0})["done"] += row["n"]
    for row in items.filter(live).values("claimed_by__username").annotate(n=Count("id")).order_by():
        name = row["claimed_by__username"] or ""
        per.setdefault(name, {"username": name, "done": 0, "in_review": 0})["in_review"] += row["n"]
    total, done, in_review = counts["total"], counts["done"], counts["in_review"]
    return {
        "open": total - done - in_review,
        "in_review": in_review,
        "done": done,
        "total": total,
        "reviewers": sorted(per.values(), key=lambda r: (-r["done"], r["username"])),
    }
