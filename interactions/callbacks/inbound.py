"""Transport-level dedupe of Feishu callbacks and events on `header.event_id` (B06).

`claim_event` inserts the `InboundEvent` row in one autocommit statement *before* any
handler runs: the unique constraint (bot, event_id) decides, across processes and machines,
which delivery of an event does the work. Every other delivery gets `duplicate_answer`: the
stored toast when the first one finished, an info toast while it is still running.
"""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

from django.db import connection
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from interactions.models import InboundEvent
from plumbing.db.rows import quoted_table

log = logging.getLogger(__name__)

#: How long event ids are remembered. Signed requests older than `MAX_REQUEST_AGE` are refused
#: by the ingress, so a replay can never outlive its dedupe row.
RETENTION = timedelta(days=3)
MAX_REQUEST_AGE = timedelta(days=1)


def claim_event(bot, event_id: str, event_type: str) -> tuple[InboundEvent, bool]:
    """Record that `event_id` of `bot` is being handled. Returns `(row, created)`; `created`
    is False when another delivery of the same event got there first (in any process).

    One statement, `INSERT … ON CONFLICT (bot_id, event_id) DO NOTHING RETURNING id`
    (PostgreSQL; SQLite ≥ 3.35): the unique constraint `inbound_event_unique` decides, without
    a transaction or savepoint of its own. Outside a transaction it commits at once, so other
    processes see the claim before the handler runs; inside one (tests) it joins it.
    """
    event_id, event_type = event_id[:64], event_type[:100]
    now = timezone.now()
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {quoted_table(InboundEvent)} "  # noqa: S608 - our table name
            "(bot_id, event_id, event_type, status, answer, received_at, finished_at) "
            "VALUES (%s, %s, %s, %s, NULL, %s, NULL) "
            "ON CONFLICT (bot_id, event_id) DO NOTHING RETURNING id",
            [
                bot.pk,
                event_id,
                event_type,
                InboundEvent.Status.PROCESSING,
                connection.ops.adapt_datetimefield_value(now),
            ],
        )
        inserted = cursor.fetchone()
    if inserted is None:
        return InboundEvent.objects.get(bot=bot, event_id=event_id), False
    row = InboundEvent(
        id=inserted[0],
        bot=bot,
        event_id=event_id,
        event_type=event_type,
        status=InboundEvent.Status.PROCESSING,
        received_at=now,
    )
    row._state.adding = False
    row._state.db = connection.alias
    return row, True


def finish_event(row: InboundEvent, answer: dict[str, Any] | None) -> None:
    """Mark `row` answered and keep the toast of `answer` (never its card)."""
    toast = (answer or {}).get("toast")
    # = `.filter(pk=row.pk).update(...)`, hand-written like `claim_event`: once per callback
    answer_field = InboundEvent._meta.get_field("answer")
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {quoted_table(InboundEvent)} "  # noqa: S608
            "SET status = %s, answer = %s, finished_at = %s WHERE id = %s",
            [
                InboundEvent.Status.ANSWERED,
                answer_field.get_db_prep_save({"toast": toast} if toast else {}, connection),
                connection.ops.adapt_datetimefield_value(timezone.now()),
                row.pk,
            ],
        )


def duplicate_answer(row: InboundEvent) -> dict[str, Any]:
    """The answer for a repeated delivery of `row`'s event: the first answer's toast, or an
    info toast while the first delivery is still being handled."""
    from interactions.callbacks.registry import Toast

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
