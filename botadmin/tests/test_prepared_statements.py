"""PostgreSQL prepared statements (`DATABASE_PREPARED_STATEMENTS`, off by default): what the
setting turns on, and why the click path's hand-written SELECTs name their columns
(`plumbing.db.rows.columns_of`): a prepared statement with named columns survives a migration
that adds a column, a prepared `SELECT *` does not."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import psycopg
import pytest
from django.conf import settings
from django.db import connection

from botadmin.models import Bot
from plumbing.db.rows import columns_of, quoted_table

_SHOW_OPTIONS = (
    "import django; django.setup(); from django.conf import settings; import json; "
    "o = settings.DATABASES['default'].get('OPTIONS', {}); "
    "print(json.dumps({k: o.get(k) for k in "
    "('server_side_binding', 'prepare_threshold', 'options')}))"
)


def _options(**env: str) -> dict:
    """The PostgreSQL OPTIONS `cardloop.settings` builds with `env` added."""
    child = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("DATABASE_PREPARED", "DATABASE_PLAN", "DATABASE_PREPARE_"))
    }
    child.update(
        DJANGO_SETTINGS_MODULE="cardloop.settings",
        DJANGO_DEBUG="true",
        DATABASE_URL="postgres://postgres@127.0.0.1:5432/cardloop_options_probe",
        **env,
    )
    out = subprocess.run(
        [sys.executable, "-c", _SHOW_OPTIONS],
        env=child,
        capture_output=True,
        text=True,
        check=True,
        cwd=settings.BASE_DIR,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_prepared_statements_are_off_unless_asked_for():
    assert _options() == {"server_side_binding": None, "prepare_threshold": None, "options": None}


def test_asked_for_they_bind_on_the_server_and_plan_each_execution_for_its_values():
    assert _options(DATABASE_PREPARED_STATEMENTS="true") == {
        "server_side_binding": True,
        "prepare_threshold": 5,
        "options": "-c plan_cache_mode=force_custom_plan",
    }
    tuned = _options(
        DATABASE_PREPARED_STATEMENTS="true",
        DATABASE_PREPARE_THRESHOLD="2",
        DATABASE_PLAN_CACHE_MODE="auto",
    )
    assert tuned["prepare_threshold"] == 2
    assert tuned["options"] == "-c plan_cache_mode=auto"


def test_columns_of_names_every_concrete_column_with_the_alias():
    listed = columns_of(Bot, "b").split(", ")
    assert listed == [f'b."{f.column}"' for f in Bot._meta.concrete_fields]
    assert columns_of(Bot) == ", ".join(f'"{f.column}"' for f in Bot._meta.concrete_fields)


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_prepared_select_with_named_columns_survives_a_column_added_by_a_migration(make_bot):
    """The migration runs on another connection, as a deploy's `migrate` does while the web
    processes keep their pooled connections (psycopg forgets its prepared statements only
    when its own connection runs DDL)."""
    bot = make_bot()
    table = quoted_table(Bot)
    named = f"SELECT {columns_of(Bot)} FROM {table} WHERE app_id = %s LIMIT 1"  # noqa: S608
    star = f"SELECT * FROM {table} WHERE app_id = %s LIMIT 1"  # noqa: S608 - the old way
    params = connection.get_connection_params()
    for key in ("cursor_factory", "context", "prepare_threshold", "pool"):
        params.pop(key, None)
    with (
        psycopg.connect(**params, autocommit=True) as web,
        psycopg.connect(**params, autocommit=True) as migrate,
    ):
        for sql in (named, star):
            assert web.execute(sql, [bot.app_id], prepare=True).fetchone()[0] == bot.pk
        migrate.execute(f"ALTER TABLE {table} ADD COLUMN prepared_probe integer")  # noqa: S608
        try:
            assert web.execute(named, [bot.app_id], prepare=True).fetchone()[0] == bot.pk
            with pytest.raises(psycopg.errors.FeatureNotSupported, match="cached plan"):
                web.execute(star, [bot.app_id], prepare=True)
        finally:
            migrate.execute(f"ALTER TABLE {table} DROP COLUMN prepared_probe")  # noqa: S608
