"""Run Cardloop commands as real child processes that share the test database (tests only)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import httpx
from django.conf import settings
from django.db import connection


def child_env(**extra: str) -> dict[str, str]:
    """Environment for a child `manage.py` / Daphne process: test settings, the current test
    database (use with `transactional_db`, so the child sees committed rows) and this test
    run's secret directory."""
    db = connection.settings_dict
    if connection.vendor == "sqlite":
        database_url = f"sqlite:///{db['NAME']}"
    else:
        auth = db["USER"] + (f":{db['PASSWORD']}" if db.get("PASSWORD") else "")
        host = db["HOST"] or "127.0.0.1"
        database_url = f"postgres://{auth}@{host}:{db['PORT'] or 5432}/{db['NAME']}"
    return {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "cardloop.settings_test",
        "DATABASE_URL": database_url,
        "CARDLOOP_SECRET_DIR": str(settings.CARDLOOP_SECRET_DIR),
        "NO_PROXY": "127.0.0.1,localhost",
        **extra,
    }


def wait_for_child_sessions_to_end(timeout: float = 15.0) -> None:
    """PostgreSQL: wait until no other session uses the test database (children that were
    killed leave theirs for a moment, and the test database cannot be dropped meanwhile).
    No-op on SQLite."""
    if connection.vendor != "postgresql":
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
            if cursor.fetchone()[0] == 0:
                return
        time.sleep(0.2)


def wait_until_serving(url: str, process, log_path, *, timeout: float = 90.0) -> None:
    """Poll `url` (a full URL, e.g. `…/healthz`) until it answers 200. Fails the test with the
    tail of `log_path` when `process` (a `subprocess.Popen`) exits first, and after `timeout`
    seconds."""
    deadline = time.monotonic() + timeout
    while True:
        assert process.poll() is None, Path(log_path).read_text(errors="replace")[-3000:]
        try:
            if httpx.get(url, timeout=2, trust_env=False).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        assert time.monotonic() < deadline, f"{url} did not answer within {timeout:.0f} s"
        time.sleep(0.3)
