"""The webhook outbox: one row per (event, destination), written with the event.

(Filled in by the outbox issue: fan-out rules, the worker, retries, SSRF guard.)
"""

from __future__ import annotations

from typing import Any


def fan_out(event, body: dict[str, Any], *, destination_ids: list[int] | None = None) -> int:
    """Insert one pending OutboxItem per destination that takes `event`; returns how many."""
    return 0
