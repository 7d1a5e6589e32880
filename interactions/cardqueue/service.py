"""Cards Cardloop sends and keeps up to date: send, register, and enqueue updates.

    entity = send_card(bot, card, receive_id="oc_…", uuid=delivery_id, purpose="feedback")
    # recorded (CardEntity.send_uuid) before the message is sent; a retry with the same uuid
    # sends the recorded entity again and Feishu answers with the first message
    enqueue_elements(entity, {"fb_status": {...}, "fb_buttons": {...}})   # CardKit, merged
    enqueue_card(entity, whole_card, version=state_version)              # owned cards
    register_renderer("progress", fn)          # fn(CardEntity) -> card dict | None
    enqueue_render(entity, "progress", version=state_version)           # rendered at apply time

Updates are rows of the durable queue `CardUpdate` (built on `plumbing.workqueue`), applied
by `manage.py card_worker` (`interactions.cardqueue.worker`): coalesced per card, strictly
increasing CardKit `sequence`, ≤ 5 updates per second per message, retried with backoff.

**Answer first.** Feishu applies no card update sent before a callback's answer. The
dispatcher runs every card-action handler inside `holding(hold)`; updates enqueued there are
*held* (not due) until the ingress has sent the answer and calls `release_after_answer(hold)`
from the response's close hook (batched per process: `interactions.cardqueue.releases`), or
until `HOLD_FALLBACK` passes (crash, long connection, race).

Enqueueing joins the caller's transaction (without a savepoint of its own), so a fact and the
card update that shows it commit together.
"""

from __future__ import annotations

import logging
import uuid as uuidlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone

from interactions.cardqueue import releases
from interactions.lark.cardjson import ELEMENT_ID_RE, merge_updates, validate_card
from interactions.models import CardEntity, CardUpdate

log = logging.getLogger(__name__)

#: A held update becomes due after this long even if nobody releases it.
HOLD_FALLBACK = timedelta(seconds=3)


class InvalidCard(ValueError):
    """A card failed `validate_card`; `problems` lists why (JSON paths, no card text)."""

    def __init__(self, problems: list[str]):
        self.problems = problems
        super().__init__("; ".join(problems[:5]))


class UpdateFailed(Exception):
    """A channel could not apply one card update (`apply_update`). `retryable`: try again
    later (rate limit, 5xx, network); `rate_limited`: the platform asked to slow down;
    `retry_after`: seconds the platform asked to wait (HTTP `Retry-After`), or None; `code`:
    the platform's error code (int) or None; `sequence`: the CardKit sequence the attempt used
    (Feishu), else None; `unexpected`: not a platform answer but a bug or library error (the
    worker logs its traceback). The message never contains card text."""

    def __init__(
        self,
        message: str,
        *,
        retryable: bool,
        rate_limited: bool = False,
        retry_after: float | None = None,
        code: int | None = None,
        sequence: int | None = None,
        unexpected: bool = False,
    ):
        super().__init__(message)
        self.retryable, self.rate_limited, self.retry_after = retryable, rate_limited, retry_after
        self.code, self.sequence, self.unexpected = code, sequence, unexpected


#: Who applies a card's updates, by channel kind (`CardEntity.channel`): an object with
#: `apply_update(card, update) -> sequence | None` and `update_interval` (a timedelta).
#: Channels register here (`interactions.channels.register` does it), so the queue never
#: imports a channel.
_appliers: dict[str, Any] = {}


def register_applier(kind: str, applier) -> None:
    """Apply the updates of cards of channel `kind` with `applier.apply_update(card, update)`
    (see `interactions.channels.base.Channel.apply_update`), spacing requests to one message
    `applier.update_interval` apart. Registering again replaces it."""
    _appliers[kind] = applier


def applier_for(card: CardEntity):
    """The registered applier of `card`'s channel. Raises LookupError when there is none."""
    try:
        return _appliers[card.channel or "feishu"]
    except KeyError:
        raise LookupError(f"no channel applies updates of {card.channel!r} cards") from None


def next_sequence(card: CardEntity) -> int:
    """Take `card`'s next CardKit sequence (strictly increasing across workers and retries)."""
    from django.db.models import F

    with transaction.atomic():
        CardEntity.objects.filter(pk=card.pk).update(sequence=F("sequence") + 1)
        return CardEntity.objects.values_list("sequence", flat=True).get(pk=card.pk)


@dataclass
class Hold:
    """The updates enqueued while one callback is being answered (`token` marks their rows).
    `used` turns True when an update is enqueued under it (before its row is written), so
    `release_holds` of a click that enqueued nothing makes no statement. After
    `release_holds`, `released` is True and later enqueues are no longer held."""

    token: str = field(default_factory=lambda: uuidlib.uuid4().hex)
    released: bool = False
    used: bool = False


_current_hold: ContextVar[Hold | None] = ContextVar("cardloop_card_hold", default=None)


@contextmanager
def holding(hold: Hold) -> Iterator[Hold]:
    """Hold every update enqueued in this context (thread / task) until `release_holds(hold)`."""
    reset = _current_hold.set(hold)
    try:
        yield hold
    finally:
        _current_hold.reset(reset)


def release_holds(hold: Hold) -> int:
    """The answer was sent: make the updates held by `hold` due now. Returns how many rows;
    0 without touching the database when nothing was enqueued under `hold` (most clicks:
    one statement fewer each, and none that fails while the database is down)."""
    hold.released = True
    if not hold.used:
        return 0
    return CardUpdate.objects.release_holds([hold.token])


def release_after_answer(hold: Hold) -> None:
    """The answer was sent: have the updates held by `hold` made due soon, in the next batch
    of this process's releases (`interactions.cardqueue.releases`), without database work in
    the calling thread. Nothing is queued when nothing was enqueued under `hold`."""
    hold.released = True
    if hold.used:
        releases.RELEASES.add(hold.token)


#: One stale-send rule for every card Cardloop sends (deliveries, progress cards, interactions):
#: a send still unfinished this long after it began was interrupted (its process died), and a
#: retry may send again. One send is at most three Open API calls (token, CardKit create,
#: message create) of `interactions.lark.client.TIMEOUT` (10 s) each, so a live send is never
#: taken for a dead one; the retry is safe anyway, since it sends the card recorded before the
#: first message with the same `uuid` (`send_card`). docs/DEVELOPING.md, "Sending cards".
SEND_STALE = timedelta(minutes=2)


def send_stale_before(now: datetime | None = None) -> datetime:
    """The instant before which a send that began is stale (`now` − SEND_STALE), for queries
    that select interrupted sends (`send_is_stale` is the same rule for one row)."""
    return (now or timezone.now()) - SEND_STALE


def send_is_stale(started_at: datetime | None, now: datetime | None = None) -> bool:
    """Whether a send that began at `started_at` (aware datetime; None: no send began) was
    interrupted by the one stale-send rule (`SEND_STALE`), so that a retry should send again."""
    return started_at is not None and started_at < send_stale_before(now)


#: Feishu keeps a message `uuid` for dedupe up to 50 characters.
UUID_MAX = 50


def send_card(
    bot,
    card: dict[str, Any] | None,
    *,
    receive_id: str,
    receive_id_type: str = "chat_id",
    uuid: str | None = None,
    purpose: str = "",
    entity: bool = True,
    card_id: str = "",
    on_created: Callable[[str], None] | None = None,
) -> CardEntity:
    """Record, then send, Card JSON 2.0 `card` to `receive_id`; the one way Cardloop sends a
    card (deliveries, progress cards, interactions, alerts). Returns the `CardEntity`.

    With `entity` (default) the card is a CardKit card entity the message references (element
    updates possible); otherwise the raw card is sent (whole-card PATCH updates only).

    Record then send, keyed by `uuid` (the message's idempotency key, ≤ 50 characters; a
    random one when None): (1) the `CardEntity` row is written with `send_uuid=uuid`; (2) the
    CardKit entity is created and its `card_id` recorded on that row; (3) the message is sent
    with Feishu's `uuid`; (4) its `open_message_id` is recorded. Feishu sends one message per
    `uuid` within an hour and answers a repeat with the first message (request body `uuid`,
    https://open.feishu.cn/document/uAjLw4CM/ukTMukTMukTM/reference/im-v1/message/create).
    So a call repeating a `uuid` — a retry after the process died at any step — resumes from
    the row: an answered
    send returns the row without any request; otherwise the recorded entity is sent again
    (never a second entity), and the chat shows one card, the one recorded. A repeat more than
    an hour after a first send that went out unrecorded can show a second message (Feishu no
    longer dedupes); callers retry interrupted sends after `SEND_STALE`, well within it.

    `card_id`: a CardKit entity an earlier attempt created and the caller recorded itself
    (deliveries keep it); it is adopted when no row holds the `uuid` yet. `on_created(card_id)`
    is called once the entity is recorded and before the message is sent. With a recorded
    entity, `card` is not sent again (the entity holds it) and may be None.

    Network I/O happens outside any transaction; call it outside yours. Raises `InvalidCard`
    (nothing sent), `ValueError` (a `uuid` too long, or a message already recorded for
    another card) and `interactions.lark.client.LarkApiError`.
    """
    # imported here: lark-oapi takes seconds to import, and every process imports the queue
    from interactions.lark.client import gateway_for

    uuid = uuid or f"cl_{uuidlib.uuid4().hex}"
    if len(uuid) > UUID_MAX:
        raise ValueError(f"a message uuid has at most {UUID_MAX} characters")
    earlier = CardEntity.objects.for_send(bot, uuid).first()
    if earlier is not None and earlier.open_message_id:
        return earlier  # sent and recorded by an earlier call
    holds_card = entity and bool(card_id or (earlier is not None and earlier.card_id))
    problems = [] if holds_card else validate_card(card)  # a recorded entity holds its card
    if problems:
        raise InvalidCard(problems)
    recorded = earlier or _recorded_send(
        bot, uuid, card_id=card_id if entity else "", purpose=purpose
    )
    if entity and not recorded.card_id:
        recorded = _record_card_id(recorded, gateway_for(bot).create_card(card))
    if entity and on_created is not None:
        on_created(recorded.card_id)
    open_message_id = gateway_for(bot).send_card(
        receive_id=receive_id,
        receive_id_type=receive_id_type,
        card_id=recorded.card_id if entity else None,
        card=None if entity else card,
        uuid=uuid,
    )
    return _record_message(recorded, open_message_id)


def _recorded_send(bot, uuid: str, *, card_id: str, purpose: str) -> CardEntity:
    """The row of the send `uuid` of `bot`: the one recorded by an earlier call, else a new one
    (adopting `card_id`, an entity the caller recorded elsewhere). Committed before it returns,
    so the record exists before anything is sent."""
    with transaction.atomic():
        found = CardEntity.objects.for_send(bot, uuid).first()
        if found is not None:
            return found
        adopted = CardEntity.objects.for_card_id(bot, card_id).first() if card_id else None
        if adopted is not None:
            if adopted.send_uuid:  # a CardKit entity is sent by one message only
                raise ValueError("this card entity was recorded for another send")
            adopted.send_uuid = uuid
            adopted.save(update_fields=["send_uuid", "updated_at"])
            return adopted
        try:
            with transaction.atomic():
                return CardEntity.objects.create(
                    bot=bot, send_uuid=uuid, card_id=card_id, purpose=purpose
                )
        except IntegrityError:  # a concurrent send of the same uuid recorded it first
            pass
    return CardEntity.objects.for_send(bot, uuid).get()


def _record_card_id(recorded: CardEntity, card_id: str) -> CardEntity:
    """Record the CardKit entity just created for send `recorded` unless a concurrent call of
    the same `uuid` recorded one first (then that one is sent: both calls send one entity, and
    the other new entity is never shown). Returns the row as it now is."""
    CardEntity.objects.filter(pk=recorded.pk, card_id="").update(card_id=card_id)
    return CardEntity.objects.get(pk=recorded.pk)


def _record_message(recorded: CardEntity, open_message_id: str) -> CardEntity:
    """Record the message Feishu answered for send `recorded`. Raises ValueError when another
    card is already recorded for that message."""
    try:
        with transaction.atomic():
            CardEntity.objects.filter(pk=recorded.pk).update(open_message_id=open_message_id)
    except IntegrityError:
        raise ValueError("this message is registered to another card") from None
    return CardEntity.objects.get(pk=recorded.pk)


def register_card(
    bot, *, card_id: str = "", open_message_id: str = "", sequence: int = 0, purpose: str = ""
) -> CardEntity:
    """Record (or complete) a card Cardloop may update: a CardKit entity `card_id` and/or the
    message `open_message_id` showing it. Idempotent; missing ids are filled in, `sequence`
    (the last CardKit sequence someone else used on the card) only moves forward.

    For cards the bot backend sent itself (two-phase registration). Raises ValueError without
    any id, or when the ids belong to two different registered cards.
    """
    if not card_id and not open_message_id:
        raise ValueError("register_card needs a card_id or an open_message_id")
    with transaction.atomic():
        by_card = (
            CardEntity.objects.select_for_update().for_card_id(bot, card_id).first()
            if card_id
            else None
        )
        by_message = (
            CardEntity.objects.select_for_update().for_message(bot, open_message_id).first()
            if open_message_id
            else None
        )
        if by_card and by_message and by_card.pk != by_message.pk:
            raise ValueError("card_id and open_message_id are registered to different cards")
        entity = by_card or by_message
        if entity is None:
            try:
                with transaction.atomic():
                    return CardEntity.objects.create(
                        bot=bot,
                        card_id=card_id,
                        open_message_id=open_message_id,
                        sequence=sequence,
                        applied_sequence=sequence,
                        purpose=purpose,
                    )
            except IntegrityError:  # a concurrent registration won
                return register_card(
                    bot,
                    card_id=card_id,
                    open_message_id=open_message_id,
                    sequence=sequence,
                    purpose=purpose,
                )
        if (card_id and entity.card_id and entity.card_id != card_id) or (
            open_message_id and entity.open_message_id and entity.open_message_id != open_message_id
        ):
            raise ValueError("this card is registered with other ids")
        entity.card_id = entity.card_id or card_id
        entity.open_message_id = entity.open_message_id or open_message_id
        entity.sequence = max(entity.sequence, sequence)
        entity.applied_sequence = max(entity.applied_sequence, sequence)
        entity.purpose = entity.purpose or purpose
        entity.save()
        return entity


def enqueue_elements(
    card: CardEntity, elements: dict[str, dict[str, Any]], *, version: int | None = None
) -> CardUpdate | None:
    """Queue replacing components of CardKit card `card` (element_id → full element JSON).

    Merged with an update still pending for the card (newer value per element). `version`
    (optional, per card, increasing) drops the call when a newer state was already enqueued.
    Returns the pending row, or None when dropped. Raises ValueError for a card without a
    CardKit `card_id` or malformed elements.
    """
    if not card.card_id:
        raise ValueError("element updates need a CardKit card entity (card_id)")
    _check_elements(elements)
    return _enqueue(card, None, dict(elements), version)


def enqueue_card(
    card: CardEntity, card_json: dict[str, Any], *, version: int | None = None
) -> CardUpdate | None:
    """Queue replacing the whole card `card` with `card_json` (CardKit `card.update` for an
    entity, message PATCH otherwise). Use for cards Cardloop owns entirely (progress, approval).
    A newer whole card replaces anything still pending. `version` as in `enqueue_elements`.
    """
    if not isinstance(card_json, dict):
        raise ValueError("card_json must be a Card JSON object")
    return _enqueue(card, card_json, {}, version)


#: Whole-card renderers of the queue: name → fn(CardEntity) -> Card JSON dict | None.
_renderers: dict[str, Any] = {}


def register_renderer(name: str, fn) -> None:
    """Register `fn(card: CardEntity) -> dict | None` under `name` for `enqueue_render`.

    The card worker calls it when the update is *applied* (each attempt), reading the current
    state from the database; None means "nothing to show any more" (the update is done
    without a request). Register from `AppConfig.ready()`; a name maps to one function.
    """
    if not name or len(name) > 32:
        raise ValueError("renderer names are 1..32 characters")
    _renderers[name] = fn


def render_now(card: CardEntity, name: str) -> dict[str, Any] | None:
    """Run renderer `name` for `card` (raises KeyError for an unknown name)."""
    return _renderers[name](card)


def enqueue_render(card: CardEntity, renderer: str, *, version: int | None = None):
    """Queue a whole-card update of `card` whose JSON renderer `renderer` produces from the
    database when the worker applies it — the current state at send time, never the state at
    enqueue time, so a later update can never bring back an older state (an answered form never
    comes back). Replaces anything pending for the card; a later `enqueue_card`
    replaces it. `version` as in `enqueue_elements`. Raises KeyError for an unknown renderer.
    Returns the pending row, or None when dropped.
    """
    if renderer not in _renderers:
        raise KeyError(f"no card renderer {renderer!r} registered")
    return _enqueue(card, None, {}, version, renderer=renderer)


def enqueue_card_for_message(
    bot, open_message_id: str, card_json: dict[str, Any]
) -> CardUpdate | None:
    """`enqueue_card` for the card in message `open_message_id`, registering it if needed
    (used for a callback answer card that failed validation: it is shown after the answer)."""
    entity = CardEntity.objects.for_message(bot, open_message_id).first() or register_card(
        bot, open_message_id=open_message_id
    )
    return enqueue_card(entity, card_json)


def enqueue_elements_for_card_id(
    bot, card_id: str, elements: dict[str, dict[str, Any]]
) -> CardUpdate | None:
    """`enqueue_elements` for the CardKit entity `card_id` of `bot`, found and locked in the
    same statement that looks for its pending update (the feedback click's path). Returns None
    when `bot` has no such entity. Raises ValueError like `enqueue_elements`."""
    if not card_id:
        raise ValueError("element updates need a CardKit card entity (card_id)")
    _check_elements(elements)
    return _enqueue((bot, card_id), None, dict(elements), None)


def _check_elements(elements: dict[str, dict[str, Any]]) -> None:
    if not elements:
        raise ValueError("no elements to update")
    for element_id, element in elements.items():
        if not isinstance(element_id, str) or not ELEMENT_ID_RE.match(element_id):
            raise ValueError(f"bad element_id {element_id!r}")
        if not isinstance(element, dict) or not element.get("tag"):
            raise ValueError(f"element {element_id!r} must be a component object with a tag")


def _enqueue(
    card: CardEntity | tuple[Any, str],
    card_json: dict[str, Any] | None,
    elements: dict[str, dict[str, Any]],
    version: int | None,
    *,
    renderer: str = "",
) -> CardUpdate | None:
    """Queue one update of `card` (a CardEntity, or `(bot, card_id)`); None when dropped
    (older `version`) or when there is no such card."""
    hold = _current_hold.get()
    held = hold is not None and not hold.released
    if held:
        hold.used = True  # before the row exists: release_holds must not skip it
    # joins the caller's transaction without a savepoint (nothing here is caught and retried:
    # an error rolls the caller back with it); on its own it is one transaction
    with transaction.atomic(savepoint=False):
        if isinstance(card, tuple) and version is None:
            # the click's path: one statement when the card has no pending update (the usual
            # case), else the lookup below, which merges into the pending one
            now = timezone.now()
            inserted = CardUpdate.objects.insert_first_pending(
                CardUpdate(
                    card_json=card_json,
                    elements=elements,
                    renderer=renderer,
                    next_attempt_at=now + HOLD_FALLBACK if held else now,
                    hold_token=hold.token if held else "",
                ),
                *card,
            )
            if inserted is not None:
                return inserted
        # one statement: the card, locked, and the id of its pending update if there is one
        locked = CardEntity.objects.locked_with_pending(card)
        if locked is None:
            return None
        if version is not None:
            if version <= locked.state_version:
                log.info(
                    "card %s: update version %s dropped (state %s is newer)",
                    locked.pk,
                    version,
                    locked.state_version,
                )
                return None
            locked.state_version = version
            locked.save(update_fields=["state_version", "updated_at"])
        now = timezone.now()
        due = now + HOLD_FALLBACK if held else now
        pending = (
            CardUpdate.objects.select_for_update().filter(pk=locked.pending_pk).first()
            if locked.pending_pk is not None
            else None
        )
        if pending is None:
            return CardUpdate.objects.insert(
                CardUpdate(
                    card=locked,
                    card_json=card_json,
                    elements=elements,
                    renderer=renderer,
                    next_attempt_at=due,
                    hold_token=hold.token if held else "",
                )
            )
        if renderer:  # a rendered whole card replaces everything pending
            merged_card, merged_elements, dropped = None, {}, set()
            pending.renderer = renderer
        elif card_json is not None or not pending.renderer:
            merged_card, merged_elements, dropped = merge_updates(
                pending.card_json, pending.elements, card_json, elements
            )
            pending.renderer = ""
        else:  # element updates cannot apply to a card rendered at apply time
            merged_card, merged_elements, dropped = None, {}, set(elements)
        if dropped:
            log.warning(
                "card %s: element update(s) %s not in the queued whole card; dropped",
                locked.pk,
                ",".join(sorted(dropped)),
            )
        pending.card_json = merged_card
        pending.elements = merged_elements
        fields = ["card_json", "elements", "renderer", "updated_at"]
        if held:
            pending.hold_token = hold.token
            pending.next_attempt_at = max(pending.next_attempt_at, due)
            fields += ["hold_token", "next_attempt_at"]
        pending.save(update_fields=fields)
        return pending
