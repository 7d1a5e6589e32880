"""A per-process cache of the bots platform callbacks look up (`Bot.objects.for_callback`).

Every Feishu callback needs its bot's row and two of its secrets (the Encrypt Key and the
Verification Token, files under `CARDLOOP_SECRET_DIR`): without the cache that is a query and
two file reads per click. An entry holds the row with its secrets read, for at most
`CARDLOOP_BOT_CACHE_SECONDS` (1.0 s):

- **in this process** a saved or deleted bot (a changed secret saves its new ref) is dropped at
  once and again when the transaction commits (`forget_bot`, from `Bot`'s `post_save` /
  `post_delete` signals), and a lookup that raced such a change does not store what it read;
- **in other processes** the entry expires within `CARDLOOP_BOT_CACHE_SECONDS`: a changed
  secret takes effect everywhere within a second;
- **while the database cannot be reached** (a transient error, `plumbing.db.transient`) an
  expired entry is still used: the click then reaches the dispatcher, whose claim fails, and
  is answered the honest "try again in a moment" toast rather than a bare 503. No change to
  the bot can be stored meanwhile.

Unknown app ids are never cached (anyone can send them). Each lookup returns its own copy of
the row, so a caller changing an attribute changes nothing for the others. Thread-safe.
"""

from __future__ import annotations

import copy
import threading
import time
from collections.abc import Callable
from typing import Any

from django.conf import settings

from plumbing.db import transient


def ttl() -> float:
    """Seconds an entry lives (`settings.CARDLOOP_BOT_CACHE_SECONDS`; 0 turns the cache off)."""
    return float(getattr(settings, "CARDLOOP_BOT_CACHE_SECONDS", 1.0))


class CallbackBots:
    """app_id → (expiry on `time.monotonic()`, bot with its secrets read)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: dict[str, tuple[float, Any]] = {}
        self._generation = 0  # moves on every forget: a lookup that raced one stores nothing

    def get(self, app_id: str, load: Callable[[str], Any], read_secrets: Callable[[Any], None]):
        """The bot of `app_id` (a copy) or None: from the cache while its entry lives, else
        `load(app_id)` (the database) then `read_secrets(bot)` (fills its secrets), stored.
        When `load` fails with a transient database error, the expired entry (if any) is
        returned; otherwise raises what `load` raises (nothing is cached then)."""
        now = time.monotonic()
        entry = self._entries.get(app_id)
        if entry is not None and entry[0] > now:
            return copy.copy(entry[1])
        generation = self._generation
        try:
            bot = load(app_id)
        except Exception as exc:
            if entry is None or not transient.is_transient(exc):
                raise
            # The database is gone: the last row known still identifies the bot, so its click
            # reaches the dispatcher and is told honestly to try again in a moment (its claim
            # cannot be written) instead of a bare 503. Nothing can change the bot meanwhile.
            return copy.copy(entry[1])
        lifetime = ttl()
        if bot is None or lifetime <= 0:
            with self._lock:
                self._entries.pop(app_id, None)
            return bot
        read_secrets(bot)
        with self._lock:
            if generation == self._generation:
                self._entries[app_id] = (now + lifetime, bot)
        return copy.copy(bot)

    def forget_bot(self, pk: Any, app_id: str = "") -> None:
        """Drop every entry of the bot with primary key `pk` (its app id may have changed) and
        the entry of `app_id` (a new bot may take the app id of one deleted)."""
        with self._lock:
            self._generation += 1
            stale = [a for a, (_exp, bot) in self._entries.items() if bot.pk == pk or a == app_id]
            for key in stale:
                del self._entries[key]

    def clear(self) -> None:
        """Drop every entry (tests)."""
        with self._lock:
            self._generation += 1
            self._entries.clear()


#: The process's cache.
CALLBACK_BOTS = CallbackBots()
