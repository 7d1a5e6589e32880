"""ASGI middleware of Cardloop that is not specific to one app.

`ServerSendInScope` hands a consumer the ASGI server's own `send` callable (the one the server
passed to the application), under `SERVER_SEND`, beside the `send` the middleware stack gives
it. A consumer that sends many WebSocket frames on behalf of others (a push to 1000 question
panels of one user, `interactions.panels.consumer`) can then skip the wrappers in between for
`websocket.send`: channels' `SessionMiddleware` wraps `send` for every message although it only
acts on `http.response.start` (it saves the session and sets its cookie there;
`channels.sessions.InstanceSessionWrapper.send`), and the wrapper and channels' two `send`
layers above it were a few per cent of Daphne's event loop per pushed frame
(bench/README.md "Panel fan-out").
"""

from __future__ import annotations

from typing import Any

#: Scope key of the server's `send` (an ASGI extension key, namespaced as the spec asks).
SERVER_SEND = "cardloop.server_send"


class ServerSendInScope:
    """ASGI middleware: call `inner` with a copy of the scope that also holds the server's
    `send` under `SERVER_SEND`. Put it outside every middleware that wraps `send`; a consumer
    may use it only for messages none of those wrappers act on (`websocket.send`)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    async def __call__(self, scope: dict, receive: Any, send: Any) -> Any:
        return await self.inner({**scope, SERVER_SEND: send}, receive, send)
