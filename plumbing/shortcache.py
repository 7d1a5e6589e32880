"""A short-lived per-process cache for rows that hot paths look up on every request (a
callback's bot, a manager token and its user's teams).

An entry lives for at most `ttl()` seconds (read at every store; 0 or less turns the cache
off). What makes it safe to cache rows that can change:

- **the owner drops changed entries at once in its own process** with `forget(match)` —
  typically from `post_save` / `post_delete` signals, once at once and once more when the
  transaction commits — and a lookup that raced such a forget does not store what it read
  (every forget moves a generation counter; a load begun before it is not stored);
- **other processes see a change within `ttl()`**: their entries simply expire;
- **`None` is never cached**: a lookup that finds nothing (an unknown id, a revoked token)
  asks the database again next time, so nothing anyone sends can fill the cache;
- optionally (`keep_on_outage=True`) an expired entry is still returned while the database
  cannot be reached (a transient error, `plumbing.db.transient`) — for callers whose next step
  answers an outage honestly anyway.

Values are returned as stored (shared between threads); a caller that hands them out copies
them. Expired entries are pruned when the cache grows past `prune_above` entries. Thread-safe.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable
from typing import Any

from plumbing.db import transient


class ShortLivedCache:
    """key → (expiry on `time.monotonic()`, value), for at most `ttl()` seconds.

    `ttl` is a callable so a setting changed at run time (tests) takes effect at the next
    store. `clock` is `time.monotonic` unless a test passes its own.
    """

    def __init__(
        self,
        ttl: Callable[[], float],
        *,
        keep_on_outage: bool = False,
        prune_above: int = 4096,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._ttl = ttl
        self._keep_on_outage = keep_on_outage
        self._prune_above = prune_above
        self.clock = clock
        self._lock = threading.Lock()
        self._entries: dict[Hashable, tuple[float, Any]] = {}
        self._generation = 0  # moves on every forget: a lookup that raced one stores nothing

    def get(self, key: Hashable, load: Callable[[], Any]) -> Any:
        """The value of `key`: the stored one while its entry lives, else `load()` (stored
        unless it is None, the cache is off, or a `forget` ran meanwhile). Raises what `load`
        raises (nothing is stored then), except that with `keep_on_outage` a transient
        database error returns the expired entry when there is one."""
        now = self.clock()
        entry = self._entries.get(key)
        if entry is not None and entry[0] > now:
            return entry[1]
        generation = self._generation
        try:
            value = load()
        except Exception as exc:
            if entry is None or not self._keep_on_outage or not transient.is_transient(exc):
                raise
            return entry[1]
        lifetime = self._ttl()
        with self._lock:
            if value is None or lifetime <= 0:
                self._entries.pop(key, None)
            elif generation == self._generation:
                if len(self._entries) >= self._prune_above:
                    self._prune(now)
                self._entries[key] = (now + lifetime, value)
        return value

    def forget(self, match: Callable[[Hashable, Any], bool]) -> None:
        """Drop every entry for which `match(key, value)` is true; a lookup running meanwhile
        stores nothing."""
        with self._lock:
            self._generation += 1
            stale = [key for key, (_exp, value) in self._entries.items() if match(key, value)]
            for key in stale:
                del self._entries[key]

    def clear(self) -> None:
        """Drop every entry (tests; a lookup running meanwhile stores nothing)."""
        with self._lock:
            self._generation += 1
            self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)

    def _prune(self, now: float) -> None:
        """Drop expired entries (call under the lock)."""
        for key in [k for k, (expiry, _v) in self._entries.items() if expiry <= now]:
            del self._entries[key]
