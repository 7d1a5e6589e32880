"""The event envelope: ids, times and JSON text of every event Cardloop sends (pure).

`{"id","type","version":1,"time","data"}`, serialized once, compact UTF-8, keys in insertion
order. Used by the event writer (`feedback.events`), the outbox (per-destination variants and
test events) and destination validation (which event types can be subscribed to). Imports
only the models, so every feedback module may use it.
"""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime
from typing import Any

from feedback.models import Event

#: Private data keys accepted by `events.emit(private=…)` → the `WebhookDestination` flag that
#: opts a destination in. Private values never reach `Event.body` or the feed.
PRIVATE_FIELDS: dict[str, str] = {"comment": "include_comment", "note": "include_comment"}

#: Event types of the public feed (and of webhook subscriptions).
FEED_TYPES: tuple[str, ...] = (
    Event.Type.TURN_COMPLETED,
    Event.Type.FEEDBACK_REVISED,
    Event.Type.INTERACTION_RESOLVED,
    Event.Type.REVIEW_COMPLETED,
    Event.Type.ALERT_FIRED,
    Event.Type.ALERT_RESOLVED,
    Event.Type.SESSION_CANCEL_REQUESTED,
)


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


def with_private(body: dict[str, Any], private: dict[str, Any], keys: tuple[str, ...]) -> str:
    """The JSON text of `body` with the private fields `keys` (of `private`) added to its
    `data`: the variant an opted-in destination receives. `body` is not changed."""
    variant = dict(body)
    variant["data"] = {**body["data"], **{k: private[k] for k in keys}}
    return serialize(variant)
