"""From a verified Feishu payload to handlers and back to an answer — shared by the HTTP ingress
(`interactions.channels.feishu.ingress`) and the long connection
(`interactions.channels.feishu.ws`).

`handle_card_action(bot, payload)` → answer dict, always within the budget:

1. the work runs in a worker thread (`POOL`, `CARDLOOP_CALLBACK_THREADS` of them; ordinary
   events in `EVENT_POOL`) with its own database connection, so neither a request thread nor
   the long connection's event loop does ORM work (Django's ORM must not run on an event loop's
   thread); the HTTP ingress's ASGI route runs the whole request in a `POOL` thread
   (`run_in_worker`);
2. dedupe: `interactions.callbacks.inbound.claim_card_action` (events: `claim_event`) on
   `header.event_id`; a repeat gets the first answer's toast or an info toast, and no handler
   runs again while the first delivery's claim is alive (a repeated event never has a second
   side effect; a claim whose run died is taken over, point 7);
3. a payload with a NUL character or a lone surrogate anywhere is refused (warning toast,
   nothing written: PostgreSQL text cannot hold a NUL, UTF-8 no lone surrogate); the callback
   value (`action.value`, object or JSON
   string) picks the handler by `kind`
   (`interactions.callbacks.registry`); unknown kind → warning toast; a handler that raises → error
   toast with the traceback logged; never a 500 (Feishu shows a 500 as a generic failure and
   retries);
4. an answer card that fails `validate_card` is dropped from the answer (toast only) and queued
   as a card update to apply after the answer (Feishu rejects the whole answer for an invalid
   card);
5. updates the handler enqueues are held until the answer was sent
   (`interactions.cardqueue.service`); the transport calls `take_after_answer()` and runs it
   once the answer left;
6. past `CARDLOOP_CALLBACK_BUDGET` seconds (2.0) the answer is an info toast while the handler
   finishes in its thread — only once the click is claimed: before that the answer is
   `try_again()` (nothing was recorded, so "still working" would be a promise nobody keeps);
7. acknowledged means recorded: the claim stores the verified action and carries a lease
   (`interactions.callbacks.inbound`); its final answer is recorded after the handler
   (`run_claim`; handlers are safe to run again for the same click); a transient database error
   (`plumbing.db.transient`) is retried a few times with backoff and is never stored as the
   answer — the claim's lease then runs out and an identical retry or the recovery
   (`interactions.callbacks.recovery`) runs it again. A handler's own exception is its final
   answer (the error toast).

`handle_event(bot, payload)` does the same for ordinary events (dedupe, every handler from
`registry.event_handlers`, errors logged); the transport acks Feishu regardless.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.db import connections
from django.utils.translation import gettext_lazy as _

from interactions.callbacks import inbound, registry
from interactions.cardqueue import service as cards
from interactions.lark.cardjson import validate_card
from plumbing import metrics
from plumbing.db import threads, transient
from plumbing.db.sqlite3.base import keep_connections_in_this_thread
from plumbing.parsers import contains_unstorable

log = logging.getLogger(__name__)

#: Threads running handlers. A handler past the budget keeps its thread until it finishes.
#: Threads that run callback work (card actions: decrypt, dedupe, handler; a few per process).
#: Card-action handlers only touch the database, so more threads than can overlap its round
#: trips just make one process's requests take turns on its GIL: at concurrency 32, 32 threads
#: stretched every click to the whole queue's time (p99 ~2× p50), 3–4 serve them in order
#: (bench/README.md). `CARDLOOP_CALLBACK_THREADS`. On SQLite their connections stay open from
#: one callback to the next (`finish_connections`); a fixed pool keeps that to a few.
POOL = ThreadPoolExecutor(
    max_workers=settings.CARDLOOP_CALLBACK_THREADS,
    thread_name_prefix="lark-handler",
    initializer=keep_connections_in_this_thread,
)
#: Threads for ordinary events, whose handlers may call the Open API (a text command's reply):
#: a slow Feishu answer must not hold up card actions.
EVENT_POOL = ThreadPoolExecutor(max_workers=32, thread_name_prefix="lark-event")

_after_answer: ContextVar[Callable[[], Any] | None] = ContextVar("lark_after_answer", default=None)
_in_worker: ContextVar[bool] = ContextVar("lark_in_worker", default=False)
#: The transport of the callbacks handled in this context (`metrics.ROUTES`); the long
#: connection sets it (`set_route`).
_route: ContextVar[str] = ContextVar("lark_route", default="http")
#: The metric kind of the last callback handled in this context (`take_answer_kind`).
_answer_kind: ContextVar[str | None] = ContextVar("lark_answer_kind", default=None)


def set_route(route: str) -> None:
    """Label the callbacks handled in this context with transport `route` (one of
    `plumbing.metrics.ROUTES`; the default is "http")."""
    _route.set(route)


def take_answer_kind() -> str | None:
    """The metric kind (`kind_label`) of the callback `handle_card_action` / `handle_event`
    last handled in this context, or None when neither ran (a refused request, a URL
    verification). Clears it. For a transport that keeps the budget itself and so measures
    the answer time (`interactions.channels.feishu.asgi`)."""
    kind = _answer_kind.get()
    _answer_kind.set(None)
    return kind


def kind_label(payload: dict[str, Any]) -> str:
    """The `kind` label of a card action for metrics: its `action.value.kind` when a handler
    is registered for it, else "unknown" (the value comes from outside, so only registered
    kinds — a closed set — become label values)."""
    event = payload.get("event")
    action = event.get("action") if isinstance(event, dict) else None
    try:
        value = registry.decode_value(action.get("value") if isinstance(action, dict) else None)
    except registry.InvalidCallback:
        return "unknown"
    kind = value.get("kind")
    if isinstance(kind, str) and registry.handler_for(kind) is not None:
        return kind
    return "unknown"


def take_after_answer() -> Callable[[], Any] | None:
    """What the transport must run once the answer it got from `handle_card_action` in this
    context has been sent (release held card updates). Clears it."""
    action = _after_answer.get()
    _after_answer.set(None)
    return action


def reset_after_answer() -> None:
    """Forget any pending after-answer action of this context (start of a request)."""
    _after_answer.set(None)


def budget() -> float:
    """Seconds a callback may take before it is answered with `still_working()`
    (`CARDLOOP_CALLBACK_BUDGET`, 2.0: Feishu waits 3 s for the answer, and that includes its
    network path to Cardloop; docs/CONTRACT.md, "3 seconds")."""
    return float(settings.CARDLOOP_CALLBACK_BUDGET)


def still_working() -> dict[str, Any]:
    """The answer of a callback that ran past `budget()`: an info toast (its work goes on)."""
    return _toast("info", _("Received. Still working on it; the card will update shortly."))


def try_again() -> dict[str, Any]:
    """The answer of a click whose claim could not be written (the database is unreachable or
    busy): nothing was recorded, so the person is asked to click again in a moment — never
    told it is being worked on."""
    return _toast(
        "warning",
        _("Cardloop cannot reach its database right now. Please try again in a moment."),
    )


def busy() -> dict[str, Any]:
    """The answer of a click that was still waiting for a handler thread when the budget ran
    out: its handler had not begun, and it never will for this delivery (`budget_answer` abandons it),
    so nothing is recorded and the person is asked to click again — the database is fine, the
    process was only busy, so the toast does not blame the database."""
    return _toast(
        "warning",
        _("Cardloop is busy and has not recorded this click. Please try again in a moment."),
    )


@dataclass
class Attempt:
    """One card action being answered, as the thread keeping the budget and the handler
    thread both see it (shared between them; every change under `lock`).

    - `started`: the handler began writing the click's claim (`begin_claim`);
    - `claimed`: the claim is written (from then on the click will be recorded, and "still
      working" is true);
    - `abandoned`: the budget answered before the claim began (`budget_answer`): the handler
      must not claim it any more, so "nothing was recorded" stays true.
    """

    claimed: bool = False
    started: bool = False
    abandoned: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def begin_claim(self) -> bool:
        """The handler is about to write the claim: True, unless the budget already answered
        for this click (then False and the handler stops without writing anything)."""
        with self.lock:
            if self.abandoned:
                return False
            self.started = True
            return True

    def mark_claimed(self) -> None:
        """The claim is written."""
        with self.lock:
            self.claimed = True


def budget_answer(attempt: Attempt | None) -> dict[str, Any]:
    """The answer when the budget ran out:

    - `still_working()` for a claimed click (or when nothing is known of it);
    - `try_again()` when its claim was being written but is not yet (the database did not
      answer in time; if the claim lands later the click is recorded and a retry is told so);
    - `busy()` when the claim had not begun (the click waited for a handler thread): the
      attempt is abandoned, so its handler never writes it and nothing is recorded."""
    if attempt is None:
        return still_working()
    with attempt.lock:
        if attempt.claimed:
            return still_working()
        if attempt.started:
            return try_again()
        attempt.abandoned = True
        return busy()


#: Tries of one claimed click's handler transaction in its thread when it fails with a
#: transient database error (`transient.backoff` between them: 0.2 s, 0.4 s); after the last
#: the claim's lease is let go and the retry / recovery runs it later.
CLAIM_TRIES = 3


def _toast(type_: str, message) -> dict[str, Any]:
    return {"toast": registry.Toast.of(type_, message).to_json()}


_attempt: ContextVar[Attempt | None] = ContextVar("lark_attempt", default=None)


def run_in_worker(fn, *args, attempt: Attempt | None = None):
    """Run `fn(*args)` in this `POOL` thread for a transport that enforces `budget()` itself
    (`interactions.channels.feishu.asgi`): `handle_card_action` / `handle_event` called inside
    do their work inline instead of handing it to a second thread. The transport owns the database
    connections of this thread (closes them when done). `attempt`: the transport's `Attempt`,
    which the card action marks claimed (for `budget_answer`)."""
    reset = _in_worker.set(True)
    reset_attempt = _attempt.set(attempt)
    try:
        return fn(*args)
    finally:
        _attempt.reset(reset_attempt)
        _in_worker.reset(reset)


def run_isolated(fn, *args):
    """Run `fn(*args)` in this pool thread with its own database connection, finished after
    (`finish_connections`)."""
    try:
        return fn(*args)
    finally:
        finish_connections()


#: A `POOL` thread is done with its database connections for now (`plumbing.db.threads`: a
#: SQLite connection is kept for the thread's next callback, a PostgreSQL one goes back to the
#: pool).
finish_connections = threads.finish_connections
hold_pooled_connections = threads.hold_pooled_connections


def more_callbacks_waiting() -> bool:
    """Whether a callback is already queued for a `POOL` thread (so the thread finishing one
    may keep its pooled connection for it: `hold_pooled_connections`). Reads the executor's
    queue (`ThreadPoolExecutor._work_queue`); False if that ever goes away, which only costs
    the pool round trip."""
    queue = getattr(POOL, "_work_queue", None)
    return queue is not None and queue.qsize() > 0


def _release_caller_connection() -> None:
    """Give the calling thread's database connection back (to the pool) before it waits for
    a handler thread, so a waiting request never holds a connection the handler needs (with
    a pool of N connections, N waiting requests would otherwise starve every handler until
    the budget ran out). Only pooled connections (PostgreSQL): without a pool there is nothing
    to starve, and reopening costs more (SQLite: PRAGMAs and the WAL close, ~5 ms a click).
    Inside a transaction (tests' atomic blocks) it is left alone, and an event loop's thread
    (the long connection) does no ORM work, so it holds none."""
    try:
        asyncio.get_running_loop()
        return
    except RuntimeError:
        pass
    connection = connections["default"]
    if (
        getattr(connection, "pool", None) is not None
        and connection.connection is not None
        and not connection.in_atomic_block
    ):
        connection.close()


def handle_card_action(bot, payload: dict[str, Any]) -> dict[str, Any]:
    """Answer a verified `card.action.trigger` payload of `bot` (dict) with the callback
    response body (`{}`, toast and/or raw card) within the callback budget. Never raises.
    Inside `run_in_worker` the work runs in the calling thread and the caller keeps the
    budget."""
    if contains_unstorable(payload):
        log.warning(
            "card action of %s carries a NUL character or a lone surrogate; refused", bot.app_id
        )
        metrics.count_refused("unstorable_characters")
        return _toast("warning", _("This request contains characters Cardloop cannot accept."))
    started = time.monotonic()
    kind = kind_label(payload)
    _answer_kind.set(kind)
    hold = cards.Hold()
    attempt = (_attempt.get() if _in_worker.get() else None) or Attempt()
    try:
        if _in_worker.get():
            answer = _answer_card_action(bot, payload, hold, attempt)
        else:
            _release_caller_connection()
            future = POOL.submit(run_isolated, _answer_card_action, bot, payload, hold, attempt)
            answer = future.result(timeout=budget())
    except FutureTimeout:
        log.warning(
            "card action %s of %s ran past the %gs budget; answered by the budget",
            _event_id(payload),
            bot.app_id,
            budget(),
        )
        metrics.count_over_budget(_route.get())
        answer = budget_answer(attempt)
    except Exception as exc:
        if transient.is_transient(exc):
            log.warning(
                "card action %s of %s: database unavailable (%s)",
                _event_id(payload),
                bot.app_id,
                type(exc).__name__,
            )
            if attempt.claimed:
                answer = still_working()
            else:
                answer = busy() if transient.is_busy(exc) else try_again()
        else:
            log.exception("card action %s of %s failed", _event_id(payload), bot.app_id)
            answer = _toast(
                "error", _("Something went wrong while handling your click. Please try again.")
            )
    _after_answer.set(functools.partial(cards.release_after_answer, hold))
    if not _in_worker.get():  # inside run_in_worker the transport measures the answer
        metrics.observe_callback_answer(_route.get(), kind, time.monotonic() - started)
    return answer


def handle_event(bot, payload: dict[str, Any]) -> bool:
    """Deliver a verified ordinary event of `bot` to its registered handlers (within the
    budget; a slow handler keeps running in its thread of `EVENT_POOL`). Never raises. An
    event with a NUL character or a lone surrogate anywhere is dropped with a warning (nothing
    could store it).

    Returns whether the event is taken care of: True when it was handled, is a duplicate, was
    dropped, or is claimed and still running past the budget; False when it was NOT recorded —
    its claim could not be written within the budget or failed on a transient database error,
    or a handler failed on one (its claim is then let go). A transport whose platform delivers
    again after an error answer (Slack's Events API, Telegram's webhook) answers False with a
    503, so the event is not lost; the claim deduplicates a redelivery of one that was
    recorded after all."""
    if contains_unstorable(payload):
        log.warning("event of %s carries a NUL character or a lone surrogate; dropped", bot.app_id)
        metrics.count_refused("unstorable_characters")
        return True
    _answer_kind.set("event")
    _release_caller_connection()
    claimed = threading.Event()
    future = EVENT_POOL.submit(run_isolated, _deliver_event, bot, payload, claimed)
    try:
        return future.result(timeout=budget())
    except FutureTimeout:
        log.warning(
            "event %s of %s still being handled after the budget (%s)",
            _event_id(payload),
            bot.app_id,
            "claimed" if claimed.is_set() else "not claimed yet: asked to be sent again",
        )
        return claimed.is_set()
    except Exception as exc:
        if transient.is_transient(exc):
            log.warning(
                "event %s of %s: database unavailable (%s); not recorded",
                _event_id(payload),
                bot.app_id,
                type(exc).__name__,
            )
            return False
        log.exception("event %s of %s failed", _event_id(payload), bot.app_id)
        return True


def _event_id(payload: dict[str, Any]) -> str:
    header = payload.get("header")
    event_id = header.get("event_id") if isinstance(header, dict) else payload.get("uuid")
    return event_id if isinstance(event_id, str) else ""


def _answer_card_action(
    bot, payload: dict[str, Any], hold: cards.Hold, attempt: Attempt
) -> dict[str, Any]:
    event_id = _event_id(payload)
    action, refusal = _verified_action(bot, payload)
    if not event_id:
        log.warning("card action of %s without header.event_id: cannot deduplicate", bot.app_id)
        if not attempt.begin_claim():
            return _abandoned(bot, event_id)
        attempt.mark_claimed()
        with cards.holding(hold):
            return refusal if refusal is not None else run_claim(bot, None, action)
    if not attempt.begin_claim():
        return _abandoned(bot, event_id)
    try:
        row, outcome = inbound.claim_card_action(
            bot, event_id, action.to_stored() if refusal is None else None
        )
    except Exception as exc:
        if not transient.is_transient(exc):
            raise
        log.warning(
            "card action %s of %s: its claim could not be written (%s); asked to try again",
            event_id,
            bot.app_id,
            type(exc).__name__,
        )
        transient.reset_connection()
        return busy() if transient.is_busy(exc) else try_again()
    attempt.mark_claimed()
    if outcome == inbound.DUPLICATE:
        log.info("card action %s of %s is a duplicate; not handled again", event_id, bot.app_id)
        return inbound.duplicate_answer(row)
    if outcome == inbound.TAKEN_OVER:
        log.info(
            "card action %s of %s: took over its expired claim (run %d)",
            event_id,
            bot.app_id,
            row.attempts,
        )
    if refusal is not None:
        _finish_final(row.pk, refusal)
        return refusal
    with cards.holding(hold):
        return run_claim(bot, row.pk, action)


def _abandoned(bot, event_id: str) -> dict[str, Any]:
    log.warning(
        "card action %s of %s waited past the budget for a handler thread; not handled "
        "(the person was asked to try again)",
        event_id or "(no id)",
        bot.app_id,
    )
    return busy()


def _verified_action(bot, payload):
    """`(CardAction, None)` for a card action a registered handler takes, else `(action or
    None, refusal answer)`: the click's own reason, final at once."""
    try:
        action = registry.CardAction.from_payload(bot, payload)
    except registry.InvalidCallback as exc:
        log.warning("card action %s of %s: %s", _event_id(payload), bot.app_id, exc)
        return None, _toast("warning", _("This button has no action Cardloop understands."))
    missing = registry.missing_fields(payload)
    if missing:
        log.warning(
            "card action %s of %s lacks %s; its handler may not find the card or the clicker",
            action.event_id,
            bot.app_id,
            ", ".join(missing),
        )
    if registry.handler_for(action.kind) is None:
        log.warning(
            "card action %s of %s: no handler for kind %r",
            action.event_id,
            bot.app_id,
            action.kind[:64],
        )
        return action, _toast(
            "warning", _("This button is not supported. Please refresh the card.")
        )
    return action, None


class _AnsweredElsewhere(Exception):
    """Another run of the same claim recorded its answer first."""


def run_claim(bot, pk: int | None, action: registry.CardAction) -> dict[str, Any]:
    """Run `action`'s handler for claim `pk` (None: an event without id, not deduplicated) to
    its answer, which is returned and recorded as the claim's final answer
    (`inbound.finish_claim`; a run that finds the claim answered by another run returns that
    answer). A handler may run again for the same click after a crash or a transient error
    between its commit and the answer's: handlers decide from the database whether the click
    is already recorded (a repeated verdict is "already chosen", a decided approval stays
    decided), so a re-run never records twice. The claim's lease is renewed meanwhile (`inbound.LEASES`). A transient database error is
    tried again (`CLAIM_TRIES`, with backoff) and never answered: after the last try the
    lease is let go and `still_working()` returned (the retry or the recovery records it). A
    handler's own exception is logged and its error toast is the final answer. Call inside
    `cards.holding` when the answer goes to Feishu. Never raises for a handler's failure."""
    if pk is not None:
        inbound.LEASES.hold(pk)
    try:
        for tried in range(1, CLAIM_TRIES + 1):
            try:
                answer = _record(pk, action)
            except _AnsweredElsewhere:
                log.info("card action %r: another run answered it first", action)
                return inbound.stored_answer(pk)
            except Exception as exc:
                if not transient.is_transient(exc):
                    log.exception("card action %r: handler %r raised", action, action.kind)
                    answer = _toast(
                        "error",
                        _("Something went wrong while handling your click. Please try again."),
                    )
                    _finish_final(pk, answer)
                    return answer
                log.warning(
                    "card action %r: transient database error (%s), try %d of %d",
                    action,
                    type(exc).__name__,
                    tried,
                    CLAIM_TRIES,
                )
                transient.reset_connection()
                if tried < CLAIM_TRIES:
                    time.sleep(transient.backoff(tried))
                    continue
                if pk is not None:
                    inbound.let_go(pk)
                return still_working()
            return _checked_card(bot, action, answer)
        raise AssertionError("unreachable")  # pragma: no cover
    finally:
        if pk is not None:
            inbound.LEASES.drop(pk)


def _record(pk: int | None, action: registry.CardAction) -> dict[str, Any]:
    """One run of the handler, then the claim's answer — in one transaction for a handler
    marked `registry.answered_in_transaction` (a click is then two write transactions: the
    claim and this), else after the handler's own; raises the handler's exceptions and
    `_AnsweredElsewhere`."""
    handler = registry.handler_for(action.kind)
    if pk is not None and registry.is_answered_in_transaction(handler):
        answer = inbound.run_and_finish(pk, lambda: _as_answer(action, handler(action)))
        if answer is None:
            raise _AnsweredElsewhere
        return answer
    answer = _as_answer(action, handler(action))
    if pk is not None and not inbound.finish_claim(pk, answer):
        raise _AnsweredElsewhere
    return answer


def _finish_final(pk: int | None, answer: dict[str, Any]) -> None:
    """Record a final answer outside a handler's transaction; on a transient error the claim
    stays (its lease runs out and the next run answers it)."""
    if pk is None:
        return
    try:
        inbound.finish_claim(pk, answer)
    except Exception as exc:
        if not transient.is_transient(exc):
            raise
        log.warning("claim %s: its answer could not be stored (%s)", pk, type(exc).__name__)
        transient.reset_connection()


def _as_answer(action, result) -> dict[str, Any]:
    if result is None:
        return {}
    if isinstance(result, registry.Answer):
        return result.to_json()
    if isinstance(result, dict):
        return result
    log.error("card action %r: handler returned %s, not an Answer", action, type(result).__name__)
    return _toast("error", _("Something went wrong while handling your click. Please try again."))


def _checked_card(bot, action, answer: dict[str, Any]) -> dict[str, Any]:
    """A card in the answer must be valid Card JSON 2.0 (Feishu rejects the whole answer
    otherwise): when it is not, answer toast-only and
    queue the card as an update after the answer. Only Feishu shows the card of an answer:
    for a click from another channel (`action.channel`: Slack and Telegram, whose messages
    are replaced through the card queue by the handlers' own updates) the card is left out,
    nothing queued."""
    card = answer.get("card")
    if card is None:
        return answer
    if action is not None and action.channel != "feishu":
        return {k: v for k, v in answer.items() if k != "card"}
    data = card.get("data") if isinstance(card, dict) else None
    problems = ["$: the answer card must be {type: raw, data: {…}}"]
    if isinstance(card, dict) and card.get("type") == "raw":
        problems = validate_card(data)
    elif isinstance(card, dict) and card.get("type") == "template":
        return answer
    if not problems:
        return answer
    answer = {k: v for k, v in answer.items() if k != "card"}
    log.warning(
        "card action %r: answer card invalid (%s); answered toast-only, card queued as an update",
        action,
        "; ".join(problems[:3]),
    )
    if action is not None and action.open_message_id and isinstance(data, dict):
        try:
            cards.enqueue_card_for_message(bot, action.open_message_id, data)
        except Exception:
            log.exception("card action %r: could not queue the answer card", action)
    return answer


def _deliver_event(bot, payload: dict[str, Any], claimed: threading.Event | None = None) -> bool:
    """Claim the event and run its handlers (`handle_event`); `claimed` is set once the claim
    is written. Returns False when a handler failed on a transient database error (the claim
    is let go, so a redelivery runs it); raises when the claim itself cannot be written."""
    event = registry.LarkEvent.from_payload(bot, payload)
    if event.event_id:
        row, created = inbound.claim_event(bot, event.event_id, event.event_type or "p1")
        if claimed is not None:
            claimed.set()
        if not created:
            log.info("event %s of %s is a duplicate; not handled again", event.event_id, bot.app_id)
            return True
    else:
        row = None
        if claimed is not None:
            claimed.set()
    for handler in registry.event_handlers(event.event_type):
        try:
            handler(event)
        except Exception as exc:
            if transient.is_transient(exc):
                log.warning(
                    "%r: handler %r failed on the database (%s); claim let go",
                    event,
                    getattr(handler, "__qualname__", handler),
                    type(exc).__name__,
                )
                transient.reset_connection()
                if row is not None:
                    inbound.release_event(row)
                return False
            log.exception("%r: handler %r raised", event, getattr(handler, "__qualname__", handler))
    if row is not None:
        inbound.finish_event(row, None)
    return True
