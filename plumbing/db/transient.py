"""Which database errors are transient: the database was unreachable, busy or chose a victim,
and the same work may succeed if tried again. Nothing about the request is wrong.

`is_transient(exc)` looks at `exc` and its causes (`__cause__` / `__context__`: Django wraps
the driver's exception in its own `OperationalError` / `InterfaceError`):

- a known outage (`plumbing.db.outage.DatabaseUnavailable`: the request failed at once);
- connection lost or refused, the pool's wait for a connection timed out
  (`psycopg_pool.PoolTimeout`), a closed connection used again (`InterfaceError`);
- SQLSTATE class 08 (connection exception), class 40 (transaction rollback: serialization
  failure 40001, deadlock 40P01), 57P01–57P05 (administrator / crash shutdown, cannot connect
  now, idle session timeout), 53300 (too many connections); PostgreSQL's error codes:
  https://www.postgresql.org/docs/current/errcodes-appendix.html
- SQLite "database is locked" / "database table is locked" / "busy" (SQLITE_BUSY, SQLITE_LOCKED:
  https://www.sqlite.org/rescode.html#busy).

An error that is not transient (a constraint, bad SQL, a bug) is the work's own failure and
retrying it changes nothing. Callers use this to retry bounded with `backoff`, to answer 503
instead of 500 and never to store a transient failure as an answer. `is_busy(exc)` tells the
one transient error that is load, not an outage: the pool's wait timed out while no outage is
known (every connection was in use) — answered 503 `busy` instead of `database_unavailable`.
"""

from __future__ import annotations

import sqlite3

from django.db import utils as db_utils

from plumbing.db import outage

#: SQLSTATE prefixes of transient PostgreSQL errors (see the module docstring).
TRANSIENT_SQLSTATE_PREFIXES = ("08", "40", "57P", "53300")
#: Message fragments of transient SQLite errors (sqlite3 reports them as OperationalError).
SQLITE_TRANSIENT_MESSAGES = ("database is locked", "database table is locked", "busy")

try:  # PostgreSQL only; SQLite-only installs still import this module
    import psycopg
    from psycopg_pool import PoolTimeout
except ImportError:  # pragma: no cover - psycopg is a dependency
    psycopg = None
    PoolTimeout = None


def _causes(exc: BaseException):
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__


def _sqlstate(exc: BaseException) -> str:
    state = getattr(exc, "sqlstate", None) or getattr(exc, "pgcode", None)
    return state if isinstance(state, str) else ""


def is_transient(exc: BaseException) -> bool:
    """True when `exc` (any exception) is a transient database error: the same work may
    succeed when tried again once the database is back or free (see the module docstring).
    Pure; never raises."""
    for err in _causes(exc):
        if isinstance(err, outage.DatabaseUnavailable):
            return True
        if PoolTimeout is not None and isinstance(err, PoolTimeout):
            return True
        state = _sqlstate(err)
        if state:
            return state.startswith(TRANSIENT_SQLSTATE_PREFIXES)
        if isinstance(err, sqlite3.OperationalError):
            message = str(err).lower()
            return any(fragment in message for fragment in SQLITE_TRANSIENT_MESSAGES)
        if psycopg is not None and isinstance(
            err, psycopg.OperationalError | psycopg.InterfaceError
        ):
            return True  # no SQLSTATE: the client lost or never had the connection
        if isinstance(err, db_utils.InterfaceError):
            return True  # a closed connection used again
        if isinstance(err, ConnectionError | TimeoutError):
            return True
    return False


def is_busy(exc: BaseException, alias: str = "default") -> bool:
    """True when `exc` is the connection pool's wait timing out (`psycopg_pool.PoolTimeout`)
    while no outage of `alias` is known (`plumbing.db.outage`): the database is up and every
    connection was in use. Pure apart from reading the outage state; never raises."""
    if outage.is_down(alias) or PoolTimeout is None:
        return False
    for err in _causes(exc):
        if isinstance(err, outage.DatabaseUnavailable):
            return False
        if isinstance(err, PoolTimeout):
            return True
    return False


def backoff(attempt: int, *, base: float = 0.2, cap: float = 2.0) -> float:
    """Seconds to wait before retry number `attempt` (1, 2, …): `base` doubled per attempt, at
    most `cap`."""
    return min(cap, base * (2 ** max(0, attempt - 1)))


def reset_connection(alias: str = "default") -> None:
    """After a transient error: close `alias`'s connection of this thread (a pooled one goes
    back to the pool, which checks it before handing it out again), so the next try opens a
    fresh one. Left alone inside an atomic block, whose owner must roll back first."""
    from django.db import connections

    from plumbing.db.pool import distrust_pooled_connections

    distrust_pooled_connections()  # the pooled connections are checked again before use
    connection = connections[alias]
    if not connection.in_atomic_block:
        try:
            connection.close()
        except Exception:  # noqa: BLE001 - a dead connection may fail to close; it is gone
            connection.connection = None
