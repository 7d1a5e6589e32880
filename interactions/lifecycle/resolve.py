"""The one lifecycle of an interaction (approvals, quick replies, forms, typed commands, asks):
the state change, timeouts and cancellation.

    outcome = resolve(ia, status="resolved", via="card", action_id="approve", value="approve")
    outcome = cancel(ia)                        # or: expire_due() from the card worker

**One function changes state**: `resolve()` runs a single conditional
`UPDATE … SET status=… WHERE id=… AND status='pending'` in one transaction with the
`interaction.resolved` event (stable id from the interaction id), the "always" rule and the
final card update. Whatever path comes first — card click, text command, API, timeout,
cancel — wins; every later path gets `Outcome(won=False)` carrying the winner's resolution.
On PostgreSQL a concurrent UPDATE waits for the first one's row lock and then re-checks the
WHERE clause (zero rows); on SQLite writers serialize (`BEGIN IMMEDIATE`).

A kind that owns its card (asks: the session's progress card) registers a resolution hook
(`register_resolution_hook`) instead of the default final card. Timeouts resolve an approval
as *deny* with `via: timeout` (status `expired`). Waiters (`interactions.lifecycle.waiters`)
are woken after commit; the database stays the truth.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone
from django.utils.functional import lazy
from django.utils.translation import gettext_lazy as _

from botadmin.services import effective_policy_for
from interactions import channels, events
from interactions.lifecycle import waiters
from interactions.models import ApprovalRule, Interaction
from interactions.render.interaction_cards import ALWAYS, DENY

log = logging.getLogger(__name__)

#: Bounds of a per-request timeout (seconds); the default is `CARDLOOP_INTERACTION_TIMEOUT`.
MIN_TIMEOUT = 10
MAX_TIMEOUT = 3600
#: Card state versions (`Channel.update(version=…)`): the final card can never be
#: overtaken by an older pending rendering.
PENDING_VERSION = 1
FINAL_VERSION = 2

S = Interaction.Status
V = Interaction.Via

#: Why an answer was refused → the message shown (toast in Feishu, reply text elsewhere).
REFUSALS = {
    "unknown_interaction": _("This request was not found."),
    "expired": _("This request has expired."),
    "already_final": _("This request was already handled."),
    "not_allowed": _("Only the person who was asked can answer this."),
    "wrong_chat": _("This request belongs to another chat."),
    "unknown_action": _("That option is not available for this request."),
    "invalid_form": _("Some answers are missing or not allowed."),
    "empty_answer": _("The answer is empty."),
    "malformed": _("Usage: /_interaction <id> <value>"),
}


class Refused(Exception):
    """An answer was refused and nothing was written. `code` is a key of `REFUSALS`;
    `interaction` the row concerned (None when unknown); `fields` names bad form fields."""

    def __init__(self, code: str, interaction: Interaction | None = None, fields=()):
        super().__init__(code)
        self.code = code
        self.interaction = interaction
        self.fields = list(fields)

    @property
    def message(self):
        return REFUSALS[self.code]


@dataclass(frozen=True)
class Outcome:
    """Result of a resolution attempt: `won` is True for the one attempt that changed the
    state; otherwise `interaction` carries what won (status and resolution). `rule` is the
    approval rule an "always" answer recorded."""

    won: bool
    interaction: Interaction
    rule: ApprovalRule | None = None


#: Per-kind hooks run by `resolve()` for the winner, inside its transaction:
#: kind → fn(interaction) (asks: re-render the progress card, tell panels on commit).
_resolution_hooks: dict[str, Any] = {}


def register_resolution_hook(kind: str, fn) -> None:
    """Run `fn(interaction)` inside the winning `resolve()` transaction of every interaction of
    `kind`, instead of queueing the final message of its channel (the kind owns its card).
    Use `transaction.on_commit` inside `fn` for anything that must wait for the commit."""
    _resolution_hooks[kind] = fn


def stable_event_id(public_id: str) -> str:
    """`evt_` + 32 hex of sha256(["interaction.resolved", public_id]): one event per
    interaction, whatever path resolved it."""
    digest = hashlib.sha256(
        json.dumps(["interaction.resolved", public_id], separators=(",", ":")).encode()
    ).hexdigest()
    return f"evt_{digest[:32]}"


def resolve(
    ia: Interaction | int,
    *,
    status: str,
    via: str,
    action_id: str = "",
    value: Any = None,
    operator: str = "",
    reason: str = "",
    now: datetime | None = None,
) -> Outcome:
    """Move a pending interaction to `status` (resolved | expired | cancelled) — the only
    function that changes an interaction's state.

    In one transaction: the conditional UPDATE (`WHERE status='pending'`), then for the
    winner the `interaction.resolved` event, the "always" approval rule, and the final card
    queued (version FINAL_VERSION, after the callback answer when inside one). Waiters are
    woken after commit. Returns `Outcome(won, interaction, rule)`; a loser's `interaction`
    holds the winner's resolution. Does not validate the choice: callers use `answer()`.
    """
    if status not in (S.RESOLVED, S.EXPIRED, S.CANCELLED):
        raise ValueError(f"cannot resolve to {status!r}")
    pk = ia.pk if isinstance(ia, Interaction) else int(ia)
    now = now or timezone.now()
    resolution = {
        "action_id": action_id,
        "value": value,
        "operator": operator,
        "via": via,
        "at": now.isoformat(),
    }
    if reason:
        resolution["reason"] = reason
    with transaction.atomic():
        won = (
            Interaction.objects.filter(pk=pk, status=S.PENDING).update(
                status=status, resolution=resolution, resolved_at=now
            )
            == 1
        )
        current = Interaction.objects.select_related("bot", "card").get(pk=pk)
        if not won:
            return Outcome(False, current)
        rule = None
        if current.kind == Interaction.Kind.APPROVAL and action_id == ALWAYS:
            rule = _record_rule(current, operator, now)
        events.emit(
            "interaction.resolved",
            stable_event_id(current.public_id),
            resolved_event_data(current, rule),
            bot=current.bot,
            team=effective_policy_for(current.bot, current.chat_id).team,
            time=now,
        )
        hook = _resolution_hooks.get(current.kind)
        if hook is not None:
            hook(current)
        elif current.card is not None:
            channel = channels.get(current.channel)
            channel.update(current.card, channel.render_interaction(current), version=FINAL_VERSION)
        transaction.on_commit(functools.partial(waiters.notify_waiters, current.public_id))
    log.info("interaction %s %s via %s", current.public_id, status, via)
    return Outcome(True, current, rule)


def resolved_event_data(ia: Interaction, rule: ApprovalRule | None = None) -> dict[str, Any]:
    """`data` of `interaction.resolved` (pure): ids, kind, channel, final status and the
    resolution `{action_id, value, operator, via, at}` — a quick reply's or form's value
    reaches the backend here. Never the question text."""
    resolution = ia.resolution or {}
    data: dict[str, Any] = {
        "interaction_id": ia.public_id,
        "kind": ia.kind,
        "status": ia.status,
        "bot_app_id": ia.bot.app_id,
        "channel": ia.channel,
        "chat_id": ia.chat_id,
        "session_id": ia.session_id or None,
        "request_id": ia.request_id or None,
        "tool": ia.tool or None,
        "platform_message_id": ia.open_message_id or None,
        "resolution": {
            "action_id": resolution.get("action_id") or None,
            "value": resolution.get("value"),
            "operator": resolution.get("operator") or None,
            "via": resolution.get("via"),
            "at": resolution.get("at"),
        },
    }
    if resolution.get("reason"):
        data["resolution"]["reason"] = resolution["reason"]
    if rule is not None:
        data["rule"] = rule_json(rule)
    return data


def _record_rule(ia: Interaction, operator: str, now: datetime) -> ApprovalRule:
    scope = ia.always_scope or Interaction.Scope.CHAT
    if scope == Interaction.Scope.SESSION and not ia.session_id:
        scope = Interaction.Scope.CHAT
    key = {
        "bot": ia.bot,
        "tool": ia.tool,
        "scope": scope,
        "session_id": ia.session_id if scope == Interaction.Scope.SESSION else "",
        "chat_id": ia.chat_id if scope == Interaction.Scope.CHAT else "",
    }
    existing = ApprovalRule.objects.active().filter(**key).first()
    if existing is not None:
        return existing
    try:
        with transaction.atomic():
            return ApprovalRule.objects.create(
                **key, interaction=ia, granted_by=operator, created_at=now
            )
    except IntegrityError:  # another approval recorded the same rule concurrently
        return ApprovalRule.objects.active().get(**key)


#: Long-polls waiting in this process: public_id → {(event loop, asyncio.Event)}.
def cancel(ia: Interaction, *, reason: str = "") -> Outcome:
    """Cancel a pending interaction (`via: cancel`); a final one is reported as lost."""
    return resolve(ia, status=S.CANCELLED, via=V.CANCEL, reason=reason)


def expire(ia: Interaction, *, now: datetime | None = None) -> Outcome:
    """Resolve `ia` as timed out: status `expired`, `via: timeout`; an approval is denied
    (`action_id`/`value` "deny"), other kinds carry no value."""
    if ia.kind == Interaction.Kind.APPROVAL:
        return resolve(ia, status=S.EXPIRED, via=V.TIMEOUT, action_id=DENY, value=DENY, now=now)
    return resolve(ia, status=S.EXPIRED, via=V.TIMEOUT, now=now)


def expire_if_due(ia: Interaction, *, now: datetime | None = None) -> Interaction:
    """`expire(ia)` when it is pending past `expires_at`; returns the current row."""
    now = now or timezone.now()
    if not ia.is_final and now >= ia.expires_at:
        return expire(ia, now=now).interaction
    return ia


def expire_due(*, now: datetime | None = None, limit: int = 200) -> int:
    """The sweeper (run by `card_worker` every period): expire up to `limit` pending
    interactions past `expires_at`, each with its event and final card. Returns how many this
    call expired (rows another path resolved first are not counted)."""
    now = now or timezone.now()
    count = 0
    for ia in Interaction.objects.due_for_expiry(now).order_by("expires_at", "id")[:limit]:
        if expire(ia, now=now).won:
            count += 1
    if count:
        log.info("expired %d interaction(s)", count)
    return count


def rule_json(rule: ApprovalRule) -> dict[str, Any]:
    return {
        "tool": rule.tool,
        "scope": rule.scope,
        "session_id": rule.session_id or None,
        "chat_id": rule.chat_id or None,
        "created_at": rule.created_at.isoformat(),
        "interaction_id": rule.interaction.public_id if rule.interaction_id else None,
    }


def lazy_format(message, **params):
    """`message % params`, evaluated in whatever language is active when it is rendered
    (so a toast gets both zh_cn and en_us)."""
    return lazy(lambda: str(message) % {k: str(v) for k, v in params.items()}, str)()
