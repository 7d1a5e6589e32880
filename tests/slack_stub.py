"""A loopback stub of the Slack Web API that the real `slack-sdk` WebClient talks to (tests only).

Start it with `SlackStub().start()` (or the `slack_stub` fixture in the test modules that use
it) and pass `stub.base_url` as the client's `base_url`.

What it answers (shapes from Slack's method docs, https://api.slack.com/methods):
- `auth.test` → `{ok, url, team, team_id, user, user_id, bot_id}` for a token in `stub.tokens`,
  else `{ok: false, error: "invalid_auth"}`;
- `chat.postMessage` → `{ok, channel, ts, message}`; refuses more than 50 blocks
  (`invalid_blocks`, https://api.slack.com/reference/block-kit/blocks) and a missing
  `channel` (`channel_not_found`).
Every request is recorded in `stub.calls` as `(method, token, params)`.
"""

from __future__ import annotations

import itertools
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs

MAX_BLOCKS = 50


class SlackStub:
    def __init__(self, tokens: dict[str, str] | None = None):
        #: token → team_id it belongs to.
        self.tokens: dict[str, str] = dict(tokens or {})
        self.calls: list[tuple[str, str, dict]] = []
        self._ts = itertools.count(1)
        self._server: ThreadingHTTPServer | None = None

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/api/"

    def start(self) -> SlackStub:
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length).decode()
                if "json" in (self.headers.get("Content-Type") or ""):
                    params = json.loads(raw or "{}")
                else:
                    params = {k: v[0] for k, v in parse_qs(raw).items()}
                auth = self.headers.get("Authorization") or ""
                token = auth.removeprefix("Bearer ")
                method = self.path.rsplit("/", 1)[-1]
                stub.calls.append((method, token, params))
                body = stub.answer(method, token, params)
                data = json.dumps(body).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server:
            self._server.shutdown()
            self._server.server_close()

    def answer(self, method: str, token: str, params: dict) -> dict:
        if token not in self.tokens:
            return {"ok": False, "error": "invalid_auth"}
        team = self.tokens[token]
        if method == "auth.test":
            return {
                "ok": True,
                "url": "https://stub.slack.com/",
                "team": "Stub",
                "team_id": team,
                "user": "cardloop",
                "user_id": "U0BOT",
                "bot_id": "B0BOT",
            }
        if method == "chat.postMessage":
            blocks = params.get("blocks") or []
            if isinstance(blocks, str):
                blocks = json.loads(blocks)
            if not params.get("channel"):
                return {"ok": False, "error": "channel_not_found"}
            if len(blocks) > MAX_BLOCKS:
                return {"ok": False, "error": "invalid_blocks"}
            ts = f"1700000000.{next(self._ts):06d}"
            return {
                "ok": True,
                "channel": params["channel"],
                "ts": ts,
                "message": {"ts": ts, "blocks": blocks},
            }
        return {"ok": False, "error": "unknown_method"}
