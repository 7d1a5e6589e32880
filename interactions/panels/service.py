"""Question panels: desktop and web clients of `/ws/panel/` that show a user's pending
ask_user_questions and answer them: the panel protocol.

What lives here (the consumer, `interactions.panels.consumer.PanelConsumer`, only parses and
calls):

- **Authentication.** A panel connects as one Feishu user (`open_id` of a bot) with a desktop
  token (`botadmin.models.DesktopToken`, `cdt_…`), given either as `Authorization: Bearer
  cdt_…` (desktop clients that can set headers), or as a WebSocket subprotocol pair
  `["cardloop.panel.v1", "cdt_…"]` (browser-based clients; the server selects
  `cardloop.panel.v1`), or — for the web panel `/panel/` — by the Django session the panel's
  login form stored (`SESSION_KEY`). Never in the URL (URLs are logged). A missing, unknown or
  revoked token: the socket is accepted, sent `{"type": "error", "error": "invalid_token"}`
  and closed with code 4401. A token revoked while connected (`revoke_token`) closes with
  4401 at once (at the next resync if that channel message is lost); from the revocation on
  it counts as not connected and its answers are refused, whether or not it was closed yet.
- **Presence and push** (`interactions.presence`): who is connected, and best-effort
  delivery of a message to every panel of a user.
- **Resync — correctness never relies on a push.** On every connect, on a client's
  `{"type": "sync"}`, and every `CARDLOOP_PANEL_RESYNC` s the panel's state is read from the
  database (`interactions.asks.service.open_asks_for`). On connect and on request a full
  snapshot is sent: a `snapshot` envelope `{"type": "snapshot", "requestIds": [...],
  "serverTime", "resyncSeconds"}` (the client drops every question not listed) followed by one
  `ask_user_questions` message per open ask. The periodic check sends an envelope only when
  the state differs from what the connection was sent, followed by the missing asks only. A repair after a lost push is logged as a warning and counted in
  `presence.STATS`.
- **No question twice on one connection.** Each connection remembers which asks it was sent.
  A push of an ask it was already sent (the connect snapshot or a resync got there first) is
  dropped; the periodic resync (`plan_resync`) sends only the asks the connection was never
  sent, and of those only the ones older than `CARDLOOP_PANEL_RESYNC_GRACE` s (younger ones
  are left to their push, which may still be on its way to many panels); a cancellation
  whose ask a resync snapshot already dropped is not sent again. A snapshot the client asks
  for (`sync`) or gets on connect lists and sends every open ask.

Protocol (JSON text frames):

| direction | message |
|---|---|
| server → client | `snapshot` (above), `ask_user_questions` (`asks.panel_message`), `ask_user_questions_cancelled` `{requestId, reason}`, `ask_user_questions_accepted` `{requestId}`, `ask_user_questions_rejected` `{requestId, code, detail}`, `pong`, `error` `{error, detail}` |
| client → server | `ask_user_questions_result` `{requestId, answers: [{question, selectedLabels, customInput}]}`, `sync`, `ping` |

The panel whose answer won gets only `ask_user_questions_accepted` for it; the other panels of
the user get `ask_user_questions_cancelled` with reason `answered` (the consumer drops that push
on the winning panel, so "you answered" and "answered elsewhere" never reach the same client).

`rejected` codes come from `asks.submit_answers` (`unknown`, `finished` — e.g. answered on the
card first —, `not_sender`, `empty_answer`, `invalid`); after `unknown`/`finished`/`not_sender`
the client drops the question. A malformed client frame gets an `error` frame (`malformed_json`,
`invalid_message`, `unknown_type`, `too_large`, `binary_frame`) and the connection stays open.

Never logged: tokens, open_ids, answer text.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import transaction
from django.utils import timezone

from botadmin import services
from botadmin.models import DesktopToken
from interactions import presence
from interactions.asks import service as asks
from interactions.panel_timing import resync_interval

log = logging.getLogger(__name__)

#: WebSocket subprotocol of the panel protocol (selected when the client offers it).
SUBPROTOCOL = "cardloop.panel.v1"
#: Session key the web panel's login stores the desktop token's id under.
SESSION_KEY = "cardloop_panel_token"
#: Close code for a missing, unknown or revoked token.
CLOSE_INVALID_TOKEN = 4401
#: Largest client frame accepted (bytes of text).
MAX_FRAME = 64 * 1024
#: Most questions in one request (an ask has 1–4); answers beyond it are refused here.
MAX_ANSWERS = 4
#: Codes after which a panel drops the question: it can never be answered from there.
TERMINAL_REJECTIONS = frozenset({"unknown", "finished", "not_sender"})

# ---------------------------------------------------------------------------------------------
# Authentication
# ---------------------------------------------------------------------------------------------


def authenticate_token(raw: str | None) -> DesktopToken | None:
    """The active desktop token for `raw` (with its bot), or None for anything else (wrong
    shape, unknown, revoked). Records use at most once a minute."""
    if not raw:
        return None
    token = DesktopToken.find_active(raw.strip())
    if token is None:
        return None
    token = DesktopToken.objects.select_related("bot").get(pk=token.pk)
    token.touch()
    return token


def _header(scope: dict, name: bytes) -> str:
    for key, value in scope.get("headers") or ():
        if key.lower() == name:
            try:
                return value.decode("latin-1")
            except Exception:  # noqa: BLE001 - a header we cannot read is no header
                return ""
    return ""


def raw_token_from_scope(scope: dict) -> str | None:
    """A desktop token a client presented in the handshake: `Authorization: Bearer cdt_…`,
    else a `cdt_…` entry among the offered subprotocols. None when there is none."""
    scheme, _sep, value = _header(scope, b"authorization").partition(" ")
    if scheme.lower() == "bearer" and value.strip():
        return value.strip()
    for proto in scope.get("subprotocols") or ():
        if proto.startswith(f"{DesktopToken.PREFIX_TAG}_"):
            return proto
    return None


def authenticate_scope(scope: dict) -> presence.PanelUser | None:
    """Who a `/ws/panel/` handshake authenticates as, or None. A token in the handshake wins;
    without one, the web panel's session (`SESSION_KEY`, set by `/panel/` login) is used — only
    when the handshake has an `Origin` (a browser; `cardloop.asgi` checked it against
    ALLOWED_HOSTS) — and its token must still be active. Sync (database): call through
    `database_sync_to_async`."""
    raw = raw_token_from_scope(scope)
    if raw is not None:
        token = authenticate_token(raw)
        via = "desktop"
    elif _header(scope, b"origin"):  # the session cookie counts only from a browser page
        session = scope.get("session")
        token_id = session.get(SESSION_KEY) if session is not None else None
        token = None
        if isinstance(token_id, int):
            token = DesktopToken.objects.active().select_related("bot").filter(pk=token_id).first()
        via = "web"
    else:
        return None
    if token is None:
        return None
    return presence.PanelUser(token_id=token.pk, bot=token.bot, open_id=token.open_id, via=via)


def token_is_active(token_id: int) -> bool:
    """Whether the desktop token `token_id` still authenticates (not revoked)."""
    return DesktopToken.objects.active().filter(pk=token_id).exists()


# Snapshots and answers (sync: the consumer calls these through database_sync_to_async)
# ---------------------------------------------------------------------------------------------


def open_messages(user: presence.PanelUser) -> list[dict[str, Any]]:
    """`ask_user_questions` messages of every open ask of `user`, oldest first."""
    return [asks.panel_message(ask) for ask in asks.open_asks_for(user.bot, user.open_id)]


def open_asks(user: presence.PanelUser) -> list[tuple[dict[str, Any], datetime]]:
    """`(ask_user_questions message, created_at)` of every open ask of `user`, oldest first:
    what the periodic resync compares with what a connection was sent."""
    return [
        (asks.panel_message(ask), ask.created_at)
        for ask in asks.open_asks_for(user.bot, user.open_id)
    ]


@dataclass(frozen=True)
class ResyncPlan:
    """What a periodic resync sends one connection: nothing when `needed` is False; else a
    snapshot envelope listing `keep` (what the client should hold after it), then `send`
    (the ask messages this connection was never sent). `missing` = asks sent now, `stale` =
    asks the connection was sent that are no longer open (their cancellation never came),
    `deferred` = open asks not sent yet but younger than the grace (their push is probably
    still on its way; the next resync looks again)."""

    keep: list[str]
    send: list[dict[str, Any]]
    stale: list[str]
    deferred: int

    @property
    def needed(self) -> bool:
        return bool(self.send or self.stale)


def plan_resync(
    open_now: list[tuple[dict[str, Any], datetime]],
    sent: set[str],
    *,
    now: datetime,
    grace: float,
) -> ResyncPlan:
    """Pure: the periodic resync of one connection that was sent the open asks `sent`
    (requestIds), given the asks open now (`open_asks`), at `now`, leaving an unsent ask
    younger than `grace` seconds to its push. Never re-sends an ask the connection was
    already sent, so a push and a resync racing never give the client the same question
    twice."""
    cutoff = now - timedelta(seconds=grace)
    current = {m["requestId"] for m, _ in open_now}
    send, deferred = [], 0
    for message, created_at in open_now:
        if message["requestId"] in sent:
            continue
        if created_at > cutoff:
            deferred += 1
        else:
            send.append(message)
    keep = [m["requestId"] for m, _ in open_now if m["requestId"] in sent] + [
        m["requestId"] for m in send
    ]
    stale = sorted(sent - current)
    return ResyncPlan(keep=keep, send=send, stale=stale, deferred=deferred)


def snapshot_envelope(messages: list[dict[str, Any]] | list[str]) -> dict[str, Any]:
    """The `snapshot` message that precedes a resync's `ask_user_questions` messages: the
    client keeps exactly the questions listed in `requestIds` (`messages`: the ask messages
    or their requestIds)."""
    return {
        "type": "snapshot",
        "requestIds": [m if isinstance(m, str) else m["requestId"] for m in messages],
        "serverTime": timezone.now().isoformat(),
        "resyncSeconds": resync_interval(),
    }


class ClientError(Exception):
    """A client frame the panel protocol refuses; answered with an `error` frame."""

    def __init__(self, code: str, detail: Any = ""):
        super().__init__(code)
        self.code = code
        self.detail = detail

    def frame(self) -> dict[str, Any]:
        return {"type": "error", "error": self.code, "detail": self.detail}


def parse_result(message: dict[str, Any]) -> tuple[str, list[dict[str, Any]]]:
    """Validate an `ask_user_questions_result` frame's shape. Returns `(request_id, answers)`
    with each answer normalized to `{question, selectedLabels, customInput}`. Raises
    `ClientError("invalid_message", {field: reason})`. Whether labels match the ask's options
    is `asks.submit_answers`' call (code `invalid`)."""
    problems: dict[str, str] = {}
    request_id = message.get("requestId")
    if not isinstance(request_id, str) or not request_id or len(request_id) > 128:
        problems["requestId"] = "a non-empty string is required"
    answers = message.get("answers")
    normalized: list[dict[str, Any]] = []
    if not isinstance(answers, list) or not 1 <= len(answers) <= MAX_ANSWERS:
        problems["answers"] = f"a list of 1–{MAX_ANSWERS} answers is required"
    else:
        for i, answer in enumerate(answers):
            where = f"answers[{i}]"
            if not isinstance(answer, dict):
                problems[where] = "an object is required"
                continue
            question = answer.get("question", "")
            labels = answer.get("selectedLabels", [])
            custom = answer.get("customInput")
            if not isinstance(question, str):
                problems[f"{where}.question"] = "a string is required"
            if not isinstance(labels, list) or not all(isinstance(x, str) for x in labels):
                problems[f"{where}.selectedLabels"] = "a list of strings is required"
            if custom is not None and not isinstance(custom, str):
                problems[f"{where}.customInput"] = "a string or null is required"
            normalized.append(
                {"question": question, "selectedLabels": labels, "customInput": custom or ""}
            )
    if problems:
        raise ClientError("invalid_message", problems)
    return request_id, normalized


#: English details of `submit_answers` codes (clients translate by code).
REJECTION_DETAILS = {
    "unknown": "This question does not exist (any more).",
    "finished": "This question was already answered, cancelled or has expired.",
    "not_sender": "Only the person the question was asked of may answer it.",
    "empty_answer": "Select at least one option or fill in “other” for every question.",
    "invalid": "The answer does not match the question's options.",
}


class TokenRevoked(Exception):
    """The panel's desktop token was revoked: it answers nothing more and is closed (4401)."""


def submit(user: presence.PanelUser, message: dict[str, Any]) -> dict[str, Any]:
    """Answer an ask from a panel: `asks.submit_answers(…, via="panel", operator_open_id=the
    token's open_id)`. Returns the reply frame, `ask_user_questions_accepted` or
    `ask_user_questions_rejected` with the outcome's code. Raises `ClientError` for a
    malformed frame and `TokenRevoked` when the token was revoked since the panel connected
    (nothing is submitted then: a revoked token answers nothing, whether or not its
    connection has been closed yet)."""
    request_id, answers = parse_result(message)
    if not token_is_active(user.token_id):
        raise TokenRevoked()
    outcome = asks.submit_answers(
        user.bot, request_id, answers, via="panel", operator_open_id=user.open_id
    )
    if outcome.won:
        return {"type": "ask_user_questions_accepted", "requestId": request_id}
    code = outcome.code or "finished"
    return {
        "type": "ask_user_questions_rejected",
        "requestId": request_id,
        "code": code,
        "detail": REJECTION_DETAILS.get(code, ""),
    }


def revoke_token(actor: Any, token: DesktopToken) -> DesktopToken:
    """Revoke desktop `token` (`botadmin.services.revoke_desktop_token`: audited, idempotent)
    and, once committed, tell its connected panels in every process to close (4401).

    The database decides: a revoked token's presence no longer counts as connected
    (`PanelPresence.live`) and its answers are refused (`submit`); the message only closes
    the sockets early, and a lost one leaves it to the panel's next resync check."""
    token = services.revoke_desktop_token(actor, token)
    event = {"type": "panel.token_revoked", "token_id": token.pk}
    transaction.on_commit(lambda: presence.group_send(token.bot, token.open_id, event))
    return token
