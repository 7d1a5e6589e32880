"""Clicks on the feedback area → immutable revisions.

Card-action handlers `feedback` and `feedback_detail` (registered from
`FeedbackConfig.ready()`) call the two state changes here:

- `record_choice(...)`: a verdict button, value `{"kind": "feedback", "delivery", "key", "rev"}`;
- `record_details(...)`: the negative follow-up form, value `{"kind": "feedback_detail",
  "delivery", "rev"}` with `form_value` `{"fb_reason": <reason key>, "fb_comment": <text>}`.

Each runs in one transaction that locks the delivery row (clicks on one delivery are
serialized on PostgreSQL; SQLite writers are anyway) and, in this order:

1. finds the delivery of this bot (and, when it has one, the clicked message must be its
   message); feedback must have been shown;
2. the operator is `CardAction.operator_open_id` from the verified callback, never the value;
   it must be in the snapshot's audience (`audience_open_ids`; `everyone`: anyone in the chat);
3. the verdict key (and reason key) must exist in the policy snapshot; the semantic is looked
   up there, never taken from the client;
4. `callback_key` = sha256 of (delivery, operator, kind, key, reason, comment, rev): a repeat
   of the same click on the same card state (a second event_id, a concurrent double click)
   finds the stored revision and answers exactly as the first one did; racing clicks
   queue on the delivery's row lock, so the later one finds the first one's revision;
5. stale-click guard: a verdict click's `rev` must be the delivery's current revision id
   ("" before any), a detail form's `rev` the operator's own latest revision id (so another
   person's click on an `everyone` card does not make an open form stale): a click made on
   an older card state gets a toast and a repaint, no write;
6. an unchanged choice writes nothing; with `allow_reselect` off an operator's first choice
   is final (toast, repaint);
7. otherwise: a new `Revision` (n+1 of this operator's chain, `supersedes` the previous one),
   `LatestFeedback` moved forward, `Delivery.current_revision`, the `feedback.revised` event
   and its outbox rows (`events.feedback_revised_event`, written with the revision), and the new feedback-area state
   queued as CardKit element updates (`interactions.cardqueue.service.enqueue_elements`, applied after the
   callback was answered: Feishu applies nothing sent before the answer).

Comment text is trimmed and checked against the snapshot (required, max length) — a failure
is a toast and nothing is written — and is stored on the revision only: never rendered,
logged or put into an event body (opted-in webhook destinations get it as private data).
"""

from __future__ import annotations

import hashlib
import json
import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.db import transaction
from django.db.models import Q, Subquery
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from feedback import answer_channels
from feedback import cards as feedback_cards
from feedback.events import feedback_revised_event
from feedback.models import Delivery, Revision
from interactions.callbacks import registry
from interactions.cardqueue import service as cards

log = logging.getLogger(__name__)


class _Message:
    """A translatable message with parameters, rendered lazily (so `Toast.of` can render it
    in zh-hans and in English)."""

    def __init__(self, msgid, **params):
        self.msgid = msgid
        self.params = params

    def __str__(self) -> str:
        # a callable parameter (a policy label) is rendered in the active language too
        params = {k: v() if callable(v) else v for k, v in self.params.items()}
        return str(self.msgid) % params if params else str(self.msgid)


# Outcome codes
RECORDED = "recorded"
DUPLICATE = "duplicate"
UNCHANGED = "unchanged"
STALE = "stale"
LOCKED = "locked"
NOT_ALLOWED = "not_allowed"
UNKNOWN_DELIVERY = "unknown_delivery"
UNKNOWN_KEY = "unknown_key"
NO_OPERATOR = "no_operator"
INVALID_DETAILS = "invalid_details"
NOT_NEGATIVE = "not_negative"

_TOAST_TYPE = {
    RECORDED: "success",
    DUPLICATE: "success",
    UNCHANGED: "info",
    STALE: "warning",
    LOCKED: "info",
    NOT_ALLOWED: "warning",
    UNKNOWN_DELIVERY: "warning",
    UNKNOWN_KEY: "warning",
    NO_OPERATOR: "warning",
    INVALID_DETAILS: "warning",
    NOT_NEGATIVE: "warning",
}


@dataclass(frozen=True)
class Outcome:
    """What a click did: `code` (one of the constants above), the revision written or found
    (RECORDED / DUPLICATE / UNCHANGED), and the toast message."""

    code: str
    message: Any
    revision: Revision | None = None

    @property
    def written(self) -> bool:
        return self.code == RECORDED

    def answer(self) -> registry.Answer:
        """The callback answer: a toast only (the card is updated after the answer)."""
        return registry.Answer(registry.Toast.of(_TOAST_TYPE[self.code], self.message))


def callback_key(
    delivery_id: str,
    operator: str,
    kind: str,
    *,
    key: str = "",
    reason: str = "",
    comment: str = "",
    rev: str = "",
) -> str:
    """`cb_` + 64 hex: sha256 of the click's content and the card state (`rev`) it was made on.
    Equal for repeats of one click; different after the card moved on, so the same button
    pressed again on a newer card state is a new click."""
    parts = [delivery_id, operator, kind, key, reason, comment, rev]
    digest = hashlib.sha256(json.dumps(parts, ensure_ascii=False).encode("utf-8")).hexdigest()
    return f"cb_{digest}"


def _recorded_message(snapshot: dict[str, Any], revision: Revision):
    """The toast of a written revision (also what a duplicate of that click is answered)."""
    if revision.reason_key or revision.comment:
        return _("Thanks, your details were recorded.")
    if revision.semantic == "negative" and feedback_cards.has_detail_step(snapshot):
        return _("Recorded. You can add a reason below.")
    return _Message(
        _("Recorded: %(label)s"),
        label=lambda: feedback_cards.button_label(snapshot, revision.verdict_key),
    )


def _not_allowed_message(snapshot: dict[str, Any]):
    audience = snapshot.get("audience", "requester")
    if audience == "reviewers":
        return _("Only the designated reviewers can give feedback on this answer.")
    if audience == "everyone":
        return _("Only members of this chat can give feedback on this answer.")
    return _("Only the person who asked can give feedback on this answer.")


def _find(bot, delivery_id: str, open_message_id: str) -> Delivery | None:
    """The delivery row of `bot`, locked (`Delivery.objects.lock_for_click`), if the click came
    from its message and feedback was shown on it. Its current revision is read after the lock
    (so a click that waited for the lock sees the revision the previous click appended), by
    `_known_and_latest` in the same query as the operator's own revisions."""
    if not isinstance(delivery_id, str) or not delivery_id:
        return None
    delivery = Delivery.objects.lock_for_click(bot, delivery_id)
    if delivery is None or not delivery.feedback_shown or not delivery.policy_snapshot:
        return None
    delivery.bot = bot  # the row was selected by this bot: no second query for it
    if delivery.platform_message_id and open_message_id != delivery.platform_message_id:
        return None
    if not delivery.current_revision_id:
        delivery.current_revision = None  # known without a query
    return delivery


def _in_audience(delivery: Delivery, snapshot: dict[str, Any], operator: str, chat_id: str) -> bool:
    if not operator:
        return False
    allowed = snapshot.get("audience_open_ids")
    if allowed is None:  # everyone: any verified operator in the delivery's chat
        return chat_id == (snapshot.get("chat_id") or chat_id)
    return operator in allowed


def _known_and_latest(
    delivery: Delivery, operator: str, key: str
) -> tuple[Revision | None, Revision | None]:
    """`(revision with callback key `key`, operator's latest revision)` on `delivery`, in one
    query of at most three rows (none for a delivery without revisions). A revision with `key`
    can only belong to this delivery and operator: both are part of the key. The delivery's
    current revision comes with them and is set on `delivery.current_revision`, so the stale
    check and the repaint read no more rows."""
    if delivery.current_revision_id is None:
        # every revision becomes its delivery's current one in the transaction that appends it
        # (`_append`), and the caller holds the delivery's row lock: no revision yet
        return None, None
    chain = Revision.objects.filter(delivery=delivery, operator_open_id=operator)
    latest_pk = chain.order_by("-revision").values("pk")[:1]
    rows = list(
        Revision.objects.filter(delivery=delivery).filter(
            Q(operator_open_id=operator, callback_key=key)
            | Q(pk=Subquery(latest_pk))
            | Q(pk=delivery.current_revision_id)
        )
    )
    current = next((r for r in rows if r.pk == delivery.current_revision_id), None)
    if current is not None:
        delivery.current_revision = current
    mine = [r for r in rows if r.operator_open_id == operator]
    known = next((r for r in mine if r.callback_key == key), None)
    latest = max(mine, key=lambda r: r.revision, default=None)
    return known, latest


def _current_rev(delivery: Delivery) -> str:
    return delivery.current_revision.revision_id if delivery.current_revision_id else ""


def _expected_rev(kind: str, delivery: Delivery, previous: Revision | None) -> str:
    """The `rev` a click of `kind` must carry not to be stale (rule 5): a verdict button, the
    delivery's current revision (the state the whole card shows); the negative detail form,
    the operator's own latest revision (the verdict it adds details to), so on an `everyone`
    card another person's click does not make an open form stale ("" before any)."""
    if kind == "feedback_detail":
        return previous.revision_id if previous is not None else ""
    return _current_rev(delivery)


def repaint(delivery: Delivery) -> None:
    """Queue the delivery's current feedback-area state (`delivery.current_revision`) as
    CardKit element updates, inside the caller's transaction. A renderer that raises is logged
    and leaves the card as it is: the fact is recorded and the answer stays a toast (a click
    is never lost to a card Feishu would refuse). An answer on another channel is repainted
    by its answer channel (`feedback.answer_channels`: Slack re-reads its message when the
    update is applied)."""
    plugin = answer_channels.get(delivery.channel)
    if plugin is not None:
        plugin.queue_repaint(delivery)
        return
    if not delivery.card_id:
        log.warning("delivery %s: no CardKit entity to update", delivery.delivery_id)
        return
    current = delivery.current_revision if delivery.current_revision_id else None
    try:
        area = feedback_cards.feedback_area(
            delivery.policy_snapshot or {}, delivery.delivery_id, feedback_cards.Choice.of(current)
        )
    except Exception:  # noqa: BLE001 - a renderer bug must not lose the click
        log.exception("delivery %s: rendering the feedback area failed", delivery.delivery_id)
        return
    if cards.enqueue_elements_for_card_id(delivery.bot, delivery.card_id, area) is None:
        log.warning("delivery %s: no CardKit entity to update", delivery.delivery_id)


def _append(
    delivery: Delivery,
    operator: str,
    *,
    verdict_key: str,
    semantic: str,
    reason_key: str,
    comment: str,
    key: str,
    previous: Revision | None,
) -> Revision:
    """Insert revision n+1 of `operator`'s chain (caller's transaction, delivery row locked);
    it becomes the operator's latest feedback and the delivery's current revision, and its
    `feedback.revised` event is inserted, in the same write (`Revision.objects.append`); the
    event's outbox rows follow (`FreshEvent.inserted`).

    No savepoint: every writer of a delivery's revisions holds its row lock (`_find`; SQLite
    has one writer anyway) and has already looked up the callback key and
    the chain under it, so the unique columns (`callback_key`; delivery, operator, revision)
    cannot be taken by a concurrent click. If they were, IntegrityError rolls the whole click
    back and the dispatcher answers an error toast — nothing half-written."""
    revision = Revision(
        revision_id=f"fb_{uuid.uuid4().hex}",
        delivery=delivery,
        operator_open_id=operator,
        revision=(previous.revision + 1) if previous else 1,
        verdict_key=verdict_key,
        semantic=semantic,
        reason_key=reason_key,
        comment=comment,
        callback_key=key,
        supersedes=previous,
        source=Revision.Source.CARD,
        created_at=timezone.now(),
    )
    event = feedback_revised_event(revision)
    Revision.objects.append(revision, delivery, event.event)
    event.inserted()
    return revision


def _locked_for_operator(
    bot, delivery_id: str, open_message_id: str, operator_open_id: str, open_chat_id: str
) -> tuple[Delivery | None, Outcome | None]:
    """The click's delivery (locked by `_find`) and None, or None and the refusal: unknown
    delivery, no verified operator, or an operator outside the snapshot's audience. Call inside
    the click's transaction."""
    delivery = _find(bot, delivery_id, open_message_id)
    if delivery is None:
        return None, Outcome(UNKNOWN_DELIVERY, _("This feedback target no longer exists."))
    if not operator_open_id:
        return None, Outcome(
            NO_OPERATOR, _("The chat platform did not say who clicked; please try again.")
        )
    if not _in_audience(delivery, delivery.policy_snapshot, operator_open_id, open_chat_id):
        return None, Outcome(NOT_ALLOWED, _not_allowed_message(delivery.policy_snapshot))
    return delivery, None


@dataclass(frozen=True)
class _Click:
    """A click that passed the guard both revision writes share: its locked delivery, the
    delivery's policy snapshot, the click's content (`parts`: the callback-key fields), its
    callback key, and the operator's latest revision (None before their first)."""

    delivery: Delivery
    snapshot: dict[str, Any]
    parts: dict[str, str]
    key: str
    previous: Revision | None


def _guard(
    bot,
    kind: str,
    *,
    delivery_id: str,
    operator_open_id: str,
    rev: str,
    open_message_id: str,
    open_chat_id: str,
    content: Callable[[dict[str, Any]], dict[str, str] | Outcome],
) -> _Click | Outcome:
    """Rules 1–5 of the module docstring, in order, for a click of `kind` (`feedback` or
    `feedback_detail`); call inside the click's transaction.

    Locks the delivery and checks the operator (rules 1–2); `content(snapshot)` checks what
    was clicked against the policy snapshot (rule 3) and returns a refusal `Outcome` or the
    click's callback-key fields (`key`, or `reason` and `comment`). Then a repeat of a stored
    click gets that click's answer (DUPLICATE), and a click made on an older card state gets
    a repaint and a STALE toast (rules 4–5). Returns the `_Click` to write, or the `Outcome`
    that answers it without a write.
    """
    delivery, refused = _locked_for_operator(
        bot, delivery_id, open_message_id, operator_open_id, open_chat_id
    )
    if refused is not None:
        return refused
    snapshot = delivery.policy_snapshot
    parts = content(snapshot)
    if isinstance(parts, Outcome):
        return parts
    rev = rev if isinstance(rev, str) else ""
    key = callback_key(delivery_id, operator_open_id, kind, rev=rev, **parts)
    known, previous = _known_and_latest(delivery, operator_open_id, key)
    if known is not None:
        return Outcome(DUPLICATE, _recorded_message(snapshot, known), known)
    if rev != _expected_rev(kind, delivery, previous):
        repaint(delivery)
        return Outcome(
            STALE, _("This card was out of date; it has been refreshed. Please choose again.")
        )
    return _Click(delivery, snapshot, parts, key, previous)


def _button(snapshot: dict[str, Any], verdict_key: str) -> dict[str, Any] | None:
    """The snapshot's button with `verdict_key`, if it exists and its semantic is visible."""
    button = next((b for b in snapshot.get("buttons") or [] if b.get("key") == verdict_key), None)
    visible = snapshot.get("visible_semantics") or []
    if button is None or (visible and button.get("semantic") not in visible):
        return None
    return button


def _choice(snapshot: dict[str, Any], verdict_key: str) -> dict[str, str] | Outcome:
    """The callback-key fields of a verdict click, or UNKNOWN_KEY for a key the snapshot does
    not offer."""
    if _button(snapshot, verdict_key) is None:
        return Outcome(UNKNOWN_KEY, _("This option is no longer available."))
    return {"key": verdict_key}


def _details(snapshot: dict[str, Any], form_value: Any) -> dict[str, str] | Outcome:
    """The callback-key fields of a follow-up form (`reason`, `comment`), or INVALID_DETAILS.

    The reason must be one of the snapshot's reasons; the comment is trimmed, empty when the
    policy turns comments off, and checked for required / max length (default 1000
    characters); one of the two must be given. Unknown form keys are ignored."""
    followup = snapshot.get("negative_followup") or {}
    comment_policy = followup.get("comment") or {}
    reasons = {r["key"] for r in followup.get("reasons") or []}
    form = form_value if isinstance(form_value, dict) else {}
    reason = form.get(feedback_cards.REASON_FIELD) or ""
    if not isinstance(reason, str) or (reason and reason not in reasons):
        return Outcome(INVALID_DETAILS, _("Please choose one of the listed reasons."))
    comment = form.get(feedback_cards.COMMENT_FIELD) or ""
    if not isinstance(comment, str):
        return Outcome(INVALID_DETAILS, _("The comment must be text."))
    comment = comment.strip() if comment_policy.get("enabled") else ""
    max_length = int(comment_policy.get("max_length") or 1000)
    if comment_policy.get("enabled") and comment_policy.get("required") and not comment:
        return Outcome(INVALID_DETAILS, _("Please add a comment before submitting."))
    if len(comment) > max_length:
        return Outcome(
            INVALID_DETAILS,
            _Message(_("The comment is too long: at most %(max)d characters."), max=max_length),
        )
    if not reason and not comment:
        return Outcome(INVALID_DETAILS, _("Choose a reason or add a comment."))
    return {"reason": reason, "comment": comment}


def record_choice(
    bot,
    *,
    delivery_id: str,
    operator_open_id: str,
    verdict_key: str,
    rev: str,
    open_message_id: str = "",
    open_chat_id: str = "",
) -> Outcome:
    """A verdict button click (see the module docstring for the rules, in order).

    `bot`: the Bot whose callback this is; `operator_open_id`: from the verified callback;
    `verdict_key`: the clicked button's key; `rev`: the revision id the clicked card state
    carried ("" for the first state); `open_message_id` / `open_chat_id`: where the click came
    from. Returns an `Outcome` (RECORDED with the new revision, or why nothing was written);
    never raises for bad input.
    """
    # no savepoint: nothing inside is caught and retried, and inside the dispatcher's
    # transaction (`inbound.run_and_finish`) a savepoint is two round trips per click
    with transaction.atomic(savepoint=False):
        click = _guard(
            bot,
            "feedback",
            delivery_id=delivery_id,
            operator_open_id=operator_open_id,
            rev=rev,
            open_message_id=open_message_id,
            open_chat_id=open_chat_id,
            content=lambda snapshot: _choice(snapshot, verdict_key),
        )
        if isinstance(click, Outcome):
            return click
        snapshot, previous = click.snapshot, click.previous
        if previous is not None and previous.verdict_key == verdict_key:
            return Outcome(
                UNCHANGED,
                _Message(
                    _("You already chose %(label)s."),
                    label=lambda: feedback_cards.button_label(snapshot, verdict_key),
                ),
                previous,
            )
        if previous is not None and not snapshot.get("allow_reselect"):
            repaint(click.delivery)
            return Outcome(
                LOCKED,
                _Message(
                    _("Already selected: %(label)s. This choice cannot be changed."),
                    label=lambda: feedback_cards.button_label(snapshot, previous.verdict_key),
                ),
                previous,
            )
        revision = _append(
            click.delivery,
            operator_open_id,
            verdict_key=verdict_key,
            semantic=_button(snapshot, verdict_key)["semantic"],
            reason_key="",
            comment="",
            key=click.key,
            previous=previous,
        )
        repaint(click.delivery)
        log.info(
            "delivery %s: revision %s (%s, #%d)",
            click.delivery.delivery_id,
            revision.revision_id,
            revision.semantic,
            revision.revision,
        )
        return Outcome(RECORDED, _recorded_message(snapshot, revision), revision)


def record_details(
    bot,
    *,
    delivery_id: str,
    operator_open_id: str,
    rev: str,
    form_value: dict[str, Any],
    open_message_id: str = "",
    open_chat_id: str = "",
) -> Outcome:
    """The negative follow-up form: reason key (from the snapshot only) and comment.

    `form_value`: `{"fb_reason": <reason key>, "fb_comment": <text>}` as submitted (checked by
    `_details`); the other arguments as for `record_choice`. The operator's latest revision
    must be negative; the new revision keeps its verdict key and supersedes it. Returns an
    `Outcome`; never raises for bad input.
    """
    # no savepoint: nothing inside is caught and retried, and inside the dispatcher's
    # transaction (`inbound.run_and_finish`) a savepoint is two round trips per click
    with transaction.atomic(savepoint=False):
        click = _guard(
            bot,
            "feedback_detail",
            delivery_id=delivery_id,
            operator_open_id=operator_open_id,
            rev=rev,
            open_message_id=open_message_id,
            open_chat_id=open_chat_id,
            content=lambda snapshot: _details(snapshot, form_value),
        )
        if isinstance(click, Outcome):
            return click
        previous = click.previous
        reason, comment = click.parts["reason"], click.parts["comment"]
        if previous is None or previous.semantic != "negative":
            return Outcome(NOT_NEGATIVE, _("Choose a negative verdict before adding details."))
        if previous.reason_key == reason and previous.comment == comment:
            return Outcome(UNCHANGED, _("Nothing changed."), previous)
        revision = _append(
            click.delivery,
            operator_open_id,
            verdict_key=previous.verdict_key,
            semantic=previous.semantic,
            reason_key=reason,
            comment=comment,
            key=click.key,
            previous=previous,
        )
        repaint(click.delivery)
        log.info(
            "delivery %s: revision %s with details (#%d)",
            click.delivery.delivery_id,
            revision.revision_id,
            revision.revision,
        )
        return Outcome(RECORDED, _recorded_message(click.snapshot, revision), revision)


def detail_refusal(
    bot,
    *,
    delivery_id: str,
    operator_open_id: str,
    rev: str,
    open_message_id: str = "",
    open_chat_id: str = "",
) -> Outcome | None:
    """Why `operator_open_id` may not add details to their verdict on `delivery_id` now, as
    the `Outcome` `record_details` would answer (unknown delivery, outside the audience, a
    stale `rev` — repainted —, no negative verdict), or None when they may. Writes nothing but
    a repaint; for channels that ask for the details before submitting them (Telegram's
    comment prompt). Arguments as for `record_details`."""
    # no savepoint: nothing inside is caught and retried, and inside the dispatcher's
    # transaction (`inbound.run_and_finish`) a savepoint is two round trips per click
    with transaction.atomic(savepoint=False):
        click = _guard(
            bot,
            "feedback_detail",
            delivery_id=delivery_id,
            operator_open_id=operator_open_id,
            rev=rev,
            open_message_id=open_message_id,
            open_chat_id=open_chat_id,
            content=lambda snapshot: {"reason": "", "comment": ""},
        )
        if isinstance(click, Outcome):
            return click
        if click.previous is None or click.previous.semantic != "negative":
            return Outcome(NOT_NEGATIVE, _("Choose a negative verdict before adding details."))
        return None


# ---------------------------------------------------------------------------------------------
# Card-action handlers (registered in FeedbackConfig.ready())
# ---------------------------------------------------------------------------------------------


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""


@registry.answered_in_transaction
def on_feedback(action: registry.CardAction) -> registry.Answer:
    """Handler of `{"kind": "feedback", "delivery", "key", "rev"}` clicks (database only: the
    dispatcher records its answer in the same transaction)."""
    return record_choice(
        action.bot,
        delivery_id=_str(action.value.get("delivery")),
        operator_open_id=action.operator_open_id,
        verdict_key=_str(action.value.get("key")),
        rev=_str(action.value.get("rev")),
        open_message_id=action.open_message_id,
        open_chat_id=action.open_chat_id,
    ).answer()


@registry.answered_in_transaction
def on_feedback_detail(action: registry.CardAction) -> registry.Answer:
    """Handler of `{"kind": "feedback_detail", "delivery", "rev"}` form submits (database
    only, like `on_feedback`)."""
    return record_details(
        action.bot,
        delivery_id=_str(action.value.get("delivery")),
        operator_open_id=action.operator_open_id,
        rev=_str(action.value.get("rev")),
        form_value=action.form_value,
        open_message_id=action.open_message_id,
        open_chat_id=action.open_chat_id,
    ).answer()
