"""Django's PostgreSQL backend that knows when the database is gone (`plumbing.db.outage`).

`ENGINE = "plumbing.db.postgresql"` (`cardloop/settings.py` sets it for a `postgres://`
`DATABASE_URL`). Four additions to Django's backend, through psycopg_pool's public API:

- every connection the pool opens (and every connection opened without the pool,
  `DATABASE_POOL=false`) is made by `watched_connection_class(alias)`, whose `connect()` tells
  the outage state that a connect failed (`outage.connect_failed`) or succeeded
  (`outage.connected`). psycopg_pool's `connection_class` argument is documented:
  https://www.psycopg.org/psycopg3/docs/api/pool.html#psycopg_pool.ConnectionPool
- while an outage is known, `get_new_connection` raises `outage.DatabaseUnavailable` at once
  instead of queueing for the pool (`DATABASE_POOL_TIMEOUT`, 10 s);
- each failed connect fails the requests already waiting in the pool's line
  (`_fail_pool_waiters`, the one place that touches psycopg_pool's internals), and the
  outage's reconnect probe opens (and closes) a fresh connection every
  `DATABASE_PROBE_INTERVAL` seconds until one succeeds;
- `_close` notes when a healthy connection is given back to the pool
  (`plumbing.db.pool.note_returned`), so one given back a moment ago is handed out without
  the health-check round trip (`plumbing.db.pool.skip_check_of_fresh_returns`); a failed
  connect distrusts every pooled connection again.

A busy pool (all connections in use, the database fine) is untouched: its requests wait their
turn and, past `DATABASE_POOL_TIMEOUT`, get psycopg_pool's `PoolTimeout` (answered 503 `busy`).
"""

from __future__ import annotations

import logging
import threading
from typing import Any

import psycopg
from django.db import DEFAULT_DB_ALIAS
from django.db.backends.postgresql import base

from plumbing.db import outage
from plumbing.db import pool as pool_rules

log = logging.getLogger(__name__)

_CLASSES: dict[str, type[psycopg.Connection]] = {}
_CLASSES_LOCK = threading.Lock()


def watched_connection_class(alias: str) -> type[psycopg.Connection]:
    """The psycopg `Connection` subclass whose `connect()` reports to `alias`'s outage state
    (one class per alias, made once)."""
    with _CLASSES_LOCK:
        cls = _CLASSES.get(alias)
        if cls is None:

            class WatchedConnection(psycopg.Connection):
                database_alias = alias

                @classmethod
                def connect(cls, *args: Any, **kwargs: Any):
                    try:
                        conn = super().connect(*args, **kwargs)
                    except psycopg.Error as exc:
                        outage.connect_failed(cls.database_alias, exc)
                        raise
                    outage.connected(cls.database_alias)
                    return conn

            WatchedConnection.__qualname__ = f"WatchedConnection[{alias}]"
            cls = _CLASSES[alias] = WatchedConnection
        return cls


def _fail_pool_waiters(pool, exc: BaseException) -> int:
    """Fail every request waiting in `pool`'s line with `outage.DatabaseUnavailable`; returns
    how many there were.

    Why internals: psycopg_pool has no public call that wakes its waiters with an error short
    of `close()`, and without it a request that entered the line just before the outage became
    known waits the whole `DATABASE_POOL_TIMEOUT` (10 s) and then drains after the database
    returned, delaying the requests behind it (bench/README.md, "Faults"). This does what the
    pool's own `close()` does to its waiters (psycopg_pool 3.2–3.3: `_lock`, `_waiting`,
    `WaitingClient.fail`); if those names change, it logs once and fails nobody (the waiters
    then time out as before)."""
    try:
        lock, waiting = pool._lock, pool._waiting
    except AttributeError:  # pragma: no cover - a psycopg_pool without these internals
        log.warning("psycopg_pool has no _waiting line; its waiters are not failed at once")
        return 0
    with lock:
        clients = list(waiting)
        waiting.clear()
    error = outage.DatabaseUnavailable(f"the database is unavailable ({type(exc).__name__})")
    return sum(1 for client in clients if client.fail(error))


def _on_connect_failed(alias: str):
    def fail_waiters(exc: BaseException) -> None:
        pool_rules.distrust_pooled_connections()
        pool = base.DatabaseWrapper._connection_pools.get(alias)
        if pool is not None:
            failed = _fail_pool_waiters(pool, exc)
            if failed:
                log.info(
                    "database %r: %d requests waiting for the pool failed at once", alias, failed
                )

    return fail_waiters


def _probe(settings_dict: dict, alias: str) -> None:
    """One fresh connection to the database, closed at once; raises when it fails."""
    params = base.DatabaseWrapper(settings_dict, alias).get_connection_params()
    params.pop("cursor_factory", None)
    watched_connection_class(alias).connect(**params).close()


_WATCHED: set[str] = set()


class DatabaseWrapper(base.DatabaseWrapper):
    """`django.db.backends.postgresql` whose connects feed `plumbing.db.outage` and whose new
    connections fail at once (`outage.DatabaseUnavailable`) while an outage is known."""

    def __init__(self, settings_dict, alias=DEFAULT_DB_ALIAS):
        super().__init__(settings_dict, alias)
        pool = self.settings_dict["OPTIONS"].get("pool")
        if pool and alias != base.NO_DB_ALIAS:
            options = {} if pool is True else pool
            if "connection_class" not in options:
                options = {**options, "connection_class": watched_connection_class(alias)}
            self.settings_dict["OPTIONS"]["pool"] = options
        if alias not in _WATCHED and alias != base.NO_DB_ALIAS:
            _WATCHED.add(alias)
            settings = self.settings_dict
            outage.watch(
                alias,
                probe=lambda: _probe(settings, alias),
                on_down=_on_connect_failed(alias),
            )

    def _close(self):
        """Django's, but a pooled connection given back without a database error seen on it is
        noted (`plumbing.db.pool.note_returned`): handed out again within
        `plumbing.db.pool.RECENT_RETURN` it skips the health-check round trip. Noted here, in
        the returning thread, and not through psycopg_pool's `reset` callback, which would
        move every return to the pool's worker thread."""
        if self.pool and self.connection is not None and not self.errors_occurred:
            pool_rules.note_returned(self.connection)
        return super()._close()

    def get_new_connection(self, conn_params):
        """Django's, but raises `outage.DatabaseUnavailable` at once while an outage is known;
        without the pool the connect itself reports to the outage state."""
        outage.raise_if_down(self.alias)
        if self.pool:
            return super().get_new_connection(conn_params)
        try:
            connection = super().get_new_connection(conn_params)
        except psycopg.OperationalError as exc:
            outage.connect_failed(self.alias, exc)
            raise
        outage.connected(self.alias)
        return connection
