"""Run Cardloop commands as real child processes that share the test database (tests only)."""

from __future__ import annotations

import os

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
        "DJANGO_SETTINGS_MODULE": "botadmin.settings_test",
        "DATABASE_URL": database_url,
        "CARDLOOP_SECRET_DIR": str(settings.CARDLOOP_SECRET_DIR),
        "NO_PROXY": "127.0.0.1,localhost",
        **extra,
    }
