"""MCP tokens: issue, revoke, authenticate (every state change of `McpToken`, each audited).

    raw, token = issue_token(actor, bot, "sess_1", chat_id="oc_…", requester_open_id="ou_…",
                             subagent=False, ttl_seconds=3600)
    token = authenticate(raw)          # None when unknown, revoked or expired
    revoke_token(actor, token)

A token is shown once (`cmt_<lookup>_<secret>`) and stored as SHA-256 like bot API keys and
desktop tokens (`botadmin.models.HashedToken`). It reaches one agent session of one bot and
nothing else: the tools act for `token.bot` and `token.session_id` only. Audit entries carry
the token's prefix, the session id, the sub-agent flag and the expiry — never a raw token or
a person's open_id.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.db import transaction
from django.utils import timezone

from botadmin import audit
from botadmin.models import Bot
from interactions.models import McpToken

#: Lifetime of a token (seconds): default, shortest and longest accepted.
DEFAULT_TTL = 3600
MIN_TTL = 60
MAX_TTL = 24 * 3600


def token_prefix(token: McpToken) -> str:
    """The public part of a token (`cmt_<lookup>_…`), safe to show and log."""
    return f"{McpToken.PREFIX_TAG}_{token.lookup}_…"


@transaction.atomic
def issue_token(
    actor: Any,
    bot: Bot,
    session_id: str,
    *,
    chat_id: str = "",
    open_id: str = "",
    requester_open_id: str = "",
    subagent: bool = False,
    project_key: str = "",
    workspace: str = "",
    ttl_seconds: int | None = None,
    label: str = "",
    now: datetime | None = None,
) -> tuple[str, McpToken]:
    """Issue a token for agent session `session_id` of `bot`; returns `(raw token, row)`.

    `ttl_seconds` (default DEFAULT_TTL) must lie in MIN_TTL..MAX_TTL; `chat_id` and `open_id`
    are exclusive. Shapes are validated by the API serializer; raises ValueError for an empty
    session id, both chat_id and open_id, or a ttl out of bounds. Audit `mcptoken.issued`.
    """
    ttl = DEFAULT_TTL if ttl_seconds is None else int(ttl_seconds)
    if not MIN_TTL <= ttl <= MAX_TTL:
        raise ValueError(f"ttl_seconds must be {MIN_TTL}..{MAX_TTL}")
    if not session_id:
        raise ValueError("session_id is required")
    if chat_id and open_id:
        raise ValueError("give chat_id or open_id, not both")
    now = now or timezone.now()
    raw, lookup = McpToken.new_raw()
    token = McpToken(
        bot=bot,
        session_id=session_id,
        chat_id=chat_id,
        open_id=open_id,
        requester_open_id=requester_open_id,
        subagent=bool(subagent),
        project_key=project_key,
        workspace=workspace,
        expires_at=now + timedelta(seconds=ttl),
        label=(label or "")[:100],
    )
    token.set_raw(raw, lookup)
    token.save()
    audit.record(
        actor,
        "mcptoken.issued",
        token,
        None,
        {
            "bot": bot.app_id,
            "token": token_prefix(token),
            "session_id": session_id,
            "subagent": token.subagent,
            "expires_at": token.expires_at.isoformat(),
        },
    )
    return raw, token


@transaction.atomic
def revoke_token(actor: Any, token: McpToken) -> McpToken:
    """Revoke `token` under its row lock: `/mcp` refuses it from the next request on (calls
    already waiting keep their answer path). No-op when already revoked. Audit
    `mcptoken.revoked`: `{"token", "revoked_at": None}` → `{"token", "revoked_at": ISO}`."""
    locked = McpToken.objects.select_for_update().get(pk=token.pk)
    if locked.revoked_at is None:
        locked.revoked_at = timezone.now()
        locked.save(update_fields=["revoked_at"])
        audit.record(
            actor,
            "mcptoken.revoked",
            locked,
            {"token": token_prefix(locked), "revoked_at": None},
            {"token": token_prefix(locked), "revoked_at": locked.revoked_at.isoformat()},
        )
    token.revoked_at = locked.revoked_at
    return token


def authenticate(raw: str, *, now: datetime | None = None) -> McpToken | None:
    """The usable token for `raw` (bot loaded), or None when it is malformed, unknown,
    revoked or past `expires_at`. Records use at most once a minute (`touch`)."""
    row = McpToken.find_active(raw)
    if row is None or row.expires_at <= (now or timezone.now()):
        return None
    row = McpToken.objects.select_related("bot").get(pk=row.pk)
    row.touch()
    return row


def find_for_bot(bot: Bot, lookup: str) -> McpToken | None:
    """The token of `bot` whose prefix is `cmt_<lookup>_…` (any state), or None."""
    if not lookup or not isinstance(lookup, str) or len(lookup) > 16:
        return None
    return McpToken.objects.filter(bot=bot, lookup=lookup).first()
