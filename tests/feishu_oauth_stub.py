"""A loopback stand-in of Feishu's OAuth web login (tests only), for the real lark-oapi client.

Use the `feishu_oauth` fixture (`interactions/tests/conftest.py`): it starts the stand-in on an
ephemeral port and points `CARDLOOP_LARK_DOMAIN` at it (Open API calls and the authorization
page alike).

What it answers (the shapes of Feishu's documentation):
- `GET /open-apis/authen/v1/authorize?client_id&response_type=code&redirect_uri&state` — the
  authorization page: an HTML page with "Authorize" (`#approve`, to
  `redirect_uri?code=…&state=…`) and "Cancel" (`#deny`, `redirect_uri?error=access_denied&
  state=…`) links for the account in `stub.account` (set it before the browser comes);
  the code it hands out is also in `stub.last_code`;
- `POST /open-apis/auth/v3/app_access_token/internal` → `a-stub-<app_id>` (wrong secret when
  `app_secrets` is given → code 10014);
- `POST /open-apis/authen/v1/oidc/access_token` (`Authorization: Bearer a-stub-<app_id>`,
  `{"grant_type": "authorization_code", "code"}`) → `u-…` user_access_token; a code is valid
  once, for 300 s, and only for the app it was issued to (else code 20003 "invalid code");
- `GET /open-apis/authen/v1/user_info` (`Authorization: Bearer u-…`) → the account's
  `open_id`, `union_id`, `tenant_key`, `name`, `en_name` (an unknown token → 99991668).

Assertions: `stub.calls` (method, path, headers, body of every request), `stub.codes_used`.
"""

from __future__ import annotations

import html
import json
import secrets
import threading
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

from tests.loopback import JsonHandler, LoopbackStub

CODE_TTL = 300


@dataclass(frozen=True)
class Account:
    """A Feishu account of the stand-in: its ids in one app and its company."""

    open_id: str
    union_id: str
    tenant_key: str
    name: str = "李雷"
    en_name: str = "Li Lei"


@dataclass
class Call:
    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: Any


class FeishuOAuthStub(LoopbackStub):
    """The stand-in server. Thread-safe; `start()`, `stop()`."""

    def __init__(self, account: Account, *, app_secrets: dict[str, str] | None = None):
        self.account = account
        self.app_secrets = app_secrets
        self.calls: list[Call] = []
        self.codes: dict[str, tuple[str, Account, float]] = {}  # code → (app_id, account, at)
        self.codes_used: list[str] = []
        self.tokens: dict[str, Account] = {}
        self.last_code = ""
        self._lock = threading.RLock()

    def start(self) -> FeishuOAuthStub:
        return self.serve(type("Handler", (_Handler,), {"stub": self}))

    @property
    def url(self) -> str:
        return self.origin

    def issue_code(self, app_id: str, account: Account | None = None) -> str:
        """A fresh authorization code for `account` (default: `self.account`) of `app_id`, as
        the authorization page would hand out."""
        code = secrets.token_hex(16)
        with self._lock:
            self.codes[code] = (app_id, account or self.account, time.time())
            self.last_code = code
        return code

    def calls_to(self, path: str) -> list[Call]:
        with self._lock:
            return [c for c in self.calls if c.path == path]


def _ok(extra: dict) -> tuple[int, dict]:
    return 200, {"code": 0, "msg": "success", **extra}


class _Handler(JsonHandler):
    stub: FeishuOAuthStub
    protocol_version = "HTTP/1.1"

    def do_GET(self):
        self._serve("GET")

    def do_POST(self):
        self._serve("POST")

    def _serve(self, method: str) -> None:
        parts = urlsplit(self.path)
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
        query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
        with self.stub._lock:
            self.stub.calls.append(
                Call(method, parts.path, query, dict(self.headers.items()), body)
            )
        if parts.path == "/open-apis/authen/v1/authorize" and method == "GET":
            self._send(200, self._authorize_page(query), "text/html; charset=utf-8")
            return
        try:
            status, payload = self._route(method, parts.path, body or {})
        except Exception as exc:  # noqa: BLE001 - a stand-in bug must show up in the test
            status, payload = 500, {"code": -1, "msg": f"stub error: {exc!r}"}
        data = json.dumps(payload, ensure_ascii=False).encode("utf-8")
        self._send(status, data, "application/json; charset=utf-8")

    def _send(self, status: int, data: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("X-Tt-Logid", f"stub-log-{secrets.token_hex(4)}")
        self.end_headers()
        self.wfile.write(data)

    def _authorize_page(self, query: dict[str, str]) -> bytes:
        stub = self.stub
        redirect_uri, state = query.get("redirect_uri", ""), query.get("state", "")
        if query.get("response_type") != "code" or not redirect_uri or not query.get("client_id"):
            return b"<h1>invalid request</h1>"
        code = stub.issue_code(query["client_id"])
        approve = f"{redirect_uri}?{urlencode({'code': code, 'state': state})}"
        deny = f"{redirect_uri}?{urlencode({'error': 'access_denied', 'state': state})}"
        page = (
            "<!DOCTYPE html><html><body><h1>Authorize</h1>"
            f"<p id='who'>{html.escape(stub.account.name)}</p>"
            f"<a id='approve' href='{html.escape(approve)}'>Authorize</a> "
            f"<a id='deny' href='{html.escape(deny)}'>Cancel</a></body></html>"
        )
        return page.encode("utf-8")

    def _route(self, method: str, path: str, body: dict) -> tuple[int, dict]:
        stub = self.stub
        auth = self.headers.get("Authorization", "")
        if path == "/open-apis/auth/v3/app_access_token/internal" and method == "POST":
            app_id = body.get("app_id", "")
            expected = (stub.app_secrets or {}).get(app_id)
            if stub.app_secrets is not None and body.get("app_secret") != expected:
                return 400, {"code": 10014, "msg": "app secret invalid"}
            return _ok({"app_access_token": f"a-stub-{app_id}", "expire": 7200})
        if path == "/open-apis/authen/v1/oidc/access_token" and method == "POST":
            if not auth.startswith("Bearer a-stub-"):
                return 400, {"code": 99991663, "msg": "app access token invalid"}
            app_id = auth.removeprefix("Bearer a-stub-")
            with stub._lock:
                issued = stub.codes.pop(body.get("code", ""), None)
                if issued is not None:
                    stub.codes_used.append(body.get("code", ""))
            if (
                body.get("grant_type") != "authorization_code"
                or issued is None
                or issued[0] != app_id
                or time.time() - issued[2] > CODE_TTL
            ):
                return 400, {"code": 20003, "msg": "invalid code"}
            token = f"u-{secrets.token_hex(12)}"
            with stub._lock:
                stub.tokens[token] = issued[1]
            data = {
                "access_token": token,
                "token_type": "Bearer",
                "expires_in": 7199,
                "refresh_token": f"ur-{secrets.token_hex(12)}",
                "refresh_expires_in": 2591999,
                "scope": "",
            }
            return _ok({"data": data})
        if path == "/open-apis/authen/v1/user_info" and method == "GET":
            account = stub.tokens.get(auth.removeprefix("Bearer "))
            if account is None:
                return 400, {"code": 99991668, "msg": "user access token invalid"}
            data = {
                "name": account.name,
                "en_name": account.en_name,
                "open_id": account.open_id,
                "union_id": account.union_id,
                "tenant_key": account.tenant_key,
                "avatar_url": "",
            }
            return _ok({"data": data})
        return 404, {"code": 404, "msg": f"no route {method} {path}"}
