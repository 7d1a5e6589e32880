"""Question panels: desktop and web clients of `/ws/panel/` that show a user's pending
ask_user_questions and answer them (issue 7 parts 4–5).

What lives here (the consumer, `interactions.panels.consumer.PanelConsumer`, only parses and calls):

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
- **Presence** (`PanelPresence` rows): created on connect, deleted on disconnect, refreshed by
  the serving process every `CARDLOOP_PANEL_HEARTBEAT` s. `is_connected()` counts only rows
  refreshed within `CARDLOOP_PANEL_PRESENCE_TTL` s, so a process that died (no disconnect ran)
  stops counting after the TTL; any process's heartbeat sweeps such rows.
- **Push.** `push(bot, open_id, message)` sends a message to every panel of the user through
  the channel layer group `group_for(bot, open_id)` (Redis across processes; the in-memory
  layer within one process). Best effort by design: the ASGI spec lets group sends drop
  silently past a channel's capacity (B15), and a client may be reconnecting (B17).
- **Resync — correctness never relies on a push.** On every connect, on a client's
  `{"type": "sync"}`, and every `CARDLOOP_PANEL_RESYNC` s the panel's state is read from the
  database (`interactions.asks.service.open_asks_for`) and, when it differs from what the panel was
  sent (or always, on connect and on request), a fresh snapshot is sent: a `snapshot`
  envelope `{"type": "snapshot", "requestIds": [...], "serverTime", "resyncSeconds"}` (the
  client drops every question not listed) followed by one `ask_user_questions` message per
  open ask. A repair after a lost push is logged as a warning and counted in `STATS`.

Protocol (JSON text frames):

| direction | message |
|---|---|
| server → client | `snapshot` (above), `ask_user_questions` (`asks.panel_message`), `ask_user_questions_cancelled` `{requestId, reason}`, `ask_user_questions_accepted` `{requestId}`, `ask_user_questions_rejected` `{requestId, code, detail}`, `pong`, `error` `{error, detail}` |
| client → server | `ask_user_questions_result` `{requestId, answers: [{question, selectedLabels, customInput}]}`, `sync`, `ping` |

`rejected` codes come from `asks.submit_answers` (`unknown`, `finished` — e.g. answered on the
card first —, `not_sender`, `empty_answer`, `invalid`); after `unknown`/`finished`/`not_sender`
the client drops the question. A malformed client frame gets an `error` frame (`malformed_json`,
`invalid_message`, `unknown_type`, `too_large`, `binary_frame`) and the connection stays open.

Never logged: tokens, open_ids, answer text.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import secrets
import socket
import threading
from collections import Counter
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from botadmin import services
from botadmin.models import Bot, DesktopToken
from interactions.models import PanelPresence

log = logging.getLogger(__name__)

#: WebSocket subprotocol of the panel protocol (selected when the client offers it).
SUBPROTOCOL = "cardloop.panel.v1"
#: Session key the web panel's login stores the desktop token's id under.
SESSION_KEY = "cardloop_panel_token"
#: Close code for a missing, unknown or revoked token.
CLOSE_INVALID_TOKEN = 4401
#: Largest client frame accepted (bytes of text).
MAX_FRAME = 64 * 1024
#: Most questions in one request (DESIGN §3: 1–4); answers beyond it are refused here.
MAX_ANSWERS = 4
#: Codes after which a panel drops the question: it can never be answered from there.
TERMINAL_REJECTIONS = frozenset({"unknown", "finished", "not_sender"})

#: This process, as written on its presence rows (host:pid:nonce).
SERVER_ID = f"{socket.gethostname()[:40]}:{os.getpid()}:{secrets.token_hex(3)}"

#: Counters of this process (pushes sent, drops seen, resync repairs): for logs and tests.
STATS: Counter[str] = Counter()


def heartbeat_interval() -> float:
    """Seconds between presence refreshes (`CARDLOOP_PANEL_HEARTBEAT`, default 20)."""
    return float(getattr(settings, "CARDLOOP_PANEL_HEARTBEAT", 20.0))


def presence_ttl() -> timedelta:
    """How long an unrefreshed presence still counts (`CARDLOOP_PANEL_PRESENCE_TTL`, 60 s)."""
    return timedelta(seconds=float(getattr(settings, "CARDLOOP_PANEL_PRESENCE_TTL", 60.0)))


def resync_interval() -> float:
    """Seconds between a panel's resyncs with the database (`CARDLOOP_PANEL_RESYNC`, 60)."""
    return float(getattr(settings, "CARDLOOP_PANEL_RESYNC", 60.0))


def group_for(bot: Bot | int, open_id: str) -> str:
    """The channel-layer group of one user's panels. Hashed: group names are logged by the
    layers and must be ASCII; an open_id must not appear in them."""
    bot_id = bot if isinstance(bot, int) else bot.pk
    digest = hashlib.sha256(f"{bot_id}:{open_id}".encode()).hexdigest()[:40]
    return f"cardloop.panel.{digest}"


def _asks():
    """`interactions.asks.service` (the asks engineer's contract module), imported when first used."""
    from interactions.asks import service as asks

    return asks


# ---------------------------------------------------------------------------------------------
# Authentication
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PanelUser:
    """Who a panel connection shows questions for: the desktop token's bot and open_id.
    `via` is `"desktop"` (token in a header or subprotocol) or `"web"` (session of `/panel/`).
    `repr()` leaves the open_id out."""

    token_id: int
    bot: Bot
    open_id: str
    via: str

    def __repr__(self) -> str:
        return f"PanelUser(token={self.token_id}, bot={self.bot.app_id}, via={self.via})"


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


def authenticate_scope(scope: dict) -> PanelUser | None:
    """Who a `/ws/panel/` handshake authenticates as, or None. A token in the handshake wins;
    without one, the web panel's session (`SESSION_KEY`, set by `/panel/` login) is used — only
    when the handshake has an `Origin` (a browser; `cardloop.asgi` checked it against
    ALLOWED_HOSTS) — and its token must still be active. Sync (database): call through `database_sync_to_async`."""
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
    return PanelUser(token_id=token.pk, bot=token.bot, open_id=token.open_id, via=via)


def token_is_active(token_id: int) -> bool:
    """Whether the desktop token `token_id` still authenticates (not revoked)."""
    return DesktopToken.objects.active().filter(pk=token_id).exists()


# ---------------------------------------------------------------------------------------------
# Presence
# ---------------------------------------------------------------------------------------------


def register(user: PanelUser, channel_name: str) -> PanelPresence:
    """Record a live panel of `user` served by this process on `channel_name`."""
    now = timezone.now()
    presence, _created = PanelPresence.objects.update_or_create(
        channel_name=channel_name,
        defaults={
            "bot": user.bot,
            "open_id": user.open_id,
            "token_id": user.token_id,
            "server": SERVER_ID,
            "via": user.via,
            "connected_at": now,
            "last_seen_at": now,
        },
    )
    return presence


def unregister(channel_name: str) -> None:
    """Forget the panel on `channel_name` (its socket closed). Idempotent."""
    PanelPresence.objects.filter(channel_name=channel_name).delete()


def refresh(channel_names: list[str]) -> int:
    """Heartbeat of this process: mark its live panels as seen now and delete expired rows of
    any process (one that died without disconnecting). Returns the number refreshed."""
    now = timezone.now()
    refreshed = 0
    names = list(channel_names)
    for start in range(0, len(names), 500):
        refreshed += PanelPresence.objects.filter(
            channel_name__in=names[start : start + 500]
        ).update(last_seen_at=now)
    swept = PanelPresence.objects.expired(now).delete()[0]
    if swept:
        log.info("panel presence: swept %d expired connection(s)", swept)
    return refreshed


def is_connected(bot: Bot, open_id: str) -> bool:
    """Whether `open_id` of `bot` has a live panel in any process (a presence row refreshed
    within `CARDLOOP_PANEL_PRESENCE_TTL` seconds). One indexed query."""
    if not open_id:
        return False
    return PanelPresence.objects.live().of_user(bot, open_id).exists()


# ---------------------------------------------------------------------------------------------
# Snapshots and answers (sync: the consumer calls these through database_sync_to_async)
# ---------------------------------------------------------------------------------------------


def open_messages(user: PanelUser) -> list[dict[str, Any]]:
    """`ask_user_questions` messages of every open ask of `user`, oldest first."""
    asks = _asks()
    return [asks.panel_message(ask) for ask in asks.open_asks_for(user.bot, user.open_id)]


def snapshot_envelope(messages: list[dict[str, Any]]) -> dict[str, Any]:
    """The `snapshot` message that precedes a resync's `ask_user_questions` messages: the
    client keeps exactly the questions listed in `requestIds`."""
    return {
        "type": "snapshot",
        "requestIds": [m["requestId"] for m in messages],
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


def submit(user: PanelUser, message: dict[str, Any]) -> dict[str, Any]:
    """Answer an ask from a panel: `asks.submit_answers(…, via="panel", operator_open_id=the
    token's open_id)`. Returns the reply frame, `ask_user_questions_accepted` or
    `ask_user_questions_rejected` with the outcome's code. Raises `ClientError` for a
    malformed frame and `TokenRevoked` when the token was revoked since the panel connected
    (nothing is submitted then: a revoked token answers nothing, whether or not its
    connection has been closed yet)."""
    request_id, answers = parse_result(message)
    if not token_is_active(user.token_id):
        raise TokenRevoked()
    outcome = _asks().submit_answers(
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


# ---------------------------------------------------------------------------------------------
# This process's live panels (for in-memory delivery and the heartbeat)
# ---------------------------------------------------------------------------------------------


class _Local:
    """Live consumers of this process: channel_name → (group, event loop). Thread-safe."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.channels: dict[str, tuple[str, asyncio.AbstractEventLoop]] = {}
        self.heartbeats: dict[asyncio.AbstractEventLoop, asyncio.Task] = {}

    def attach(self, channel_name: str, group: str) -> None:
        loop = asyncio.get_running_loop()
        with self.lock:
            self.channels[channel_name] = (group, loop)
            task = self.heartbeats.get(loop)
            if task is None or task.done():
                self.heartbeats[loop] = loop.create_task(_heartbeat(loop))

    def detach(self, channel_name: str) -> None:
        with self.lock:
            entry = self.channels.pop(channel_name, None)
            if entry is None:
                return
            loop = entry[1]
            if not any(lp is loop for _g, lp in self.channels.values()):
                task = self.heartbeats.pop(loop, None)
                if task is not None:
                    task.cancel()

    def on_loop(self, loop) -> list[str]:
        with self.lock:
            return [name for name, (_g, lp) in self.channels.items() if lp is loop]

    def in_group(self, group: str) -> list[tuple[str, asyncio.AbstractEventLoop]]:
        with self.lock:
            return [(name, lp) for name, (g, lp) in self.channels.items() if g == group]


LOCAL = _Local()


async def _heartbeat(loop) -> None:
    """Refresh this loop's presence rows every `heartbeat_interval()` s while it has panels."""
    from channels.db import database_sync_to_async

    while True:
        await asyncio.sleep(heartbeat_interval())
        names = LOCAL.on_loop(loop)
        if not names:
            return
        try:
            await database_sync_to_async(refresh)(names)
        except asyncio.CancelledError:
            raise
        except Exception:  # noqa: BLE001 - a failed refresh is retried next beat
            log.warning("panel presence refresh failed", exc_info=True)


# ---------------------------------------------------------------------------------------------
# Push
# ---------------------------------------------------------------------------------------------

#: Tasks of pushes scheduled on a running loop (kept referenced until done).
_pending: set = set()


def _log_failure(future) -> None:
    _pending.discard(future)
    if future.cancelled():
        return
    exc = future.exception()
    if exc is not None:
        STATS["push_failed"] += 1
        log.warning("panel push failed: %s", type(exc).__name__)


async def _send_local(layer, channel_name: str, event: dict) -> None:
    from channels.exceptions import ChannelFull

    try:
        await layer.send(channel_name, event)
    except ChannelFull:
        STATS["push_dropped"] += 1
        log.warning(
            "panel push dropped: channel over capacity (%d); the panel resyncs", layer.capacity
        )


def revoke_token(actor: Any, token: DesktopToken) -> DesktopToken:
    """Revoke desktop `token` (`botadmin.services.revoke_desktop_token`: audited, idempotent)
    and, once committed, tell its connected panels in every process to close (4401).

    The database decides: a revoked token's presence no longer counts as connected
    (`PanelPresence.live`) and its answers are refused (`submit`); the message only closes
    the sockets early, and a lost one leaves it to the panel's next resync check."""
    token = services.revoke_desktop_token(actor, token)
    event = {"type": "panel.token_revoked", "token_id": token.pk}
    transaction.on_commit(lambda: _group_send(token.bot, token.open_id, event))
    return token


def push(bot: Bot, open_id: str, message: dict[str, Any]) -> None:
    """Send `message` (a panel protocol dict, e.g. `asks.panel_message(ask)`) to every live
    panel of `open_id` of `bot`, in every process. Never raises and never blocks on a client.

    Call it after the state it announces is committed: `transaction.on_commit(lambda:
    panels.push(bot, open_id, message))`. Delivery is best effort (B15, B17): panels resync
    with the database on connect and periodically, so a lost push only delays the panel.

    With the in-memory layer (one process) the message goes directly to this process's
    consumers of that user, on their event loop (thread-safe from any thread, e.g. the Feishu
    callback pool); a full channel is counted in `STATS["push_dropped"]` and logged. With
    Redis it is a `group_send` to `group_for(bot, open_id)` (over capacity, channels-redis
    logs "channels over capacity").
    """
    STATS["push"] += 1
    _group_send(bot, open_id, {"type": "panel.push", "message": message})


def _group_send(bot: Bot, open_id: str, event: dict[str, Any]) -> None:
    """Deliver channel-layer `event` to the consumers of `group_for(bot, open_id)` (see
    `push`). Never raises."""
    try:
        from channels.layers import InMemoryChannelLayer, get_channel_layer

        layer = get_channel_layer()
        if layer is None or not open_id:
            return
        group = group_for(bot, open_id)
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if isinstance(layer, InMemoryChannelLayer):
            for channel_name, loop in LOCAL.in_group(group):
                try:
                    if loop is running:
                        task = loop.create_task(_send_local(layer, channel_name, event))
                    else:
                        task = asyncio.run_coroutine_threadsafe(
                            _send_local(layer, channel_name, event), loop
                        )
                except RuntimeError:  # that loop is closed: its consumer is gone
                    continue
                _pending.add(task)
                task.add_done_callback(_log_failure)
            return
        if running is not None:
            task = running.create_task(layer.group_send(group, event))
            _pending.add(task)
            task.add_done_callback(_log_failure)
            return
        from asgiref.sync import async_to_sync

        async_to_sync(layer.group_send)(group, event)
    except Exception as exc:  # noqa: BLE001 - a push never fails the caller's change
        STATS["push_failed"] += 1
        log.warning("panel push failed: %s", type(exc).__name__)


def push_on_commit(bot: Bot, open_id: str, message: dict[str, Any]) -> None:
    """`push()` once the current transaction commits (at once outside one)."""
    transaction.on_commit(lambda: push(bot, open_id, message))


__all__ = [
    "CLOSE_INVALID_TOKEN",
    "SESSION_KEY",
    "STATS",
    "SUBPROTOCOL",
    "ClientError",
    "PanelUser",
    "authenticate_scope",
    "authenticate_token",
    "group_for",
    "is_connected",
    "open_messages",
    "parse_result",
    "push",
    "push_on_commit",
    "refresh",
    "register",
    "revoke_token",
    "snapshot_envelope",
    "submit",
    "token_is_active",
    "TokenRevoked",
    "unregister",
]
