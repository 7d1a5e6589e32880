"""Panel presence and pushes — MINIMAL PLACEHOLDER written on branch `asks`.

The `panel` branch (issue 7 parts 4–5: WebSocket panel, presence, desktop tokens) replaces
this whole file with the real implementation; keep the two signatures below. Until then no
user has a connected panel and pushes go nowhere, so asks are offered on the progress card only.
"""

from __future__ import annotations

from typing import Any


def is_connected(bot, open_id: str) -> bool:
    """Whether `open_id` has a live panel for `bot` in any process. Placeholder: always False
    (the panel branch replaces it with stored presence)."""
    return False


def push(bot, open_id: str, message: dict[str, Any]) -> None:
    """Send `message` (`asks.panel_message` / `asks.cancelled_message`) to every live panel of
    `open_id` for `bot`. Never raises; call it from `transaction.on_commit`. Placeholder: does
    nothing (the panel branch replaces it with a channel-layer group send)."""
    return None
