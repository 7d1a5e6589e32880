"""The card-action handlers of progress messages: registry kinds `feishu_ask` (a form submit
answering an ask) and `progress` (the "Cancel task" and "Session details" buttons), for Feishu
cards and Slack messages alike (a Slack click arrives as the same `CardAction`; its message is
found by its `ts`). Registered in `InteractionsConfig.ready()`.

Only Feishu shows a card in the callback answer (to the clicker at once); on Slack the answer
is the toast (posted ephemerally) and the message changes through the card queue, which the
state change itself fills (`refresh_card` from the resolve hook or `request_cancel`)."""

from __future__ import annotations

from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from interactions import kinds
from interactions.asks import service as asks
from interactions.asks.card import pending_asks, render_session
from interactions.asks.progress import request_cancel, session_for_message
from interactions.callbacks.registry import Answer
from interactions.lifecycle.resolve import lazy_format
from interactions.models import Interaction, ProgressSession

V = Interaction.Via


#: Toasts (English msgids; zh-hans in locale: 已提交, 问题已失效, 仅消息发送者可操作,
#: 请至少选择一项或填写其他).
SUBMITTED = _("Submitted")
STALE = _("This question is no longer valid")
NOT_SENDER = _("Only the message sender can do this")
EMPTY_ANSWER = _("Choose at least one option or fill in Other")
INVALID_ANSWER = _("That answer does not fit the question; please refresh the card")
NO_SESSION = _("This task card is no longer tracked")
CANCEL_RECORDED = _("Cancellation requested; the agent will stop")
CANCEL_ALREADY = _("Cancellation was already requested")
SESSION_ENDED = _("This task has already ended")


def answer_card(session: ProgressSession | None):
    """The card to put in a callback answer: the session's current Feishu card, None for a
    session on another channel (its message is updated through the card queue) or none."""
    if session is None or session.channel != kinds.FEISHU:
        return None
    return render_session(session)


def _card_of(action) -> ProgressSession | None:
    """The progress session shown by the clicked message (never the ids inside `value`)."""
    return session_for_message(action.bot, action.open_message_id)


def on_ask_action(action):
    """Registry handler of `{"kind": "feishu_ask", "act": "submit", "sessionId", "requestId",
    "sender"}` (a form submit on a progress card).

    Only the ask's requester (from the verified callback, not `sender`) may submit; others get
    "仅消息发送者可操作" and nothing changes. A question with no option and no text gets
    "请至少选择一项或填写其他" and the card keeps the form (no card in the answer). The winner
    gets "已提交" and the whole progress card without that form in the answer (Feishu shows
    the card of a callback answer to the person who clicked at once); the queued re-render
    (held until the answer was sent) covers everyone else. Unknown or finished asks get "问题已失效"
    and the current card (without that form).
    """
    value = action.value
    session = _card_of(action)

    def current_card():
        return answer_card(session)

    if value.get("act") != "submit":
        return Answer.warning(INVALID_ANSWER, card=current_card())
    request_id = str(value.get("requestId") or "")
    ask = asks.find_ask(action.bot, request_id)
    if ask is None or ask.is_final or timezone.now() >= ask.expires_at:
        if ask is not None:
            asks.expire_ask_if_due(ask, timezone.now())
        return Answer.info(STALE, card=current_card())
    if action.operator_open_id != ask.requester_open_id:
        return Answer.warning(NOT_SENDER)
    try:
        answers = asks.answers_from_form(ask, action.form_value)
    except asks.AnswerError:
        return Answer.warning(INVALID_ANSWER)
    outcome = asks.submit_answers(
        action.bot, request_id, answers, via=V.CARD, operator_open_id=action.operator_open_id
    )
    if outcome.won:
        return Answer.success(SUBMITTED, card=current_card())
    if outcome.code == "empty_answer":
        return Answer.warning(EMPTY_ANSWER)
    if outcome.code == "not_sender":
        return Answer.warning(NOT_SENDER)
    if outcome.code == "invalid":
        return Answer.warning(INVALID_ANSWER)
    return Answer.info(STALE, card=current_card())


def on_progress_action(action):
    """Registry handler of `{"kind": "progress", "act": "cancel" | "details", "sessionId"}`
    (buttons outside every form).

    - `cancel`: only the requester; records the request once (`request_cancel`), answers a
      success toast and the card with "cancellation requested" instead of the button.
      Cardloop stops nothing: the backend learns of it from the `session.cancel_requested`
      event and from `cancel_requested` in its progress calls.
    - `details`: a toast with the session's status and how many questions are open.
    """
    session = _card_of(action)
    if session is None:
        return Answer.warning(NO_SESSION)
    act = action.value.get("act")
    if act == "details":
        return Answer.info(
            lazy_format(
                _("Session %(session)s: %(status)s, %(open)s open question(s)"),
                session=session.session_id[:40],
                status=ProgressSession.Status(session.status).label,
                open=len(pending_asks(session)),
            )
        )
    if act != "cancel":
        return Answer.warning(INVALID_ANSWER)
    if action.operator_open_id != session.requester_open_id:
        return Answer.warning(NOT_SENDER)
    if session.is_terminal:
        return Answer.info(SESSION_ENDED, card=answer_card(session))
    recorded = request_cancel(session, operator_open_id=action.operator_open_id)
    session.refresh_from_db()
    message = CANCEL_RECORDED if recorded else CANCEL_ALREADY
    return Answer.success(message, card=answer_card(session))
