"""How the PostgreSQL connection pool (psycopg_pool, Django's `OPTIONS["pool"]`) reconnects.

psycopg_pool retries a failed connection attempt after 1 s, doubling the delay each time
(`AttemptWithBackoff`: 1, 2, 4, 8, 16 … s): after a 30 s outage its next attempt could be 16 s
away, and every request meanwhile waits in the pool's line (measured: normal answers resumed
about 11 s after PostgreSQL returned). Django builds the pool itself, so the delay is set on
psycopg_pool's retry policy class, once per process, by `keep_reconnects_frequent`.

It also health-checks a connection on every checkout (a round trip); `skip_check_of_fresh_returns`
spares the connections given back a moment ago while no database error was seen.
"""

from __future__ import annotations

import threading
import time
import weakref
from typing import Any

#: Seconds between two reconnection attempts of the pool while the database is gone.
RECONNECT_DELAY = 0.5


def keep_reconnects_frequent(delay: float = RECONNECT_DELAY) -> None:
    """Make psycopg_pool retry a failed connection every `delay` seconds (no exponential
    growth; its small jitter stays). A connection attempt to a refused port costs well under a
    millisecond, so a few per second per process cost nothing while the database is down.
    Idempotent; no-op without psycopg_pool."""
    try:
        from psycopg_pool.base import AttemptWithBackoff
    except ImportError:  # pragma: no cover - psycopg_pool is a dependency
        return
    AttemptWithBackoff.INITIAL_DELAY = delay
    AttemptWithBackoff.DELAY_BACKOFF = 1.0


#: A connection given back to the pool less than this many seconds ago, with no database error
#: seen in the process since, is handed out again without psycopg_pool's health check.
RECENT_RETURN = 1.0

_lock = threading.Lock()
_returned: weakref.WeakKeyDictionary[Any, tuple[float, int]] = weakref.WeakKeyDictionary()
_generation = 0


def note_returned(connection) -> None:
    """`connection` (a psycopg connection that saw no database error) is being given back to
    the pool; remember when, under the current error generation."""
    with _lock:
        _returned[connection] = (time.monotonic(), _generation)


def distrust_pooled_connections() -> None:
    """A database error was seen: every connection in the pool gets the full health check
    again before it is handed out (the database may have gone away under all of them)."""
    global _generation
    with _lock:
        _generation += 1


def skip_check_of_fresh_returns() -> None:
    """Have psycopg_pool's health check (`ConnectionPool.check_connection`, which Django passes
    as the pool's `check` when `CONN_HEALTH_CHECKS` is on) skip a connection given back less
    than `RECENT_RETURN` seconds ago when no database error was seen since
    (`distrust_pooled_connections`, called by `plumbing.db.transient.reset_connection` and on
    every failed connect).

    Why: the check is a round trip to PostgreSQL on every checkout, and a callback handler
    thread checks a connection out for every click (it gives it back after each so the
    handler threads can never hold more than the pool has): about a tenth of a click's time
    on PostgreSQL (bench/README.md). A connection that served a request a moment ago is as
    good as checked; if the database vanished in that moment, the first statement fails
    with a transient error, which is answered like any outage ("try again in a moment") and
    distrusts every pooled connection. Idempotent, once per process, like
    `keep_reconnects_frequent`; no-op without psycopg_pool."""
    try:
        from psycopg_pool import ConnectionPool
    except ImportError:  # pragma: no cover - psycopg_pool is a dependency
        return
    original = ConnectionPool.__dict__["check_connection"]
    if getattr(original, "cardloop_skips_fresh", False):
        return
    full_check = original.__func__

    def check_connection(connection) -> None:
        with _lock:
            seen = _returned.get(connection)
        if (
            seen is not None
            and seen[1] == _generation
            and time.monotonic() - seen[0] < RECENT_RETURN
            and not connection.closed
        ):
            return
        full_check(connection)

    check_connection.cardloop_skips_fresh = True  # type: ignore[attr-defined]
    ConnectionPool.check_connection = staticmethod(check_connection)
