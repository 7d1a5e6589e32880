"""Database connections of long-lived worker threads (callback handler threads, the card-hold
release thread)."""

from __future__ import annotations

from django.db import connections


def finish_connections() -> None:
    """A worker thread is done with its database connections for now. Each one is closed — on
    PostgreSQL given back to the process's connection pool (`DATABASE_POOL_*`; a worker
    thread must not keep one, or a fixed set of such threads could hold more than the pool
    has) — except a SQLite connection of a thread that called
    `plumbing.db.sqlite3.base.keep_connections_in_this_thread` (`CONN_MAX_AGE` None there),
    which the backend keeps for the thread's next piece of work unless it saw a database error
    or was left in a transaction."""
    for connection in connections.all(initialized_only=True):
        if connection.close_at is None:
            connection.close_if_unusable_or_obsolete()
        else:
            connection.close()
