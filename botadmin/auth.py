"""Authentication of the bot backend (`Authorization: Bearer clk_…`) and of managers' API
tokens (`Authorization: Token cmk_…`) for DRF views.

A valid key makes `request.user` a `BotPrincipal` (authenticated, not staff) and `request.auth`
the `BotApiKey` row. Staff sessions still work through DRF's SessionAuthentication; views that
are for the bot backend only use the `IsBot` permission.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.utils.translation import gettext_lazy as _
from rest_framework import authentication, exceptions, permissions

from botadmin.models import Bot, BotApiKey, ManagerToken


@dataclass(frozen=True)
class BotPrincipal:
    """The caller behind a bot API key."""

    bot: Bot
    key: BotApiKey

    is_authenticated = True
    is_anonymous = False
    is_staff = False
    is_superuser = False
    is_active = True

    @property
    def pk(self) -> None:  # never a user row
        return None

    def get_username(self) -> str:
        return f"bot:{self.bot.app_id}"

    def __str__(self) -> str:
        return self.get_username()


class BotApiKeyAuthentication(authentication.BaseAuthentication):
    """`Authorization: Bearer clk_<lookup>_<secret>`; other schemes/tokens are left to others."""

    keyword = "Bearer"

    def authenticate(self, request):
        header = authentication.get_authorization_header(request)
        if not header:
            return None
        try:
            scheme, _sep, raw = header.decode("ascii").partition(" ")
        except UnicodeDecodeError:
            raise exceptions.AuthenticationFailed(_("Malformed Authorization header.")) from None
        if scheme.lower() != "bearer":
            return None
        raw = raw.strip()
        if not raw.startswith(f"{BotApiKey.PREFIX_TAG}_"):
            return None
        key = BotApiKey.find_active(raw)
        if key is None:
            raise exceptions.AuthenticationFailed(_("Invalid or revoked API key."))
        key.touch()  # find_active joined the bot
        return BotPrincipal(bot=key.bot, key=key), key

    def authenticate_header(self, request) -> str:
        return 'Bearer realm="cardloop"'


class ManagerTokenAuthentication(authentication.BaseAuthentication):
    """`Authorization: Token <token>` (or `Bearer cmk_…`): a manager API token
    (`botadmin.models.ManagerToken`, `cmk_…`, or a key migrated from DRF's `authtoken`).

    A valid token makes `request.user` its user and `request.auth` the row (copies, from
    `ManagerToken.for_request`'s short-lived cache); an unknown or revoked token, or a token of
    a deactivated user, is 401 — in the process that revoked it at once, in the others within
    `CARDLOOP_ACCESS_CACHE_SECONDS` (1 s). `Bearer` with anything but
    `cmk_…` is left to the other authenticators (bot API keys). The scheme of RFC 6750 is
    accepted besides DRF's `Token`, so scripts may use either.
    """

    keyword = "Token"

    def authenticate(self, request):
        header = authentication.get_authorization_header(request)
        if not header:
            return None
        try:
            scheme, _sep, raw = header.decode("ascii").partition(" ")
        except UnicodeDecodeError:
            raise exceptions.AuthenticationFailed(_("Malformed Authorization header.")) from None
        raw = raw.strip()
        scheme = scheme.lower()
        if scheme == "bearer" and not raw.startswith(f"{ManagerToken.PREFIX_TAG}_"):
            return None
        if scheme not in ("token", "bearer"):
            return None
        # From the access cache: no query for a token seen within the last second, and a
        # revoked token or deactivated user is refused at once here, within 1 s elsewhere.
        token = ManagerToken.for_request(raw) if raw else None
        if token is None or not token.user.is_active:  # for_request joined the user
            raise exceptions.AuthenticationFailed(_("Invalid or revoked token."))
        return token.user, token

    def authenticate_header(self, request) -> str:
        return self.keyword


class IsBot(permissions.BasePermission):
    """Only callers authenticated with a bot API key."""

    message = _("This endpoint needs a bot API key (Authorization: Bearer clk_…).")

    def has_permission(self, request, view) -> bool:
        return isinstance(request.user, BotPrincipal)


class IsBotOrStaff(permissions.BasePermission):
    """A bot API key, or a logged-in staff user."""

    message = _("This endpoint needs a bot API key or a staff session.")

    def has_permission(self, request, view) -> bool:
        user = request.user
        return isinstance(user, BotPrincipal) or bool(
            getattr(user, "is_authenticated", False) and getattr(user, "is_staff", False)
        )
