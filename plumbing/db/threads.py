"""Database connections of long-lived worker threads (callback handler threads, the card-hold
release thread)."""

from __future__ import annotations

import time

from django.db import connections

#: The longest a worker thread keeps one pooled connection across pieces of work (seconds):
#: then it goes back to the pool at the next `hold_pooled_connections`, so the pool's
#: `max_lifetime` and its health check apply to it again even under constant load.
MAX_HOLD_SECONDS = 30.0

#: How long a held connection waits for the work it was held for (seconds). Past it, the
#: next `request_started` (Django's `close_old_connections`) gives it back to the pool and
#: the work takes one from the pool, with the pool's health check: a held connection skips
#: that check (Django's backend leaves it to the pool), so one the server closed meanwhile
#: (a restart, `pg_terminate_backend`, an idle cut-off) is reused only within this window —
#: about the same window as between any health check and the query after it. It also ends
#: the hold of a thread that found no work after all (two threads saw one queued callback).
HELD_FOR_SECONDS = 1.0


def hold_pooled_connections(hold: bool) -> None:
    """Call before the request of a worker thread ends (Django's `request_finished`). `hold`
    (the thread's next piece of work is already waiting): its pooled (PostgreSQL) connections
    stay open for that work — `request_finished` / `request_started` and
    `finish_connections(hold=True)` then close one only when it is unusable (a database error,
    left in a transaction) or the work did not start within `HELD_FOR_SECONDS` — instead of
    going back to the pool to be taken again at once (a checkout and return cost about 0.1 ms
    of CPU a click), for at most `MAX_HOLD_SECONDS` in a row, and only outside a transaction (one left open goes back to the pool, which rolls
    it back). Not `hold`: they go back to the pool at the next close, as always. No-op for
    connections without a pool (SQLite)."""
    now = time.monotonic()
    for connection in connections.all(initialized_only=True):
        if getattr(connection, "pool", None) is None or connection.connection is None:
            continue
        # a transaction left open (a raw BEGIN) goes back to the pool, which rolls it back
        keep = hold and _outside_transaction(connection.connection)
        since = getattr(connection, "cardloop_held_since", None)
        if keep and since is None:
            connection.cardloop_held_since = since = now
        if keep and now - since < MAX_HOLD_SECONDS:
            connection.close_at = now + HELD_FOR_SECONDS
        else:
            connection.cardloop_held_since = None
            connection.close_at = now


def _outside_transaction(raw) -> bool:
    """Whether the psycopg connection `raw` is idle outside a transaction, as libpq last saw it
    (no round trip). Django's own check (`close_if_unusable_or_obsolete`) compares only its
    autocommit flag, so a transaction opened with a raw `BEGIN` would be carried into the next
    piece of work of a thread that keeps the connection."""
    import psycopg  # only pooled (PostgreSQL) connections get here

    return raw.info.transaction_status == psycopg.pq.TransactionStatus.IDLE


def finish_connections(*, hold: bool = False) -> None:
    """A worker thread is done with its database connections for now. Each one is closed — on
    PostgreSQL given back to the process's connection pool (`DATABASE_POOL_*`; a worker
    thread must not keep one, or a fixed set of such threads could hold more than the pool
    has) — except a SQLite connection of a thread that called
    `plumbing.db.sqlite3.base.keep_connections_in_this_thread` (`CONN_MAX_AGE` None there),
    which the backend keeps for the thread's next piece of work unless it saw a database error
    or was left in a transaction. `hold=True` (after `hold_pooled_connections(True)`): a
    pooled connection is kept in the same way, for the work already waiting; without it a
    pooled connection always goes back to the pool."""
    for connection in connections.all(initialized_only=True):
        pooled = getattr(connection, "pool", None) is not None
        if pooled and not hold:
            connection.close()
        elif pooled or connection.close_at is None:  # held: closed if unusable or past its hold
            connection.close_if_unusable_or_obsolete()
        else:
            connection.close()
