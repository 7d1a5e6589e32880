"""A loopback stub of the Slack Web API that the real `slack-sdk` WebClient talks to (tests only).

Start it with `SlackStub().start()` (or the `slack_stub` fixture in the test modules that use
it) and pass `stub.base_url` as the client's `base_url`.

What it answers (shapes from Slack's method docs, https://api.slack.com/methods):
- `auth.test` → `{ok, url, team, team_id, user, user_id, bot_id}` for a token in `stub.tokens`,
  else `{ok: false, error: "invalid_auth"}`;
- `chat.postMessage` → `{ok, channel, ts, message}`; refuses more than 50 blocks
  (`invalid_blocks`, https://api.slack.com/reference/block-kit/blocks) and a missing
  `channel` (`channel_not_found`).
- `chat.update` → `{ok, channel, ts, text}` for a message it posted (`message_not_found`
  otherwise), https://api.slack.com/methods/chat.update; `stub.rate_limit(seconds)` makes the
  next `chat.update` answer HTTP 429 `ratelimited` with `Retry-After`
  (https://api.slack.com/docs/rate-limits);
- both refuse a message breaking Block Kit's limits with `invalid_blocks` (`limit_problems`:
  ≤ 50 blocks, section text ≤ 3000, button text ≤ 75 and value ≤ 2000, unique `block_id`s,
  `action_id`s unique within a block, https://api.slack.com/reference/block-kit);
- `conversations.history` (GET) → the channel's posted messages since `oldest`, newest
  first, each with its `metadata` when `include_all_metadata`
  (https://api.slack.com/methods/conversations.history);
- `users.info` (GET, https://api.slack.com/methods/users.info) → `{ok, user: {id, locale}}`
  for a user in `stub.locales` (`locale` only with `include_locale`), else `user_not_found`;
- `POST /response/<key>` is a `response_url` (https://api.slack.com/interactivity/handling):
  the JSON body is recorded in `stub.responses` (`stub.response_url(key)` builds the URL).
Every Web API request is recorded in `stub.calls` as `(method, token, params)`;
`stub.messages` holds the current blocks of each posted message by `(channel, ts)`.
"""

from __future__ import annotations

import itertools
import json
import threading
from urllib.parse import parse_qs

from tests.loopback import JsonHandler, LoopbackStub

MAX_BLOCKS = 50


class SlackStub(LoopbackStub):
    def __init__(self, tokens: dict[str, str] | None = None):
        #: token → team_id it belongs to.
        self.tokens: dict[str, str] = dict(tokens or {})
        self.calls: list[tuple[str, str, dict]] = []
        self.messages: dict[tuple[str, str], list] = {}
        #: `metadata` a message was posted with, by `(channel, ts)`.
        self.metadata: dict[tuple[str, str], dict] = {}
        self.responses: list[tuple[str, dict]] = []
        #: Slack user id → locale `users.info` reports (others: `user_not_found`).
        self.locales: dict[str, str] = {}
        self._retry_after: int | None = None
        self._lock = threading.Lock()
        self._ts = itertools.count(1)

    def rate_limit(self, seconds: int) -> None:
        """Answer the next `chat.update` with HTTP 429 and `Retry-After: seconds`."""
        self._retry_after = seconds

    def response_url(self, key: str) -> str:
        return f"{self.origin}/response/{key}"

    @property
    def base_url(self) -> str:
        return f"{self.origin}/api/"

    def start(self) -> SlackStub:
        stub = self

        class Handler(JsonHandler):
            def do_GET(self):  # slack-sdk sends users.info as a GET with a query string
                path, _, query = self.path.partition("?")
                params = {k: v[0] for k, v in parse_qs(query).items()}
                token = (self.headers.get("Authorization") or "").removeprefix("Bearer ")
                method = path.rsplit("/", 1)[-1]
                with stub._lock:
                    stub.calls.append((method, token, params))
                    body = stub.answer(method, token, params)
                self.send_json(200, body)

            def do_POST(self):
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length).decode()
                if self.path.startswith("/response/"):
                    with stub._lock:
                        stub.responses.append((self.path.rsplit("/", 1)[-1], json.loads(raw)))
                    self.send_response(200)
                    self.send_header("Content-Length", "2")
                    self.end_headers()
                    self.wfile.write(b"ok")
                    return
                if "json" in (self.headers.get("Content-Type") or ""):
                    params = json.loads(raw or "{}")
                else:
                    params = {k: v[0] for k, v in parse_qs(raw).items()}
                auth = self.headers.get("Authorization") or ""
                token = auth.removeprefix("Bearer ")
                method = self.path.rsplit("/", 1)[-1]
                with stub._lock:
                    stub.calls.append((method, token, params))
                    body = stub.answer(method, token, params)
                if body.pop("_status", None) == 429:
                    retry_after = str(body.get("retry_after", 1))
                    self.send_json(429, body, {"Retry-After": retry_after})
                else:
                    self.send_json(200, body)

        return self.serve(Handler)

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
        if method in ("chat.postMessage", "chat.update"):
            blocks = params.get("blocks") or []
            if isinstance(blocks, str):
                blocks = json.loads(blocks)
            if not params.get("channel"):
                return {"ok": False, "error": "channel_not_found"}
            if limit_problems(blocks):
                return {"ok": False, "error": "invalid_blocks"}
            if method == "chat.update":
                if self._retry_after is not None:
                    seconds, self._retry_after = self._retry_after, None
                    return {
                        "ok": False,
                        "error": "ratelimited",
                        "_status": 429,
                        "retry_after": seconds,
                    }
                key = (params["channel"], str(params.get("ts")))
                if key not in self.messages:
                    return {"ok": False, "error": "message_not_found"}
                self.messages[key] = blocks
                return {"ok": True, "channel": key[0], "ts": key[1], "text": params.get("text", "")}
            ts = f"1700000000.{next(self._ts):06d}"
            self.messages[(params["channel"], ts)] = blocks
            metadata = params.get("metadata")
            if isinstance(metadata, str):
                metadata = json.loads(metadata)
            if isinstance(metadata, dict):
                self.metadata[(params["channel"], ts)] = metadata
            return {
                "ok": True,
                "channel": params["channel"],
                "ts": ts,
                "message": {"ts": ts, "blocks": blocks},
            }
        if method == "conversations.history":
            oldest = float(params.get("oldest") or 0)
            with_metadata = str(params.get("include_all_metadata")).lower() in ("1", "true")
            found = []
            for (channel, ts), blocks in sorted(self.messages.items(), reverse=True):
                if channel != params.get("channel") or float(ts) < oldest:
                    continue
                message = {"type": "message", "ts": ts, "blocks": blocks}
                if with_metadata and (channel, ts) in self.metadata:
                    message["metadata"] = self.metadata[(channel, ts)]
                found.append(message)
            return {"ok": True, "messages": found[: int(params.get("limit") or 100)]}
        if method == "users.info":
            user = params.get("user", "")
            if user not in self.locales:
                return {"ok": False, "error": "user_not_found"}
            found = {"id": user, "team_id": team}
            if str(params.get("include_locale")).lower() in ("1", "true"):
                found["locale"] = self.locales[user]
            return {"ok": True, "user": found}
        return {"ok": False, "error": "unknown_method"}


def limit_problems(blocks: list) -> list[str]:
    """The stub's own check of Block Kit limits (independent of Cardloop's renderer checks)."""
    out = []
    if len(blocks) > MAX_BLOCKS:
        out.append("too many blocks")
    block_ids = set()
    for block in blocks:
        block_id = block.get("block_id")
        if block_id is not None:
            if block_id in block_ids or len(block_id) > 255:
                out.append(f"block_id {block_id}")
            block_ids.add(block_id)
        if block.get("type") == "section" and len((block.get("text") or {}).get("text", "")) > 3000:
            out.append("section text")
        elements = block.get("elements") if block.get("type") == "actions" else []
        action_ids = set()
        for element in elements or []:
            action_id = element.get("action_id")
            if action_id in action_ids:
                out.append(f"action_id {action_id}")
            action_ids.add(action_id)
            if element.get("type") == "button":
                if len((element.get("text") or {}).get("text", "")) > 75:
                    out.append("button text")
                if len(element.get("value", "")) > 2000:
                    out.append("button value")
    return out
