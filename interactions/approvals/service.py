"""Approvals, quick replies, forms and typed commands: creating, sending and answering them.

    ia, created = create_interaction(bot, kind="approval", channel="feishu", chat_id="oc_…",
                                     requester_open_id="ou_…", title="Run rm?", tool="bash")
    ia = send_to_chat(ia)                       # Feishu: card sent, message recorded
    outcome = answer(ia, choice="approve", via="card", operator="ou_…", chat_id="oc_…")
    rule = check_rule(bot, "bash", session_id="s1", chat_id="oc_…")

The state change itself (`resolve`, `cancel`, `expire_due`) is the one lifecycle of
`interactions.lifecycle.resolve`; this module validates answers before anything is written
(`Refused(code)`): the interaction must exist, be pending and not past `expires_at`, the chat
must match, the operator must be allowed (the allow-list, else the requester), and the choice
must be one of the interaction's actions — an unknown action value is refused, never turned
into a denial.
"""

from __future__ import annotations

import logging
import re
import secrets
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from botadmin.models import Bot
from interactions import channels, kinds
from interactions.cardqueue import service as cards
from interactions.lifecycle.resolve import (
    FINAL_VERSION,
    MAX_TIMEOUT,
    MIN_TIMEOUT,
    REFUSALS,
    Outcome,
    Refused,
    lazy_format,
    resolve,
)
from interactions.models import ApprovalRule, CardEntity, Interaction
from interactions.render import interaction_cards
from interactions.render.interaction_cards import ALWAYS, APPROVE, SUBMIT
from plumbing.parsers import ascii_int

log = logging.getLogger(__name__)

#: Longest question (characters) and typed answer accepted.
MAX_BODY = Interaction.MAX_BODY
MAX_TEXT_ANSWER = 1000

S = Interaction.Status
V = Interaction.Via


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
    channel_kind = kinds.normalize(channel)
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
    """Render `ia` for its channel and send it to its chat (Feishu: a CardKit entity, `uuid` =
    the interaction id so a retried send is deduplicated by Feishu), then record the message.
    Channels without buttons are not sent (the API returns the text fallback). Network I/O;
    call it outside any transaction.

    Raises `SendFailed` after recording the interaction as cancelled (reason `send_failed`),
    so a failed send never leaves a live pending interaction nobody can answer.
    """
    channel = channels.get(ia.channel)
    if not channel.capabilities.buttons or ia.card_id or ia.is_final:
        return ia
    card = channel.render_interaction(ia)
    try:
        entity = channel.send(
            ia.bot, card, receive_id=ia.chat_id, uuid=ia.public_id, purpose="interaction"
        )
    except cards.InvalidCard as exc:
        outcome = resolve(ia, status=S.CANCELLED, via=V.CANCEL, reason="send_failed")
        raise SendFailed(outcome.interaction, msg="invalid card", problems=exc.problems) from None
    except channel.send_errors as exc:
        log.warning("interaction %s: sending the card failed: %s", ia.public_id, exc)
        outcome = resolve(ia, status=S.CANCELLED, via=V.CANCEL, reason="send_failed")
        raise SendFailed(
            outcome.interaction, code=exc.code, msg=exc.msg, log_id=exc.log_id
        ) from None
    except ValueError:  # send_card: the message is recorded for another card entity
        # (a card registered before sends were recorded by uuid): the interaction is shown;
        # return what that send recorded
        log.warning("interaction %s: the card was already recorded by another send", ia.pk)
        return Interaction.objects.select_related("card").get(pk=ia.pk)
    return attach_card(ia, entity)


#: An interaction still pending without a card this long after it was created lost its
#: first send (the creating process died): a retry of its request_id sends it. The one
#: stale-send rule of every card (`cards.SEND_STALE`, `cards.send_is_stale`).
SEND_STALE = cards.SEND_STALE


def send_was_interrupted(ia: Interaction, now: datetime | None = None) -> bool:
    """Whether `ia` is a pending interaction whose first card send never finished (see
    SEND_STALE), so that a retry of its request should send it. Resending keeps the message
    `uuid` (the interaction id) and `cards.send_card` sends the card entity it recorded
    before the first message, so Feishu answers with the first message if it went out."""
    now = now or timezone.now()
    return (
        channels.capabilities(ia.channel).buttons
        and not ia.card_id
        and ia.status == S.PENDING
        and cards.send_is_stale(ia.created_at, now)
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
            channel = channels.get(locked.channel)
            channel.update(entity, channel.render_interaction(locked), version=FINAL_VERSION)
    return locked


# ---------------------------------------------------------------------------------------------
# Answers from people (card, text, API)
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
    field names (typed). Unknown keys are ignored and never stored (only
    the interaction's own fields are kept). Raises
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


def lost_message(ia: Interaction):
    """What a losing path is told: the interaction was already handled or expired."""
    if ia.status == S.EXPIRED:
        return REFUSALS["expired"]
    return REFUSALS["already_final"]
