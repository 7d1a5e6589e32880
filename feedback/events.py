"""Durable events (`turn.completed`, `feedback.revised`, `interaction.resolved`).

`emit()` is called inside the transaction that records the fact, so the fact, its event row and
its outbox rows commit together or not at all. The envelope
`{"id","type","version":1,"time","data"}` is serialized once here and stored as text; the outbox
sends those bytes (or the per-destination variant serialized once at fan-out).
"""

from __future__ import annotations

import hashlib
import json
from datetime import datetime
from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone

from feedback.models import Event


def stable_event_id(*parts: Any) -> str:
    """`evt_` + the first 32 hex chars of sha256 over the JSON array of `parts`: the same fact
    always gets the same id, so a replayed write cannot create a second event."""
    digest = hashlib.sha256(
        json.dumps(list(parts), ensure_ascii=False, separators=(",", ":"), default=str).encode()
    ).hexdigest()
    return f"evt_{digest[:32]}"


def envelope(event_id: str, type_: str, time: datetime, data: dict[str, Any]) -> dict[str, Any]:
    """The event envelope as a dict (`time` in RFC 3339 UTC with milliseconds)."""
    return {
        "id": event_id,
        "type": type_,
        "version": 1,
        "time": time.astimezone(timezone.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z"),
        "data": data,
    }


def serialize(body: dict[str, Any]) -> str:
    """Canonical JSON text of an envelope (UTF-8, compact, keys in insertion order)."""
    return json.dumps(body, ensure_ascii=False, separators=(",", ":"))


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
) -> tuple[Event, bool]:
    """Record event `event_id` of `type_` with `data` and fan it out to the outbox.

    Must run inside the caller's transaction (asserted). Returns `(event, created)`; an
    existing `event_id` returns the stored row and writes nothing (idempotent).
    `destination_ids`: the destinations frozen for this fact (e.g. on the delivery); None means
    "resolve the current effective set" (see `feedback.outbox.fan_out`).
    """
    assert transaction.get_connection().in_atomic_block, "emit() must run inside a transaction"
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
                created_at=time,
            )
    except IntegrityError:
        return Event.objects.get(event_id=event_id), False
    from feedback.outbox import fan_out

    fan_out(event, body, destination_ids=destination_ids)
    return event, True
