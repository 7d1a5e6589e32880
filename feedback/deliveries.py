"""Deliveries: a final answer handed over by the bot backend, sent (or registered) with
Cardloop's feedback area. The one entry point is `deliver()` (API and `manage.py send_card`).

Steps of `deliver(bot, request)`:

1. **Retry first.** A delivery is identified by (bot, session_id, turn_id, native_session_id,
   dispatch_attempt, discriminator) when session and turn are given (database constraint
   `delivery_correlation_unique`). A request whose correlation is known returns that delivery
   and sends nothing (`created=False`) — also the loser of two concurrent first requests, which
   hits the constraint and reads the winner. Only a delivery whose send *failed*, or was
   *interrupted* (still `pending` after `STALE_SEND`: the process sending it died), is sent
   again, and only by the request whose conditional UPDATE claims it, so a burst of retries
   still sends once. The resend reuses the CardKit entity the first attempt recorded and the
   same message `uuid`, so Feishu shows one card whichever step the first attempt died in;
   `fail_interrupted_sends` (outbox_worker) marks such deliveries `send_failed` /
   `send_interrupted` so that analytics counts them.
2. **Policy.** `botadmin.services.effective_policy_for(bot, chat_id)`; feedback is shown only
   for `response_kind == "final"` (else reason `not_final`) and when the policy says so
   (`disabled`, `api_only`, `ambiguous_team`, `invalid_policy` otherwise). The full policy is
   frozen on the delivery as `policy_snapshot`, with `audience_open_ids`: the requester, the
   reviewers, or None for `everyone` (the audience list is frozen at send), the bot's
   `card_language`, and the agent's proposed `feedback_options` applied as the policy's
   `agent_options` allows (`with_agent_options`; what was used and why not all of it are
   frozen too, and a resend renders from the snapshot).
3. **Compose** (pure, `feedback.cards`): the caller's Card JSON 2.0 plus the feedback area;
   validated with `validate_card` before anything is written (`InvalidDelivery`).
4. **Record** the delivery (`pending`), with `content_hash` of the caller's card — never its
   text — and `webhook_destination_ids` frozen through `outbox.effective_destinations`.
5. **Send** outside any transaction: `interactions.cardqueue.service.send_card` (CardKit entity, message
   `uuid` = delivery id so Feishu dedupes a resend for 1 h). Two-phase: when the backend sent
   the card itself (`platform_message_id` + `card_id`), the card is registered
   (`cards.register_card`), the ids are claimed for the delivery (a message another delivery
   owns is refused before its card is touched) and, when feedback is shown, the composed card
   is written to the entity with its next CardKit sequence.
6. **Mark sent** in one transaction with `terminals.reconcile_delivery` (`turn.completed` if
   the worker terminal came first). A failed send marks the delivery `send_failed` with an
   `error_code` (`lark_<code>`; analytics counts these) and raises `SendFailed`.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import logging
import uuid
from dataclasses import dataclass, field
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import F
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from botadmin.models import Bot, Chat
from botadmin.policy import USED_NONE, apply_agent_options
from botadmin.services import effective_policy_for
from feedback import answer_channels, terminals
from feedback import cards as feedback_cards
from feedback.models import Delivery
from feedback.outbox import effective_destinations
from interactions.cardqueue import service as cards
from interactions.lark.cardjson import validate_card
from interactions.models import CardEntity
from interactions.render.bilingual import bot_language

log = logging.getLogger(__name__)

#: Run-time metadata a delivery keeps (analytics dimensions, frozen at send).
METADATA_FIELDS: tuple[str, ...] = (
    "model",
    "cli_id",
    "cli_version",
    "skill_name",
    "skill_version",
    "workflow_id",
    "task_id",
    "parent_task_id",
    "reasoning_effort",
    "content_ref",
)
REASON_NOT_FINAL = "not_final"

#: A delivery still `pending` this long after its last send began was interrupted: the one
#: stale-send rule of every card (`cards.SEND_STALE`, `cards.send_is_stale`).
STALE_SEND = cards.SEND_STALE
ERROR_SEND_INTERRUPTED = "send_interrupted"


class InvalidDelivery(ValueError):
    """The request cannot be delivered as given; nothing was written or sent.

    `errors` maps a request field to messages (`{"card": ["$.schema: must be \"2.0\""]}`).
    """

    def __init__(self, errors: dict[str, list[str]]):
        self.errors = errors
        super().__init__("; ".join(f"{k}: {', '.join(v)}" for k, v in errors.items()))


class SendFailed(Exception):
    """Feishu refused the card or could not be reached. The delivery is recorded as
    `send_failed` (`delivery.error_code`); a retry of the same correlation sends again.
    `code`, `msg`, `log_id` come from `LarkApiError` (code -1: network / unreadable answer)."""

    def __init__(self, delivery: Delivery, *, code: int, msg: str, log_id: str = ""):
        self.delivery = delivery
        self.code = code
        self.msg = msg
        self.log_id = log_id
        super().__init__(f"sending delivery {delivery.delivery_id} failed: {code} {msg}")


@dataclass
class DeliveryRequest:
    """What the bot backend asks for (the API body, already type-checked).

    `card`: Card JSON 2.0 object of the answer (required unless registering a card the
    backend sent itself, then optional: without it no feedback area can be added).
    `platform_message_id` + `card_id` (+ `sequence`, the last CardKit sequence the backend
    used): two-phase registration of a card the backend sent. `metadata`: keys of
    METADATA_FIELDS. `feedback_options`: buttons (and reasons) the agent proposes for this
    answer, already checked by `botadmin.policy.validate_agent_options`.
    """

    chat_id: str
    card: dict[str, Any] | None = None
    response_kind: str = ""
    session_id: str = ""
    turn_id: str = ""
    native_session_id: str = ""
    dispatch_attempt: int = 0
    discriminator: str = ""
    requester_open_id: str = ""
    topic_id: str = ""
    platform_message_id: str = ""
    card_id: str = ""
    sequence: int = 0
    duration_ms: int | None = None
    usage: dict[str, Any] | None = None
    metadata: dict[str, str] = field(default_factory=dict)
    feedback_options: dict[str, Any] | None = None
    #: `Delivery.Channel`: `feishu` sends `card`; every other channel is an answer channel
    #: (`feedback.answer_channels`): `slack` sends `blocks` (Block Kit, a list) with the
    #: fallback `text` through the bot's Slack app, `telegram` sends `text` through the bot's
    #: Telegram bot.
    channel: str = Delivery.Channel.FEISHU
    blocks: list[dict[str, Any]] | None = None
    text: str = ""
    #: The request field that chose the channel (`channel`, or `blocks` when inferred), named
    #: in the error of a bot that cannot send there.
    channel_field: str = "channel"

    @property
    def message(self) -> Any:
        """What the backend gave to send: the card (Feishu) or what the answer channel sends
        (Slack: the blocks; Telegram: the text), or None."""
        plugin = answer_channels.get(self.channel)
        return plugin.message(self) if plugin is not None else self.card

    @property
    def registers(self) -> bool:
        """True for two-phase registration (the backend sent the card itself)."""
        return bool(self.platform_message_id or self.card_id)


@dataclass(frozen=True)
class Delivered:
    """Result of `deliver`: the delivery and whether this call created it (False: a retry,
    nothing was sent unless `resent`)."""

    delivery: Delivery
    created: bool
    resent: bool = False


def delivery_id_for(bot: Bot, request: DeliveryRequest) -> str:
    """`del_` + 32 hex: derived from the correlation when session and turn are given (so a
    retry, even with edited text, has the same id and Feishu's `uuid` dedupe holds), random for
    proactive sends. Content is never part of it."""
    if request.session_id and request.turn_id:
        parts = [
            bot.app_id,
            request.session_id,
            request.turn_id,
            request.native_session_id,
            request.dispatch_attempt,
            request.discriminator,
        ]
        digest = hashlib.sha256(json.dumps(parts, separators=(",", ":")).encode()).hexdigest()
        return f"del_{digest[:32]}"
    return f"del_{uuid.uuid4().hex}"


def _correlated(bot: Bot, request: DeliveryRequest) -> Delivery | None:
    if not (request.session_id and request.turn_id):
        return None
    return (
        Delivery.objects.filter(
            bot=bot,
            session_id=request.session_id,
            turn_id=request.turn_id,
            native_session_id=request.native_session_id,
            dispatch_attempt=request.dispatch_attempt,
            discriminator=request.discriminator,
        )
        .select_related("bot", "chat", "team")
        .first()
    )


def snapshot_for(resolution, request: DeliveryRequest, bot: Bot | None = None) -> dict[str, Any]:
    """The policy snapshot frozen on a delivery: the effective policy plus
    `audience_open_ids` (requester → [requester], reviewers → the reviewers, everyone → None),
    the resolution's `reason`, the `chat_id` sent to (an `everyone` audience means anyone
    clicking in that chat) and, given the bot, its `card_language` (the content default of the
    feedback area on every later repaint)."""
    policy = dict(resolution.policy)
    audience = policy.get("audience", "requester")
    if audience == "requester":
        policy["audience_open_ids"] = (
            [request.requester_open_id] if request.requester_open_id else []
        )
    elif audience == "reviewers":
        policy["audience_open_ids"] = list(policy.get("reviewers") or [])
    else:
        policy["audience_open_ids"] = None
    policy["reason"] = resolution.reason
    policy["chat_id"] = request.chat_id
    if bot is not None:
        policy["card_language"] = bot_language(bot)
    return policy


#: Snapshot keys recording what of the agent's proposal was used, and why not all of it.
OPTIONS_USED, OPTIONS_IGNORED = "feedback_options_used", "feedback_options_ignored"


def with_agent_options(
    snapshot: dict[str, Any], options: dict[str, Any] | None, *, shown: bool
) -> dict[str, Any]:
    """The snapshot with the agent's proposed options applied as the effective policy allows
    (`botadmin.policy.apply_agent_options`: replaced buttons, maybe reasons), and the outcome
    frozen beside them (`feedback_options_used`, `feedback_options_ignored`), so a click's
    semantic and every label come from the snapshot as for configured options. Pure."""
    policy, used, ignored = apply_agent_options(snapshot, options, shown=shown)
    policy[OPTIONS_USED] = used
    policy[OPTIONS_IGNORED] = ignored
    return policy


def agent_options_outcome(delivery: Delivery) -> dict[str, str]:
    """`{"feedback_options_used", "feedback_options_ignored"}` of a delivery (`none`, "" for
    one sent before agent options existed)."""
    snapshot = delivery.policy_snapshot or {}
    return {
        OPTIONS_USED: snapshot.get(OPTIONS_USED) or USED_NONE,
        OPTIONS_IGNORED: snapshot.get(OPTIONS_IGNORED) or "",
    }


def _card_problems(card: Any) -> list[str]:
    """What is wrong with the caller's card as Cardloop would send it (`update_multi` is set
    by Cardloop, so a card without it is fine; `fb_` ids are reserved)."""
    if not isinstance(card, dict):
        return [str(_("card must be a Card JSON 2.0 object."))]
    try:
        return validate_card(feedback_cards.compose(card, None))
    except feedback_cards.ReservedIds as exc:
        return exc.problems


def _with_area(problem: str) -> str:
    return str(_("With Cardloop's feedback area added: %(problem)s")) % {"problem": problem}


def deliver(bot: Bot, request: DeliveryRequest) -> Delivered:
    """Send (or register) the final answer of `request` for `bot`; see the module docstring.

    Returns `Delivered`. Raises `InvalidDelivery` (nothing written, nothing sent) and
    `SendFailed` (delivery recorded as `send_failed`). Network I/O happens outside any
    transaction; call it outside yours.
    """
    existing = _correlated(bot, request)
    if existing is not None:
        return _retry(existing, request)

    plugin = answer_channels.get(request.channel)
    problems: dict[str, list[str]] = {}
    card = request.message
    if plugin is not None:
        problems = plugin.request_problems(bot, request)
    else:
        if card is None and not request.registers:
            problems["card"] = [str(_("This field is required."))]
        if request.registers and not (request.platform_message_id and request.card_id):
            missing = "card_id" if request.platform_message_id else "platform_message_id"
            problems[missing] = [
                str(_("Registering a card you sent needs both platform_message_id and card_id."))
            ]
        if card is not None:
            own = _card_problems(card)
            if own:
                problems["card"] = own[:20]
    if problems:
        raise InvalidDelivery(problems)

    resolution = effective_policy_for(bot, request.chat_id)
    final = request.response_kind == Delivery.ResponseKind.FINAL
    shown = final and resolution.enabled and card is not None
    reason = resolution.reason if final else REASON_NOT_FINAL
    if final and resolution.enabled and card is None:
        reason = "no_card"
    snapshot = snapshot_for(resolution, request, bot)
    snapshot = with_agent_options(snapshot, request.feedback_options, shown=shown)
    if shown and snapshot.get("audience") == "requester" and not request.requester_open_id:
        raise InvalidDelivery(
            {
                (plugin.requester_field if plugin else "requester_open_id"): [
                    str(
                        _(
                            "Required: the policy of this chat lets only the requester give "
                            "feedback."
                        )
                    )
                ]
            }
        )

    delivery_id = delivery_id_for(bot, request)
    composed = None
    if plugin is not None:
        try:
            composed = plugin.compose(request, snapshot if shown else None, delivery_id)
        except answer_channels.MessageRefused as exc:
            raise InvalidDelivery(exc.errors) from None
    elif card is not None:
        area = feedback_cards.feedback_area(snapshot, delivery_id, None) if shown else None
        try:
            composed = feedback_cards.compose(card, area)
        except feedback_cards.ReservedIds as exc:
            raise InvalidDelivery({"card": exc.problems[:20]}) from None
        problems_after = validate_card(composed)
        if problems_after:
            # the caller's card alone passed: the feedback area pushed it over a limit
            raise InvalidDelivery({"card": [_with_area(p) for p in problems_after[:20]]})

    chat = Chat.objects.filter(chat_id=request.chat_id).first()
    team = resolution.team
    try:
        with transaction.atomic():
            delivery = Delivery.objects.create(
                delivery_id=delivery_id,
                bot=bot,
                chat=chat,
                sent_chat_id=request.chat_id,
                team=team,
                session_id=request.session_id,
                turn_id=request.turn_id,
                native_session_id=request.native_session_id,
                dispatch_attempt=request.dispatch_attempt,
                discriminator=request.discriminator,
                requester_open_id=request.requester_open_id,
                topic_id=request.topic_id,
                response_kind=(
                    Delivery.ResponseKind.FINAL if final else Delivery.ResponseKind.PROGRESS
                ),
                channel=request.channel,
                content_hash=_content_hash(request),
                feedback_shown=shown,
                feedback_reason=reason,
                policy_snapshot=snapshot,
                webhook_destination_ids=effective_destinations(bot, team),
                duration_ms=request.duration_ms,
                usage=request.usage,
                status=Delivery.Status.PENDING,
                **{k: request.metadata.get(k, "") or "" for k in METADATA_FIELDS},
            )
    except IntegrityError:
        # A concurrent first request with the same correlation won: it sends, we don't.
        winner = _correlated(bot, request)
        if winner is None:
            raise
        return Delivered(winner, created=False)
    delivery.bot = bot
    _send(delivery, request, composed)
    return Delivered(delivery, created=True)


def _content_hash(request: DeliveryRequest) -> str:
    """`content_hash` of what the backend gave (the card; an answer channel's message, e.g. a
    Slack message's blocks and text), "" when it gave none."""
    plugin = answer_channels.get(request.channel)
    if plugin is not None:
        return plugin.content_hash(request)
    return feedback_cards.content_hash(request.card) if request.card is not None else ""


def _retry(existing: Delivery, request: DeliveryRequest) -> Delivered:
    """A known correlation: return it. Only a `send_failed` one, or a `pending` one whose send
    was interrupted (`STALE_SEND`), is sent again, by the one request whose conditional UPDATE
    claims it (moves it back to `pending` with a fresh `updated_at`)."""
    now = timezone.now()
    rows = Delivery.objects.filter(pk=existing.pk)
    if existing.status == Delivery.Status.SEND_FAILED:
        claimed = rows.filter(status=Delivery.Status.SEND_FAILED).update(
            status=Delivery.Status.PENDING, error_code="", updated_at=now
        )
    elif existing.status == Delivery.Status.PENDING and cards.send_is_stale(
        existing.updated_at, now
    ):
        claimed = rows.filter(
            status=Delivery.Status.PENDING, updated_at__lt=cards.send_stale_before(now)
        ).update(updated_at=now)
        if claimed:
            log.warning(
                "delivery %s: its send was interrupted; sending again", existing.delivery_id
            )
    else:
        return Delivered(existing, created=False)
    if not claimed:
        existing.refresh_from_db()
        return Delivered(existing, created=False)
    existing.refresh_from_db()
    # the chat the delivery was made for (its frozen snapshot), not whatever this retry names
    request = dataclasses.replace(
        request, chat_id=(existing.policy_snapshot or {}).get("chat_id") or request.chat_id
    )
    plugin = answer_channels.get(existing.channel)
    if plugin is not None:
        return _retry_plugin(plugin, existing, request)
    card = request.card
    composed = None
    if existing.card_id and not request.registers:
        # An earlier attempt created the CardKit entity: it is sent as it is. If its message
        # went out, Feishu's uuid dedupe answers with that message, which shows that entity,
        # so an entity for an edited card would be recorded but never seen.
        if card is not None and feedback_cards.content_hash(card) != existing.content_hash:
            log.info(
                "delivery %s: resent with an edited card; the first card is kept",
                existing.delivery_id,
            )
    elif card is not None:
        if feedback_cards.content_hash(card) != existing.content_hash and existing.content_hash:
            log.info("delivery %s: resent with an edited card", existing.delivery_id)
        area = (
            feedback_cards.feedback_area(existing.policy_snapshot or {}, existing.delivery_id, None)
            if existing.feedback_shown
            else None
        )
        try:
            composed = feedback_cards.compose(card, area)
        except feedback_cards.ReservedIds as exc:
            _mark_failed(existing, "invalid_card")
            raise InvalidDelivery({"card": exc.problems[:20]}) from None
        problems = validate_card(composed)
        if problems:
            _mark_failed(existing, "invalid_card")
            raise InvalidDelivery({"card": problems[:20]})
        Delivery.objects.filter(pk=existing.pk).update(
            content_hash=feedback_cards.content_hash(card)
        )
        existing.content_hash = feedback_cards.content_hash(card)
    elif not request.registers:
        _mark_failed(existing, "invalid_card")
        raise InvalidDelivery({"card": [str(_("This field is required."))]})
    elif existing.feedback_shown:
        # a registration without `card`: no feedback area can be written, as on a first
        # request (`no_card`), whatever the first attempt carried
        Delivery.objects.filter(pk=existing.pk).update(
            feedback_shown=False, feedback_reason="no_card"
        )
        existing.feedback_shown, existing.feedback_reason = False, "no_card"
    _send(existing, request, composed)
    return Delivered(existing, created=False, resent=True)


def _retry_plugin(
    plugin: answer_channels.AnswerChannel, existing: Delivery, request: DeliveryRequest
) -> Delivered:
    """Send a claimed delivery of an answer channel again (`_retry`): the retry's message with
    the area of the frozen snapshot. Slack and Telegram have no send dedupe, so an interrupted
    send that did reach the platform shows twice; only the second message is the delivery's."""
    request = dataclasses.replace(request, channel=existing.channel)
    problems = plugin.request_problems(existing.bot, request)
    if problems:
        _mark_failed(existing, "invalid_card")
        raise InvalidDelivery(problems)
    snapshot = existing.policy_snapshot if existing.feedback_shown else None
    try:
        composed = plugin.compose(request, snapshot, existing.delivery_id)
    except answer_channels.MessageRefused as exc:
        _mark_failed(existing, "invalid_card")
        raise InvalidDelivery(exc.errors) from None
    Delivery.objects.filter(pk=existing.pk).update(content_hash=_content_hash(request))
    existing.content_hash = _content_hash(request)
    _send(existing, request, composed)
    return Delivered(existing, created=False, resent=True)


def _send(delivery: Delivery, request: DeliveryRequest, composed: Any) -> None:
    """Network part: send or register, then `_mark_sent`; `_mark_failed` + SendFailed on error."""
    plugin = answer_channels.get(delivery.channel)
    if plugin is not None:
        try:
            message_id = plugin.send(delivery, request, composed)
        except answer_channels.AnswerSendError as exc:
            log.warning(
                "delivery %s: %s refused the message: %s", delivery.delivery_id, plugin.kind, exc
            )
            _mark_failed(delivery, f"{plugin.kind}_{exc.error}")
            raise SendFailed(delivery, code=-1, msg=exc.error) from None
        _mark_sent_ids(delivery, message_id, "")
        return
    # local for start-up cost: the client loads lark-oapi (~4-6 s); only a send needs it
    from interactions.lark.client import LarkApiError

    bot = delivery.bot
    try:
        if request.registers:
            entity = cards.register_card(
                bot,
                card_id=request.card_id,
                open_message_id=request.platform_message_id,
                sequence=request.sequence,
                purpose="feedback",
            )
            _claim_platform_ids(delivery, entity)
            if delivery.feedback_shown and composed is not None:
                _write_whole_card(entity, composed)
        else:
            entity = cards.send_card(
                bot,
                composed,
                receive_id=request.chat_id,
                receive_id_type="chat_id",
                uuid=delivery.delivery_id,
                purpose="feedback",
                card_id=delivery.card_id,  # an earlier, interrupted attempt's entity
                on_created=functools.partial(_record_card_id, delivery),
            )
    except LarkApiError as exc:
        log.warning("delivery %s: Feishu refused the card: %s", delivery.delivery_id, exc)
        _mark_failed(delivery, f"lark_{exc.code}")
        raise SendFailed(delivery, code=exc.code, msg=exc.msg, log_id=exc.log_id) from None
    except InvalidDelivery:
        raise  # already marked failed (`_claim_platform_ids`)
    except ValueError as exc:  # register_card: ids registered to another card
        _mark_failed(delivery, "card_conflict")
        raise InvalidDelivery({"card_id": [str(exc)]}) from None
    _mark_sent(delivery, entity)


def _record_card_id(delivery: Delivery, card_id: str) -> None:
    """Keep the CardKit entity just created for `delivery` before its message is sent, so a
    resend after a crash reuses it (`cards.send_card`)."""
    Delivery.objects.filter(pk=delivery.pk).update(card_id=card_id)
    delivery.card_id = card_id


def link_chat(chat: Chat) -> int:
    """Link the deliveries sent to `chat.chat_id` before Cardloop had a row for that chat
    (`Delivery.chat` empty, `sent_chat_id` the chat's id) to `chat`; returns how many. Runs in
    the transaction of `botadmin.services.save_chat`, as its chat-saved hook (registered from
    `FeedbackConfig.ready()`; botadmin never imports feedback)."""
    return Delivery.objects.waiting_for_chat(chat.chat_id).update(chat=chat)


def fail_interrupted_sends(now=None) -> int:
    """Mark deliveries still `pending` `STALE_SEND` after their send began as `send_failed`
    with `error_code` `send_interrupted` (the process sending them died), so analytics counts
    them and the backend's next retry sends them again. Returns how many. Run periodically
    by `manage.py outbox_worker`."""
    now = now or timezone.now()
    count = Delivery.objects.interrupted_sends(cards.send_stale_before(now)).update(
        status=Delivery.Status.SEND_FAILED, error_code=ERROR_SEND_INTERRUPTED, updated_at=now
    )
    if count:
        log.warning("%d delivery send(s) were interrupted; marked send_failed", count)
    return count


def _claim_platform_ids(delivery: Delivery, entity: CardEntity) -> None:
    """Two-phase registration: record the backend's message and card on the still `pending`
    delivery *before* anything is written to the card. The database allows one delivery per
    platform message (`delivery_platform_message_unique`), so a message another delivery owns
    is refused here (`message_taken`, InvalidDelivery) and its card is never touched;
    concurrent registrations of one message wait on each other and one wins."""
    try:
        with transaction.atomic():
            Delivery.objects.filter(pk=delivery.pk).update(
                platform_message_id=entity.open_message_id, card_id=entity.card_id
            )
    except IntegrityError:
        _refuse_taken_message(delivery)


def _refuse_taken_message(delivery: Delivery):
    """Mark `delivery` failed (`message_taken`) and raise InvalidDelivery naming the field."""
    _mark_failed(delivery, "message_taken")
    raise InvalidDelivery(
        {"platform_message_id": [str(_("This message already belongs to another delivery."))]}
    ) from None


def _write_whole_card(entity: CardEntity, card: dict[str, Any]) -> None:
    """Replace a registered CardKit entity's content with `card` now (two-phase send), with
    the card's next sequence. Done in the request, not through the card-update queue, so the
    answer body is never written to a queue row."""
    # local for start-up cost: the client loads lark-oapi (~4-6 s); only a send needs it
    from interactions.lark.client import gateway_for

    with transaction.atomic():
        CardEntity.objects.filter(pk=entity.pk).update(sequence=F("sequence") + 1)
        sequence = CardEntity.objects.values_list("sequence", flat=True).get(pk=entity.pk)
    gateway_for(entity.bot).update_card(entity.card_id, card, sequence=sequence)
    CardEntity.objects.filter(pk=entity.pk, applied_sequence__lt=sequence).update(
        applied_sequence=sequence
    )


def _mark_sent(delivery: Delivery, entity: CardEntity) -> None:
    """Record the platform ids and status `sent`; `turn.completed` if the terminal came first."""
    _mark_sent_ids(delivery, entity.open_message_id, entity.card_id)


def _mark_sent_ids(delivery: Delivery, message_id: str, card_id: str) -> None:
    """`_mark_sent` with the platform ids: the Feishu message and card, or the message id an
    answer channel returned (a Slack `ts`, a Telegram `tg:<chat_id>:<message_id>`)."""
    try:
        with transaction.atomic():
            locked = Delivery.objects.select_for_update().get(pk=delivery.pk)
            locked.platform_message_id = message_id
            locked.card_id = card_id
            locked.status = Delivery.Status.SENT
            locked.error_code = ""
            locked.save(
                update_fields=[
                    "platform_message_id",
                    "card_id",
                    "status",
                    "error_code",
                    "updated_at",
                ]
            )
            terminals.reconcile_delivery(locked)
    except IntegrityError:
        # Another delivery already owns this platform message (one delivery per message).
        _refuse_taken_message(delivery)
    delivery.refresh_from_db()


def _mark_failed(delivery: Delivery, code: str) -> None:
    Delivery.objects.filter(pk=delivery.pk).update(
        status=Delivery.Status.SEND_FAILED, error_code=code[:64]
    )
    delivery.status = Delivery.Status.SEND_FAILED
    delivery.error_code = code[:64]
