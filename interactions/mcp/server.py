"""The MCP server at `/mcp` (Streamable HTTP, the official `mcp` SDK) and its ASGI mount.

`McpMount(app)` wraps Cardloop's HTTP application (`cardloop.asgi`): a request whose path is
`/mcp` is answered here, everything else goes to `app` unchanged. So the same Daphne
processes serve the tools, and a request may land in any of them.

**Stateless.** The SDK's session manager runs in stateless mode: every POST is served by a
fresh transport, no `Mcp-Session-Id` is handed out and nothing of a client is kept in process
memory between requests. With several Daphne processes on one port (`manage.py serve
--web-processes N`, SO_REUSEPORT) consecutive requests of one client land in different
processes; a stateful session would live in one process only and answer 404 elsewhere. The
tools need no server-to-client requests (no sampling or elicitation), only request-scoped
progress notifications, which stateless mode carries on the call's own response stream;
everything a call waits on is in the database and wake-ups cross processes through the
channel layer. Clients on the 2026-07-28 protocol (per-request envelope, no handshake) are
stateless by design and served the same way.

**Authentication.** `Authorization: Bearer cmt_…`, a session-scoped MCP token
(`interactions.mcp.tokens`). Missing, malformed, unknown, revoked or expired → 401 JSON
`{"error": "invalid_token", "detail": …}` with `WWW-Authenticate: Bearer`, before the SDK sees
the request. The Host header is judged by `ALLOWED_HOSTS` as Django does (400
`disallowed_host`); a browser `Origin` that is not an allowed host is refused (403
`forbidden_origin`), which also covers DNS rebinding.

**Cancellation.** A client on the 2026-07-28 protocol cancels by closing the call's response
stream: the SDK cancels the handler, which withdraws the question (`tools.call_tool`). A
client on the handshake protocols POSTs `notifications/cancelled {requestId}`; that POST may
reach another process than the one holding the call, so `CancelledNotifications` finds the
call's question in the database (`McpCall`, per token) and withdraws it there; the waiting
handler then sees it cancelled. A client that disconnects mid-call has its handler cancelled
by the transport, which withdraws the question too.

**Lifespan.** Daphne runs no ASGI lifespan, so the SDK's session manager is started lazily,
once per event loop, by the first `/mcp` request (`_manager_for_loop`).
"""

from __future__ import annotations

import asyncio
import json
import logging
import weakref
from typing import Any

import anyio
import mcp_types as types
from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import close_old_connections
from django.http.request import split_domain_port, validate_host
from django.utils.translation import gettext_lazy as _
from mcp.server.lowlevel.server import Server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings

from interactions.mcp import calls, tokens, tools
from interactions.models import McpToken

log = logging.getLogger(__name__)

#: The mounted path (with or without a trailing slash).
PATH = "/mcp"
#: Where the authenticated token travels in the ASGI scope.
SCOPE_KEY = "cardloop.mcp_token"
SERVER_NAME = "cardloop"

INSTRUCTIONS = (
    "Cardloop reaches the person behind this agent session on Feishu (progress card, "
    "approval cards) and the desktop question panel. Use ask_user_questions for decisions "
    "only the user can make and request_approval before a risky tool call; both wait for the "
    "answer. If ask_user_questions fails with 当前通道无法向用户提问, ask in plain text."
)


def _token_of(ctx) -> McpToken:
    request = getattr(ctx, "request", None)
    token = request.scope.get(SCOPE_KEY) if request is not None else None
    if token is None:  # McpMount authenticates every request before the SDK sees it
        raise RuntimeError("MCP request without an authenticated token")
    return token


async def list_tools(ctx, params) -> types.ListToolsResult:
    """`tools/list`: the session's tools (`tools.tools_for`)."""
    token = _token_of(ctx)
    return types.ListToolsResult(
        tools=[
            types.Tool(
                name=spec.name,
                title=spec.title,
                description=spec.description,
                input_schema=spec.input_schema,
            )
            for spec in tools.tools_for(token)
        ]
    )


async def call_tool(ctx, params: types.CallToolRequestParams) -> types.CallToolResult:
    """`tools/call`: `tools.call_tool` with MCP progress reporting for waiting calls."""
    token = _token_of(ctx)

    async def progress(done: float, total: float | None, message: str | None) -> None:
        try:
            await ctx.session.report_progress(done, total, message)
        except Exception:  # noqa: BLE001 - a lost progress notification changes nothing
            log.debug("mcp: progress notification not sent", exc_info=True)

    try:
        result = await tools.call_tool(
            token,
            params.name,
            params.arguments,
            rpc_request_id="" if ctx.request_id is None else str(ctx.request_id),
            progress=progress,
        )
    except Exception:
        # never the exception's text to the client (it can name internals)
        log.exception("mcp: tool %s failed", params.name[:64])
        result = tools.ToolResult(tools.bilingual(INTERNAL_ERROR), {"error": "internal"}, True)
    return types.CallToolResult(
        content=[types.TextContent(text=result.text)],
        structured_content=result.data,
        is_error=result.is_error,
    )


class CancelledNotifications:
    """Server middleware: a `notifications/cancelled` withdraws the question of the named
    call of the same token, in whichever process that call waits (see the module
    docstring). Every other message passes through."""

    async def __call__(self, ctx, call_next):
        if ctx.request_id is None and ctx.method == "notifications/cancelled":
            request_id = (ctx.params or {}).get("requestId")
            request = getattr(ctx, "request", None)
            token = request.scope.get(SCOPE_KEY) if request is not None else None
            if token is not None and isinstance(request_id, (str, int)):
                # shielded: the transport answers a notification 202 at once and then tears
                # its connection down, which would cancel this mid-query
                with anyio.CancelScope(shield=True):
                    try:
                        await sync_to_async(_cancel_call, thread_sensitive=False)(token, request_id)
                    except Exception:  # noqa: BLE001 - a notification has nobody to answer
                        log.warning("mcp: notifications/cancelled failed", exc_info=True)
        return await call_next(ctx)


def _cancel_call(token: McpToken, request_id) -> bool:
    try:
        return calls.cancel(token, str(request_id))
    finally:
        close_old_connections()


def build_server() -> Server:
    """The low-level MCP server with Cardloop's tools."""
    server = Server(
        SERVER_NAME,
        version="1",
        title="Cardloop",
        instructions=INSTRUCTIONS,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )
    server.middleware.append(CancelledNotifications())
    return server


SERVER = build_server()

#: One running session manager per event loop (the SDK's manager runs once, in one loop).
_managers: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


async def _manager_for_loop() -> StreamableHTTPSessionManager:
    """This loop's session manager, started on first use and kept running (Daphne runs no
    ASGI lifespan)."""
    loop = asyncio.get_running_loop()
    entry = _managers.get(loop)
    if entry is None:
        manager = StreamableHTTPSessionManager(
            app=SERVER,
            stateless=True,
            json_response=False,
            # Host and Origin are checked by McpMount against ALLOWED_HOSTS
            security_settings=TransportSecuritySettings(enable_dns_rebinding_protection=False),
        )
        ready = asyncio.Event()

        async def run() -> None:
            async with manager.run():
                ready.set()
                await asyncio.Event().wait()  # until the loop ends

        task = loop.create_task(run())
        entry = _managers[loop] = (manager, ready, task)
    manager, ready, task = entry
    if not ready.is_set():
        waiter = asyncio.ensure_future(ready.wait())
        done, _pending = await asyncio.wait({waiter, task}, return_when=asyncio.FIRST_COMPLETED)
        if task in done:
            waiter.cancel()
            _managers.pop(loop, None)
            task.result()  # raises what stopped it
    return manager


# ---------------------------------------------------------------------------------------------
# The ASGI mount
# ---------------------------------------------------------------------------------------------

INTERNAL_ERROR = _("The tool failed inside Cardloop; try again later.")
INVALID_TOKEN = _("Missing, invalid, revoked or expired MCP token (Authorization: Bearer cmt_…).")
DISALLOWED_HOST = _("Invalid Host header.")
FORBIDDEN_ORIGIN = _("Requests from this Origin are not allowed.")


def is_mcp_path(path: str) -> bool:
    return path in (PATH, PATH + "/")


def _allowed_hosts() -> list[str]:
    hosts = list(settings.ALLOWED_HOSTS)
    if settings.DEBUG and not hosts:
        hosts = [".localhost", "127.0.0.1", "[::1]"]
    return hosts


def _header(scope, name: bytes) -> list[str]:
    return [v.decode("latin1") for k, v in scope.get("headers") or () if k == name]


def _host_allowed(scope) -> bool:
    """Django's Host check: the Host header (several are refused), else the server address."""
    hosts = _header(scope, b"host")
    host = ",".join(hosts)
    if not host:
        server = scope.get("server")
        host = str(server[0]) if server else ""
    domain, _port = split_domain_port(host)
    return bool(domain) and validate_host(domain, _allowed_hosts())


def _origin_allowed(scope) -> bool:
    """No Origin (not a browser), or a browser Origin whose host is allowed."""
    origins = _header(scope, b"origin")
    if not origins:
        return True
    if len(origins) > 1:
        return False
    from urllib.parse import urlsplit

    try:
        hostname = urlsplit(origins[0]).hostname or ""
    except ValueError:
        return False
    return bool(hostname) and validate_host(hostname, _allowed_hosts())


def _bearer(scope) -> str:
    values = _header(scope, b"authorization")
    if len(values) != 1:
        return ""
    scheme, _sep, raw = values[0].partition(" ")
    return raw.strip() if scheme.lower() == "bearer" else ""


@sync_to_async(thread_sensitive=False)
def _authenticate(raw: str) -> McpToken | None:
    try:
        return tokens.authenticate(raw) if raw.startswith(f"{McpToken.PREFIX_TAG}_") else None
    finally:
        close_old_connections()


async def _json(send, status: int, error: str, detail, headers=()) -> None:
    from interactions.mcp.tools import bilingual

    body = json.dumps({"error": error, "detail": bilingual(detail)}, ensure_ascii=False).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                *headers,
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


class McpMount:
    """ASGI: `/mcp` → the MCP server (after Host, Origin and token checks); any other path
    → `app`."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http" or not is_mcp_path(scope.get("path", "")):
            await self.app(scope, receive, send)
            return
        if not _host_allowed(scope):
            log.warning("mcp: request with a disallowed Host header refused")
            await _json(send, 400, "disallowed_host", DISALLOWED_HOST)
            return
        if not _origin_allowed(scope):
            await _json(send, 403, "forbidden_origin", FORBIDDEN_ORIGIN)
            return
        token = await _authenticate(_bearer(scope))
        if token is None:
            await _json(
                send,
                401,
                "invalid_token",
                INVALID_TOKEN,
                headers=[(b"www-authenticate", b'Bearer realm="cardloop", error="invalid_token"')],
            )
            return
        manager = await _manager_for_loop()
        scope = {**scope, SCOPE_KEY: token, "path": PATH, "raw_path": PATH.encode()}
        await manager.handle_request(scope, receive, send)


def mount(app: Any) -> McpMount:
    """`app` with `/mcp` served in front of it (used by `cardloop.asgi`)."""
    return McpMount(app)
