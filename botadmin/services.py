"""State changes of botadmin, one function each, each in one transaction with its audit entry.

Admin saves, admin actions and management commands call these functions; nothing else writes
teams, bots, chats, bindings, policy layers, bot secrets or bot API keys. Every change writes an
`AuditEntry` (who, when, what, before → after) in the same transaction; secrets appear in it only
as "set" / "not set", API keys only by their public prefix. A call that changes nothing writes
nothing (no row update, no audit entry).

`actor` everywhere: a Django user, a string naming a system actor (e.g. `"seed_demo"`), or None.

Also here: `effective_policy_for(bot, chat)`, the read helper every sender uses to resolve (and
freeze) the feedback policy of a delivery.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
import secrets
from collections.abc import Callable
from typing import Any

from django.contrib.auth import get_user_model
from django.db import IntegrityError, models, transaction
from django.utils import timezone

from botadmin import audit
from botadmin.models import (
    Bot,
    BotApiKey,
    Chat,
    ChatPolicy,
    DesktopToken,
    FeishuIdentity,
    ManagerToken,
    SlackApp,
    Team,
    TeamChat,
    TeamMembership,
    TelegramBot,
)
from botadmin.policy import PolicyError, Resolution, resolve, validate_layer
from plumbing.secretstore import delete_secret, write_secret

#: Plain fields whose changes are audited, per model (policy layers have their own actions).
_TEAM_FIELDS = ("name", "description")
_BOT_FIELDS = ("app_id", "name", "domain", "api_only", "card_language")
_CHAT_FIELDS = ("chat_id", "name", "chat_type")


def _actor_user(actor: Any):
    return (
        actor if getattr(actor, "is_authenticated", False) and getattr(actor, "pk", None) else None
    )


def _values(obj, fields) -> dict[str, Any]:
    return {name: getattr(obj, name) for name in fields}


# ---------------------------------------------------------------------------------------------
# Effective policy (read)
# ---------------------------------------------------------------------------------------------


def effective_policy_for(bot: Bot, chat: Chat | str | None) -> Resolution:
    """The effective feedback policy of `bot` in `chat` (a Chat, a `chat_id`, or None).

    Layers: built-in defaults < the chat's team < `bot.policy` (as held by the instance given)
    < the `ChatPolicy` of (bot, chat). A chat bound to two or more teams fails closed
    (`reason == "ambiguous_team"`); an `api_only` bot is always off. An unknown `chat_id` counts
    as a chat with no team and no chat policy. The returned `Resolution` carries `team` (the
    chat's single team, or None) and `teams` (all its teams). Freeze `resolution.policy` as the
    delivery's snapshot. Runs 2 queries with a Chat (3 with a chat_id), none without; never raises for bad stored
    layers (they are listed in `resolution.problems` and fail closed).
    """
    if isinstance(chat, str):
        chat = Chat.objects.filter(chat_id=chat).first()
    teams: list[Team] = list(chat.teams.order_by("name")) if chat is not None else []
    chat_layer = None
    if chat is not None:
        chat_layer = (
            ChatPolicy.objects.filter(bot=bot, chat=chat).values_list("policy", flat=True).first()
        )
    team = teams[0] if len(teams) == 1 else None
    resolution = resolve(
        team.policy if team is not None else None,
        bot.policy,
        chat_layer,
        api_only=bot.api_only,
        ambiguous_team=len(teams) > 1,
    )
    return dataclasses.replace(resolution, team=team, teams=tuple(teams))


# ---------------------------------------------------------------------------------------------
# Policy layers
# ---------------------------------------------------------------------------------------------


@transaction.atomic
def set_policy_layer(
    actor: Any, owner: Team | Bot | ChatPolicy, layer: Any
) -> Team | Bot | ChatPolicy:
    """Replace the stored policy layer of a team, a bot or a chat policy with `layer`.

    The layer is validated (`botadmin.policy.validate_layer`) and stored exactly as given:
    partial, never filled with defaults. Audit action `policy.changed` with
    `{"policy": before}` → `{"policy": after}`. Raises `PolicyError`; nothing is written then.
    Returns `owner` with its `policy` updated.
    """
    valid = validate_layer(layer)
    locked = type(owner).objects.select_for_update().get(pk=owner.pk)
    before = locked.policy
    if before != valid:
        locked.policy = valid
        locked.save(update_fields=["policy", "updated_at"])
        audit.record(actor, "policy.changed", locked, {"policy": before}, {"policy": valid})
    owner.policy = valid
    return owner


@transaction.atomic
def set_chat_policy(actor: Any, bot: Bot, chat: Chat, layer: Any) -> ChatPolicy:
    """Create or replace the policy layer of the (bot, chat) pair.

    Creating writes `policy.created` (`None` → `{"policy": layer}`); replacing behaves as
    `set_policy_layer`. Raises `PolicyError` for an invalid layer (nothing written).
    """
    valid = validate_layer(layer)
    existing = ChatPolicy.objects.select_for_update().filter(bot=bot, chat=chat).first()
    if existing is None:
        try:
            with transaction.atomic():
                created = ChatPolicy.objects.create(bot=bot, chat=chat, policy=valid)
        except IntegrityError:  # created concurrently: update that row instead
            existing = ChatPolicy.objects.select_for_update().get(bot=bot, chat=chat)
        else:
            audit.record(actor, "policy.created", created, None, {"policy": valid})
            return created
    return set_policy_layer(actor, existing, valid)


@transaction.atomic
def delete_chat_policy(actor: Any, chat_policy: ChatPolicy) -> None:
    """Delete a (bot, chat) layer; the pair then inherits. Audit `policy.deleted`."""
    locked = ChatPolicy.objects.select_for_update().filter(pk=chat_policy.pk).first()
    if locked is None:
        return
    audit.record(actor, "policy.deleted", locked, {"policy": locked.policy}, None)
    locked.delete()


# ---------------------------------------------------------------------------------------------
# Teams, bots, chats (plain fields)
# ---------------------------------------------------------------------------------------------


def _save_plain(actor: Any, obj, fields: tuple[str, ...], kind: str):
    """Insert or update `obj`'s plain `fields`; audit `<kind>.created` / `<kind>.changed`."""
    if obj.pk is None:
        obj.save()
        audit.record(actor, f"{kind}.created", obj, None, _values(obj, fields))
        return obj
    current = type(obj).objects.select_for_update().get(pk=obj.pk)
    before = _values(current, fields)
    after = _values(obj, fields)
    changed = [name for name in fields if before[name] != after[name]]
    if changed:
        for name in changed:
            setattr(current, name, after[name])
        current.save(
            update_fields=[*changed, "updated_at"] if hasattr(current, "updated_at") else changed
        )
        audit.record(
            actor,
            f"{kind}.changed",
            current,
            {n: before[n] for n in changed},
            {n: after[n] for n in changed},
        )
    return obj


@transaction.atomic
def save_team(actor: Any, team: Team) -> Team:
    """Create or update a team's name/description (its layer: `set_policy_layer`)."""
    return _save_plain(actor, team, _TEAM_FIELDS, "team")


@transaction.atomic
def save_bot(actor: Any, bot: Bot) -> Bot:
    """Create or update a bot's app_id, name, domain, `card_language` and `api_only` flag (audited; `api_only`
    turns feedback off). Secrets: `set_secret`; layer: `set_policy_layer`."""
    return _save_plain(actor, bot, _BOT_FIELDS, "bot")


#: Functions called with the saved `Chat` inside `save_chat`'s transaction (apps above botadmin
#: register them from `AppConfig.ready()`: feedback links deliveries sent to that chat_id).
_chat_saved_hooks: list[Callable[[Chat], Any]] = []


def register_chat_saved(fn: Callable[[Chat], Any]) -> None:
    """Call `fn(chat)` after every `save_chat`, in its transaction (an exception rolls the
    save back with it). Registering the same function twice registers it once."""
    if fn not in _chat_saved_hooks:
        _chat_saved_hooks.append(fn)


@transaction.atomic
def save_chat(actor: Any, chat: Chat) -> Chat:
    """Create or update a chat's chat_id, name and type, then run the chat-saved hooks
    (`register_chat_saved`) in the same transaction."""
    saved = _save_plain(actor, chat, _CHAT_FIELDS, "chat")
    for hook in _chat_saved_hooks:
        hook(saved)
    return saved


@transaction.atomic
def delete_team(actor: Any, team: Team) -> None:
    """Delete a team with its bindings and memberships (its chats fall back to no team)."""
    before = {**_values(team, _TEAM_FIELDS), "policy": team.policy}
    before["chats"] = sorted(team.chats.values_list("chat_id", flat=True))
    audit.record(actor, "team.deleted", team, before, None)
    team.delete()


@transaction.atomic
def delete_bot(actor: Any, bot: Bot) -> None:
    """Delete a bot with its chat policies and keys; its secret files are removed on commit."""
    before = {
        **_values(bot, _BOT_FIELDS),
        "policy": bot.policy,
        **{name: audit.secret_state(getattr(bot, ref)) for name, ref in Bot.SECRET_FIELDS.items()},
    }
    refs = [getattr(bot, ref) for ref in Bot.SECRET_FIELDS.values() if getattr(bot, ref)]
    audit.record(actor, "bot.deleted", bot, before, None)
    bot.delete()
    for ref in refs:
        transaction.on_commit(lambda ref=ref: delete_secret(ref))


@transaction.atomic
def delete_chat(actor: Any, chat: Chat) -> None:
    """Delete a chat with its team bindings and chat policies."""
    before = {
        **_values(chat, _CHAT_FIELDS),
        "teams": sorted(chat.teams.values_list("name", flat=True)),
    }
    audit.record(actor, "chat.deleted", chat, before, None)
    chat.delete()


# ---------------------------------------------------------------------------------------------
# Team ↔ chat bindings and team members
# ---------------------------------------------------------------------------------------------


def _team_names(chat: Chat) -> list[str]:
    return sorted(chat.teams.values_list("name", flat=True))


@transaction.atomic
def bind_team_chat(actor: Any, team: Team, chat: Chat) -> TeamChat:
    """Bind `chat` to `team` (no-op when bound). Audit `chat.bound` on the chat with its team
    names before → after; a chat with two teams resolves to `ambiguous_team` (fails closed)."""
    Chat.objects.select_for_update().filter(pk=chat.pk).first()
    existing = TeamChat.objects.filter(team=team, chat=chat).first()
    if existing is not None:
        return existing
    before = _team_names(chat)
    binding = TeamChat.objects.create(team=team, chat=chat)
    audit.record(actor, "chat.bound", chat, {"teams": before}, {"teams": _team_names(chat)})
    return binding


@transaction.atomic
def unbind_team_chat(actor: Any, team: Team, chat: Chat) -> bool:
    """Remove the binding of `chat` to `team`; returns False when there was none."""
    Chat.objects.select_for_update().filter(pk=chat.pk).first()
    before = _team_names(chat)
    deleted, _ = TeamChat.objects.filter(team=team, chat=chat).delete()
    if deleted:
        audit.record(actor, "chat.unbound", chat, {"teams": before}, {"teams": _team_names(chat)})
    return bool(deleted)


@transaction.atomic
def add_team_member(actor: Any, team: Team, user) -> TeamMembership:
    """Make `user` a member (manager) of `team`; no-op when already one."""
    membership, created = TeamMembership.objects.get_or_create(team=team, user=user)
    if created:
        audit.record(actor, "team.member_added", team, None, {"member": user.get_username()})
    return membership


@transaction.atomic
def remove_team_member(actor: Any, team: Team, user) -> bool:
    """Remove `user` from `team`; returns False when they were not a member."""
    deleted, _ = TeamMembership.objects.filter(team=team, user=user).delete()
    if deleted:
        audit.record(actor, "team.member_removed", team, {"member": user.get_username()}, None)
    return bool(deleted)


# ---------------------------------------------------------------------------------------------
# Bot secrets (write-only)
# ---------------------------------------------------------------------------------------------


def _secret_field(model: type[models.Model], name: str, label: str) -> str:
    """The model field holding secret `name` of `model` (its `SECRET_FIELDS`); raises
    ValueError naming `label` ("bot", "Slack") for an unknown name."""
    try:
        return model.SECRET_FIELDS[name]
    except KeyError:
        raise ValueError(
            f"unknown {label} secret {name!r}; one of {sorted(model.SECRET_FIELDS)}"
        ) from None


def _store_secret(actor: Any, obj: models.Model, field_name: str, name: str, value: str):
    """Write `value` to a new 0600 file, keep its ref on `obj` (row locked), audit
    `secret.set` ("set"/"not set" only) and remove the old file on commit. Call inside the
    caller's transaction; `value` is already stripped and non-empty. Returns `obj`."""
    locked = type(obj).objects.select_for_update().get(pk=obj.pk)
    old_ref = getattr(locked, field_name)
    new_ref = write_secret(value)
    setattr(locked, field_name, new_ref)
    locked.save(update_fields=[field_name, "updated_at"])
    audit.record(
        actor, "secret.set", locked, {name: audit.secret_state(old_ref)}, {name: audit.SET}
    )
    if old_ref:
        transaction.on_commit(lambda: delete_secret(old_ref))
    setattr(obj, field_name, new_ref)
    return obj


def _drop_secret(actor: Any, obj: models.Model, field_name: str, name: str):
    """Clear the secret ref `field_name` of `obj` (no-op when not set): audit
    `secret.cleared`, remove its file on commit. Call inside the caller's transaction."""
    locked = type(obj).objects.select_for_update().get(pk=obj.pk)
    old_ref = getattr(locked, field_name)
    if old_ref:
        setattr(locked, field_name, "")
        locked.save(update_fields=[field_name, "updated_at"])
        audit.record(actor, "secret.cleared", locked, {name: audit.SET}, {name: audit.NOT_SET})
        transaction.on_commit(lambda: delete_secret(old_ref))
    setattr(obj, field_name, "")
    return obj


def _stripped_secret(value: Any) -> str:
    value = value.strip() if isinstance(value, str) else ""
    if not value:
        raise ValueError("a secret cannot be empty; use clear_secret to remove it")
    return value


#: What `setWebhook` accepts as `secret_token` (https://core.telegram.org/bots/api#setwebhook).
TELEGRAM_WEBHOOK_SECRET_RE = re.compile(r"^[A-Za-z0-9_-]{1,256}\Z")


def _check_telegram_secret(tg: TelegramBot, name: str, value: str) -> None:
    if name == "webhook_secret" and not TELEGRAM_WEBHOOK_SECRET_RE.match(value):
        raise ValueError("a webhook secret is 1-256 characters of A-Z a-z 0-9 _ -")
    if name == "bot_token" and value.split(":", 1)[0] != str(tg.bot_user_id):
        raise ValueError("the bot token does not belong to this Telegram bot id")


#: Every model with write-only secrets → (the label its errors name, its extra value check).
_SECRET_OWNERS: dict[type[models.Model], tuple[str, Callable[[Any, str, str], None] | None]] = {
    Bot: ("bot", None),
    SlackApp: ("Slack", None),
    TelegramBot: ("Telegram", _check_telegram_secret),
}


def _secret_owner(obj: models.Model, name: str) -> tuple[str, Callable | None]:
    """(model field holding secret `name` of `obj`, its value check); raises ValueError for a
    model without write-only secrets or an unknown name."""
    try:
        label, check = _SECRET_OWNERS[type(obj)]
    except KeyError:
        raise ValueError(f"{type(obj).__name__} has no write-only secrets") from None
    return _secret_field(type(obj), name, label), check


@transaction.atomic
def set_secret(actor: Any, obj: Bot | SlackApp | TelegramBot, name: str, value: str):
    """Store write-only secret `name` (a key of `type(obj).SECRET_FIELDS`: a bot's
    `app_secret` / `encrypt_key` / `verification_token`, a Slack app's `bot_token` /
    `signing_secret`, a Telegram bot's `bot_token` / `webhook_secret`). Returns `obj`.

    The value (surrounding whitespace stripped) goes to a new 0600 file through
    `secretstore.write_secret`; `obj` keeps only its ref; the previous file is removed on
    commit. Audit `secret.set` with `{name: "set"|"not set"}` → `{name: "set"}`. Raises
    ValueError for an unknown name or an empty value, and for a Telegram bot a webhook secret
    outside 1-256 characters of A-Z a-z 0-9 _ - (what Telegram accepts,
    https://core.telegram.org/bots/api#setwebhook) or a bot token whose id (before ":") is not
    the bot's `bot_user_id`.
    """
    field_name, check = _secret_owner(obj, name)
    value = _stripped_secret(value)
    if check is not None:
        check(obj, name, value)
    return _store_secret(actor, obj, field_name, name, value)


@transaction.atomic
def clear_secret(actor: Any, obj: Bot | SlackApp | TelegramBot, name: str):
    """Remove write-only secret `name` of `obj` (no-op when not set); returns `obj`. Audit
    `secret.cleared`: set → not set. Raises ValueError for an unknown name."""
    field_name, _check = _secret_owner(obj, name)
    return _drop_secret(actor, obj, field_name, name)


#: The per-model names of `set_secret` / `clear_secret`, kept for their callers.
set_bot_secret = set_slack_secret = set_telegram_secret = set_secret
clear_bot_secret = clear_slack_secret = clear_telegram_secret = clear_secret


# ---------------------------------------------------------------------------------------------
# Bot API keys
# ---------------------------------------------------------------------------------------------


def key_prefix(key: BotApiKey) -> str:
    """The public part of a key (`clk_<lookup>_…`), safe to show and log."""
    return f"{BotApiKey.PREFIX_TAG}_{key.lookup}_…"


@transaction.atomic
def issue_api_key(actor: Any, bot: Bot, label: str = "") -> tuple[str, BotApiKey]:
    """Issue a new API key for `bot`. Returns `(raw key, row)`: show the raw key once; only its
    SHA-256 is stored. Audit `apikey.issued` with the key's prefix and label."""
    raw, lookup = BotApiKey.new_raw()
    key = BotApiKey(bot=bot, label=label or "", created_by=_actor_user(actor))
    key.set_raw(raw, lookup)
    key.save()
    audit.record(
        actor,
        "apikey.issued",
        key,
        None,
        {"bot": bot.app_id, "key": key_prefix(key), "label": key.label},
    )
    return raw, key


def _revoke_hashed_token(actor: Any, token, *, action: str, name: str, prefix) -> Any:
    """Revoke a `HashedToken` row (API key or desktop token) under its row lock; no-op when
    already revoked. Audit `action`: `{name: prefix, "revoked_at": None}` → `{name: prefix,
    "revoked_at": ISO time}`. Call inside the caller's transaction."""
    locked = type(token).objects.select_for_update().get(pk=token.pk)
    if locked.revoked_at is None:
        locked.revoked_at = timezone.now()
        locked.save(update_fields=["revoked_at"])
        audit.record(
            actor,
            action,
            locked,
            {name: prefix(locked), "revoked_at": None},
            {name: prefix(locked), "revoked_at": locked.revoked_at.isoformat()},
        )
    token.revoked_at = locked.revoked_at
    return token


@transaction.atomic
def revoke_api_key(actor: Any, key: BotApiKey) -> BotApiKey:
    """Revoke `key` (it stops authenticating at once); no-op when already revoked.
    Audit `apikey.revoked`: `{"revoked_at": None}` → `{"revoked_at": ISO time}`."""
    return _revoke_hashed_token(actor, key, action="apikey.revoked", name="key", prefix=key_prefix)


# ---------------------------------------------------------------------------------------------
# Desktop tokens (question panels)
# ---------------------------------------------------------------------------------------------

#: Longest `open_id` a desktop token may carry (the model column's length).
OPEN_ID_MAX_LENGTH = DesktopToken._meta.get_field("open_id").max_length


def desktop_token_prefix(token: DesktopToken) -> str:
    """The public part of a desktop token (`cdt_<lookup>_…`), safe to show and log."""
    return f"{DesktopToken.PREFIX_TAG}_{token.lookup}_…"


@transaction.atomic
def issue_desktop_token(
    actor: Any, bot: Bot, open_id: str, label: str = ""
) -> tuple[str, DesktopToken]:
    """Issue a desktop token that lets a question panel connect as the Feishu user `open_id`
    of `bot` (`/ws/panel/`, `/panel/`). Returns `(raw token, row)`: show the raw token once;
    only its SHA-256 is stored. Raises `ValueError` for an empty or over-long `open_id`.
    Audit `desktoptoken.issued` with the token's prefix and label — never the open_id, which
    is a person's id."""
    open_id = (open_id or "").strip()
    if not open_id or len(open_id) > OPEN_ID_MAX_LENGTH:
        raise ValueError(f"open_id must be 1–{OPEN_ID_MAX_LENGTH} characters")
    raw, lookup = DesktopToken.new_raw()
    token = DesktopToken(
        bot=bot, open_id=open_id, label=(label or "")[:100], created_by=_actor_user(actor)
    )
    token.set_raw(raw, lookup)
    token.save()
    audit.record(
        actor,
        "desktoptoken.issued",
        token,
        None,
        {"bot": bot.app_id, "token": desktop_token_prefix(token), "label": token.label},
    )
    return raw, token


@transaction.atomic
def revoke_desktop_token(actor: Any, token: DesktopToken) -> DesktopToken:
    """Revoke `token`: it stops authenticating at once. Call it through
    `interactions.panels.service.revoke_token`, which also closes the panels connected with it.
    No-op when already revoked.
    Audit `desktoptoken.revoked`: `{"revoked_at": None}` → `{"revoked_at": ISO time}`."""
    return _revoke_hashed_token(
        actor, token, action="desktoptoken.revoked", name="token", prefix=desktop_token_prefix
    )


# ---------------------------------------------------------------------------------------------
# Manager API tokens (analytics and review API as a user)
# ---------------------------------------------------------------------------------------------


def manager_token_prefix(token: ManagerToken) -> str:
    """The public part of a manager token (`cmk_<lookup>_…`; a migrated key: its first
    characters and `…`), safe to show and log."""
    if token.legacy:
        return f"{token.lookup}…"
    return f"{ManagerToken.PREFIX_TAG}_{token.lookup}_…"


@transaction.atomic
def issue_manager_token(actor: Any, user, label: str = "") -> tuple[str, ManagerToken]:
    """Issue an API token that acts as `user` on the analytics and review API
    (`Authorization: Token cmk_…`). Returns `(raw token, row)`: show the raw token once; only
    its SHA-256 is stored. The token grants nothing of its own: what `user` may read is
    decided per request by their team memberships and reviewer permissions. Audit
    `managertoken.issued` with the user, the token's prefix and label."""
    raw, lookup = ManagerToken.new_raw()
    token = ManagerToken(user=user, label=(label or "")[:100], created_by=_actor_user(actor))
    token.set_raw(raw, lookup)
    token.save()
    audit.record(
        actor,
        "managertoken.issued",
        token,
        None,
        {"user": user.get_username(), "token": manager_token_prefix(token), "label": token.label},
    )
    return raw, token


@transaction.atomic
def revoke_manager_token(actor: Any, token: ManagerToken) -> ManagerToken:
    """Revoke `token`: the next request with it gets 401. No-op when already revoked.
    Audit `managertoken.revoked`: `{"revoked_at": None}` → `{"revoked_at": ISO time}`."""
    return _revoke_hashed_token(
        actor, token, action="managertoken.revoked", name="token", prefix=manager_token_prefix
    )


# ---------------------------------------------------------------------------------------------
# Feishu sign-in
# ---------------------------------------------------------------------------------------------


class SignInRefused(Exception):
    """A verified Feishu account may not sign in: `reason` is `"staff"` (staff and superuser
    accounts sign in with their password) or `"inactive"` (a deactivated user)."""

    def __init__(self, reason: str):
        self.reason = reason
        super().__init__(reason)


def _feishu_username(tenant_key: str, person_id: str) -> str:
    """Username of a user made by a first sign-in: stable, and no Feishu id in it."""
    digest = hashlib.sha256(f"{tenant_key}:{person_id}".encode()).hexdigest()[:16]
    return f"feishu-{digest}"


@transaction.atomic
def sign_in_feishu_user(
    bot: Bot, *, tenant_key: str, open_id: str, union_id: str = "", name: str = ""
) -> tuple[Any, bool]:
    """The Django user a verified Feishu account (of `bot`'s app, in `tenant_key`) signs in as.
    Returns `(user, created)`.

    Lookup: the account's `FeishuIdentity` by (`bot`, `open_id`); else one of the same person
    (`union_id`) in the same tenant through another bot, which gets linked; else a new user
    (a `feishu-…` username, the Feishu name as first name, no usable password, no team, no
    permission: ops grant those in the admin). The caller has checked `tenant_key` against
    the bot's tenant. Updates the identity's name, union_id and last sign-in. Audit
    `feishuidentity.linked` (bot, username; never an open_id) when an identity is new.
    Raises `SignInRefused("staff")` for a staff or superuser account and
    `SignInRefused("inactive")` for a deactivated one (nothing written then), and
    IntegrityError when a concurrent first sign-in of the same account won (call again).
    """
    identity = (
        FeishuIdentity.objects.select_for_update()
        .select_related("user")
        .filter(bot=bot, open_id=open_id)
        .first()
    )
    created = False
    if identity is None:
        user = None
        if union_id:
            other = (
                FeishuIdentity.objects.select_related("user")
                .filter(tenant_key=tenant_key, union_id=union_id)
                .order_by("created_at")
                .first()
            )
            user = other.user if other is not None else None
        if user is None:
            user = get_user_model().objects.create_user(
                username=_feishu_username(tenant_key, union_id or open_id),
                first_name=(name or "")[:150],
            )
            created = True
        identity = FeishuIdentity.objects.create(
            user=user, bot=bot, tenant_key=tenant_key, open_id=open_id, union_id=union_id
        )
        audit.record(
            "feishu sign-in",
            "feishuidentity.linked",
            identity,
            None,
            {"bot": bot.app_id, "user": user.get_username(), "new_user": created},
        )
    user = identity.user
    if user.is_staff or user.is_superuser:
        raise SignInRefused("staff")
    if not user.is_active:
        raise SignInRefused("inactive")
    identity.name = (name or "")[:100]
    identity.union_id = union_id or identity.union_id
    identity.last_login_at = timezone.now()
    identity.save(update_fields=["name", "union_id", "last_login_at"])
    return user, created


__all__ = [
    "PolicyError",
    "add_team_member",
    "bind_team_chat",
    "clear_bot_secret",
    "clear_secret",
    "delete_bot",
    "delete_chat",
    "delete_chat_policy",
    "delete_team",
    "desktop_token_prefix",
    "effective_policy_for",
    "issue_api_key",
    "issue_desktop_token",
    "issue_manager_token",
    "key_prefix",
    "manager_token_prefix",
    "register_chat_saved",
    "remove_team_member",
    "revoke_api_key",
    "revoke_desktop_token",
    "revoke_manager_token",
    "save_bot",
    "save_chat",
    "save_slack_app",
    "save_team",
    "set_bot_secret",
    "set_secret",
    "set_telegram_secret",
    "clear_telegram_secret",
    "ensure_telegram_webhook_secret",
    "set_chat_policy",
    "set_policy_layer",
    "sign_in_feishu_user",
    "unbind_team_chat",
]


_SLACK_APP_FIELDS = ("bot_id", "app_id")


@transaction.atomic
def save_slack_app(actor: Any, app: SlackApp) -> SlackApp:
    """Create or update a Slack app's bot and app id (audited `slack_app.created` /
    `slack_app.changed`). Secrets: `set_secret`."""
    return _save_plain(actor, app, _SLACK_APP_FIELDS, "slack_app")


@transaction.atomic
def ensure_telegram_webhook_secret(actor: Any, tg: TelegramBot) -> str:
    """The webhook secret of `tg`, generated (32 URL-safe characters) and stored through
    `set_secret` when none is set yet. Returns the plain value (for `setWebhook`)."""
    locked = TelegramBot.objects.select_for_update().get(pk=tg.pk)
    current = locked.secret("webhook_secret")
    if current:
        return current
    value = secrets.token_urlsafe(24)
    set_secret(actor, locked, "webhook_secret", value)
    tg.webhook_secret_ref = locked.webhook_secret_ref
    return value
