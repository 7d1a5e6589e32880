"""Durable events (`turn.completed`, `feedback.revised`, `interaction.resolved`) and their feed.

`emit()` is called inside the transaction that records the fact, so the fact, its event row and
its outbox rows commit together or not at all. The envelope
`{"id","type","version":1,"time","data"}` is serialized once here and stored as text
(`Event.body`); the outbox stores, per destination, either those same bytes or a variant that
adds opted-in private fields, each variant serialized once at fan-out (`feedback.outbox`).

Privacy: the comment text of a feedback revision is passed as `private={"comment": …}`. It never
enters `Event.body` (so never the feed) and reaches only destinations with `include_comment`.
The answer body is never part of any event.

Feed (`GET /api/v1/events`): events in (`txid`, `id`) order behind an opaque cursor; see
`EventQuerySet.settled` for why a reader never skips an event committed late.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from feedback.models import Event

#: Private data keys accepted by `emit(private=…)` → the `WebhookDestination` flag that opts a
#: destination in. Private values never reach `Event.body` or the feed.
PRIVATE_FIELDS: dict[str, str] = {"comment": "include_comment"}

#: Event types of the public feed (and of webhook subscriptions).
FEED_TYPES: tuple[str, ...] = (
    Event.Type.TURN_COMPLETED,
    Event.Type.FEEDBACK_REVISED,
    Event.Type.INTERACTION_RESOLVED,
)


class NotInTransaction(RuntimeError):
    """`emit()` (or another fact writer) was called outside `transaction.atomic()`: the event
    could commit without its fact or the fact without its event."""


class InvalidCursor(ValueError):
    """A feed cursor that Cardloop did not issue (or that was altered)."""


def require_transaction(what: str) -> None:
    """Raise NotInTransaction unless the default connection is inside `atomic()`."""
    if not transaction.get_connection().in_atomic_block:
        raise NotInTransaction(f"{what} must run inside transaction.atomic()")


def stable_event_id(*parts: Any) -> str:
    """`evt_` + the first 32 hex chars of sha256 over the JSON array of `parts`: the same fact
    always gets the same id, so a replayed write cannot create a second event."""
    digest = hashlib.sha256(
        json.dumps(list(parts), ensure_ascii=False, separators=(",", ":"), default=str).encode()
    ).hexdigest()
    return f"evt_{digest[:32]}"


def rfc3339(value: datetime | None) -> str | None:
    """`2025-03-01T15:59:59.123Z` (UTC, milliseconds), or None."""
    if value is None:
        return None
    return value.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def envelope(event_id: str, type_: str, time: datetime, data: dict[str, Any]) -> dict[str, Any]:
    """The event envelope as a dict (`time` in RFC 3339 UTC with milliseconds)."""
    return {"id": event_id, "type": type_, "version": 1, "time": rfc3339(time), "data": data}


def serialize(body: dict[str, Any]) -> str:
    """Canonical JSON text of an envelope (UTF-8, compact, keys in insertion order)."""
    return json.dumps(body, ensure_ascii=False, separators=(",", ":"))


def _current_txid() -> int:
    """The top-level transaction id on PostgreSQL (assigned if needed); 0 elsewhere."""
    if connection.vendor != "postgresql":
        return 0
    with connection.cursor() as cur:
        cur.execute("SELECT pg_current_xact_id()::text::bigint")
        return int(cur.fetchone()[0])


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
    """
    require_transaction("emit()")
    private = {k: v for k, v in (private or {}).items() if v not in (None, "")}
    unknown = set(private) - set(PRIVATE_FIELDS)
    if unknown:
        raise ValueError(f"unknown private event fields: {sorted(unknown)}")
    if set(private) & set(data):
        raise ValueError("a private field must not also be in data")
    existing = Event.objects.filter(event_id=event_id).first()
    if existing is not None:
        return existing, False
    time = time or timezone.now()
    body = envelope(event_id, type_, time, data)
    try:
        with transaction.atomic():
            event = Event.objects.create(
                event_id=event_id,
                type=type_,
                bot=bot,
                team=team,
                delivery=delivery,
                body=serialize(body),
                txid=_current_txid(),
                created_at=time,
            )
    except IntegrityError:
        found = Event.objects.filter(event_id=event_id).first()
        if found is None:
            raise
        return found, False
    from feedback.outbox import fan_out

    fan_out(event, body, destination_ids=destination_ids, private=private)
    return event, True


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
    Source: research/botmux.md §A.8 "Payload".
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

    Event id: `stable_event_id("feedback.revised", revision_id)`; destinations: the set frozen
    on the delivery. Returns `(event, created)` like `emit`.
    """
    data, private = feedback_revised_payload(revision)
    delivery = revision.delivery
    return emit(
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

_CURSOR_TAG = "e1"


def encode_cursor(txid: int, pk: int) -> str:
    """Opaque feed cursor for position (txid, pk)."""
    raw = f"{_CURSOR_TAG}:{txid}:{pk}".encode("ascii")
    return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


def decode_cursor(cursor: str) -> tuple[int, int]:
    """(txid, pk) of a cursor from `encode_cursor`; raises InvalidCursor on anything else."""
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        raw = base64.urlsafe_b64decode(padded.encode("ascii")).decode("ascii")
        tag, txid, pk = raw.split(":")
        if tag != _CURSOR_TAG or not txid.isdigit() or not pk.isdigit():
            raise ValueError(raw)
        return int(txid), int(pk)
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
    """Events after cursor `after` (None = from the start), oldest first.

    `bot`: only that bot's events (bot API key callers); None = all (staff). `types`: only
    these types (members of FEED_TYPES; None/empty = all). `limit`: 1..1000. Raises
    InvalidCursor for a foreign cursor.
    """
    txid, pk = decode_cursor(after) if after else (-1, 0)
    qs = Event.objects.in_feed().settled()
    if bot is not None:
        qs = qs.for_bot(bot)
    if types:
        qs = qs.of_types(types)
    rows = list(qs.after_position(txid, pk).values_list("txid", "pk", "body")[: limit + 1])
    has_more = len(rows) > limit
    rows = rows[:limit]
    if rows:
        next_cursor = encode_cursor(rows[-1][0], rows[-1][1])
    else:
        next_cursor = after or encode_cursor(0, 0)
    return FeedPage([r[2] for r in rows], next_cursor, has_more)
