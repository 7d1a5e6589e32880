"""Asks (ask_user_questions): register, answer, cancel, and the contract with the panels.

    reg = register_ask(bot, "sess_1", questions=[…], requester_open_id="ou_…")  # or NoChannel
    outcome = submit_answers(bot, reg.ask.public_id, answers, via="card", operator_open_id="ou_…")
    cancel_ask(ask); invalidate_session_asks(bot, "sess_1", reason="recovering")

**One first-answer-wins.** An ask is an `Interaction` of kind `ask` (`models.Ask`, a proxy):
it is completed, expired (the `card_worker` sweeper `lifecycle.resolve.expire_due`) and
cancelled only through `interactions.lifecycle.resolve.resolve()` — the one
`UPDATE … WHERE status='pending'` with its `interaction.resolved` event and long-poll wake-up.
`resolve()` calls this module's hook (`on_resolved`, registered in `InteractionsConfig.ready()`)
for the winner, inside its transaction: the session's progress card is re-rendered through the
card queue (`interactions.asks.card`), and on commit every panel of the requester is told
`ask_user_questions_cancelled` (reason answered | timeout | cancelled | session_ended |
recovering).

**Contract with the panel** (`interactions.panels.service`): `open_asks_for`, `panel_message`,
`cancelled_message`, `submit_answers` (see each docstring; DEVELOPING.md "Progress cards and
asks"). Progress sessions themselves are `interactions.asks.progress`.

Rules:
- 1–4 questions, each single- or multi-select; sub-agents never ask (the view checks
  `channels.kinds.session_capabilities`);
- an ask goes on the session's progress card when it is running (a form per request) and to
  the requester's connected panel; with neither, `NoChannel` is raised at once (no waiting);
- only the requester may answer; single-select: the "other" text wins and clears the labels;
  multi-select keeps both; a question with neither is refused (`empty_answer`);
- a `recovering` or terminal progress state invalidates every pending ask of the session.
"""

from __future__ import annotations

import functools
import logging
import re
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import Max
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from botadmin.models import Bot
from interactions import kinds, presence
from interactions.asks import card as session_card
from interactions.lifecycle.resolve import MAX_TIMEOUT, MIN_TIMEOUT, Outcome, expire, resolve
from interactions.models import Ask, Interaction, ProgressSession
from interactions.render import progress_cards
from plumbing.fields import OPEN_ID_PATTERN
from plumbing.parsers import ascii_int

log = logging.getLogger(__name__)

#: Default of an ask's timeout (seconds); bounds MIN_TIMEOUT..MAX_TIMEOUT as interactions.
DEFAULT_TIMEOUT = 15 * 60
#: Limits of a request.
MAX_QUESTIONS = 4
MAX_CUSTOM_INPUT = 1000

#: Why a panel loses an ask (`cancelled_message` reason).
REASONS = ("answered", "timeout", "cancelled", "session_ended", "recovering")
#: AskOutcome codes.
CODES = ("", "unknown", "finished", "not_sender", "empty_answer", "invalid")

S = Interaction.Status
V = Interaction.Via


class NoChannel(Exception):
    """Neither a running progress card nor a connected panel can show the ask (nothing is
    recorded; the API answers `{"error": "当前通道无法向用户提问"}` at once)."""


class AskRefused(Exception):
    """A registration or progress update was refused; `code` and `field` name why."""

    def __init__(self, code: str, field: str, message):
        super().__init__(code)
        self.code, self.field, self.message = code, field, message


class AnswerError(ValueError):
    """Submitted answers do not fit the ask: `code` is `invalid` or `empty_answer`."""

    def __init__(self, code: str, detail: str = ""):
        super().__init__(detail or code)
        self.code = code


@dataclass(frozen=True)
class AskOutcome:
    """Result of `submit_answers`: `won` for the one submission that completed the ask;
    otherwise `code` says why not (unknown | finished | not_sender | empty_answer | invalid)
    and `ask` is the current row (None when unknown)."""

    won: bool
    code: str
    ask: Ask | None


@dataclass(frozen=True)
class Registration:
    """`register_ask` result: the ask, whether it was created now, and where it is shown."""

    ask: Ask
    created: bool
    on_card: bool
    on_panel: bool


# ---------------------------------------------------------------------------------------------
# The panel contract
# ---------------------------------------------------------------------------------------------


def open_asks_for(bot: Bot, open_id: str, *, now: datetime | None = None) -> list[Ask]:
    """Pending, unexpired asks of `bot` whose requester is `open_id`, oldest first (the
    snapshot a panel gets on connect)."""
    if not open_id:
        return []
    return list(Ask.objects.open_for(bot, open_id, now=now).select_related("bot"))


def panel_message(ask: Interaction) -> dict[str, Any]:
    """The `ask_user_questions` message for panels: `{"type", "requestId", "sessionId",
    "chatId", "questions": [{question, header, options: [{label, description}],
    multiSelect}], "expiresAt": ISO-8601}`."""
    return {
        "type": "ask_user_questions",
        "requestId": ask.public_id,
        "sessionId": ask.session_id,
        "chatId": ask.chat_id,
        "questions": [
            {
                "question": q["question"],
                "header": q.get("header", ""),
                "options": [
                    {"label": o["label"], "description": o.get("description", "")}
                    for o in q.get("options", [])
                ],
                "multiSelect": bool(q.get("multiSelect")),
            }
            for q in ask.questions
        ],
        "expiresAt": ask.expires_at.isoformat(),
    }


def cancelled_message(request_id: str, reason: str) -> dict[str, Any]:
    """The `ask_user_questions_cancelled` message: `{"type", "requestId", "reason"}` with
    reason answered | timeout | cancelled | session_ended | recovering. Raises ValueError for
    another reason."""
    if reason not in REASONS:
        raise ValueError(f"unknown cancel reason {reason!r}")
    return {"type": "ask_user_questions_cancelled", "requestId": request_id, "reason": reason}


def cancel_reason(ask: Interaction) -> str:
    """Why a final ask left the panels (one of REASONS)."""
    if ask.status == S.RESOLVED:
        return "answered"
    if ask.status == S.EXPIRED:
        return "timeout"
    reason = (ask.resolution or {}).get("reason")
    return reason if reason in ("session_ended", "recovering") else "cancelled"


def submit_answers(
    bot: Bot,
    request_id: str,
    answers: Any,
    *,
    via: str,
    operator_open_id: str,
    now: datetime | None = None,
) -> AskOutcome:
    """Complete ask `request_id` with `answers` `[{question, selectedLabels, customInput}]`
    (one per question, in order; `question` is filled from the request) — first wins.

    `via`: panel | card | api. Refusals write nothing: `unknown` (no such ask of `bot`),
    `finished` (answered, expired, cancelled or past `expires_at`), `not_sender` (the operator
    is not the requester), `invalid` (shape, unknown labels, two labels on a single-select,
    text too long), `empty_answer` (a question with no label and no text). The winner's
    transaction (`resolve`) writes `interaction.resolved`, re-renders the progress
    card without the form and, on commit, pushes `cancelled_message(…, "answered")` to panels
    and wakes long-polls. A lost race answers `finished`.
    """
    if via not in (V.PANEL, V.CARD, V.API):
        raise ValueError(f"via must be panel, card or api, not {via!r}")
    now = now or timezone.now()
    ask = find_ask(bot, request_id)
    if ask is None:
        return AskOutcome(False, "unknown", None)
    ask = expire_ask_if_due(ask, now)
    if ask.is_final:
        return AskOutcome(False, "finished", ask)
    if not operator_open_id or operator_open_id != ask.requester_open_id:
        return AskOutcome(False, "not_sender", ask)
    try:
        cleaned = clean_answers(ask.questions, answers)
    except AnswerError as exc:
        return AskOutcome(False, exc.code, ask)
    outcome = resolve(
        ask,
        status=S.RESOLVED,
        via=via,
        action_id="submit",
        value=cleaned,
        operator=operator_open_id,
        now=now,
    )
    current = _as_ask(outcome.interaction)
    return AskOutcome(True, "", current) if outcome.won else AskOutcome(False, "finished", current)


# ---------------------------------------------------------------------------------------------
# Answers (pure)
# ---------------------------------------------------------------------------------------------


def clean_answers(questions: list[dict[str, Any]], answers: Any) -> list[dict[str, Any]]:
    """Validate and normalize answers against `questions` → `[{question, selectedLabels,
    customInput}]` (single-select: text wins and clears the labels; multi-select
    keeps labels, in option order, and text). Answers are matched to questions by position;
    an answer that names its `question` (the panel echoes it; absent or "" names none) must
    name the question at its position, so a client that reordered them is refused instead of
    answering the wrong one.
    Raises `AnswerError("invalid")` for a wrong shape or count, a `question` that is not the
    one at that position, an unknown label, several labels on a single-select or text over
    MAX_CUSTOM_INPUT; `AnswerError("empty_answer")` when a question has neither."""
    if not isinstance(answers, list) or len(answers) != len(questions):
        raise AnswerError("invalid", "one answer per question is needed")
    cleaned = []
    for question, item in zip(questions, answers, strict=True):
        if not isinstance(item, dict):
            raise AnswerError("invalid", "each answer is an object")
        named = item.get("question")
        if named not in (None, "") and named != question["question"]:
            raise AnswerError("invalid", "answers must be in the order of the questions")
        labels = item.get("selectedLabels") or []
        custom = item.get("customInput") or ""
        if not isinstance(labels, list) or not all(isinstance(x, str) for x in labels):
            raise AnswerError("invalid", "selectedLabels is a list of strings")
        if not isinstance(custom, str):
            raise AnswerError("invalid", "customInput is a string")
        custom = custom.strip()
        if len(custom) > MAX_CUSTOM_INPUT:
            raise AnswerError("invalid", "customInput is too long")
        known = [o["label"] for o in question.get("options", [])]
        if any(label not in known for label in labels):
            raise AnswerError("invalid", "unknown label")
        chosen = [label for label in known if label in labels]
        if question.get("multiSelect"):
            selected = chosen
        else:
            if len(chosen) > 1:
                raise AnswerError("invalid", "a single-select question takes one label")
            selected = [] if custom else chosen
        if not selected and not custom:
            raise AnswerError("empty_answer")
        cleaned.append(
            {"question": question["question"], "selectedLabels": selected, "customInput": custom}
        )
    return cleaned


def answers_from_form(ask: Interaction, form_value: dict[str, Any] | None) -> list[dict]:
    """Map a card submit's `form_value` to answers (not yet cleaned): `q<i>` holds option
    indices ("0"…; a string for select_static, a list for multi_select_static), `c<i>` the
    "other" text (names per `progress_cards.field_names`). Missing keys count as empty.
    Raises `AnswerError("invalid")` for an index that is not an option."""
    form_value = form_value if isinstance(form_value, dict) else {}
    answers = []
    for i, question in enumerate(ask.questions):
        select_name, other_name = progress_cards.field_names(ask.form_index, i)
        raw = form_value.get(select_name)
        if raw in (None, ""):
            indices = []
        elif isinstance(raw, list):
            indices = [str(x) for x in raw]
        else:
            indices = [str(raw)]
        options = question.get("options", [])
        labels = []
        for index in indices:
            position = ascii_int(index, max_digits=3)
            if position is None or position >= len(options):
                raise AnswerError("invalid", "unknown option index")
            labels.append(options[position]["label"])
        custom = form_value.get(other_name)
        answers.append(
            {
                "question": question["question"],
                "selectedLabels": labels,
                "customInput": custom if isinstance(custom, str) else "",
            }
        )
    return answers


# ---------------------------------------------------------------------------------------------
# Asks: register, read, cancel, invalidate
# ---------------------------------------------------------------------------------------------


def new_request_id() -> str:
    """`ask_` + 16 random hex digits: the `requestId` of an ask (unguessable)."""
    return f"ask_{secrets.token_hex(8)}"


def _as_ask(ia: Interaction) -> Ask:
    if isinstance(ia, Ask):
        return ia
    ask = Ask.objects.select_related("bot").get(pk=ia.pk)
    return ask


def find_ask(bot: Bot, request_id: str) -> Ask | None:
    """The ask `request_id` of `bot`, or None."""
    if not request_id or not isinstance(request_id, str):
        return None
    return Ask.objects.select_related("bot", "card").filter(bot=bot, public_id=request_id).first()


def expire_ask_if_due(ask: Ask, now: datetime) -> Ask:
    if not ask.is_final and now >= ask.expires_at:
        return _as_ask(expire(ask, now=now).interaction)
    return ask


def read_ask(bot: Bot, request_id: str, *, now: datetime | None = None) -> Ask | None:
    """The ask, expired first when it is past `expires_at` (so a read never shows a dead ask
    as pending), or None."""
    ask = find_ask(bot, request_id)
    return None if ask is None else expire_ask_if_due(ask, now or timezone.now())


def ask_status(ask: Interaction) -> str:
    """pending | answered | timeout | cancelled (the API's names of the interaction states)."""
    return {
        S.PENDING: "pending",
        S.RESOLVED: "answered",
        S.EXPIRED: "timeout",
        S.CANCELLED: "cancelled",
    }[ask.status]


def ask_state(ask: Interaction) -> dict[str, Any]:
    """The API view of an ask: `{requestId, sessionId, status, reason, answers, answered_via,
    questions, expiresAt, createdAt, resolvedAt}`; `answers` is `[]` until answered,
    `reason` (why it left the panels) None while pending."""
    resolution = ask.resolution or {}
    answered = ask.status == S.RESOLVED
    return {
        "requestId": ask.public_id,
        "sessionId": ask.session_id,
        "status": ask_status(ask),
        "reason": None if ask.status == S.PENDING else cancel_reason(ask),
        "answers": list(resolution.get("value") or []) if answered else [],
        "answered_via": resolution.get("via") if answered else None,
        "questions": ask.questions,
        "expiresAt": ask.expires_at.isoformat(),
        "createdAt": ask.created_at.isoformat(),
        "resolvedAt": ask.resolved_at.isoformat() if ask.resolved_at else None,
    }


def _key_taken() -> AskRefused:
    """The idempotency key belongs to an approval, quick reply or form of the same bot (one
    key space per bot: the `interaction_request_id` unique index)."""
    return AskRefused(
        "idempotency_key_taken",
        "idempotency_key",
        _("This idempotency_key is already used by another kind of interaction."),
    )


def _repeated(existing: Interaction, session_id: str) -> Registration:
    """The answer to a repeated `idempotency_key`: the first ask, when it belongs to the same
    session; another session's ask is refused (`idempotency_key_taken`) rather than handed
    to a caller that would then wait on, or cancel, someone else's question."""
    if existing.session_id != session_id:
        raise AskRefused(
            "idempotency_key_taken",
            "idempotency_key",
            _("This idempotency_key is already used by an ask of another session."),
        )
    return Registration(existing, False, bool(existing.card_id), False)


def person_fits(channel: str, person_id: str) -> bool:
    """Whether `person_id` has the shape of a person id on `channel` (Feishu `ou_…`, Slack
    `U…`/`W…`, Telegram a number: `kinds.OPERATOR_ID_PATTERNS`); a channel without its own
    pattern takes Feishu's."""
    pattern = kinds.OPERATOR_ID_PATTERNS.get(channel, OPEN_ID_PATTERN)
    return re.match(pattern, person_id) is not None


def register_ask(
    bot: Bot,
    session_id: str,
    *,
    questions: list[dict[str, Any]],
    requester_open_id: str = "",
    chat_id: str = "",
    timeout_seconds: int | None = None,
    idempotency_key: str = "",
    now: datetime | None = None,
) -> Registration:
    """Record an ask of `session_id` and show it where the requester can answer.

    Surfaces: the session's progress card when it is running (a form `ask_<n>` is added by
    re-rendering the card; no other notification is sent) and the requester's connected panel
    (`presence.push(panel_message)` on commit). The requester defaults to the progress session's.
    A repeated `idempotency_key` returns the first ask (`created` False) and shows nothing new;
    the key of another session's ask is refused (`AskRefused` `idempotency_key_taken`).

    Raises `NoChannel` (nothing recorded) when neither surface exists, `AskRefused` when no
    requester is known (`requester_required`) or the given one is not a person id of the
    session's channel (`requester_channel`). `questions` must already be validated (the API serializer: 1–4
    questions, 1–10 options with unique labels). Timeout: DEFAULT_TIMEOUT (15 min), clamped
    to MIN_TIMEOUT..MAX_TIMEOUT.
    """
    now = now or timezone.now()
    if not 1 <= len(questions) <= MAX_QUESTIONS:
        raise ValueError("an ask has 1 to 4 questions")
    timeout = DEFAULT_TIMEOUT if timeout_seconds is None else int(timeout_seconds)
    timeout = max(MIN_TIMEOUT, min(MAX_TIMEOUT, timeout))
    try:
        with transaction.atomic():
            session = (
                ProgressSession.objects.select_for_update()
                .filter(bot=bot, session_id=session_id)
                .first()
            )
            if idempotency_key:
                existing = Ask.objects.for_request(bot, idempotency_key).first()
                if existing is not None:
                    return _repeated(existing, session_id)
                if Interaction.objects.for_request(bot, idempotency_key).exists():
                    raise _key_taken()
            requester = requester_open_id or (session.requester_open_id if session else "")
            if session is not None and requester and not person_fits(session.channel, requester):
                raise AskRefused(
                    "requester_channel",
                    "requester_open_id",
                    _("Use the requester's id on %(channel)s (the session's channel).")
                    % {"channel": session.channel},
                )
            if not requester:
                raise AskRefused(
                    "requester_required",
                    "requester_open_id",
                    _("Give requester_open_id (the session's progress card names nobody)."),
                )
            on_card = bool(
                session is not None
                and session.shows_forms
                and (session.card_id or session.sending_since)
            )
            on_panel = bool(presence.is_connected(bot, requester))
            if not (on_card or on_panel):
                raise NoChannel()
            last = (
                Ask.objects.of_session(bot, session_id).aggregate(n=Max("form_index"))["n"]
                if session_id
                else None
            )
            first_question = questions[0]
            ask = Ask(
                public_id=new_request_id(),
                bot=bot,
                kind=Interaction.Kind.ASK,
                channel=session.channel if session is not None else kinds.FEISHU,
                chat_id=chat_id or (session.chat_id or session.receive_id if session else ""),
                requester_open_id=requester,
                session_id=session_id,
                request_id=idempotency_key,
                title=(first_question.get("header") or first_question["question"])[:200],
                body=first_question["question"][: Interaction.MAX_BODY],
                questions=questions,
                form_index=0 if last is None else last + 1,
                card=session.card if on_card else None,
                open_message_id=session.card.open_message_id if on_card and session.card else "",
                expires_at=now + timedelta(seconds=timeout),
                created_at=now,
            )
            ask.save()
            if on_card:
                session_card.refresh_card(session)
            if on_panel:
                transaction.on_commit(functools.partial(_push, bot, requester, panel_message(ask)))
    except IntegrityError:
        if idempotency_key:  # a concurrent retry with the same key won
            existing = Ask.objects.for_request(bot, idempotency_key).first()
            if existing is None:  # an interaction of another kind holds the key
                raise _key_taken() from None
            return _repeated(existing, session_id)
        raise
    log.info("ask %s registered (card=%s, panel=%s)", ask.public_id, on_card, on_panel)
    return Registration(ask, True, on_card, on_panel)


def cancel_ask(ask: Interaction, *, reason: str = "cancelled") -> Outcome:
    """Cancel a pending ask (`via: cancel`, resolution reason `reason`: cancelled |
    session_ended | recovering); its form leaves the card and panels are told. A final ask
    is reported as lost (`won` False)."""
    if reason not in ("cancelled", "session_ended", "recovering"):
        raise ValueError(f"unknown cancel reason {reason!r}")
    return resolve(ask, status=S.CANCELLED, via=V.CANCEL, reason=reason)


def invalidate_session_asks(bot: Bot, session_id: str, *, reason: str) -> int:
    """Cancel every pending ask of the session (runtime restart: `recovering`; session end:
    `session_ended`; the backend's cancel: `cancelled`). Each goes through `resolve()`, so a
    submit racing it either wins first or gets `finished`. Returns how many this call
    cancelled."""
    count = 0
    for ask in Ask.objects.of_session(bot, session_id).pending().order_by("id"):
        if cancel_ask(ask, reason=reason).won:
            count += 1
    return count


def _push(bot: Bot, open_id: str, message: dict[str, Any]) -> None:
    try:
        presence.push(bot, open_id, message)
    except Exception:  # noqa: BLE001 - presence.push must never raise; be safe anyway
        log.warning("panel push of %s failed", message.get("type"), exc_info=True)


def on_resolved(ia: Interaction) -> None:
    """`resolve()` hook for asks (inside the winner's transaction): re-render the
    session's progress card without the form, and on commit tell the requester's panels."""
    session = ProgressSession.objects.filter(bot_id=ia.bot_id, session_id=ia.session_id).first()
    if ia.session_id and session is not None and session.card_id:
        session_card.refresh_card(session)
    if ia.requester_open_id:
        transaction.on_commit(
            functools.partial(
                _push,
                ia.bot,
                ia.requester_open_id,
                cancelled_message(ia.public_id, cancel_reason(ia)),
            )
        )
