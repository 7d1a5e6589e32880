"""Asks on a Telegram progress message: the keyboard's server-side state, and what a tap on
an ask or progress button and a reply to an "Other…" prompt do.

Telegram has no forms: a button carries at most 64 bytes of `callback_data`
(https://core.telegram.org/bots/api#inlinekeyboardbutton), so what the requester picked so
far lives in `interactions.models.TelegramAskState` (one row per ask) and the message is
re-rendered from it through the card-update queue after each change (`editMessageText`,
after the tap's `answerCallbackQuery`). The rules (which tap answers, Submit, Other…) are in
`interactions.channels.telegram.progress`.

- `on_ask_tap(action, verb, ask id, numbers)` (the `telegram` registry handler calls it for
  `aq:` / `as:` / `ao:` data): the ask must be on the tapped message (its session's progress
  message: a tap in another chat or on another message finds nothing), pending and not
  expired (else "already answered" / "withdrawn" / "expired", nothing written), and the
  operator (`callback_query.from.id` of the authenticated update) its requester (else "only
  the requester…", nothing written).
  - a pick (`aq`) on an ask of one single-select question answers it at once; on any other
    ask it toggles the option in the state (`toggle_option`: one transaction, the ask's row
    locked first, so two rapid taps are applied one after the other);
  - Submit (`as`) answers with the state's choice;
  - Other… (`ao`) sends a `force_reply` prompt (https://core.telegram.org/bots/api#forcereply)
    and records it (`TelegramReplyPrompt`), once per tap however often its handler runs
    (`interactions.channels.telegram.prompts`).
  Every answer goes through `interactions.asks.service.submit_answers(…, via="card")`, the
  one first-answer-wins path, shared with the panel, the API and Feishu's form submit.
- `on_reply(bot, message)`: a reply to such a prompt (`reply_to_message`) from the requester
  becomes the question's "Other" text (`set_other`), or answers an ask of one single-select
  question at once. Returns the text to reply with, or None when the message is not a reply
  to a prompt (then it may be a typed command).
- `on_progress_tap(action, act)`: "Cancel task" / "Session details" become the `progress`
  click Feishu's buttons send (`interactions.asks.handlers.on_progress_action`, found through
  the registry).

This package imports no domain module (`interactions.asks` imports the channels): the ask
service's `submit_answers` and the progress message's `refresh_card` are handed over in
`InteractionsConfig.ready()` (`use_asks`). Never logs ids of people, button data or text.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone, translation
from django.utils.functional import lazy
from django.utils.translation import gettext_lazy as _

from interactions.callbacks import registry
from interactions.callbacks.registry import Answer, CardAction, Toast
from interactions.channels.telegram import prompts, render
from interactions.models import (
    Ask,
    Interaction,
    ProgressSession,
    TelegramAskState,
    TelegramReplyPrompt,
)
from interactions.render.bilingual import language_of

log = logging.getLogger(__name__)

S = Interaction.Status
#: The registry kind of the progress buttons' clicks (Feishu's "Cancel task" / "details").
PROGRESS_KIND = "progress"
#: Longest "Other" text (the asks' customInput limit).
MAX_OTHER = 1000

#: Toasts and replies (English msgids; zh-hans in the interactions locale).
NOT_REQUESTER = _("Only the requester can answer this question")
ANSWERED = _("This question was already answered")
WITHDRAWN = _("This question was withdrawn")
EXPIRED = _("This question has expired")
NOT_HERE = _("This question is not on this message; please use the latest task message")
SUBMITTED = _("Submitted")
INCOMPLETE = _("Answer every question (an option or Other…) before you submit")
INVALID = _("That answer does not fit the question; please refresh the card")
OTHER_ASKED = _("Reply to the prompt below with your answer")
OTHER_NOTED = _("Noted. Tap Submit when every question is answered.")
OTHER_NOT_TEXT = _("Please reply with text.")
OTHER_TOO_LONG = _("That answer is too long (at most 1000 characters).")
SEND_FAILED = _("Telegram did not take the prompt; please try again")
PICKED = _("Chosen: %(label)s")
UNPICKED = _("Removed: %(label)s")


def _label_toast(message, label: str):
    """`message % {"label": label}` in whatever language is active when it is shown (the
    toast is rendered in both languages)."""
    return lazy(lambda: str(message) % {"label": label}, str)()


@dataclasses.dataclass
class _Domain:
    submit_answers: Callable[..., Any] | None = None
    refresh_card: Callable[[ProgressSession], None] | None = None


_domain = _Domain()


def use_asks(submit_answers: Callable[..., Any], refresh_card: Callable[..., None]) -> None:
    """Answer asks with `submit_answers(bot, request_id, answers, via=, operator_open_id=)`
    (`interactions.asks.service.submit_answers`) and re-render a session's progress message
    with `refresh_card(session)` (`interactions.asks.card.refresh_card`): both live in the
    domain, which imports the channels, so they are handed over in `ready()`."""
    _domain.submit_answers = submit_answers
    _domain.refresh_card = refresh_card


# ---------------------------------------------------------------------------------------------
# State (one transaction each, the ask's row locked first)
# ---------------------------------------------------------------------------------------------


def selection_of(state: TelegramAskState | None) -> render.Selection:
    """The `render.Selection` a state row holds (empty for None; keys that are not question
    numbers are skipped)."""
    if state is None:
        return render.Selection()
    picked = {
        int(q): tuple(sorted(int(o) for o in options))
        for q, options in (state.picked or {}).items()
        if str(q).isdigit() and isinstance(options, list)
    }
    other = {int(q): str(text) for q, text in (state.other or {}).items() if str(q).isdigit()}
    return render.Selection(picked, other)


def selections_for(asks: list[Interaction]) -> dict[str, render.Selection]:
    """`{ask public_id: Selection}` of the saved `asks` (one query; asks without a state are
    left out)."""
    ids = {a.pk: a.public_id for a in asks if a.pk is not None}
    if not ids:
        return {}
    states = TelegramAskState.objects.filter(ask_id__in=list(ids))
    return {ids[state.ask_id]: selection_of(state) for state in states}


def _store(state: TelegramAskState, selection: render.Selection, tap_id: str) -> None:
    state.picked = {str(q): list(o) for q, o in selection.picked.items() if o}
    state.other = {str(q): text for q, text in selection.other.items() if text}
    if tap_id:
        state.taps = [*(state.taps or []), tap_id][-TelegramAskState.MAX_TAPS :]
    state.save()


def _change(
    ask: Interaction,
    session: ProgressSession,
    tap_id: str,
    change: Callable[[Interaction, render.Selection], render.Selection],
) -> render.Selection | None:
    """Apply `change` to `ask`'s state in one transaction: the ask's row is locked (the lock
    order of `resolve()`: ask, then session), a final ask changes nothing (None), a tap
    already applied (`tap_id` in `taps`, a handler run again) is not applied twice, and the
    session's progress message is queued for re-rendering."""
    with transaction.atomic():
        locked = (
            Interaction.objects.select_for_update()
            .filter(pk=ask.pk, status=S.PENDING)
            .only("pk", "questions", "status")
            .first()
        )
        if locked is None:
            return None
        state, _created = TelegramAskState.objects.get_or_create(ask_id=locked.pk)
        selection = selection_of(state)
        if tap_id and tap_id in (state.taps or []):
            return selection
        selection = change(locked, selection)
        _store(state, selection, tap_id)
        if _domain.refresh_card is not None:
            _domain.refresh_card(session)
    return selection


def toggle_option(
    ask: Interaction, session: ProgressSession, q: int, o: int, *, tap_id: str = ""
) -> render.Selection | None:
    """Tap option `o` of question `q` (`render.toggle`: multi-select ticks or unticks it,
    single-select picks it and drops that question's "Other" text). Returns the new
    selection, None when the ask is no longer pending. Raises IndexError for a question or
    option the ask does not have (nothing written)."""
    return _change(ask, session, tap_id, lambda a, sel: render.toggle(a, sel, q, o))


def set_other(
    ask: Interaction, session: ProgressSession, q: int, text: str, *, tap_id: str = ""
) -> render.Selection | None:
    """Set question `q`'s "Other" text (single-select: it replaces the picked option, as
    `submit_answers` would). Returns the new selection, None when the ask is final."""

    def change(a: Interaction, sel: render.Selection) -> render.Selection:
        picked, other = dict(sel.picked), dict(sel.other)
        other[q] = text
        if not (a.questions or [])[q].get("multiSelect"):
            picked.pop(q, None)
        return render.Selection(picked, other)

    return _change(ask, session, tap_id, change)


def forget(ask: Interaction) -> None:
    """Delete `ask`'s keyboard state and prompts (once it is final: an answered ask's "Other"
    text then lives in its resolution only, a withdrawn or expired ask's nowhere)."""
    with transaction.atomic():
        TelegramAskState.objects.filter(ask_id=ask.pk).delete()
        TelegramReplyPrompt.objects.filter(ask_id=ask.pk).delete()


def after_resolution(hook: Callable[[Interaction], None]) -> Callable[[Interaction], None]:
    """The asks' `resolve()` hook `hook` followed by `forget`, both inside the winning
    transaction (registered in `ready()`: every way an ask ends — answered anywhere,
    cancelled, expired — drops its Telegram state)."""

    def resolved(ask: Interaction) -> None:
        hook(ask)
        forget(ask)

    return resolved


# ---------------------------------------------------------------------------------------------
# Taps
# ---------------------------------------------------------------------------------------------


def session_of_message(bot, open_message_id: str) -> ProgressSession | None:
    """The progress session shown in message `open_message_id` (`tg:<chat>:<message>`)."""
    return ProgressSession.objects.for_message(bot, open_message_id).select_related("card").first()


def _stale(ask: Interaction):
    """Why a final (or past-due) ask takes no answer."""
    if ask.status == S.RESOLVED:
        return ANSWERED
    if ask.status == S.EXPIRED or (ask.status == S.PENDING and timezone.now() >= ask.expires_at):
        return EXPIRED
    return WITHDRAWN


def _checked(action: CardAction, public_id: str):
    """`(ask, session, None)` when `action`'s operator may answer ask `public_id` on the
    tapped message, else `(…, refusal Answer)`."""
    session = session_of_message(action.bot, action.open_message_id)
    ask = Ask.objects.filter(bot=action.bot, public_id=public_id).first()
    if ask is None or session is None or ask.session_id != session.session_id:
        return ask, session, Answer.warning(NOT_HERE)
    if ask.is_final or timezone.now() >= ask.expires_at:
        return ask, session, Answer.info(_stale(ask))
    if not action.operator_open_id or action.operator_open_id != ask.requester_open_id:
        return ask, session, Answer.warning(NOT_REQUESTER)
    return ask, session, None


def submit(bot, ask: Interaction, answers: list[dict[str, Any]], operator: str):
    """Answer `ask` with `answers` through `submit_answers` (via card). Returns `(toast type,
    lazy text)` saying what happened."""
    if _domain.submit_answers is None:
        return "warning", INVALID
    outcome = _domain.submit_answers(
        bot, ask.public_id, answers, via=Interaction.Via.CARD, operator_open_id=operator
    )
    if outcome.won:  # its state went with the resolution (`after_resolution`)
        return "success", SUBMITTED
    if outcome.code == "empty_answer":
        return "warning", INCOMPLETE
    if outcome.code == "not_sender":
        return "warning", NOT_REQUESTER
    if outcome.code == "invalid":
        return "warning", INVALID
    return "info", _stale(outcome.ask or ask)


def _answer(result) -> Answer:
    toast_type, text = result
    return Answer(toast=Toast.of(toast_type, text))


def on_ask_tap(action: CardAction, verb: str, public_id: str, numbers: tuple[int, ...]):
    """A tap on an ask's button (`aq:<id>:<q>:<o>`, `as:<id>`, `ao:<id>:<q>`; see the module
    docstring). Returns the `Answer` whose toast `answerCallbackQuery` shows."""
    ask, session, refusal = _checked(action, public_id)
    if refusal is not None:
        return refusal
    questions = ask.questions or []
    if numbers and not 0 <= numbers[0] < len(questions):
        return Answer.warning(INVALID)
    if verb == render.SUBMIT:
        selection = selection_of(TelegramAskState.objects.filter(ask_id=ask.pk).first())
        return _answer(
            submit(action.bot, ask, render.answers(ask, selection), action.operator_open_id)
        )
    if verb == render.OTHER:
        return _prompt_other(action, ask, session, numbers[0])
    q, o = numbers
    options = questions[q].get("options", [])
    if not 0 <= o < len(options):
        return Answer.warning(INVALID)
    label = options[o]["label"]
    if not render.needs_submit(ask):
        answers = [{"question": questions[0]["question"], "selectedLabels": [label]}]
        return _answer(submit(action.bot, ask, answers, action.operator_open_id))
    selection = toggle_option(ask, session, q, o, tap_id=action.event_id)
    if selection is None:
        ask.refresh_from_db()
        return Answer.info(_stale(ask))
    chosen = o in selection.picked.get(q, ())
    return Answer.success(_label_toast(PICKED if chosen else UNPICKED, label))


def claim_other_prompt(
    action: CardAction, ask: Interaction, chat_id: str, q: int
) -> tuple[TelegramReplyPrompt | None, bool]:
    """`(prompt row, send)` for tap `action` asking for question `q`'s "Other" text
    (`prompts.claim`, one transaction, the ask's row locked first as `_change` does), or
    `(None, False)` when the ask is no longer pending: a prompt row is only ever written for a
    pending ask, so its resolution (`forget`) leaves none behind."""
    with transaction.atomic():
        locked = (
            Interaction.objects.select_for_update()
            .filter(pk=ask.pk, status=S.PENDING)
            .only("pk")
            .first()
        )
        if locked is None:
            return None, False
        return prompts.claim(
            TelegramReplyPrompt,
            bot=action.bot,
            event_id=action.event_id,
            chat_id=str(chat_id),
            ask_id=locked.pk,
            question=q,
        )


def _prompt_other(action: CardAction, ask: Interaction, session: ProgressSession, q: int):
    """Send the `force_reply` prompt for question `q` (in the bot's card language, like the
    message) to the tapped message's chat, once per tap (`claim_other_prompt`)."""
    address = (session.card.address if session.card else None) or {}
    chat_id = address.get("chat_id") or action.open_chat_id
    prompt, send = claim_other_prompt(action, ask, chat_id, q)
    if prompt is None:
        ask.refresh_from_db()
        return Answer.info(_stale(ask))
    if send:
        tg = getattr(action.bot, "telegram_bot", None)
        with translation.override(language_of(ask)):
            message = render.other_prompt(ask, q)
        token = tg.secret("bot_token") if tg is not None else ""
        if not prompts.send(prompt, token, message, settings.CARDLOOP_TELEGRAM_API_BASE_URL):
            return Answer.warning(SEND_FAILED)
    return Answer.info(OTHER_ASKED)


def on_progress_tap(action: CardAction, act: str):
    """The "Cancel task" / "Session details" buttons (`pg:c` / `pg:d`): the `progress`
    click of the tapped message (`{"kind": "progress", "act": act}`), answered by its
    registered handler (requester-only cancel, recorded once; the details toast). Only the
    toast is kept."""
    handler = registry.handler_for(PROGRESS_KIND)
    if handler is None:
        return Answer.warning(INVALID)
    value = {"kind": PROGRESS_KIND, "act": act}
    result = handler(dataclasses.replace(action, kind=PROGRESS_KIND, value=value))
    return Answer(toast=result.toast) if isinstance(result, Answer) else result


# ---------------------------------------------------------------------------------------------
# Replies to "Other…" prompts
# ---------------------------------------------------------------------------------------------


def on_reply(bot, message: dict[str, Any], *, event_id: str = ""):
    """The reply to send (a lazy text) for `message` (a Telegram Message,
    https://core.telegram.org/bots/api#message) when it replies to a prompt Cardloop sent,
    else None. The sender (`from.id`) must be the ask's requester; the text (≤ 1000
    characters) becomes the question's "Other" text, or answers an ask of one single-select
    question at once."""
    replied = message.get("reply_to_message")
    chat = message.get("chat") if isinstance(message.get("chat"), dict) else {}
    if not isinstance(replied, dict) or not isinstance(replied.get("message_id"), int):
        return None
    prompt = (
        TelegramReplyPrompt.objects.filter(
            bot=bot, chat_id=str(chat.get("id")), message_id=replied["message_id"]
        )
        .select_related("ask")
        .first()
    )
    if prompt is None:
        return None
    ask = prompt.ask
    sender = message.get("from") if isinstance(message.get("from"), dict) else {}
    text = message.get("text")
    session = ProgressSession.objects.filter(bot=bot, session_id=ask.session_id).first()
    if ask.is_final or timezone.now() >= ask.expires_at or session is None:
        return _stale(ask)
    if str(sender.get("id") or "") != ask.requester_open_id:
        return NOT_REQUESTER
    if not isinstance(text, str) or not text.strip():
        return OTHER_NOT_TEXT
    text = text.strip()
    if len(text) > MAX_OTHER:
        return OTHER_TOO_LONG
    if not render.needs_submit(ask):
        question = (ask.questions or [])[0]["question"]
        answers = [{"question": question, "selectedLabels": [], "customInput": text}]
        return submit(bot, ask, answers, ask.requester_open_id)[1]
    if set_other(ask, session, prompt.question, text, tap_id=event_id) is None:
        ask.refresh_from_db()
        return _stale(ask)
    return OTHER_NOTED
