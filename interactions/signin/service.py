"""Sign in with Feishu: the `state` of a sign-in in progress and what a verified account becomes.

- **Which app.** `CARDLOOP_FEISHU_SIGNIN_APP` names the bot whose Feishu/Lark app signs people
  in, and `CARDLOOP_FEISHU_SIGNIN_TENANT` the `tenant_key` of the company it belongs to; both
  unset (or the bot unknown, or without an app secret) → no sign-in with Feishu.
- **State** (RFC 6749 §10.12, https://www.rfc-editor.org/rfc/rfc6749#section-10.12): `begin`
  stores a random `state` with the page to return to and the time in the browser's session;
  `take_state` removes it whatever the outcome (single use) and accepts only the same value
  (constant-time compare) within `STATE_TTL` seconds. A callback from another browser, a
  replayed one, or one after the TTL is refused.
- **Account → user.** `complete` checks nothing itself beyond what the view checked (the
  tenant); `botadmin.services.sign_in_feishu_user` finds or makes the user by open_id /
  union_id; Django's `login` starts the session (a new session key), and the person's web
  panel (`/panel/`) is signed in too: a desktop token for (bot, open_id) labelled
  `SIGNIN_TOKEN_LABEL` is issued for this session (never shown; the session holds its id, as
  the token form does) and revoked when the person signs out (`user_logged_out`), so no
  desktop token has to be handed out for the web panel. Desktop apps keep using issued
  tokens.

Never logged: tokens, codes, states, open_ids.
"""

from __future__ import annotations

import hmac
import logging
import secrets
import time
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.contrib import auth
from django.contrib.auth.signals import user_logged_out
from django.db import IntegrityError
from django.dispatch import receiver

from botadmin import services
from botadmin.models import Bot, DesktopToken
from interactions.panels import service as panels

if TYPE_CHECKING:  # lark-oapi takes seconds to import; AppConfig.ready() imports this module
    from interactions.lark.oauth import FeishuAccount

log = logging.getLogger(__name__)

#: Session key of a sign-in in progress: {"state", "next", "at" (Unix seconds)}.
SESSION_STATE = "cardloop_feishu_signin"
#: Session key of the desktop token this sign-in issued for the web panel.
SESSION_PANEL_TOKEN = "cardloop_feishu_signin_panel_token"  # noqa: S105 - a key name
#: Seconds a sign-in may take between leaving for Feishu and coming back.
STATE_TTL = 600
#: Where a sign-in without a `next` page lands.
DEFAULT_NEXT = "/dashboard/"
#: Label of the desktop tokens sign-in issues (shown in the admin's desktop token list).
SIGNIN_TOKEN_LABEL = "Feishu sign-in"  # noqa: S105 - a label
#: The backend `login` records (Feishu accounts have no password).
BACKEND = "django.contrib.auth.backends.ModelBackend"


def signin_bot() -> Bot | None:
    """The bot whose app signs people in, or None when sign-in with Feishu is off: a setting
    unset, no such bot, or no app secret to exchange codes with."""
    app_id = settings.CARDLOOP_FEISHU_SIGNIN_APP
    if not app_id or not settings.CARDLOOP_FEISHU_SIGNIN_TENANT:
        return None
    bot = Bot.objects.filter(app_id=app_id).first()
    if bot is None or not bot.has_credentials:
        return None
    return bot


def begin(session, next_url: str) -> str:
    """Start a sign-in: a fresh random `state` (43 URL-safe characters) remembered in
    `session` with `next_url` and the time; returns it for the authorization URL. A sign-in
    started earlier in the same browser is replaced."""
    state = secrets.token_urlsafe(32)
    session[SESSION_STATE] = {"state": state, "next": next_url, "at": time.time()}
    return state


def take_state(session, state: str) -> str | None:
    """End the sign-in in progress: its `next` page when `state` is the one `begin` stored in
    this `session` less than `STATE_TTL` seconds ago, else None. The stored state is removed
    either way (single use)."""
    pending = session.pop(SESSION_STATE, None)
    if not isinstance(pending, dict) or not isinstance(state, str) or not state:
        return None
    expected = pending.get("state")
    if not isinstance(expected, str) or not hmac.compare_digest(
        expected.encode(), state.encode("utf-8", "replace")
    ):
        return None
    started = pending.get("at")
    if not isinstance(started, int | float) or not 0 <= time.time() - started <= STATE_TTL:
        return None
    next_url = pending.get("next")
    return next_url if isinstance(next_url, str) and next_url else DEFAULT_NEXT


def _user_for(bot: Bot, account: FeishuAccount):
    fields = {
        "tenant_key": account.tenant_key,
        "open_id": account.open_id,
        "union_id": account.union_id,
        "name": account.name,
    }
    try:
        return services.sign_in_feishu_user(bot, **fields)[0]
    except IntegrityError:  # a concurrent first sign-in of the same account won: use its row
        return services.sign_in_feishu_user(bot, **fields)[0]


def complete(request, bot: Bot, account: FeishuAccount) -> Any:
    """Sign `request`'s browser in as the user of the verified `account` (of `bot`'s app, in
    its tenant — the caller checked that) and sign its web panel in. Returns the user. Raises
    `botadmin.services.SignInRefused` (staff or deactivated accounts)."""
    user = _user_for(bot, account)
    auth.login(request, user, backend=BACKEND)
    session = request.session
    token = (
        DesktopToken.objects.active()
        .filter(pk=session.get(SESSION_PANEL_TOKEN), bot=bot, open_id=account.open_id)
        .first()
        if isinstance(session.get(SESSION_PANEL_TOKEN), int)
        else None
    )
    if token is None:
        _raw, token = services.issue_desktop_token(
            user, bot, account.open_id, SIGNIN_TOKEN_LABEL
        )  # the raw value is dropped: this session is its only holder
    session[SESSION_PANEL_TOKEN] = token.pk
    session[panels.SESSION_KEY] = token.pk
    log.info("feishu sign-in: bot=%s user_id=%s", bot.app_id, user.pk)
    return user


@receiver(user_logged_out, dispatch_uid="cardloop.signin.revoke_panel_token")
def revoke_panel_token(sender, request, user, **kwargs) -> None:
    """Signing out ends the web panel this sign-in opened: its desktop token is revoked
    (audited; connected panels close with 4401)."""
    session = getattr(request, "session", None)
    token_id = session.get(SESSION_PANEL_TOKEN) if session is not None else None
    if not isinstance(token_id, int):
        return
    token = DesktopToken.objects.active().filter(pk=token_id).first()
    if token is not None:
        panels.revoke_token(user if user is not None else "sign-out", token)
