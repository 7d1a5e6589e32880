"""What this process knows of its database being gone: the known-outage state, per alias.

Without it, every request that arrives while PostgreSQL is gone waits in the connection
pool's line (`DATABASE_POOL_TIMEOUT`, 10 s), and every SQLite writer behind a lock held by
another process waits SQLite's busy timeout; when the database returns they drain first and
the requests behind them miss their budget for seconds (bench/README.md, "Faults").

The state (one per database alias, in memory, per process):

- **set** only by a failed attempt to reach the database: a PostgreSQL connect that failed
  (`connect_failed`: `plumbing.db.postgresql` reports every connect of the pool and of
  `DATABASE_POOL=false`), or a SQLite write lock not obtainable within `DATABASE_LOCK_WAIT`
  seconds (`plumbing.db.sqlite3`). A busy pool (every connection in use) never sets it: that
  is load, not an outage;
- **while set**, a request that needs a connection (PostgreSQL) or the write lock (SQLite)
  raises `DatabaseUnavailable` at once instead of waiting (`raise_if_down`); the backend's
  `on_down` hooks run on each failed attempt (PostgreSQL: the pool's waiters are failed);
- **cleared** by a successful attempt: any connect that succeeded (`connected`), above all the
  reconnect probe this module runs in a daemon thread every `DATABASE_PROBE_INTERVAL` seconds
  (0.5) while the state is set, so the first request after the database returns finds it
  cleared without any request having to try first.

Model-free, no Django models imported; thread-safe.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from django.db import utils as db_utils

log = logging.getLogger(__name__)

#: Seconds between two reconnect probes while an outage is known (`DATABASE_PROBE_INTERVAL`).
DEFAULT_PROBE_INTERVAL = 0.5


class DatabaseUnavailable(db_utils.OperationalError):
    """Raised instead of waiting for a connection (or SQLite's write lock) while an outage of
    the database is known. A transient error (`plumbing.db.transient.is_transient`): nothing
    was done, the same work may be tried again once the database is back."""


@dataclass
class _State:
    down: bool = False
    since: float = 0.0  # time.monotonic() when it was set
    reason: str = ""  # the class name of the error that set it (never its message)
    probe: Callable[[], None] | None = None
    on_down: list[Callable[[BaseException], None]] = field(default_factory=list)
    prober: threading.Thread | None = None
    #: increases each time the state is set or cleared (tests wait on it)
    changes: int = 0


_STATES: dict[str, _State] = {}
_LOCK = threading.Condition()


def _state(alias: str) -> _State:
    state = _STATES.get(alias)
    if state is None:
        state = _STATES.setdefault(alias, _State())
    return state


def probe_interval() -> float:
    """Seconds between reconnect probes (`settings.DATABASE_PROBE_INTERVAL`, default 0.5)."""
    from django.conf import settings

    return float(getattr(settings, "DATABASE_PROBE_INTERVAL", DEFAULT_PROBE_INTERVAL))


def watch(alias: str, *, probe: Callable[[], None], on_down: Callable | None = None) -> None:
    """Register how to reach `alias`'s database: `probe()` makes one fresh attempt (a
    connect, or taking SQLite's write lock and letting it go) and raises when it fails;
    `on_down(exc)` (optional) runs after each failed attempt (`connect_failed`). Called by the
    database backends; a later call replaces the probe and adds `on_down` once."""
    with _LOCK:
        state = _state(alias)
        state.probe = probe
        if on_down is not None and on_down not in state.on_down:
            state.on_down.append(on_down)


def is_down(alias: str = "default") -> bool:
    """True while an outage of `alias`'s database is known to this process."""
    state = _STATES.get(alias)
    return state is not None and state.down


def raise_if_down(alias: str = "default") -> None:
    """Raise `DatabaseUnavailable` while an outage of `alias` is known; otherwise return."""
    state = _STATES.get(alias)
    if state is not None and state.down:
        raise DatabaseUnavailable(
            f"the database {alias!r} is known to be unavailable since "
            f"{time.monotonic() - state.since:.1f} s ({state.reason})"
        )


def connect_failed(alias: str, exc: BaseException) -> None:
    """A fresh attempt to reach `alias`'s database failed with `exc`: the outage is known from
    now on (the reconnect probe starts once per outage). The `on_down` hooks run on every
    failed attempt, not only the first: a request that was already past `raise_if_down` when
    the outage became known (PostgreSQL: inside the pool's own check-and-retry loop) may queue
    after the first attempt failed, and the next failed attempt fails it."""
    with _LOCK:
        state = _state(alias)
        hooks = list(state.on_down)
        first = not state.down
        if first:
            state.down = True
            state.since = time.monotonic()
            state.reason = type(exc).__name__
            state.changes += 1
            if state.probe is not None and state.prober is None:
                state.prober = threading.Thread(
                    target=_probe_until_up, args=(alias,), name=f"db-probe-{alias}", daemon=True
                )
                state.prober.start()
            _LOCK.notify_all()
    if first:
        log.warning(
            "database %r unreachable (%s): requests fail at once until a probe reconnects",
            alias,
            type(exc).__name__,
        )
    for hook in hooks:
        try:
            hook(exc)
        except Exception:  # noqa: BLE001 - a hook must never hide the outage itself
            log.exception("database %r: an outage hook failed", alias)


def connected(alias: str) -> None:
    """A fresh attempt to reach `alias`'s database succeeded: the known outage (if any) ends."""
    state = _STATES.get(alias)
    if state is None or not state.down:
        return
    with _LOCK:
        if not state.down:
            return
        seconds = time.monotonic() - state.since
        state.down = False
        state.changes += 1
        _LOCK.notify_all()
    log.warning("database %r reachable again after %.1f s", alias, seconds)


def _probe_until_up(alias: str) -> None:
    """The reconnect probe: one attempt every `probe_interval()` seconds until the state is
    cleared (by this probe or by another connect that succeeded)."""
    state = _state(alias)
    while True:
        with _LOCK:
            if not state.down:
                state.prober = None  # under the lock: a new outage starts a new probe
                return
            probe = state.probe
        time.sleep(probe_interval())
        if probe is None or not state.down:
            continue
        try:
            probe()
        except Exception as exc:  # noqa: BLE001 - any failure: still down
            log.debug("database %r probe failed: %s", alias, type(exc).__name__)
            continue
        connected(alias)


def changes(alias: str = "default") -> int:
    """How many times `alias`'s state was set or cleared in this process (for tests and
    diagnostics: wait until it moves instead of sleeping)."""
    state = _STATES.get(alias)
    return 0 if state is None else state.changes


def wait_for(alias: str, *, down: bool, timeout: float) -> bool:
    """Block until `alias` is known down (`down=True`) or not, at most `timeout` seconds;
    True when it is so. For tests and tools."""
    deadline = time.monotonic() + timeout
    with _LOCK:
        while is_down(alias) != down:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            _LOCK.wait(left)
    return True


def reset(alias: str = "default") -> None:
    """Forget a known outage of `alias` without a probe (tests that cut and heal on purpose)."""
    connected(alias)
