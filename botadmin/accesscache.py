"""Per-process caches of what every manager API request looks up before its real work: the
manager token (`ManagerToken.objects.for_request`) and the teams of a user
(`TeamMembership.objects.team_ids_of`, the scope of analytics and reviews).

Without them each request with `Authorization: Token cmk_…` costs a token query (joined to its
user) and a membership query. An entry lives for at most `CARDLOOP_ACCESS_CACHE_SECONDS`
(1.0 s; 0 turns both caches off):

- **in this process** a saved or deleted token (revoking saves `revoked_at`), user (deactivated,
  made superuser, deleted) or team membership drops the entries it touches at once and again
  when the transaction commits (`forget_token`, `forget_user`, `forget_memberships`, from signals in
  `botadmin.models`): a revoked token is refused and a removed member loses the team on the
  next request;
- **in other processes**, and for changes made without signals (`QuerySet.update`, SQL), the
  entries expire within `CARDLOOP_ACCESS_CACHE_SECONDS`.

Tokens are keyed by their SHA-256 (the hash stored in the row), never by the raw value; an
unknown or revoked token is never cached. Rules of expiry and races: `plumbing.shortcache`.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings

from plumbing.shortcache import ShortLivedCache


def ttl() -> float:
    """Seconds an entry lives (`settings.CARDLOOP_ACCESS_CACHE_SECONDS`; 0 turns it off)."""
    return float(getattr(settings, "CARDLOOP_ACCESS_CACHE_SECONDS", 1.0))


#: SHA-256 hex of a raw manager token → its active `ManagerToken` row, user joined (shared:
#: `ManagerToken.objects.for_request` hands out copies).
MANAGER_TOKENS = ShortLivedCache(ttl)
#: user pk → frozenset of the ids of the teams the user is a member of.
TEAM_IDS = ShortLivedCache(ttl)


def forget_token(pk: Any) -> None:
    """Drop the cached token with primary key `pk`."""
    MANAGER_TOKENS.forget(lambda _key, token: token.pk == pk)


def forget_user(pk: Any) -> None:
    """Drop the cached tokens and teams of the user with primary key `pk`."""
    MANAGER_TOKENS.forget(lambda _key, token: token.user_id == pk)
    TEAM_IDS.forget(lambda key, _ids: key == pk)


def forget_memberships(_pk: Any = None) -> None:
    """Drop every cached team list: a membership changed (it may have moved from one user to
    another, so dropping its present user's list alone could keep the old one's)."""
    TEAM_IDS.clear()


def clear() -> None:
    """Drop every entry of both caches (tests)."""
    MANAGER_TOKENS.clear()
    TEAM_IDS.clear()
