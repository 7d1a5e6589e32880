"""A loopback stand-in of Feishu's long-connection endpoint for lark-oapi's `lark.ws.Client`
(tests only).

Use the `long_connection` fixture (`interactions/tests/test_ws_end_to_end.py`) or start it
yourself: `stub = LongConnectionStub(app_secrets={"cli_…": "secret"}).start()` and point
`CARDLOOP_LARK_DOMAIN` at `stub.url`.

What it speaks (the shapes lark-oapi's `lark_oapi/ws/client.py` uses, see Feishu's long
connection guide,
https://open.feishu.cn/document/server-docs/event-subscription-guide/event-subscription-configure-/request-url-configuration-case):
- endpoint discovery: `POST /callback/ws/endpoint` with `{"AppID", "AppSecret"}` →
  `{"code": 0, "data": {"URL": "ws://127.0.0.1:<port>/ws?device_id=…&service_id=…",
  "ClientConfig": {"ReconnectCount", "ReconnectInterval", "ReconnectNonce", "PingInterval"}}}`
  (seconds; `client_config` overrides them, e.g. no reconnect jitter in tests); a wrong secret
  → code 1000040351 (a client error: lark-oapi raises it out of `start()`);
- the WebSocket: protobuf `pbbp2.Frame` frames encoded with lark-oapi's own `Frame` class.
  `send_event(payload)` writes a DATA frame (headers `type`, `message_id`, `trace_id`, `sum`,
  `seq`) and waits for the client's answer frame (same `message_id`; payload
  `{"code": 200, "data": base64(JSON answer)}`); CONTROL frames (pings) are counted and
  answered with a pong;
- `drop()` closes the current connection from the server side, as Feishu does on a
  redeploy; the client must discover the endpoint again and reconnect.

Assertions: `stub.discoveries` (the `AppID` of each discovery call; the secret is only
compared), `stub.connections` (WebSocket connections accepted so far), `stub.pings`.
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from lark_oapi.ws.enum import FrameType, MessageType
from lark_oapi.ws.pb.pbbp2_pb2 import Frame
from websockets.asyncio.server import serve
from websockets.exceptions import ConnectionClosed

SERVICE_ID = 7

#: Settings the stand-in hands out: reconnect at once (no 0–30 s jitter), forever.
DEFAULT_CLIENT_CONFIG = {
    "ReconnectCount": -1,
    "ReconnectInterval": 1,
    "ReconnectNonce": 0,
    "PingInterval": 120,
}


@dataclass
class AnswerFrame:
    """The client's answer to one DATA frame: `code` (200, or 500 when its handler raised),
    `answer` (the decoded callback answer, None when the handler returned nothing) and the
    frame's `headers` (lark-oapi adds `biz_rt`, the handler's milliseconds)."""

    code: int
    answer: dict[str, Any] | None
    headers: dict[str, str]


class LongConnectionStub:
    def __init__(
        self,
        *,
        app_secrets: dict[str, str] | None = None,
        client_config: dict[str, int] | None = None,
    ):
        self.app_secrets = dict(app_secrets or {})
        self.client_config = {**DEFAULT_CLIENT_CONFIG, **(client_config or {})}
        self.discoveries: list[str] = []
        self.connections = 0
        self.pings = 0
        self._ids = itertools.count(1)
        self._changed = threading.Condition()
        self._current = None
        self._waiting: dict[str, asyncio.Future] = {}
        self._loop = asyncio.new_event_loop()
        self._ws_port = 0

    # -- life cycle ------------------------------------------------------------------------

    def start(self) -> LongConnectionStub:
        started = threading.Event()
        self._stopped: asyncio.Future | None = None

        async def run_ws():
            self._stopped = self._loop.create_future()
            async with serve(self._serve_connection, "127.0.0.1", 0, close_timeout=2) as server:
                self._ws_port = server.sockets[0].getsockname()[1]
                started.set()
                await self._stopped

        self._ws_thread = threading.Thread(
            target=self._loop.run_until_complete, args=(run_ws(),), daemon=True
        )
        self._ws_thread.start()
        started.wait(10)

        stub = self

        class Handler(_DiscoveryHandler):
            pass

        Handler.stub = stub
        self._http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._http_thread = threading.Thread(target=self._http.serve_forever, daemon=True)
        self._http_thread.start()
        return self

    def stop(self) -> None:
        self._http.shutdown()
        self._http.server_close()
        self._loop.call_soon_threadsafe(self._stopped.set_result, None)
        self._ws_thread.join(10)
        if not self._ws_thread.is_alive():
            self._loop.close()

    @property
    def url(self) -> str:
        """The base URL for `CARDLOOP_LARK_DOMAIN` (discovery is `{url}/callback/ws/endpoint`)."""
        return f"http://127.0.0.1:{self._http.server_address[1]}"

    # -- what tests call -------------------------------------------------------------------

    def wait_for_connections(self, count: int, timeout: float = 15) -> None:
        """Block until `count` WebSocket connections were accepted (AssertionError after
        `timeout` seconds)."""
        with self._changed:
            if not self._changed.wait_for(lambda: self.connections >= count, timeout):
                raise AssertionError(f"{self.connections} connection(s), expected {count}")

    def send_event(
        self, payload: dict[str, Any], *, frame_type: str = "event", timeout: float = 15
    ) -> AnswerFrame:
        """Write `payload` as one DATA frame on the current connection and wait for the
        client's answer frame."""
        future = asyncio.run_coroutine_threadsafe(
            self._send_event(payload, frame_type, timeout), self._loop
        )
        return future.result(timeout + 1)

    def drop(self) -> None:
        """Close the current connection from the server side."""
        asyncio.run_coroutine_threadsafe(self._drop(), self._loop).result(10)

    # -- on the stand-in's loop ------------------------------------------------------------

    def _connection_url(self) -> str:
        device = next(self._ids)
        return f"ws://127.0.0.1:{self._ws_port}/ws?device_id=dev-{device}&service_id={SERVICE_ID}"

    async def _serve_connection(self, connection) -> None:
        with self._changed:
            self._current = connection
            self.connections += 1
            self._changed.notify_all()
        try:
            async for message in connection:
                frame = Frame()
                frame.ParseFromString(message)
                headers = {header.key: header.value for header in frame.headers}
                if frame.method == FrameType.CONTROL.value:
                    if headers.get("type") == MessageType.PING.value:
                        self.pings += 1
                        await connection.send(_pong(frame).SerializeToString())
                    continue
                waiting = self._waiting.pop(headers.get("message_id", ""), None)
                if waiting is not None and not waiting.done():
                    waiting.set_result(frame)
        except ConnectionClosed:
            pass

    async def _send_event(self, payload, frame_type, timeout) -> AnswerFrame:
        connection = self._current
        if connection is None:
            raise AssertionError("no client is connected")
        message_id = f"msg-{next(self._ids)}"
        frame = Frame()
        frame.SeqID, frame.LogID, frame.service = next(self._ids), next(self._ids), SERVICE_ID
        frame.method = FrameType.DATA.value
        for key, value in {
            "type": frame_type,
            "message_id": message_id,
            "trace_id": f"trace-{message_id}",
            "sum": "1",
            "seq": "0",
        }.items():
            header = frame.headers.add()
            header.key, header.value = key, value
        frame.payload = json.dumps(payload).encode()
        answered = self._loop.create_future()
        self._waiting[message_id] = answered
        await connection.send(frame.SerializeToString())
        reply = await asyncio.wait_for(answered, timeout)
        response = json.loads(reply.payload)
        data = response.get("data")
        return AnswerFrame(
            code=response["code"],
            answer=json.loads(base64.b64decode(data)) if data else None,
            headers={header.key: header.value for header in reply.headers},
        )

    async def _drop(self) -> None:
        connection, self._current = self._current, None
        if connection is not None:
            await connection.close(code=1001, reason="server going away")


def _pong(ping: Frame) -> Frame:
    frame = Frame()
    frame.SeqID, frame.LogID, frame.service = 0, 0, ping.service
    frame.method = FrameType.CONTROL.value
    header = frame.headers.add()
    header.key, header.value = "type", MessageType.PONG.value
    return frame


class _DiscoveryHandler(BaseHTTPRequestHandler):
    stub: LongConnectionStub

    def log_message(self, format, *args):  # noqa: A002 - quiet
        pass

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
        if self.path != "/callback/ws/endpoint":
            return self._send(404, {"code": 404, "msg": "not found"})
        stub = self.stub
        app_id = body.get("AppID", "")
        stub.discoveries.append(app_id)
        if stub.app_secrets.get(app_id) != body.get("AppSecret"):
            return self._send(200, {"code": 1000040351, "msg": "app_id or app_secret invalid"})
        url = stub._connection_url()
        return self._send(
            200,
            {"code": 0, "msg": "ok", "data": {"URL": url, "ClientConfig": stub.client_config}},
        )

    def _send(self, status: int, payload: dict) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
