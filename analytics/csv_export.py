"""CSV export of the drill-down list: pure row formatting plus a streaming generator.

The file is UTF-8 with a BOM (so Excel reads Chinese labels correctly, as Chatwoot's export
does), one line per (delivery, matching latest rating), or one line with empty rating columns
for a delivery without one. Times are ISO 8601 in the report zone. Cells that a spreadsheet
would run as a formula (starting with = + - @, tab or CR) get a leading apostrophe (OWASP CSV
injection advice). Redacted like the API: no comment, open_id, card or secret.
"""

from __future__ import annotations

import csv
import io
import zoneinfo
from collections.abc import AsyncIterator, Iterable, Iterator
from datetime import datetime
from typing import Any

from asgiref.sync import sync_to_async
from django.utils import translation
from django.utils.translation import gettext_lazy as _

BOM = "\ufeff"

COLUMNS = (
    "delivery_id",
    "sent_at",
    "status",
    "channel",
    "team_id",
    "team",
    "bot_app_id",
    "bot",
    "chat_id",
    "topic_id",
    "model",
    "cli_id",
    "cli_version",
    "skill_name",
    "skill_version",
    "workflow_id",
    "task_id",
    "feedback_shown",
    "error_code",
    "semantic",
    "verdict_key",
    "verdict_label",
    "reason_key",
    "reason_label",
    "revision",
    "rated_at",
)

#: Header cells for a Chinese reader; English readers (and `header_row` outside Chinese) get
#: the column names themselves, which scripts match on.
COLUMN_LABELS = {
    "delivery_id": _("delivery id"),
    "sent_at": _("sent at"),
    "status": _("status"),
    "channel": _("channel"),
    "team_id": _("team id"),
    "team": _("team"),
    "bot_app_id": _("bot app_id"),
    "bot": _("bot"),
    "chat_id": _("chat id"),
    "topic_id": _("topic id"),
    "model": _("model"),
    "cli_id": _("CLI id"),
    "cli_version": _("CLI version"),
    "skill_name": _("skill name"),
    "skill_version": _("skill version"),
    "workflow_id": _("workflow id"),
    "task_id": _("task id"),
    "feedback_shown": _("feedback shown"),
    "error_code": _("error code"),
    "semantic": _("semantic"),
    "verdict_key": _("verdict key"),
    "verdict_label": _("verdict label"),
    "reason_key": _("reason key"),
    "reason_label": _("reason label"),
    "revision": _("revision"),
    "rated_at": _("rated at"),
}

_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def header_row() -> list[str]:
    """The header in the reader's (active) language: Chinese labels for a Chinese reader,
    `COLUMNS` as they are otherwise."""
    if (translation.get_language() or "").startswith("zh"):
        return [str(COLUMN_LABELS[c]) for c in COLUMNS]
    return list(COLUMNS)


def _cell(value: Any, tz: zoneinfo.ZoneInfo) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, datetime):
        return value.astimezone(tz).isoformat()
    text = str(value)
    return "'" + text if text.startswith(_FORMULA_START) else text


def lines(row: dict[str, Any], tz: zoneinfo.ZoneInfo) -> list[list[str]]:
    """The CSV lines (lists of cells in COLUMNS order) of one drill-down row."""
    base = [
        row["delivery_id"],
        row["sent_at"],
        row["status"],
        row["channel"],
        row["team"]["id"] if row["team"] else None,
        row["team"]["name"] if row["team"] else None,
        row["bot"]["app_id"],
        row["bot"]["name"],
        row["chat_id"],
        row["topic_id"],
        row["model"],
        row["cli_id"],
        row["cli_version"],
        row["skill_name"],
        row["skill_version"],
        row["workflow_id"],
        row["task_id"],
        row["feedback_shown"],
        row["error_code"],
    ]
    ratings = row["ratings"] or [None]
    out = []
    for r in ratings:
        tail = (
            [
                r["semantic"],
                r["verdict_key"],
                r["verdict_label"],
                r["reason_key"],
                r["reason_label"],
                r["revision"],
                r["rated_at"],
            ]
            if r
            else [None] * 7
        )
        out.append([_cell(v, tz) for v in base + tail])
    return out


def stream(
    rows: Iterable[dict[str, Any]], tz: zoneinfo.ZoneInfo, header: list[str] | None = None
) -> Iterator[str]:
    """Yield the file as text chunks: BOM + `header` (default `COLUMNS`; the view passes
    `header_row()` in the reader's language), then about 500 lines per chunk."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\r\n")
    buffer.write(BOM)
    writer.writerow(header or COLUMNS)
    pending = 0
    for row in rows:
        for line in lines(row, tz):
            writer.writerow(line)
            pending += 1
        if pending >= 500:
            yield buffer.getvalue()
            buffer.seek(0)
            buffer.truncate()
            pending = 0
    yield buffer.getvalue()


async def astream(chunks: Iterator[str]) -> AsyncIterator[str]:
    """The same chunks for an ASGI server (Daphne): each chunk is produced in Django's sync
    thread (where the database queries run) and sent before the next one is made. Django
    would otherwise read a sync iterator to the end into memory before sending anything."""
    done = object()
    step = sync_to_async(next, thread_sensitive=True)
    while True:
        chunk = await step(chunks, done)
        if chunk is done:
            return
        yield chunk
