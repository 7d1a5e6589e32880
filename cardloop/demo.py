"""The project's part of `manage.py seed_demo` (registered as a seeder in `CardloopConfig`)."""

from __future__ import annotations

from collections.abc import Callable

from django.conf import settings


def print_metrics_token(say: Callable[[str], None]) -> None:
    """Print how to scrape `/metrics` with the token the server uses (DEBUG only: the demo's
    token is derived from the development secret key; production sets its own and never sees
    it printed)."""
    if not settings.DEBUG:
        say("/metrics token: not printed (DEBUG is off; set CARDLOOP_METRICS_TOKEN)")
        return
    token = settings.CARDLOOP_METRICS_TOKEN
    say(
        f"/metrics token: {token}\n"
        f"    curl -H 'Authorization: Bearer {token}' http://127.0.0.1:8000/metrics"
    )
