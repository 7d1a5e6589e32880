"""The server plumbing every loopback stub of a platform API shares (tests only).

    class TelegramStub(LoopbackStub):
        def start(self):
            class Handler(JsonHandler):
                def do_POST(self): ...          # the stub's own request handling
            return self.serve(Handler)

`serve(handler)` starts a `ThreadingHTTPServer` on 127.0.0.1 and an ephemeral port in a daemon
thread (handler threads are daemons too, so `stop()` never waits for a kept-alive connection)
and returns the stub; `origin` is `http://127.0.0.1:<port>`; `stop()` shuts it down and may be
called twice. `JsonHandler` is a quiet `BaseHTTPRequestHandler` with `send_json`.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class LoopbackStub:
    """Base of the loopback stubs: one HTTP server on 127.0.0.1 serving the stub's handler."""

    _server: ThreadingHTTPServer | None = None
    _thread: threading.Thread | None = None

    def serve(self, handler: type[BaseHTTPRequestHandler]):
        """Start serving `handler` on an ephemeral port; returns `self`."""
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    @property
    def origin(self) -> str:
        """`http://127.0.0.1:<port>`; AssertionError when the stub is not started."""
        assert self._server is not None, "stub not started"
        return f"http://127.0.0.1:{self._server.server_address[1]}"


class JsonHandler(BaseHTTPRequestHandler):
    """A request handler that logs nothing (tests read the stub's recorded calls instead) and
    answers JSON with `send_json`."""

    def log_message(self, format, *args):  # noqa: A002 - quiet
        return

    def send_json(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
        """Answer `status` with `body` as JSON (`Content-Type: application/json`) and any
        extra `headers`."""
        data = json.dumps(body).encode()
        self.send_response(status)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
