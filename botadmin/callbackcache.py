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
the row, so a caller changing an attribute changes nothing for the others. Thread-safe; the
expiry, forget and outage rules are `plumbing.shortcache`'s.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from django.conf import settings

from plumbing.shortcache import ShortLivedCache


def ttl() -> float:
    """Seconds an entry lives (`settings.CARDLOOP_BOT_CACHE_SECONDS`; 0 turns the cache off)."""
    return float(getattr(settings, "CARDLOOP_BOT_CACHE_SECONDS", 1.0))


class CallbackBots:
    """app_id → bot with its secrets read (a `ShortLivedCache` that keeps entries on outage)."""

    def __init__(self) -> None:
        self._cache = ShortLivedCache(ttl, keep_on_outage=True)

    def get(self, app_id: str, load: Callable[[str], Any], read_secrets: Callable[[Any], None]):
        """The bot of `app_id` (a copy) or None: from the cache while its entry lives, else
        `load(app_id)` (the database) then `read_secrets(bot)` (fills its secrets), stored.
        When `load` fails with a transient database error, the expired entry (if any) is
        returned; otherwise raises what `load` raises (nothing is cached then)."""

        def load_with_secrets():
            bot = load(app_id)
            if bot is not None and ttl() > 0:
                read_secrets(bot)
            return bot

        # The database is gone (keep_on_outage): the last row known still identifies the bot,
        # so its click reaches the dispatcher and is told honestly to try again in a moment
        # (its claim cannot be written) instead of a bare 503.
        bot = self._cache.get(app_id, load_with_secrets)
        return None if bot is None else copy.copy(bot)

    def forget_bot(self, pk: Any, app_id: str = "") -> None:
        """Drop every entry of the bot with primary key `pk` (its app id may have changed) and
        the entry of `app_id` (a new bot may take the app id of one deleted)."""
        self._cache.forget(lambda key, bot: bot.pk == pk or key == app_id)

    def clear(self) -> None:
        """Drop every entry (tests)."""
        self._cache.clear()


#: The process's cache.
CALLBACK_BOTS = CallbackBots()
