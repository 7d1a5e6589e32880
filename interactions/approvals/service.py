"""Interactions (approvals, quick replies, forms, typed commands): every state change.

    ia, created = create_interaction(bot, kind="approval", channel="feishu", chat_id="oc_…",
                                     requester_open_id="ou_…", title="Run rm?", tool="bash")
    ia = send_to_chat(ia)                       # Feishu: card sent, message recorded
    outcome = answer(ia, choice="approve", via="card", operator="ou_…", chat_id="oc_…")
    outcome = cancel(ia)                        # or: expire_due() from the card worker
    rule = check_rule(bot, "bash", session_id="s1", chat_id="oc_…")

**One function changes state**: `resolve()` runs a single conditional
`UPDATE … SET status=… WHERE id=… AND status='pending'` in one transaction with the
`interaction.resolved` event (stable id from the interaction id), the "always" rule and the
final card update. Whatever path comes first — card click, text command, API, timeout,
cancel — wins; every later path gets `Outcome(won=False)` carrying the winner's resolution.
On PostgreSQL a concurrent UPDATE waits for the first one's row lock and then re-checks the
WHERE clause (zero rows); on SQLite writers serialize (`BEGIN IMMEDIATE`).

Answers are validated before anything is written (`Refused(code)`): the interaction must
exist, be pending and not past `expires_at`, the chat must match, the operator must be allowed
(the allow-list, else the requester), and the choice must be one of the interaction's actions —
an unknown action value is refused, never turned into a denial (botmux.md §B.1, zeroclaw
`unknown_lark_decision_cannot_become_an_operator_denial`). Timeouts resolve an approval as
*deny* with `via: timeout` (status `expired`).

Waiters (`GET /api/v1/interactions/<id>?wait=`) are woken through the channel layer after
commit (`notify_waiters`); the database stays the truth.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import re
import secrets
import threading
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone
from django.utils.functional import lazy
from django.utils.translation import gettext_lazy as _

from botadmin.models import Bot
from botadmin.services import effective_policy_for
from interactions import events
from interactions.cardqueue import service as cards
from interactions.channels import kinds as channels
from interactions.models import ApprovalRule, CardEntity, Interaction
from interactions.render import interaction_cards
from interactions.render.interaction_cards import ALWAYS, APPROVE, DENY, SUBMIT
from plumbing.parsers import ascii_int

log = logging.getLogger(__name__)

#: Bounds of a per-request timeout (seconds); the default is `CARDLOOP_INTERACTION_TIMEOUT`.
MIN_TIMEOUT = 10
MAX_TIMEOUT = 3600
#: Longest question (characters) and typed answer accepted.
MAX_BODY = 4000
MAX_TEXT_ANSWER = 1000
#: Card state versions (`cards.enqueue_card(version=…)`): the final card can never be
#: overtaken by an older pending rendering.
PENDING_VERSION = 1
FINAL_VERSION = 2
#: Prefix of channel-layer groups that wake long-polls.
GROUP_PREFIX = "interaction."

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


class SendFailed(Exception):
    """The interaction could not be sent to Feishu; it was recorded as cancelled (reason
    `send_failed`). `code` / `msg` / `log_id` come from Feishu (`LarkApiError`), `problems`
    from card validation."""

    def __init__(self, interaction: Interaction, *, code=None, msg="", log_id="", problems=()):
        super().__init__(msg or "send failed")
        self.interaction = interaction
        self.code = code
        self.msg = msg
        self.log_id = log_id
        self.problems = list(problems)


@dataclass(frozen=True)
class Outcome:
    """Result of a resolution attempt: `won` is True for the one attempt that changed the
    state; otherwise `interaction` carries what won (status and resolution). `rule` is the
    approval rule an "always" answer recorded."""

    won: bool
    interaction: Interaction
    rule: ApprovalRule | None = None


# ---------------------------------------------------------------------------------------------
# Creating and sending
# ---------------------------------------------------------------------------------------------


def new_public_id() -> str:
    """`ia_` + 16 random hex digits (unguessable: it is typed in chats)."""
    return f"ia_{secrets.token_hex(8)}"


def default_timeout() -> int:
    return int(settings.CARDLOOP_INTERACTION_TIMEOUT)


def create_interaction(
    bot: Bot,
    *,
    kind: str,
    channel: str,
    chat_id: str,
    title: str,
    body: str = "",
    requester_open_id: str = "",
    allowed_open_ids: list[str] | None = None,
    session_id: str = "",
    request_id: str = "",
    tool: str = "",
    always_scope: str = "",
    allow_always: bool = True,
    actions: list[dict[str, Any]] | None = None,
    fields: list[dict[str, Any]] | None = None,
    timeout_seconds: int | None = None,
    now: datetime | None = None,
) -> tuple[Interaction, bool]:
    """Record a pending interaction; returns `(interaction, created)`.

    A repeated `request_id` of the same bot returns the first row (`created` False) and
    changes nothing. Approvals get the fixed actions approve / deny / always (`allow_always`)
    and `always_scope` defaults to `session` when a `session_id` is given, else `chat`.
    `timeout_seconds` is clamped to MIN_TIMEOUT..MAX_TIMEOUT (default
    `CARDLOOP_INTERACTION_TIMEOUT`). Shapes are validated by the API serializer; raises
    ValueError for an unknown channel or kind, or an empty operator list, and
    `RequestIdTaken` when `request_id` is an ask's idempotency key.
    """
    channel_kind = channels.normalize(channel)
    if channel_kind is None:
        raise ValueError(f"unknown channel kind {channel!r}")
    if kind not in Interaction.Kind.values:
        raise ValueError(f"unknown interaction kind {kind!r}")
    if not (requester_open_id or allowed_open_ids):
        raise ValueError("an interaction needs a requester_open_id or allowed_open_ids")
    if request_id:
        existing = Interaction.objects.for_request(bot, request_id).first()
        if existing is not None:
            return _same_request(existing, kind, chat_id, session_id, tool), False
    now = now or timezone.now()
    timeout = default_timeout() if timeout_seconds is None else int(timeout_seconds)
    timeout = max(MIN_TIMEOUT, min(MAX_TIMEOUT, timeout))
    if kind == Interaction.Kind.APPROVAL:
        actions = interaction_cards.approval_actions(allow_always)
        always_scope = always_scope or (
            Interaction.Scope.SESSION if session_id else Interaction.Scope.CHAT
        )
    else:
        always_scope = ""
    ia = Interaction(
        public_id=new_public_id(),
        bot=bot,
        kind=kind,
        channel=channel_kind,
        chat_id=chat_id,
        requester_open_id=requester_open_id,
        allowed_open_ids=list(allowed_open_ids or []),
        session_id=session_id,
        request_id=request_id,
        title=title,
        body=body[:MAX_BODY],
        tool=tool,
        always_scope=always_scope,
        actions=list(actions or []),
        fields=list(fields or []) if kind == Interaction.Kind.FORM else [],
        expires_at=now + timedelta(seconds=timeout),
        created_at=now,
    )
    try:
        with transaction.atomic():
            ia.save()
    except IntegrityError:
        if request_id:  # a concurrent retry with the same request_id won
            winner = Interaction.objects.for_request(bot, request_id).get()
            return _same_request(winner, kind, chat_id, session_id, tool), False
        raise
    return ia, True


class RequestIdTaken(ValueError):
    """The `request_id` names another request of the same bot (one key space per bot: the
    `interaction_request_id` unique index): an ask's `idempotency_key` (`ask` True), or an
    interaction of another kind, chat, session or tool. Nothing was written or sent."""

    def __init__(self, request_id: str, *, ask: bool):
        super().__init__(request_id)
        self.ask = ask


def _same_request(
    existing: Interaction, kind: str, chat_id: str, session_id: str, tool: str
) -> Interaction:
    """The row a repeated `request_id` names, when it is the same request: same kind, chat,
    session and tool. Anything else raises `RequestIdTaken`: a caller asking about `rm -rf`
    must never get the answer someone gave about `ls`, nor act on someone's question."""
    if existing.kind == Interaction.Kind.ASK:
        raise RequestIdTaken(existing.request_id, ask=True)
    same = (existing.kind, existing.chat_id, existing.session_id, existing.tool) == (
        kind,
        chat_id,
        session_id,
        tool,
    )
    if not same:
        raise RequestIdTaken(existing.request_id, ask=False)
    return existing


def send_to_chat(ia: Interaction) -> Interaction:
    """Render `ia` as a Feishu card and send it to its chat (CardKit entity, `uuid` = the
    interaction id so a retried send is deduplicated by Feishu), then record the message.
    Channels without buttons are not sent (the API returns the text fallback). Network I/O;
    call it outside any transaction.

    Raises `SendFailed` after recording the interaction as cancelled (reason `send_failed`),
    so a failed send never leaves a live pending interaction nobody can answer.
    """
    from interactions.lark.client import LarkApiError

    if not channels.capabilities(ia.channel).buttons or ia.card_id or ia.is_final:
        return ia
    card = interaction_cards.feishu_card(ia)
    try:
        entity = cards.send_card(
            ia.bot, card, receive_id=ia.chat_id, uuid=ia.public_id, purpose="interaction"
        )
    except cards.InvalidCard as exc:
        outcome = resolve(ia, status=S.CANCELLED, via=V.CANCEL, reason="send_failed")
        raise SendFailed(outcome.interaction, msg="invalid card", problems=exc.problems) from None
    except LarkApiError as exc:
        log.warning("interaction %s: sending the card failed: %s", ia.public_id, exc)
        outcome = resolve(ia, status=S.CANCELLED, via=V.CANCEL, reason="send_failed")
        raise SendFailed(
            outcome.interaction, code=exc.code, msg=exc.msg, log_id=exc.log_id
        ) from None
    except ValueError:  # register_card: the message is registered to another entity
        # a concurrent resend of the same uuid got there first (Feishu answered both with
        # one message): the interaction is shown; return what that send recorded
        log.warning("interaction %s: the card was already recorded by another send", ia.pk)
        return Interaction.objects.select_related("card").get(pk=ia.pk)
    return attach_card(ia, entity)


#: An interaction still pending without a card this long after it was created lost its
#: first send (the creating process died): a retry of its request_id sends it.
SEND_STALE = cards.SEND_STALE


def send_was_interrupted(ia: Interaction, now: datetime | None = None) -> bool:
    """Whether `ia` is a pending interaction whose first card send never finished (see
    SEND_STALE), so that a retry of its request should send it. Resending keeps the message
    `uuid` (the interaction id), so Feishu answers with the first message if it went out."""
    now = now or timezone.now()
    return (
        channels.capabilities(ia.channel).buttons
        and not ia.card_id
        and ia.status == S.PENDING
        and ia.created_at < now - SEND_STALE
    )


def attach_card(ia: Interaction, entity: CardEntity) -> Interaction:
    """Record that `ia` is shown by card `entity`. When `ia` was resolved meanwhile (a click
    or timeout raced the send), the final card is queued right away."""
    with transaction.atomic():
        locked = Interaction.objects.select_for_update().get(pk=ia.pk)
        locked.card = entity
        locked.open_message_id = entity.open_message_id
        locked.save(update_fields=["card", "open_message_id"])
        if locked.is_final:
            cards.enqueue_card(entity, interaction_cards.feishu_card(locked), version=FINAL_VERSION)
    return locked


# ---------------------------------------------------------------------------------------------
# The one state change
# ---------------------------------------------------------------------------------------------


#: Per-kind hooks run by `resolve()` for the winner, inside its transaction:
#: kind → fn(interaction) (asks: re-render the progress card, tell panels on commit).
_resolution_hooks: dict[str, Any] = {}


def register_resolution_hook(kind: str, fn) -> None:
    """Run `fn(interaction)` inside the winning `resolve()` transaction of every interaction of
    `kind`, instead of queueing `interaction_cards.feishu_card` (the kind owns its card).
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
            cards.enqueue_card(
                current.card, interaction_cards.feishu_card(current), version=FINAL_VERSION
            )
        transaction.on_commit(functools.partial(notify_waiters, current.public_id))
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
_local_waiters: dict[str, set[tuple[Any, Any]]] = {}
_local_lock = threading.Lock()


def add_local_waiter(public_id: str, loop, event) -> None:
    """Register an `asyncio.Event` (set on `loop`) to wake when `public_id` is resolved in
    this process."""
    with _local_lock:
        _local_waiters.setdefault(public_id, set()).add((loop, event))


def remove_local_waiter(public_id: str, loop, event) -> None:
    with _local_lock:
        waiters = _local_waiters.get(public_id)
        if waiters is not None:
            waiters.discard((loop, event))
            if not waiters:
                del _local_waiters[public_id]


def channel_layer_for_waiters():
    """The channel layer that reaches waiters in other processes (Redis), or None. The
    in-memory layer reaches no other process, and in-process waiters are woken directly."""
    from channels.layers import InMemoryChannelLayer, get_channel_layer

    layer = get_channel_layer()
    return None if layer is None or isinstance(layer, InMemoryChannelLayer) else layer


def notify_waiters(public_id: str) -> None:
    """Wake long-polls of `public_id`: those of this process directly (thread-safe), those
    of other processes through the channel layer group. Best effort: a lost wake-up only
    means the waiter finds the state at its next database poll."""
    with _local_lock:
        waiters = list(_local_waiters.get(public_id, ()))
    for loop, event in waiters:
        try:
            loop.call_soon_threadsafe(event.set)
        except RuntimeError:  # that loop is closed: its waiter is gone
            pass
    try:
        layer = channel_layer_for_waiters()
        if layer is not None:
            from asgiref.sync import async_to_sync

            async_to_sync(layer.group_send)(
                GROUP_PREFIX + public_id, {"type": "interaction.resolved", "id": public_id}
            )
    except Exception:  # noqa: BLE001 - never fail a resolution for a wake-up
        log.warning("interaction %s: could not notify waiters", public_id, exc_info=True)


# ---------------------------------------------------------------------------------------------
# Answers from people (card, text, API), cancel, timeout
# ---------------------------------------------------------------------------------------------


def find(bot: Bot, public_id: str) -> Interaction | None:
    """The interaction `public_id` of `bot`, or None. Asks are not found here: they are
    answered only through `interactions.asks.service` (their own validation and card)."""
    if not public_id or not isinstance(public_id, str):
        return None
    return (
        Interaction.objects.select_related("bot", "card")
        .filter(bot=bot, public_id=public_id)
        .exclude(kind=Interaction.Kind.ASK)
        .first()
    )


def match_action(ia: Interaction, choice: str) -> dict[str, Any] | None:
    """The action of `ia` that `choice` names: its value, its id (case-insensitive), or its
    1-based number in the list. None when nothing matches."""
    choice = (choice or "").strip()
    if not choice:
        return None
    for action in ia.actions:
        if choice == str(action.get("value", "")) or choice == str(action["id"]):
            return action
    lowered = choice.lower()
    for action in ia.actions:
        if lowered in (str(action.get("value", "")).lower(), str(action["id"]).lower()):
            return action
    number = ascii_int(choice, max_digits=3)
    if number is not None and 1 <= number <= len(ia.actions):
        return ia.actions[number - 1]
    return None


def parse_form_text(text: str) -> dict[str, str]:
    """`name=value; name2=value` (also newline-separated) → dict (typed form answers)."""
    values: dict[str, str] = {}
    for part in re.split(r"[;\n]", text or ""):
        name, sep, value = part.partition("=")
        if sep and name.strip():
            values[name.strip()] = value.strip()
    return values


def clean_form(ia: Interaction, submitted: dict[str, Any], *, prefixed: bool) -> dict[str, Any]:
    """Validate submitted form values against `ia.fields` → `{field name: value}`.

    `prefixed`: keys are card component names (`f_<name>`, Feishu `form_value`) rather than
    field names (typed). Unknown keys are ignored and not stored (B09). Raises
    `Refused("invalid_form", fields=[…])` for a missing required field, a select value not
    among the options or text longer than the field allows; `Refused("empty_answer")` when
    every field is empty.
    """
    values: dict[str, Any] = {}
    bad: list[str] = []
    for field in ia.fields:
        key = interaction_cards.form_field_name(field) if prefixed else field["name"]
        raw = submitted.get(key)
        value = raw.strip() if isinstance(raw, str) else ""
        if field.get("type") == "select" and value:
            if value not in {str(o["value"]) for o in field.get("options", [])}:
                bad.append(field["name"])
                continue
        elif len(value) > int(field.get("max_length") or MAX_TEXT_ANSWER):
            bad.append(field["name"])
            continue
        if field.get("required") and not value:
            bad.append(field["name"])
            continue
        values[field["name"]] = value
    if bad:
        raise Refused("invalid_form", ia, fields=bad)
    if not any(values.values()):
        raise Refused("empty_answer", ia)
    return values


def answer(
    ia: Interaction | None,
    *,
    choice: str = "",
    via: str,
    operator: str = "",
    chat_id: str | None = None,
    form: dict[str, Any] | None = None,
    form_prefixed: bool = False,
    check_operator: bool = True,
    now: datetime | None = None,
) -> Outcome:
    """A person's (or the backend's) answer to `ia`, validated, then `resolve()`d.

    `choice`: an action value / id / number (typed text for `command` interactions);
    `form`: submitted form values (form interactions; `form_prefixed` for Feishu
    `form_value`). `chat_id` (when given) must be the interaction's chat; `operator` must be
    allowed unless `check_operator` is False (the backend's API without an operator).
    Raises `Refused` (nothing written) for an unknown, final or expired interaction, a wrong
    chat or operator, an unknown action or an invalid form. A lost race returns
    `Outcome(won=False)` with the winner's resolution.
    """
    if ia is None:
        raise Refused("unknown_interaction")
    now = now or timezone.now()
    if ia.is_final:
        raise Refused("expired" if ia.status == S.EXPIRED else "already_final", ia)
    if chat_id is not None and chat_id != ia.chat_id:
        raise Refused("wrong_chat", ia)
    if check_operator and operator not in ia.operators:
        raise Refused("not_allowed", ia)
    if now >= ia.expires_at:
        raise Refused("expired", ia)
    if ia.kind == Interaction.Kind.FORM:
        if form is None:
            form, form_prefixed = parse_form_text(choice), False
        values = clean_form(ia, form, prefixed=form_prefixed)
        return resolve(
            ia, status=S.RESOLVED, via=via, action_id=SUBMIT, value=values, operator=operator
        )
    action = match_action(ia, choice)
    if action is None:
        if ia.kind == Interaction.Kind.COMMAND and choice.strip():
            text = choice.strip()
            if len(text) > MAX_TEXT_ANSWER:
                raise Refused("unknown_action", ia)
            return resolve(ia, status=S.RESOLVED, via=via, value=text, operator=operator)
        if not choice.strip():
            raise Refused("empty_answer", ia)
        raise Refused("unknown_action", ia)
    return resolve(
        ia,
        status=S.RESOLVED,
        via=via,
        action_id=str(action["id"]),
        value=action.get("value", action["id"]),
        operator=operator,
    )


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


# ---------------------------------------------------------------------------------------------
# "Always" rules
# ---------------------------------------------------------------------------------------------


def check_rule(
    bot: Bot, tool: str, *, session_id: str = "", chat_id: str = ""
) -> ApprovalRule | None:
    """The active "always" rule covering `tool` for this session / chat / bot, or None
    (most specific first: session, chat, bot)."""
    order = {Interaction.Scope.SESSION: 0, Interaction.Scope.CHAT: 1, Interaction.Scope.BOT: 2}
    rules = list(ApprovalRule.objects.matching(bot, tool, session_id=session_id, chat_id=chat_id))
    return min(rules, key=lambda r: (order[r.scope], -r.pk)) if rules else None


def revoke_rule(rule: ApprovalRule, *, now: datetime | None = None) -> bool:
    """Revoke an active rule (the backend will ask again). False when already revoked."""
    return (
        ApprovalRule.objects.filter(pk=rule.pk, revoked_at__isnull=True).update(
            revoked_at=now or timezone.now()
        )
        == 1
    )


def rule_json(rule: ApprovalRule) -> dict[str, Any]:
    return {
        "tool": rule.tool,
        "scope": rule.scope,
        "session_id": rule.session_id or None,
        "chat_id": rule.chat_id or None,
        "created_at": rule.created_at.isoformat(),
        "interaction_id": rule.interaction.public_id if rule.interaction_id else None,
    }


# ---------------------------------------------------------------------------------------------
# Feishu card callbacks (registry kind "interaction")
# ---------------------------------------------------------------------------------------------


def on_card_action(action):
    """Registry handler of `{"kind": "interaction", "interaction_id", "action_id",
    "action_value"}` clicks and form submits (`interactions.callbacks.registry.CardAction`).

    The operator comes from the verified callback and must be allowed; the click's chat must
    be the interaction's. Unknown / expired / already-handled ids and unknown actions get a
    toast and no write (an already-handled one also gets its final card back). A winning
    click answers a success toast plus the final card (Cardloop owns the whole card); the
    queued update (held until this answer was sent) covers the other viewers.
    """
    from interactions.callbacks.registry import Answer

    value = action.value
    ia = find(action.bot, str(value.get("interaction_id") or ""))
    choice = str(value.get("action_value") or value.get("action_id") or "")
    try:
        outcome = answer(
            ia,
            choice=choice,
            via=V.CARD,
            operator=action.operator_open_id,
            chat_id=action.open_chat_id or None,
            form=action.form_value if ia is not None and ia.kind == Interaction.Kind.FORM else None,
            form_prefixed=True,
        )
    except Refused as refused:
        final = (
            refused.interaction if refused.interaction and refused.interaction.is_final else None
        )
        card = interaction_cards.feishu_card(final) if final is not None else None
        kind = "info" if refused.code in ("already_final", "expired") else "warning"
        return getattr(Answer, kind)(refused.message, card=card)
    if not outcome.won:
        return Answer.info(
            lost_message(outcome.interaction),
            card=interaction_cards.feishu_card(outcome.interaction),
        )
    return Answer.success(
        success_message(outcome), card=interaction_cards.feishu_card(outcome.interaction)
    )


def success_message(outcome: Outcome):
    """What the person who answered is told (toast or reply text)."""
    ia = outcome.interaction
    action_id = (ia.resolution or {}).get("action_id")
    if ia.kind == Interaction.Kind.APPROVAL:
        if action_id == ALWAYS:
            scope = Interaction.Scope(outcome.rule.scope if outcome.rule else "chat").label
            return lazy_format(
                _("Approved. This tool will not be asked about again for this %(scope)s."),
                scope=scope,
            )
        if action_id == APPROVE:
            return _("Approved.")
        return _("Denied.")
    return _("Answer recorded.")


def lazy_format(message, **params):
    """`message % params`, evaluated in whatever language is active when it is rendered
    (so a toast gets both zh_cn and en_us)."""
    return lazy(lambda: str(message) % {k: str(v) for k, v in params.items()}, str)()


def lost_message(ia: Interaction):
    """What a losing path is told: the interaction was already handled or expired."""
    if ia.status == S.EXPIRED:
        return REFUSALS["expired"]
    return REFUSALS["already_final"]
