"""Durable events (`turn.completed`, `feedback.revised`, `interaction.resolved`,
`session.cancel_requested`, and the analytics events `review.completed`, `alert.fired`,
`alert.resolved`) and their feed.

`emit()` is called inside the transaction that records the fact, so the fact, its event row and
its outbox rows commit together or not at all. The envelope
`{"id","type","version":1,"time","data"}` is serialized once here and stored as text
(`Event.body`); the outbox stores, per destination, either those same bytes or a variant that
adds opted-in private fields, each variant serialized once at fan-out (`feedback.outbox`).

Privacy: the comment text of a feedback revision (and a reviewer's note) is passed as
`private={"comment": …}` (`{"note": …}`). It never
enters `Event.body` (so never the feed) and reaches only destinations with `include_comment`.
The answer body is never part of any event.

Feed (`GET /api/v1/events`): events in `seq` order behind an opaque cursor. Every new event
wakes, after commit, the feed long-polls (`?wait=`) of its bot and of staff
(`wake_feed_readers`, through `interactions.lifecycle.waiters`). `seq` is handed
out after commit, under a lock, by `sequence_events()` (run by every feed read): whatever is
committed and unsequenced gets the next positions, so positions follow commit order and a
reader that moved past position N can never later find an event below N. Unrelated long
transactions do not hold the feed back.
"""

from __future__ import annotations

import base64
import binascii
import functools
import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import Case, Value, When
from django.utils import timezone

from feedback.envelopes import PRIVATE_FIELDS, envelope, rfc3339, serialize, stable_event_id
from feedback.models import Event
from feedback.outbox import fan_out
from interactions.lifecycle import waiters


class NotInTransaction(RuntimeError):
    """`emit()` (or another fact writer) was called outside `transaction.atomic()`: the event
    could commit without its fact or the fact without its event."""


class InvalidCursor(ValueError):
    """A feed cursor that Cardloop did not issue (or that was altered)."""


def require_transaction(what: str) -> None:
    """Raise NotInTransaction unless the default connection is inside `atomic()`."""
    if not transaction.get_connection().in_atomic_block:
        raise NotInTransaction(f"{what} must run inside transaction.atomic()")


def emit(
    type_: str,
    event_id: str,
    data: dict[str, Any],
    *,
    bot=None,
    team=None,
    delivery=None,
    destination_ids: list[int] | None = None,
    time: datetime | None = None,
    private: Mapping[str, Any] | None = None,
    fresh_id: bool = False,
) -> tuple[Event, bool]:
    """Record event `event_id` of `type_` with `data` and fan it out to the outbox.

    - Must run inside the caller's transaction: raises NotInTransaction otherwise.
    - Returns `(event, created)`; an existing `event_id` returns the stored row and writes
      nothing (idempotent, also under concurrency: the loser of an insert race re-reads).
    - `destination_ids`: the destinations frozen for this fact (`Delivery.
      webhook_destination_ids`); None means the current effective set of (bot, team)
      (`feedback.outbox.effective_destinations`), used for `interaction.resolved`.
    - `private`: extra `data` fields (keys of PRIVATE_FIELDS, e.g. `{"comment": "…"}`) added
      only to the outbox bodies of destinations whose flag opts in; never stored in
      `Event.body`. Empty values are dropped. Unknown keys raise ValueError.
    - `time`: the envelope time (default now).
    - `fresh_id`: the caller guarantees no event can hold `event_id` yet (it derives from a row
      inserted in this same transaction, e.g. a new revision): the lookup and the savepoint
      guarding the insert race are skipped (two statements fewer per click); if the guarantee
      is broken the insert raises IntegrityError and the caller's transaction rolls back.
    """
    require_transaction("emit()")
    fresh = fresh_event(
        type_,
        event_id,
        data,
        bot=bot,
        team=team,
        delivery=delivery,
        destination_ids=destination_ids,
        time=time,
        private=private,
    )
    if fresh_id:
        Event.objects.insert(fresh.event)
    else:
        existing = Event.objects.filter(event_id=event_id).first()
        if existing is not None:
            return existing, False
        try:
            with transaction.atomic():
                fresh.event.save(force_insert=True)
        except IntegrityError:
            found = Event.objects.filter(event_id=event_id).first()
            if found is None:
                raise
            return found, False
    fresh.inserted()
    return fresh.event, True


@dataclass(frozen=True)
class FreshEvent:
    """An event not yet inserted whose id is new with the fact being written (it derives from
    a row inserted in the same transaction): `event` (the unsaved row), its envelope `body`,
    the frozen `destination_ids` (None: the effective set) and its `private` fields.

    Whoever inserts `event` (`Event.objects.insert`, or `Revision.objects.append` in the
    revision's own statement) calls `inserted()` right after, in the same transaction."""

    event: Event
    body: dict[str, Any]
    destination_ids: list[int] | None
    private: dict[str, Any]

    def inserted(self) -> None:
        """Fan the inserted event out to the outbox and wake the feed readers after commit."""
        if self.event.pk is None:
            raise ValueError("FreshEvent.inserted() before the event row was inserted")
        fan_out(self.event, self.body, destination_ids=self.destination_ids, private=self.private)
        transaction.on_commit(functools.partial(wake_feed_readers, self.event.bot_id))


def fresh_event(
    type_: str,
    event_id: str,
    data: dict[str, Any],
    *,
    bot=None,
    team=None,
    delivery=None,
    destination_ids: list[int] | None = None,
    time: datetime | None = None,
    private: Mapping[str, Any] | None = None,
) -> FreshEvent:
    """The event `emit` would insert, not inserted (arguments as `emit`'s): for a writer that
    inserts it together with its fact. Raises ValueError for unknown or duplicated private
    fields, NotInTransaction outside `transaction.atomic()`."""
    require_transaction("emit()")
    private = {k: v for k, v in (private or {}).items() if v not in (None, "")}
    unknown = set(private) - set(PRIVATE_FIELDS)
    if unknown:
        raise ValueError(f"unknown private event fields: {sorted(unknown)}")
    if set(private) & set(data):
        raise ValueError("a private field must not also be in data")
    time = time or timezone.now()
    body = envelope(event_id, type_, time, data)
    event = Event(
        event_id=event_id,
        type=type_,
        bot=bot,
        team=team,
        delivery=delivery,
        body=serialize(body),
        created_at=time,
    )
    return FreshEvent(event, body, destination_ids, private)


def feed_waiter_key(bot_id: int | None) -> str:
    """The wake-up key (`interactions.lifecycle.waiters`) of feed long-polls reading the
    events of bot `bot_id`, or of every bot (None: staff)."""
    return "feed" if bot_id is None else f"feed.{bot_id}"


def wake_feed_readers(bot_id: int | None) -> None:
    """Wake the feed long-polls (`GET /api/v1/events?wait=`) that could see a new event of
    bot `bot_id`: that bot's and staff's. Run after commit; best effort (a lost wake-up only
    means the reader finds the event at its next poll)."""
    waiters.notify_waiters(feed_waiter_key(None))
    if bot_id is not None:
        waiters.notify_waiters(feed_waiter_key(bot_id))


# ---------------------------------------------------------------------------------------------
# Payloads
# ---------------------------------------------------------------------------------------------


def _compact(data: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in data.items() if v not in (None, "", {}, [])}


def turn_completed_data(delivery) -> dict[str, Any]:
    """`data` of `turn.completed` for a reconciled delivery (pure; never the answer body).

    Always: delivery_id, bot_app_id, session_id, turn_id, attempt, status, sent_at,
    completed_at, content_hash, platform_message_id. When known: native_session_id,
    discriminator, card_id, chat_id, topic_id, duration_ms, usage, cli_id, cli_version, model,
    reasoning_effort, skill_name, skill_version, workflow_id, task_id, parent_task_id.
    """
    always = {
        "delivery_id": delivery.delivery_id,
        "bot_app_id": delivery.bot.app_id,
        "session_id": delivery.session_id,
        "turn_id": delivery.turn_id,
        "attempt": delivery.dispatch_attempt,
        "status": delivery.status,
        "sent_at": rfc3339(delivery.created_at),
        "completed_at": rfc3339(delivery.completed_at),
        "content_hash": delivery.content_hash,
        "platform_message_id": delivery.platform_message_id,
    }
    known = _compact(
        {
            "native_session_id": delivery.native_session_id,
            "discriminator": delivery.discriminator,
            "card_id": delivery.card_id,
            "chat_id": delivery.chat.chat_id if delivery.chat_id else None,
            "topic_id": delivery.topic_id,
            "duration_ms": delivery.duration_ms,
            "usage": delivery.usage,
            "cli_id": delivery.cli_id,
            "cli_version": delivery.cli_version,
            "model": delivery.model,
            "reasoning_effort": delivery.reasoning_effort,
            "skill_name": delivery.skill_name,
            "skill_version": delivery.skill_version,
            "workflow_id": delivery.workflow_id,
            "task_id": delivery.task_id,
            "parent_task_id": delivery.parent_task_id,
        }
    )
    return always | known


def feedback_revised_payload(revision) -> tuple[dict[str, Any], dict[str, Any]]:
    """`(data, private)` of `feedback.revised` for `revision` (pure).

    data: revision_id, delivery_id, bot_app_id, operator_open_id, revision, supersedes
    (revision id or None), verdict_key, semantic, reason_key (or None), has_comment, source,
    created_at, plus session_id / turn_id / chat_id / platform_message_id when known.
    private: `{"comment": text}` when the revision has a comment — only opted-in destinations
    get it (`WebhookDestination.include_comment`). The operator's open_id is included on
    purpose: the feed is scoped to the bot that owns those ids, and receivers need it to keep
    one latest rating per person.
    """
    delivery = revision.delivery
    data = {
        "revision_id": revision.revision_id,
        "delivery_id": delivery.delivery_id,
        "bot_app_id": delivery.bot.app_id,
        "operator_open_id": revision.operator_open_id,
        "revision": revision.revision,
        "supersedes": revision.supersedes.revision_id if revision.supersedes_id else None,
        "verdict_key": revision.verdict_key,
        "semantic": revision.semantic,
        "reason_key": revision.reason_key or None,
        "has_comment": bool(revision.comment),
        "source": revision.source,
        "created_at": rfc3339(revision.created_at),
    } | _compact(
        {
            "session_id": delivery.session_id,
            "turn_id": delivery.turn_id,
            "chat_id": delivery.chat.chat_id if delivery.chat_id else None,
            "platform_message_id": delivery.platform_message_id,
        }
    )
    private = {"comment": revision.comment} if revision.comment else {}
    return data, private


def emit_feedback_revised(revision) -> tuple[Event, bool]:
    """Emit `feedback.revised` for a just-written revision, inside the caller's transaction.

    Event id: `stable_event_id("feedback.revised", revision_id)`, new with the revision
    (`fresh_id`); destinations: the set frozen on the delivery. Returns `(event, created)`
    like `emit`.
    """
    fresh = feedback_revised_event(revision)
    Event.objects.insert(fresh.event)
    fresh.inserted()
    return fresh.event, True


def feedback_revised_event(revision) -> FreshEvent:
    """The `feedback.revised` event of a revision being written, not inserted (`fresh_event`):
    `Revision.objects.append` inserts it in the revision's own statement. Event id and
    destinations as `emit_feedback_revised`. Raises NotInTransaction outside
    `transaction.atomic()`."""
    data, private = feedback_revised_payload(revision)
    delivery = revision.delivery
    return fresh_event(
        Event.Type.FEEDBACK_REVISED,
        stable_event_id("feedback.revised", revision.revision_id),
        data,
        bot=delivery.bot,
        team=delivery.team,
        delivery=delivery,
        destination_ids=list(delivery.webhook_destination_ids or []),
        time=revision.created_at,
        private=private,
    )


# ---------------------------------------------------------------------------------------------
# Feed
# ---------------------------------------------------------------------------------------------

_CURSOR_TAG = "e2"


def sequence_events(*, batch: int = 1000, max_batches: int = 20) -> int:
    """Give committed events without a feed position the next positions, oldest id first.

    Each batch runs in its own transaction holding the sequencer lock (a PostgreSQL advisory
    transaction lock; SQLite serializes writers anyway), so batches commit in order and the
    committed positions are always 1..N with no hole below a visible one (gaps from rolled
    back batches aside). Returns how many events were sequenced.
    """
    total = 0
    for _ in range(max_batches):
        with transaction.atomic():
            Event.objects.lock_sequencer()
            pks = list(Event.objects.unsequenced().values_list("pk", flat=True)[:batch])
            if not pks:
                break
            base = Event.objects.feed_head()
            Event.objects.filter(pk__in=pks).update(
                seq=Case(*(When(pk=pk, then=Value(base + n)) for n, pk in enumerate(pks, 1)))
            )
        total += len(pks)
        if len(pks) < batch:
            break
    return total


def encode_cursor(seq: int) -> str:
    """Opaque feed cursor for feed position `seq`."""
    raw = f"{_CURSOR_TAG}:{seq}".encode("ascii")
    return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


def decode_cursor(cursor: str) -> int:
    """The position of a cursor from `encode_cursor`; raises InvalidCursor on anything else."""
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        raw = base64.urlsafe_b64decode(padded.encode("ascii")).decode("ascii")
        tag, seq = raw.split(":")
        if tag != _CURSOR_TAG or not seq.isdigit():
            raise ValueError(raw)
        return int(seq)
    except (ValueError, UnicodeError, binascii.Error):
        raise InvalidCursor("not a cursor issued by this feed") from None


@dataclass(frozen=True)
class FeedPage:
    """One page of the feed: stored envelopes (JSON text, in order) and the cursor to continue
    from (the input cursor when the page is empty, so a poller keeps its place)."""

    bodies: list[str]
    next_cursor: str
    has_more: bool

    def to_json(self) -> str:
        """`{"events":[<envelope>…],"next":"<cursor>","has_more":bool}` built from the stored
        envelope text (each envelope is sent exactly as stored)."""
        return (
            '{"events":['
            + ",".join(self.bodies)
            + '],"next":'
            + json.dumps(self.next_cursor)
            + ',"has_more":'
            + ("true" if self.has_more else "false")
            + "}"
        )


def feed_page(
    *, bot=None, after: str | None = None, types: list[str] | None = None, limit: int = 100
) -> FeedPage:
    """Events after cursor `after` (None = from the start), in feed order.

    Sequences newly committed events first (`sequence_events`). `bot`: only that bot's events
    (bot API key callers); None = all (staff). `types`: only these types (members of
    FEED_TYPES; None/empty = all). `limit`: 1..1000. Raises InvalidCursor for a foreign cursor
    or one past the feed's end (which no page issued).
    """
    position = decode_cursor(after) if after else 0
    sequence_events()
    qs = Event.objects.in_feed()
    if bot is not None:
        qs = qs.for_bot(bot)
    if types:
        qs = qs.of_types(types)
    rows = list(qs.after_position(position).values_list("seq", "body")[: limit + 1])
    if not rows and position > Event.objects.feed_head():
        # well-formed but past the feed's end: no page ever issued it (a `next` is always a
        # position already handed out), and accepting it would hold a poller silently until
        # the feed grew past it. Only an empty page can be past the end, so only it asks.
        raise InvalidCursor("beyond the end of this feed")
    has_more = len(rows) > limit
    rows = rows[:limit]
    next_cursor = encode_cursor(rows[-1][0] if rows else position)
    return FeedPage([r[1] for r in rows], next_cursor, has_more)
