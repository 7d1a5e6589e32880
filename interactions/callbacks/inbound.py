"""Transport-level dedupe of callbacks and events on their event id (Feishu: `header.event_id`):
a redelivered or concurrently repeated event gets the first delivery's answer, never a second
side effect.

`claim_event` inserts the `InboundEvent` row in one autocommit statement *before* any
handler runs: the unique constraint (bot, event_id) decides, across processes and machines,
which delivery of an event does the work. Every other delivery gets `duplicate_answer`: the
stored toast when the first one finished, an info toast while it is still running.
"""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

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


def finish_event(row: InboundEvent, answer: dict[str, Any] | None) -> None:
    """Mark `row` answered and keep the toast of `answer` (never its card)."""
    InboundEvent.objects.mark_answered(row.pk, (answer or {}).get("toast"))


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
