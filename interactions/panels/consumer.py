"""The question panel's WebSocket consumer (`/ws/panel/`). Thin: the protocol, authentication
and resync rules are in `interactions.panels.service` (read its docstring for the message
table), presence and push in `interactions.presence`."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer
from django.utils import timezone

from interactions import presence
from interactions.panel_timing import resync_grace, resync_interval
from interactions.panels import service as panels
from plumbing.asgi import SERVER_SEND
from plumbing.parsers import contains_unstorable, loads_untrusted

log = logging.getLogger(__name__)


class _PanelLock(asyncio.Lock):
    """The consumer's lock (its bookkeeping and frame order), which can tell whether taking it
    now would wait."""

    def idle(self) -> bool:
        """Free, and no task queued for it: `acquire()` would return without suspending."""
        return not self.locked() and not self._waiters


class PanelConsumer(AsyncWebsocketConsumer):
    """`/ws/panel/`: one question panel of one user (see `interactions.panels.service`).

    Also the panel's `presence.Receiver`: on the in-memory layer a push reaches an idle
    consumer straight from the fan-out (`push_now`), not through its channel."""

    user: presence.PanelUser | None = None
    group: str = ""
    timer: asyncio.Task | None = None
    #: Handlers (`websocket.*` and channel-layer events other than pushes) in progress.
    handling: int = 0

    async def __call__(self, scope, receive, send):
        """Run the consumer; on *every* exit — a normal disconnect, but also the channel
        layer's receive raising (Redis restarted: Daphne then closes the socket with 1011
        and `disconnect()` never runs), or cancellation — cancel the resync timer, stop the
        presence heartbeat for this channel and drop its presence row (`_leave`)."""
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._cancel_timer()
            try:
                await asyncio.wait_for(self._leave(), timeout=5)
            except (Exception, asyncio.CancelledError):  # noqa: BLE001 - the row expires (TTL)
                log.warning("panel cleanup after the socket ended failed; its presence expires")

    def _cancel_timer(self):
        if self.timer is not None and self.timer is not asyncio.current_task():
            self.timer.cancel()

    async def connect(self):
        self.known: set[str] = set()  # requestIds the client was told are open
        self.closed: set[str] = set()  # requestIds the client was told are closed (recent)
        self.won: set[str] = set()  # requestIds this panel answered (its acceptance is final)
        self.dropped: set[str] = set()  # requestIds a resync snapshot dropped (no cancel push)
        self.lock = _PanelLock()
        self.timer: asyncio.Task | None = None
        # the server's own send for pushed frames: nothing between it and us acts on
        # `websocket.send` (plumbing.asgi); without it (another stack) the usual one
        self.frame_send = self.scope.get(SERVER_SEND) or self.base_send
        self.user = await database_sync_to_async(panels.authenticate_scope)(self.scope)
        offered = self.scope.get("subprotocols") or []
        await self.accept(panels.SUBPROTOCOL if panels.SUBPROTOCOL in offered else None)
        if self.user is None:
            await self._send(
                {
                    "type": "error",
                    "error": "invalid_token",
                    "detail": "A valid desktop token is required.",
                }
            )
            await self.close(code=panels.CLOSE_INVALID_TOKEN)
            return
        self.group = presence.group_for(self.user.bot, self.user.open_id)
        # Join the group before reading the snapshot, so nothing committed in between is missed.
        await presence.join(self.channel_layer, self.group, self.channel_name, self)
        await database_sync_to_async(presence.register)(self.user, self.channel_name)
        async with self.lock:
            await self._snapshot(await database_sync_to_async(panels.open_messages)(self.user))
        self.timer = asyncio.get_running_loop().create_task(self._resync_loop())

    async def disconnect(self, code):
        self._cancel_timer()
        await self._leave()

    async def _leave(self):
        """Leave the group and drop the presence row (idempotent). If this is cancelled
        midway, or the layer or database is down, the row expires: the heartbeat no longer
        refreshes a detached channel."""
        if self.user is None or not self.group:
            return
        group, self.group = self.group, ""
        try:
            await asyncio.wait_for(
                presence.leave(self.channel_layer, group, self.channel_name), timeout=2
            )
        except (Exception, TimeoutError) as exc:  # noqa: BLE001 - expires with group_expiry
            log.warning("panel could not leave its group (%s); it expires", type(exc).__name__)
        finally:
            await database_sync_to_async(presence.unregister)(self.channel_name)

    # -- client → server ------------------------------------------------------------------

    async def receive(self, text_data=None, bytes_data=None):
        if self.user is None:
            return
        try:
            if text_data is None:
                raise panels.ClientError("binary_frame", "Send JSON text frames.")
            if len(text_data) > panels.MAX_FRAME or len(text_data.encode()) > panels.MAX_FRAME:
                raise panels.ClientError("too_large", f"At most {panels.MAX_FRAME} bytes.")
            try:
                message = loads_untrusted(text_data)
            except ValueError:
                raise panels.ClientError("malformed_json", "The frame is not JSON.")
            if not isinstance(message, dict) or not isinstance(message.get("type"), str):
                raise panels.ClientError("invalid_message", {"type": "a string is required"})
            if contains_unstorable(message):
                raise panels.ClientError(
                    "invalid_message",
                    "Text must not contain NUL (\\u0000) or a lone surrogate (\\ud800-\\udfff).",
                )
            kind = message["type"]
            if kind == "ask_user_questions_result":
                try:
                    reply = await database_sync_to_async(panels.submit)(self.user, message)
                except panels.TokenRevoked:
                    await self._close_revoked()
                    return
                async with self.lock:
                    if reply["type"] == "ask_user_questions_accepted" or (
                        reply["code"] in panels.TERMINAL_REJECTIONS
                    ):
                        self.known.discard(reply["requestId"])
                        self._remember_closed(reply["requestId"])
                    if reply["type"] == "ask_user_questions_accepted":
                        self._remember_won(reply["requestId"])
                    await self._send(reply)
            elif kind == "sync":
                await self._resync(always=True)
            elif kind == "ping":
                await self._send({"type": "pong"})
            else:
                raise panels.ClientError("unknown_type", {"type": kind[:64]})
        except panels.ClientError as exc:
            await self._send(exc.frame())
        except Exception:  # noqa: BLE001 - one failed frame must not end the panel
            log.exception("panel frame failed")
            await self._send({"type": "error", "error": "internal_error", "detail": "Try again."})

    # -- channel layer → server → client ----------------------------------------------------

    async def dispatch(self, message):
        """channels' `dispatch`, except that a `panel.push` goes straight to `panel_push`.

        channels runs `django.db.close_old_connections` through the thread-sensitive executor
        before every handler: a hop to Django's one sync thread and back per panel and push,
        queued behind the request whose commit pushed (with 500 panels of one user it was the
        largest part of a push's cost in Daphne; bench/README.md "Panel fan-out").
        `panel_push` reads no database, and every database call of this consumer goes through
        `database_sync_to_async`, which closes old connections itself before and after."""
        if message.get("type") == "panel.push":
            await self.panel_push(message)
            return
        self.handling += 1  # direct pushes wait (in the channel) until it is done
        try:
            await super().dispatch(message)
        finally:
            self.handling -= 1

    def takes_push_now(self) -> bool:
        """`presence.Receiver`: a push may be delivered now, past the channel — no handler
        is in progress (connect: before its snapshot is sent a push must queue behind it; an
        answer: the push of its own "answered" must find `won` set) and the lock is idle (a
        resync or snapshot holds it). Otherwise the push is queued on the channel and handled
        after them, as every push was before; a later push may then reach the panel before
        the queued one, which the bookkeeping of `panel_push` already allows for (pushes
        from two processes: a cancellation that overtook its ask drops the ask)."""
        return not self.handling and self.group != "" and self.lock.idle()

    async def push_now(self, event):
        """`presence.Receiver`: `panel_push(event)`, called by the fan-out in its own task.

        If it raises, the socket is closed with 1011 (and the error re-raised for the
        fan-out to count), as when a push handled through the channel failed and ended the
        consumer: the bookkeeping may already say the client has the frame, so only a
        reconnect's snapshot is sure to repair it."""
        try:
            await self.panel_push(event)
        except Exception:
            with contextlib.suppress(Exception):
                await self.close(code=1011)
            raise

    async def panel_push(self, event):
        """A push of `presence.push`: `event["message"]`, the panel protocol dict, decides what
        this connection's bookkeeping drops (an ask already sent or already closed, a
        cancellation a resync already applied, "answered" on the panel whose answer won);
        `event["text"]`, when present, is that dict encoded once for every panel and is sent
        as it is."""
        message = event.get("message") or {}
        text = event.get("text")
        request_id = message.get("requestId")
        async with self.lock:
            if message.get("type") == "ask_user_questions":
                if request_id in self.closed:
                    return  # a cancellation overtook it (pushes from two processes)
                if request_id in self.known:
                    return  # the connect snapshot or a resync sent it first
                self.known.add(request_id)
            elif message.get("type") == "ask_user_questions_cancelled":
                if request_id in self.dropped:
                    self.dropped.discard(request_id)
                    return  # a resync snapshot already dropped it from the client
                self.known.discard(request_id)
                self._remember_closed(request_id)
                if message.get("reason") == "answered" and request_id in self.won:
                    # this panel's answer won: it was told `accepted`, and "answered
                    # elsewhere" would contradict that (every other panel still gets it)
                    return
            if not isinstance(text, str):
                text = json.dumps(message, ensure_ascii=False)
            await self.frame_send({"type": "websocket.send", "text": text})

    async def panel_token_revoked(self, event):
        """`panels.revoke_token` says a token of this user was revoked: close if it is ours."""
        if self.user is not None and event.get("token_id") == self.user.token_id:
            await self._close_revoked()

    async def _close_revoked(self):
        """Our desktop token was revoked: leave, say so and close with 4401 (idempotent)."""
        self._cancel_timer()
        if not self.group:
            return  # already left
        await self._leave()
        await self._send(
            {"type": "error", "error": "invalid_token", "detail": "The desktop token was revoked."}
        )
        await self.close(code=panels.CLOSE_INVALID_TOKEN)

    # -- resync ----------------------------------------------------------------------------

    async def _resync_loop(self):
        interval = resync_interval()
        while True:
            await asyncio.sleep(interval * random.uniform(0.9, 1.1))  # noqa: S311 - jitter
            if not await database_sync_to_async(panels.token_is_active)(self.user.token_id):
                await self._close_revoked()
                return
            try:
                await self._resync(always=False)
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001 - retried at the next interval
                log.warning("panel resync failed", exc_info=True)

    async def _resync(self, *, always: bool):
        """`always` (connect, a client's `sync`): a full snapshot. Otherwise (the periodic
        check) only what `panels.plan_resync` finds missing or stale, never an ask this
        connection was already sent."""
        if always:
            async with self.lock:
                await self._snapshot(await database_sync_to_async(panels.open_messages)(self.user))
            return
        async with self.lock:  # read under the lock: a push meanwhile would be undone
            open_now = await database_sync_to_async(panels.open_asks)(self.user)
            plan = panels.plan_resync(
                open_now, self.known, now=timezone.now(), grace=resync_grace()
            )
            if plan.deferred:
                presence.STATS["resync_deferred"] += plan.deferred
            if not plan.needed:
                return
            presence.STATS["resync_repaired"] += 1
            log.warning(
                "panel resync repaired a lost push: %d question(s) missing, %d stale",
                len(plan.send),
                len(plan.stale),
            )
            await self._send(panels.snapshot_envelope(plan.keep))
            for message in plan.send:
                await self._send(message)
            for request_id in plan.stale:
                self._remember_closed(request_id)
                self._remember_dropped(request_id)
            self.known = set(plan.keep)
            self.closed -= self.known

    async def _snapshot(self, messages):
        """Send the snapshot envelope and each open ask; the caller holds `self.lock`."""
        await self._send(panels.snapshot_envelope(messages))
        for message in messages:
            await self._send(message)
        current = {m["requestId"] for m in messages}
        for request_id in self.known - current:
            self._remember_closed(request_id)
            self._remember_dropped(request_id)
        self.known = current
        self.closed -= current

    def _remember_closed(self, request_id):
        if len(self.closed) > 1000:
            self.closed.clear()
        self.closed.add(request_id)

    def _remember_dropped(self, request_id):
        if len(self.dropped) > 1000:
            self.dropped.clear()
        self.dropped.add(request_id)

    def _remember_won(self, request_id):
        if len(self.won) > 1000:
            self.won.clear()
        self.won.add(request_id)

    async def _send(self, message):
        await self.send(text_data=json.dumps(message, ensure_ascii=False))
