"""The Feishu card of an alert (Card JSON 2.0), built by a pure function: facts in, card out.

The card says what crossed which line: the figure, the threshold, the window, the scope, and a
button that opens the dashboard filtered to the rule's scope and window. A resolved alert's
card (sent as an update of the same card) says when and at which figure it cleared. Texts are
translated in the active language (the service renders in `LANGUAGE_CODE`).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any
from urllib.parse import urlencode

from django.utils.translation import gettext as _

from analytics.alerts.rules import PERCENT_KINDS
from analytics.models import AlertRule
from feedback.envelopes import rfc3339


def format_figure(kind: str, value: float | None) -> str:
    """A figure as people read it: `42.5%` (rates), `3.2×` (growth), `17` (counts)."""
    if value is None:
        return "–"
    if kind in PERCENT_KINDS:
        return f"{value:.1f}%"
    if kind == AlertRule.Kind.NEGATIVES_GROWTH:
        return f"{value:.1f}×"
    return f"{value:.0f}"


def dashboard_link(
    base_url: str, *, start: datetime, end: datetime, team_id, bot_app_id, kind
) -> str:
    """`<base>/dashboard/?from=…&to=…&tz=UTC[&team=…][&bot=…][&semantic=negative]`: the
    dashboard filtered to the rule's scope and the alert's window (negative ratings for the
    negative-count rules)."""
    params: dict[str, Any] = {"from": rfc3339(start), "to": rfc3339(end), "tz": "UTC"}
    if team_id:
        params["team"] = team_id
    if bot_app_id:
        params["bot"] = bot_app_id
    if kind in (AlertRule.Kind.NEGATIVES_ABOVE, AlertRule.Kind.NEGATIVES_GROWTH):
        params["semantic"] = "negative"
    return f"{base_url.rstrip('/')}/dashboard/?{urlencode(params)}"


def alert_card(facts: dict[str, Any]) -> dict[str, Any]:
    """Card JSON 2.0 for an alert.

    `facts`: `rule` (name), `kind` (an `AlertRule.Kind`), `kind_label`, `scope` (team/bot
    name or "all deliveries"), `value`, `threshold`, `window_minutes`, `sample`, `fired_at`
    (datetime), `resolved_at` (datetime or None), `resolved_value`, `link` (dashboard URL).
    Pure: no database, no clock.
    """
    resolved = facts.get("resolved_at") is not None
    kind = facts["kind"]
    title = (_("Resolved: %(rule)s") if resolved else _("Alert: %(rule)s")) % {
        "rule": facts["rule"]
    }
    lines = [
        f"**{facts['kind_label']}**",
        _("Figure: **%(value)s** (threshold %(threshold)s) over the last %(minutes)d minutes")
        % {
            "value": format_figure(kind, facts["value"]),
            "threshold": format_figure(kind, facts["threshold"]),
            "minutes": facts["window_minutes"],
        },
        _("Scope: %(scope)s · sample %(sample)d")
        % {"scope": facts["scope"], "sample": facts["sample"]},
        _("Fired at %(time)s (UTC)") % {"time": facts["fired_at"].strftime("%Y-%m-%d %H:%M")},
    ]
    if resolved:
        lines.append(
            _("Resolved at %(time)s (UTC) at %(value)s")
            % {
                "time": facts["resolved_at"].strftime("%Y-%m-%d %H:%M"),
                "value": format_figure(kind, facts.get("resolved_value")),
            }
        )
    return {
        "schema": "2.0",
        "config": {"update_multi": True},
        "header": {
            "title": {"tag": "plain_text", "content": title},
            "template": "green" if resolved else "red",
        },
        "body": {
            "elements": [
                {"tag": "markdown", "content": "\n".join(lines)},
                {
                    "tag": "button",
                    "text": {"tag": "plain_text", "content": _("Open the dashboard")},
                    "type": "default" if resolved else "primary",
                    "behaviors": [{"type": "open_url", "default_url": facts["link"]}],
                },
            ]
        },
    }
