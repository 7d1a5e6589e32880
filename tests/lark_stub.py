"""A loopback stub of the Feishu Open API that the real lark-oapi client talks to (tests only).

Use the `lark_stub` fixture (root `conftest.py`): it starts the stub on an ephemeral port,
points `CARDLOOP_LARK_DOMAIN` at it and clears lark-oapi's token cache.

What it answers (the shapes of Feishu's Open API documentation):
- `POST /open-apis/auth/v3/tenant_access_token/internal` → `t-stub-<app_id>` (wrong secret,
  when `app_secrets` is given → code 10014);
- CardKit: `POST /open-apis/cardkit/v1/cards` (create; the card must be schema 2.0),
  `PUT …/cards/<card_id>` (whole card), `PUT …/cards/<card_id>/elements/<element_id>`,
  `POST …/cards/<card_id>/batch_update`; every update needs a `sequence` greater than the
  card's last one, else code 300317 (nothing applied);
- messages: `POST /open-apis/im/v1/messages` (card entity reference or raw card; `uuid`
  dedupes), `PATCH /open-apis/im/v1/messages/<id>` (the new card must keep
  `config.update_multi: true`, else 230099), `GET …/messages/<id>`; a `PUT` on a message is
  recorded and refused (230001), so tests can assert it never happens (a card is updated
  through CardKit or PATCH, never by re-sending it);
  `POST /open-apis/im/v1/messages/<id>/reply` (text replies, kept in `stub.replies`);
- every API call needs `Authorization: Bearer t-stub-<app_id>` (else 99991663).

Assertions: `stub.calls` (every request, parsed), `stub.calls_to("PUT", "/open-apis/cardkit")`,
`stub.cards[card_id]` (`card`, `sequence`, `sequences`), `stub.messages[message_id]`.
Failures: `stub.fail("PUT", "/open-apis/cardkit/v1/cards/", code=230020, times=2)` makes the
next two matching calls fail (HTTP 400 by default; `http_status=503, body=b"<html>"` for a
proxy error page).
"""

from __future__ import annotations

import copy
import itertools
import json
import re
import threading
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, urlsplit

from interactions.lark.cardjson import replace_elements
from tests.loopback import JsonHandler, LoopbackStub


@dataclass
class Call:
    """One request the stub received. `body` is the parsed JSON body (or None)."""

    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: Any
    app_id: str = ""

    def field_json(self, name: str) -> Any:
        """A body field that carries JSON as a string (`content`, `data`, `element`, `actions`)."""
        return json.loads(self.body[name])


@dataclass
class StubCard:
    app_id: str
    card: dict[str, Any]
    sequence: int = 0
    sequences: list[int] = field(default_factory=list)
    sent: bool = False


@dataclass
class _Failure:
    method: str
    prefix: str
    code: int
    msg: str
    http_status: int
    times: int
    body: bytes | None
    headers: dict[str, str]


class FeishuStub(LoopbackStub):
    """The stub server. Thread-safe; start with `start()`, stop with `stop()`."""

    def __init__(self, *, app_secrets: dict[str, str] | None = None, first_id: int = 1):
        """`app_secrets`: app_id → secret the token call must match (None: any secret).
        `first_id`: where the card / message id counter starts (a bench that keeps its
        database between runs starts it past the ids earlier stubs handed out)."""
        self.app_secrets = app_secrets
        self.calls: list[Call] = []
        self.cards: dict[str, StubCard] = {}
        self.messages: dict[str, dict[str, Any]] = {}
        self.replies: list[dict[str, Any]] = []
        self.token_requests = 0
        self._uuids: dict[tuple[str, str], str] = {}
        self._failures: list[_Failure] = []
        self._delays: dict[str, float] = {}
        self._ids = itertools.count(first_id)
        self._lock = threading.RLock()

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> FeishuStub:
        return self.serve(type("Handler", (_Handler,), {"stub": self}))

    @property
    def url(self) -> str:
        return self.origin

    # -- test API ----------------------------------------------------------------------------

    def fail(
        self,
        method: str,
        path_prefix: str,
        *,
        code: int = 230020,
        msg: str = "stub failure",
        http_status: int = 400,
        times: int = 1,
        body: bytes | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        """Make the next `times` calls of `method` to a path starting with `path_prefix` fail
        with Feishu `code` (or the raw `body`), `http_status` and extra response `headers`
        (e.g. `{"Retry-After": "30"}`), without applying anything."""
        with self._lock:
            self._failures.append(
                _Failure(
                    method.upper(), path_prefix, code, msg, http_status, times, body, headers or {}
                )
            )

    def slow(self, path_prefix: str, seconds: float) -> None:
        """Answer requests whose path starts with `path_prefix` only after `seconds` (0 undoes
        it): a worker calling it holds its claims meanwhile."""
        with self._lock:
            self._delays[path_prefix] = seconds

    def calls_to(self, method: str | None = None, path_prefix: str = "") -> list[Call]:
        with self._lock:
            return [
                c
                for c in self.calls
                if (method is None or c.method == method.upper()) and c.path.startswith(path_prefix)
            ]

    def add_card(
        self, card: dict[str, Any], *, app_id: str = "cli_test_app", sequence: int = 0
    ) -> str:
        """Create a card entity directly (as if another client had created it)."""
        with self._lock:
            card_id = f"7{next(self._ids):018d}"
            self.cards[card_id] = StubCard(app_id, copy.deepcopy(card), sequence)
            return card_id

    def new_id(self) -> int:
        return next(self._ids)

    def _take_failure(self, method: str, path: str) -> _Failure | None:
        with self._lock:
            for failure in self._failures:
                if (
                    failure.method == method
                    and path.startswith(failure.prefix)
                    and failure.times > 0
                ):
                    failure.times -= 1
                    return failure
        return None


def _ok(data: Any = None, msg: str = "success") -> tuple[int, dict]:
    body: dict[str, Any] = {"code": 0, "msg": msg}
    if data is not None:
        body["data"] = data
    return 200, body


def _err(code: int, msg: str, http_status: int = 400) -> tuple[int, dict]:
    return http_status, {"code": code, "msg": msg}


class _Handler(JsonHandler):
    stub: FeishuStub
    protocol_version = "HTTP/1.1"

    def do_GET(self):
        self._serve("GET")

    def do_POST(self):
        self._serve("POST")

    def do_PUT(self):
        self._serve("PUT")

    def do_PATCH(self):
        self._serve("PATCH")

    def _serve(self, method: str) -> None:
        stub = self.stub
        parts = urlsplit(self.path)
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
        query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
        auth = self.headers.get("Authorization", "")
        app_id = auth.removeprefix("Bearer t-stub-") if auth.startswith("Bearer t-stub-") else ""
        call = Call(method, parts.path, query, dict(self.headers.items()), body, app_id)
        with stub._lock:
            stub.calls.append(call)
        with stub._lock:
            delay = max(
                (s for p, s in stub._delays.items() if parts.path.startswith(p)), default=0.0
            )
        if delay:
            time.sleep(delay)
        failure = stub._take_failure(method, parts.path)
        if failure is not None:
            if failure.body is not None:
                self._send(failure.http_status, failure.body, "text/html", failure.headers)
            else:
                status, payload = _err(failure.code, failure.msg, failure.http_status)
                self._send_json(status, payload, failure.headers)
            return
        try:
            status, payload = self._route(method, parts.path, query, body, app_id)
        except Exception as exc:  # noqa: BLE001 - a stub bug must show up in the test, not hang it
            status, payload = 500, {"code": -1, "msg": f"stub error: {exc!r}"}
        self._send_json(status, payload)

    def _send_json(self, status: int, payload: dict, headers: dict | None = None) -> None:
        data = json.dumps(payload, ensure_ascii=False).encode("utf-8")
        self._send(status, data, "application/json; charset=utf-8", headers)

    def _send(
        self, status: int, data: bytes, content_type: str, headers: dict | None = None
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("X-Tt-Logid", f"stub-log-{self.stub.new_id()}")
        self.end_headers()
        self.wfile.write(data)

    # -- routes ------------------------------------------------------------------------------

    def _route(self, method, path, query, body, app_id):
        stub = self.stub
        if path == "/open-apis/auth/v3/tenant_access_token/internal" and method == "POST":
            body = body or {}
            with stub._lock:
                stub.token_requests += 1
            expected = (stub.app_secrets or {}).get(body.get("app_id"))
            if stub.app_secrets is not None and body.get("app_secret") != expected:
                return 200, {"code": 10014, "msg": "app secret invalid"}
            return 200, {
                "code": 0,
                "msg": "ok",
                "tenant_access_token": f"t-stub-{body.get('app_id', '')}",
                "expire": 7200,
            }
        if not app_id:
            return _err(99991663, "Invalid access token for authorization.")
        if not path.startswith("/open-apis/"):
            return _err(404, "stub: no such endpoint", 404)

        if path == "/open-apis/cardkit/v1/cards" and method == "POST":
            return self._create_card(body, app_id)
        m = re.fullmatch(r"/open-apis/cardkit/v1/cards/([^/]+)", path)
        if m and method == "PUT":
            return self._update_card(m.group(1), body, app_id)
        m = re.fullmatch(r"/open-apis/cardkit/v1/cards/([^/]+)/elements/([^/]+)", path)
        if m and method == "PUT":
            return self._update_elements(
                m.group(1), {m.group(2): json.loads(body["element"])}, body, app_id
            )
        m = re.fullmatch(r"/open-apis/cardkit/v1/cards/([^/]+)/batch_update", path)
        if m and method == "POST":
            actions = json.loads(body["actions"])
            elements = {}
            for action in actions:
                if action.get("action") != "update_element":
                    return _err(10002, f"stub: unsupported action {action.get('action')}")
                params = action["params"]
                elements[params["element_id"]] = params["element"]
            return self._update_elements(m.group(1), elements, body, app_id)

        if path == "/open-apis/im/v1/messages" and method == "POST":
            return self._send_message(query, body, app_id)
        m = re.fullmatch(r"/open-apis/im/v1/messages/([^/]+)/reply", path)
        if m and method == "POST":
            return self._reply_message(m.group(1), body, app_id)
        m = re.fullmatch(r"/open-apis/im/v1/messages/([^/]+)", path)
        if m and method == "PATCH":
            return self._patch_message(m.group(1), body, app_id)
        if m and method == "GET":
            return self._get_message(m.group(1), app_id)
        if m and method == "PUT":
            return _err(230001, "stub: PUT is not for interactive messages; use PATCH")
        return _err(404, "stub: no such endpoint", 404)

    def _create_card(self, body, app_id):
        if not body or body.get("type") != "card_json":
            return _err(10002, "type must be card_json")
        card = json.loads(body["data"])
        if card.get("schema") != "2.0":
            return _err(200220, "Failed to generate card content: schema 2.0 required")
        card_id = self.stub.add_card(card, app_id=app_id)
        return _ok({"card_id": card_id})

    def _card(self, card_id, app_id) -> StubCard | None:
        card = self.stub.cards.get(card_id)
        if card is None or card.app_id != app_id:
            return None
        return card

    def _check_sequence(self, card: StubCard, body) -> tuple[int, dict] | None:
        sequence = body.get("sequence")
        if not isinstance(sequence, int) or sequence <= card.sequence:
            return _err(
                300317,
                f"The sequence number for operating on the card did not increment "
                f"(got {sequence}, last {card.sequence})",
            )
        return None

    def _update_card(self, card_id, body, app_id):
        with self.stub._lock:
            card = self._card(card_id, app_id)
            if card is None:
                return _err(200740, "The card entity does not exist")
            problem = self._check_sequence(card, body)
            if problem:
                return problem
            new = json.loads(body["card"]["data"])
            if new.get("schema") != "2.0":
                return _err(200830, "a 2.0 card cannot be updated to 1.0")
            card.card = new
            card.sequence = body["sequence"]
            card.sequences.append(body["sequence"])
        return _ok({})

    def _update_elements(self, card_id, elements, body, app_id):
        with self.stub._lock:
            card = self._card(card_id, app_id)
            if card is None:
                return _err(200740, "The card entity does not exist")
            problem = self._check_sequence(card, body)
            if problem:
                return problem
            new, missing = replace_elements(card.card, elements)
            if missing:
                return _err(300309, f"element not found: {sorted(missing)}")
            card.card = new
            card.sequence = body["sequence"]
            card.sequences.append(body["sequence"])
        return _ok({})

    def _send_message(self, query, body, app_id):
        receive_id_type = query.get("receive_id_type")
        if receive_id_type not in {"chat_id", "open_id", "union_id", "user_id", "email"}:
            return _err(230001, "invalid receive_id_type")
        if not body or body.get("msg_type") != "interactive" or not body.get("receive_id"):
            return _err(230001, "invalid message")
        content = json.loads(body["content"])
        with self.stub._lock:
            uuid = body.get("uuid")
            if uuid and (app_id, uuid) in self.stub._uuids:
                message_id = self.stub._uuids[(app_id, uuid)]
                return _ok(self._message_data(message_id))
            card_id = None
            if content.get("type") == "card":
                card_id = content.get("data", {}).get("card_id")
                card = self._card(card_id, app_id)
                if card is None:
                    return _err(230099, "card entity not found")
                if card.sent:
                    return _err(230099, "a card entity can only be sent once")
                card.sent = True
            message_id = f"om_stub_{self.stub.new_id():024d}"
            self.stub.messages[message_id] = {
                "app_id": app_id,
                "receive_id": body["receive_id"],
                "receive_id_type": receive_id_type,
                "chat_id": body["receive_id"] if receive_id_type == "chat_id" else "oc_stub_p2p",
                "card_id": card_id,
                "card": None if card_id else content,
                "patches": [],
            }
            if uuid:
                self.stub._uuids[(app_id, uuid)] = message_id
        return _ok(self._message_data(message_id))

    def _reply_message(self, parent_id, body, app_id):
        """A reply (text only here) to any message id; recorded in `stub.replies`."""
        if not body or body.get("msg_type") != "text":
            return _err(230001, "stub: only text replies are supported")
        text = json.loads(body["content"]).get("text", "")
        with self.stub._lock:
            message_id = f"om_stub_{self.stub.new_id():024d}"
            self.stub.replies.append(
                {"app_id": app_id, "parent_id": parent_id, "message_id": message_id, "text": text}
            )
        return _ok({"message_id": message_id, "msg_type": "text"})

    def _message_data(self, message_id):
        message = self.stub.messages[message_id]
        return {"message_id": message_id, "chat_id": message["chat_id"], "msg_type": "interactive"}

    def _patch_message(self, message_id, body, app_id):
        with self.stub._lock:
            message = self.stub.messages.get(message_id)
            if message is None or message["app_id"] != app_id:
                return _err(230001, "message not found")
            card = json.loads(body["content"])
            if (card.get("config") or {}).get("update_multi") is not True:
                return _err(230099, "update_multi must be true before and after the update")
            message["card"] = card
            message["patches"].append(card)
        return _ok({}, msg="ok")

    def _get_message(self, message_id, app_id):
        with self.stub._lock:
            message = self.stub.messages.get(message_id)
            if message is None or message["app_id"] != app_id:
                return _err(230001, "message not found")
            if message["card_id"]:
                content = json.dumps(self.stub.cards[message["card_id"]].card, ensure_ascii=False)
            else:
                content = json.dumps(message["card"], ensure_ascii=False)
        return _ok(
            {
                "items": [
                    {
                        "message_id": message_id,
                        "msg_type": "interactive",
                        "chat_id": message["chat_id"],
                        "body": {"content": content},
                    }
                ]
            }
        )
