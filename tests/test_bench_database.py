"""`bench/benchdb.ensure_database`: the benches create the PostgreSQL database their
DATABASE_URL names on a fresh machine, instead of failing after the pool's 10 s timeout."""

from __future__ import annotations

import importlib.util
import socket
import uuid
from pathlib import Path

import psycopg
import pytest
from django.conf import settings

ROOT = Path(__file__).resolve().parents[1]


def _benchdb():
    spec = importlib.util.spec_from_file_location("benchdb", ROOT / "bench" / "benchdb.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _server_url(name: str, port: int | None = None) -> str:
    db = settings.DATABASES["default"]
    user = db.get("USER") or "postgres"
    host = db.get("HOST") or "127.0.0.1"
    return f"postgres://{user}@{host}:{port or db.get('PORT') or 5432}/{name}"


def _maintenance():
    """An autocommit connection to the server's `postgres` database (as createdb uses)."""
    db = settings.DATABASES["default"]
    return psycopg.connect(
        dbname="postgres",
        host=db.get("HOST") or "127.0.0.1",
        port=db.get("PORT") or 5432,
        user=db.get("USER") or "postgres",
        autocommit=True,
    )


def _exists(name: str) -> bool:
    with _maintenance() as conn:
        found = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone()
        return found is not None


def _drop(name: str) -> None:
    with _maintenance() as conn:
        conn.execute(
            psycopg.sql.SQL("DROP DATABASE IF EXISTS {}").format(psycopg.sql.Identifier(name))
        )


@pytest.mark.postgres
def test_a_missing_bench_database_is_created_once_and_then_left_alone(capsys):
    name = f"cl_bench_test_{uuid.uuid4().hex[:10]}"
    benchdb = _benchdb()
    try:
        assert not _exists(name)
        assert benchdb.ensure_database(_server_url(name)) is True
        assert _exists(name)
        assert f"created PostgreSQL database '{name}'" in capsys.readouterr().out
        assert benchdb.ensure_database(_server_url(name)) is False
        assert capsys.readouterr().out == ""
    finally:
        _drop(name)


@pytest.mark.postgres
def test_an_unreachable_server_exits_with_one_line_naming_the_database():
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(SystemExit) as exc:
        _benchdb().ensure_database(_server_url("cl_bench_nowhere", port=port))
    message = str(exc.value)
    assert message.startswith("cannot prepare PostgreSQL database 'cl_bench_nowhere': ")
    assert "\n" not in message


def test_sqlite_and_unset_urls_are_left_to_the_engine(tmp_path):
    benchdb = _benchdb()
    target = tmp_path / "bench.sqlite3"
    assert benchdb.ensure_database(f"sqlite:///{target}") is False
    assert not target.exists()
    assert benchdb.ensure_database(None) is False
    assert benchdb.ensure_database("") is False
