"""PostgreSQL prepared statements (`DATABASE_PREPARED_STATEMENTS`, on by default): a statement a
connection runs often is prepared, and the click path's hand-written SELECTs name their columns
(`plumbing.db.rows.columns_of`) so a prepared one survives a migration that adds a column."""

from __future__ import annotations

import psycopg
import pytest
from django.conf import settings
from django.db import connection
from django.db.utils import NotSupportedError

from botadmin.models import Bot
from plumbing.db.rows import columns_of, quoted_table, select_one

pytestmark = [pytest.mark.postgres, pytest.mark.django_db]


def _often(sql: str, params: list) -> Bot | None:
    """Run `sql` more often than the connection's prepare threshold; the last result."""
    found = None
    for _ in range(settings.DATABASES["default"]["OPTIONS"]["prepare_threshold"] + 2):
        found = select_one(Bot, sql, params)
    return found


def _prepared(fragment: str) -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_prepared_statements WHERE statement LIKE %s",
            [f"%{fragment}%"],
        )
        return cursor.fetchone()[0]


def test_prepared_statements_are_on_by_default():
    options = settings.DATABASES["default"]["OPTIONS"]
    assert options["server_side_binding"] is True
    assert options["prepare_threshold"] >= 1


def test_every_execution_gets_a_plan_for_its_own_values():
    """A generic plan (one for every value of a prepared statement) made the analytics' date
    range queries several times slower; each execution is planned for its values."""
    with connection.cursor() as cursor:
        cursor.execute("SHOW plan_cache_mode")
        assert cursor.fetchone()[0] == "force_custom_plan"


def test_the_callback_bot_lookup_is_prepared_once_it_ran_a_few_times(make_bot):
    bot = make_bot()
    assert _prepared("/* prepared-lookup-probe */") == 0
    sql = (
        f"SELECT {columns_of(Bot)} FROM {quoted_table(Bot)} "  # noqa: S608 - ours
        "WHERE app_id = %s /* prepared-lookup-probe */ LIMIT 1"
    )
    assert _often(sql, [bot.app_id]).pk == bot.pk
    assert _prepared("/* prepared-lookup-probe */") == 1


@pytest.mark.django_db(transaction=True)
def test_a_prepared_lookup_with_named_columns_still_works_after_a_column_is_added(make_bot):
    """The migration runs on another connection, as a deploy's `migrate` does while the web
    processes keep their pooled connections (psycopg forgets its prepared statements only
    when its own connection runs DDL)."""
    bot = make_bot()
    table = quoted_table(Bot)
    named = f"SELECT {columns_of(Bot)} FROM {table} WHERE app_id = %s LIMIT 1"  # noqa: S608
    star = f"SELECT * FROM {table} WHERE app_id = %s LIMIT 1"  # noqa: S608 - the old way
    assert _often(named, [bot.app_id]).pk == bot.pk
    assert _often(star, [bot.app_id]).pk == bot.pk
    params = connection.get_connection_params()
    params.pop("cursor_factory", None)
    params.pop("context", None)
    with psycopg.connect(**{**params, "autocommit": True}) as migrate:
        migrate.execute(f"ALTER TABLE {table} ADD COLUMN prepared_probe integer")  # noqa: S608
        try:
            assert select_one(Bot, named, [bot.app_id]).pk == bot.pk
            with pytest.raises(NotSupportedError, match="cached plan must not change"):
                select_one(Bot, star, [bot.app_id])
        finally:
            migrate.execute(f"ALTER TABLE {table} DROP COLUMN prepared_probe")  # noqa: S608


def test_columns_of_names_every_concrete_column_with_the_alias():
    listed = columns_of(Bot, "b").split(", ")
    assert listed == [f'b."{f.column}"' for f in Bot._meta.concrete_fields]
    assert columns_of(Bot) == ", ".join(f'"{f.column}"' for f in Bot._meta.concrete_fields)
