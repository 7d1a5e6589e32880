"""How the PostgreSQL connection pool (psycopg_pool, Django's `OPTIONS["pool"]`) reconnects.

psycopg_pool retries a failed connection attempt after 1 s, doubling the delay each time
(`AttemptWithBackoff`: 1, 2, 4, 8, 16 … s): after a 30 s outage its next attempt could be 16 s
away, and every request meanwhile waits in the pool's line (measured: normal answers resumed
about 11 s after PostgreSQL returned). Django builds the pool itself, so the delay is set on
psycopg_pool's retry policy class, once per process, by `keep_reconnects_frequent`.
"""

from __future__ import annotations

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
