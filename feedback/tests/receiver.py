"""A real HTTPS webhook receiver on loopback for tests and `bench/outbox_throughput.py`.

An asyncio HTTP/1.1 server (keep-alive, Content-Length bodies) in a background thread with a
certificate from `trustme`. It records every request (headers, body bytes, TLS SNI), counts TCP
connections as they are accepted (before the TLS handshake), and answers from a script:
queued `Reply`s first, then `handler(request)` if set, then `default`.
"""

from __future__ import annotations

import asyncio
import collections
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class Reply:
    """One scripted answer: status, extra headers, body, a delay before answering, and
    `hold_until`: answer only once that many requests have arrived in total."""

    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b'{"ok":true}'
    delay: float = 0.0
    hold_until: int = 0


@dataclass
class Received:
    """One request as the receiver saw it. Header names are lower-case."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    sni: str | None
    at: float


_REASONS = {200: "OK", 204: "No Content", 302: "Found", 410: "Gone", 429: "Too Many Requests"}


class HttpsReceiver:
    """`with HttpsReceiver(leaf_cert) as r: … r.url("/hook") …` — see the module docstring."""

    def __init__(self, cert, *, host: str = "127.0.0.1", port: int = 0, record: bool = True):
        self.host = host
        self.port = port
        self.record = record
        self.replies: collections.deque[Reply] = collections.deque()
        self.handler: Callable[[Received], Reply | None] | None = None
        self.default = Reply()
        self.requests: list[Received] = []
        self.count = 0
        self.connections = 0
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        cert.configure_cert(self._ctx)
        self._sni: dict[int, str] = {}
        self._ctx.sni_callback = self._on_sni
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server = None
        self._writers: set[asyncio.StreamWriter] = set()

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> HttpsReceiver:
        self._thread.start()
        future = asyncio.run_coroutine_threadsafe(self._start(), self._loop)
        future.result(timeout=10)
        return self

    async def _start(self) -> None:
        def factory():
            with self._lock:
                self.connections += 1
            reader = asyncio.StreamReader(limit=2**20)
            return asyncio.StreamReaderProtocol(reader, self._serve)

        self._server = await self._loop.create_server(
            factory, self.host, self.port, ssl=self._ctx, backlog=512
        )
        self.port = self._server.sockets[0].getsockname()[1]

    def stop(self) -> None:
        async def _stop():
            self._server.close()
            for writer in list(self._writers):
                writer.transport.abort()

        try:
            asyncio.run_coroutine_threadsafe(_stop(), self._loop).result(timeout=5)
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=5)

    def __enter__(self) -> HttpsReceiver:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- test helpers ------------------------------------------------------------------------

    def url(self, path: str = "/hook", host: str = "hooks.cardloop.test") -> str:
        return f"https://{host}:{self.port}{path}"

    def reply(self, *replies: Reply) -> None:
        """Queue answers for the next requests (in order)."""
        with self._lock:
            self.replies.extend(replies)

    def wait_for(self, count: int, timeout: float = 15.0) -> bool:
        """Block until at least `count` requests arrived (True) or `timeout` passed (False)."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self.count < count:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
        return True

    def by_webhook_id(self) -> collections.Counter:
        with self._lock:
            return collections.Counter(r.headers.get("webhook-id") for r in self.requests)

    # -- serving -----------------------------------------------------------------------------

    def _on_sni(self, sslobj, server_name, _ctx):
        self._sni[id(sslobj)] = server_name

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        sslobj = writer.get_extra_info("ssl_object")
        sni = self._sni.pop(id(sslobj), None)
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
                    break
                lines = head.decode("latin-1").split("\r\n")
                method, path, _version = lines[0].split(" ", 2)
                headers: dict[str, str] = {}
                for line in lines[1:]:
                    if ":" in line:
                        name, value = line.split(":", 1)
                        headers[name.strip().lower()] = value.strip()
                length = int(headers.get("content-length", "0") or 0)
                body = await reader.readexactly(length) if length else b""
                request = Received(method, path, headers, body, sni, time.monotonic())
                with self._cond:
                    self.count += 1
                    if self.record:
                        self.requests.append(request)
                    reply = self.replies.popleft() if self.replies else None
                    self._cond.notify_all()
                if reply is None and self.handler is not None:
                    reply = self.handler(request)
                reply = reply or self.default
                while self.count < reply.hold_until:
                    await asyncio.sleep(0.01)
                if reply.delay:
                    await asyncio.sleep(reply.delay)
                extra = "".join(f"{k}: {v}\r\n" for k, v in reply.headers.items())
                writer.write(
                    (
                        f"HTTP/1.1 {reply.status} {_REASONS.get(reply.status, 'Status')}\r\n"
                        f"content-length: {len(reply.body)}\r\n"
                        f"content-type: application/json\r\n{extra}\r\n"
                    ).encode("latin-1")
                    + reply.body
                )
                await writer.drain()
                if headers.get("connection", "").lower() == "close":
                    break
        except (ConnectionError, asyncio.CancelledError, ssl.SSLError):
            pass
        finally:
            self._writers.discard(writer)
            writer.close()
