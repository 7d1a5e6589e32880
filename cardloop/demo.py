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
    # the address the server will answer at: `make run` sets CARDLOOP_PUBLIC_URL from HOST/PORT
    base = settings.CARDLOOP_PUBLIC_URL.rstrip("/")
    say(f"/metrics token: {token}\n    curl -H 'Authorization: Bearer {token}' {base}/metrics")
