"""The Feishu callback URL on its own ASGI path: `POST /lark/<app_id>/callback` in front of Django.

Feishu waits at most 3 seconds for a callback answer, and a Daphne process serves every click on
one GIL. Through Django's ASGI handler each request passes eleven middleware classes, most of
them sync-only `MiddlewareMixin`s, so a request hops between the event loop and a fresh
per-request thread about a dozen times (`ThreadSensitiveContext`), and none of that work
(sessions, CSRF, messages, locale, clickjacking headers) applies to a signed server-to-server
callback. `LarkCallbackApp` therefore answers exactly that route itself and hands everything else
(any other path, any other method, a NUL or control character in the path) to Django unchanged:

1. the Host header is judged as Django judges it (`ALLOWED_HOSTS`; several Host headers are
   refused): a disallowed one is answered 400 `disallowed_host` JSON with one warning line
   (Django would answer an HTML page and log a traceback);
2. the body is taken from ASGI messages up to `DATA_UPLOAD_MAX_MEMORY_SIZE` (beyond it: 413
   `too_large`, nothing parsed, no side effect; Daphne has buffered the whole body by then,
   so cap request sizes at the proxy in front as well);
3. one hop to a handler thread (`dispatcher.POOL`, through `dispatcher.run_in_worker`), which
   sends Django's `request_started` signal and calls the same view Django routes to,
   `interactions.channels.feishu.ingress.callback`, with an `ASGIRequest` (so headers,
   `request.body` and the answer are exactly what Django would produce); the dispatcher runs
   the handler in that same thread, and the event loop keeps the budget: past
   `dispatcher.budget()` (2.0 s) the answer is the "still working" info toast while the thread
   finishes;
4. the answer is sent, and only then `response.close()` runs, in the same handler thread and
   on the same database connection: the held card updates are released (Feishu applies
   no card update sent before the callback answer) and `request_finished` tidies the
   database connections, as Django does after every response. The thread waits for the
   loop's "sent" (a few hundred microseconds) rather than handing the close to a second
   thread, which would take a second connection from the pool (and its health check).

Django's URL route for the view stays (WSGI servers, the test client); this app is what
`cardloop.asgi.application` serves it through.
"""

from __future__ import annotations

import asyncio
import functools
import io
import json
import logging
import re
import threading
import time

from django.conf import settings
from django.core import signals
from django.core.handlers.asgi import ASGIHandler, ASGIRequest
from django.db import connections
from django.http import HttpResponseBase
from django.http.request import split_domain_port, validate_host

from interactions.callbacks import dispatcher
from interactions.channels.feishu import ingress
from plumbing import metrics
from plumbing.api import RETRY_AFTER_SECONDS, transient_error_body
from plumbing.db import transient

log = logging.getLogger(__name__)

#: The route; an app_id with a NUL or control character (%00, %0A) is left to Django's URL
#: handling (404 / 400), so such a value never reaches a log line from here.
CALLBACK_PATH = re.compile(r"/lark/(?P<app_id>[^/\x00-\x1f\x7f]+)/callback")


def _allowed_hosts() -> list[str]:
    """`ALLOWED_HOSTS` as Django's `HttpRequest.get_host()` applies it (with DEBUG and an empty
    list: localhost only)."""
    hosts = list(settings.ALLOWED_HOSTS)
    if settings.DEBUG and not hosts:
        hosts = [".localhost", "127.0.0.1", "[::1]"]
    return hosts


def _host_allowed(scope) -> bool:
    """Django's Host check for this request: the Host header (several are joined, as Django
    joins them, and so refused), else the server address."""
    hosts = [
        value.decode("latin1") for name, value in scope.get("headers") or () if name == b"host"
    ]
    host = ",".join(hosts)
    if not host:
        server = scope.get("server")
        host = str(server[0]) if server else ""
    domain, _port = split_domain_port(host)
    return bool(domain) and validate_host(domain, _allowed_hosts())


class _TooLarge(Exception):
    pass


class _Disconnected(Exception):
    pass


async def _read_body(receive, limit: int) -> bytes:
    """The request body from `http.request` messages; raises `_TooLarge` past `limit` bytes and
    `_Disconnected` when the client went away first."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise _Disconnected
        chunk = message.get("body", b"")
        size += len(chunk)
        if limit is not None and size > limit:
            raise _TooLarge
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


#: How long a handler thread waits for the event loop to send its answer before it runs the
#: after-answer action anyway (only a stuck loop takes longer than a millisecond or so).
SEND_WAIT_SECONDS = 30.0


def _answer(scope, body: bytes, app_id: str) -> HttpResponseBase:
    """Run the callback view for one request in this thread (Django's `request_started` first).
    Never raises: an unexpected error is logged and answered 500 JSON. The thread's database
    connections stay open for `_close` (the caller closes them)."""
    try:
        signals.request_started.send(sender=LarkCallbackApp, scope=scope)
        request = ASGIRequest(scope, io.BytesIO(body))
        response = ingress.callback(request, app_id)
    except Exception as exc:
        try:
            connections.close_all()  # whatever state the failure left them in
        except Exception:  # noqa: BLE001 - a dead connection may fail to close; it is gone
            log.info("lark callback of %r: a broken connection did not close", app_id[:64])
        if transient.is_transient(exc):
            # the bot could not even be looked up: nothing was claimed, Feishu may retry
            log.warning(
                "lark callback of %r: database unavailable (%s)", app_id[:64], type(exc).__name__
            )
            response = ingress.AnswerResponse(transient_error_body(exc), status=503)
            response["Retry-After"] = str(RETRY_AFTER_SECONDS)
        else:
            log.exception("lark callback of %r failed outside the dispatcher", app_id[:64])
            response = ingress.AnswerResponse(
                {"error": "server_error", "detail": "Internal error; it has been logged."},
                status=500,
            )
    response._handler_class = LarkCallbackApp
    return response


def _close(response: HttpResponseBase) -> None:
    """After the answer was sent: the response's after-answer action (held card updates), then
    Django's `request_finished` (database connections)."""
    try:
        response.close()
    except Exception:
        log.exception("closing a lark callback response failed")


def _hand_over(answered: asyncio.Future, response: HttpResponseBase) -> None:
    if not answered.done():
        answered.set_result(response)


def _answer_send_close(
    scope,
    body: bytes,
    app_id: str,
    loop,
    answered: asyncio.Future,
    sent: threading.Event,
    timing: dict[str, float],
) -> None:
    """Handler thread, start to end of one callback: the view's answer is handed to the event
    loop (`answered`), the thread waits until the loop has sent it (`sent`; set at once when
    the budget answer went out instead), then closes the response on the same connection.
    Last, the answer time the loop noted (`timing["seconds"]`, before `sent`) is recorded
    under the callback's kind (`dispatcher.take_answer_kind`; nothing for a refusal). Never
    raises."""
    response = _answer(scope, body, app_id)
    kind = dispatcher.take_answer_kind()
    try:
        loop.call_soon_threadsafe(_hand_over, answered, response)
        if not sent.wait(SEND_WAIT_SECONDS):
            log.warning("lark callback of %r: the answer was not sent in time", app_id[:64])
    except RuntimeError:  # the event loop is closed: the server is stopping
        log.warning("lark callback of %r: the server stopped before the answer", app_id[:64])
    finally:
        # under load the next callback is already queued for this thread: it keeps its
        # pooled connection for it; idle, the connection goes back to the pool
        hold = dispatcher.more_callbacks_waiting()
        dispatcher.hold_pooled_connections(hold)
        _close(response)
        dispatcher.finish_connections(hold=hold)
    seconds = timing.get("seconds")
    if kind is not None and seconds is not None:
        metrics.observe_callback_answer("http", kind, seconds)


async def _send_json(send, status: int, code: str, detail: str) -> None:
    """Answer `{"error": code, "detail": detail}` with HTTP `status` (a refusal: counted)."""
    metrics.count_refused(code)
    payload = json.dumps({"error": code, "detail": detail}).encode()
    headers = [
        (b"Content-Type", b"application/json"),
        (b"Content-Length", str(len(payload)).encode()),
        (b"X-Content-Type-Options", b"nosniff"),
    ]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": payload})


class LarkCallbackApp:
    """ASGI app: `POST /lark/<app_id>/callback` answered without Django's middleware stack;
    every other HTTP request (and every other scope type) goes to `app` unchanged.

    Errors: a body over `DATA_UPLOAD_MAX_MEMORY_SIZE` → 413 `{"error": "too_large"}`; the
    database unreachable before the click could be claimed → 503 `database_unavailable` with
    `Retry-After` (at once while the outage is known, `plumbing.db.outage`; 503 `busy` when
    every pooled connection stayed in use for the pool's wait); the view's own answers
    otherwise (see `interactions.channels.feishu.ingress`).
    """

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        match = None
        if scope["type"] == "http" and str(scope.get("method", "")).upper() == "POST":
            match = CALLBACK_PATH.fullmatch(scope.get("path", ""))
        if match is None:
            return await self.app(scope, receive, send)
        started = time.monotonic()
        if not _host_allowed(scope):
            log.warning("lark callback refused: Host header not in ALLOWED_HOSTS")
            await _send_json(send, 400, "disallowed_host", "The Host header is not allowed.")
            return
        try:
            body = await _read_body(receive, settings.DATA_UPLOAD_MAX_MEMORY_SIZE)
        except _Disconnected:
            return
        except _TooLarge:
            await _send_json(send, 413, "too_large", "The body is too large.")
            return
        loop = asyncio.get_running_loop()
        app_id = match.group("app_id")
        answered = loop.create_future()
        sent = threading.Event()
        timing: dict[str, float] = {}
        attempt = dispatcher.Attempt()
        work = loop.run_in_executor(
            dispatcher.POOL,
            functools.partial(dispatcher.run_in_worker, attempt=attempt),
            _answer_send_close,
            scope,
            body,
            app_id,
            loop,
            answered,
            sent,
            timing,
        )
        try:
            try:
                response = await asyncio.wait_for(asyncio.shield(answered), dispatcher.budget())
            except TimeoutError:
                log.warning(
                    "lark callback of %r ran past the %gs budget; answered by the budget",
                    app_id[:64],
                    dispatcher.budget(),
                )
                # the thread closes its response (after-answer action) when it is done, but
                # not before this answer went out (`sent`, set in the finally below)
                await _SEND_RESPONSE.send_response(
                    ingress.AnswerResponse(dispatcher.budget_answer(attempt), status=200), send
                )
                timing["seconds"] = time.monotonic() - started
                metrics.count_over_budget("http")
                return
            try:
                await _SEND_RESPONSE.send_response(response, send)
                timing["seconds"] = time.monotonic() - started
            finally:
                sent.set()
            await work
        finally:
            # every way out, a cancellation too (Daphne cancels pending requests when it
            # stops): the thread must never wait SEND_WAIT_SECONDS for a send that will not
            # come, or the process cannot exit until it gives up
            sent.set()


class _SendResponse(ASGIHandler):
    """Only for `ASGIHandler.send_response` (headers, cookies, chunking), without loading the
    middleware an `ASGIHandler()` would."""

    def __init__(self):  # noqa: D107 - no middleware
        pass


_SEND_RESPONSE = _SendResponse()
