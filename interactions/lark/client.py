"""The Feishu Open API as Cardloop uses it: one small gateway per bot over lark-oapi's `Client`.

    gw = gateway_for(bot)                     # LarkGateway, or DryRunGateway (dry run)
    card_id = gw.create_card(card)            # CardKit card entity from Card JSON 2.0
    om_id = gw.send_card(receive_id="oc_…", card_id=card_id, uuid="del_…")
    gw.update_element(card_id, "fb_status", element, sequence=3)
    gw.batch_update_elements(card_id, {"fb_status": …, "fb_buttons": …}, sequence=4)
    gw.update_card(card_id, card, sequence=5)
    gw.patch_message(om_id, card)             # whole-card update of a non-entity card
    gw.get_message(om_id)                     # {"message_id", "msg_type", "chat_id", "content"}
    gw.reply_text(om_id, "text")              # a plain-text reply to a message -> om_id

Every call raises `LarkApiError` on failure (Feishu `code`/`msg`, `log_id`, HTTP status, and
whether retrying can help). Nothing here touches the database.

Domain: the bot's (`open.feishu.cn` or `open.larksuite.com`); `CARDLOOP_LARK_DOMAIN` overrides
it for every bot (tests point it at the loopback stub, `tests/lark_stub.py`).

Dry run (`interactions.lark.dryrun`): when `CARDLOOP_LARK_DRY_RUN` is true, or it is unset and
the bot has no app secret, `gateway_for` returns a gateway that logs each call (name, ids,
sizes; never secrets or card text) and returns synthetic ids.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any, Protocol

import lark_oapi as lark
import requests
from django.conf import settings
from lark_oapi.api.cardkit.v1 import (
    BatchUpdateCardRequest,
    BatchUpdateCardRequestBody,
    Card,
    CreateCardRequest,
    CreateCardRequestBody,
    UpdateCardElementRequest,
    UpdateCardElementRequestBody,
    UpdateCardRequest,
    UpdateCardRequestBody,
)
from lark_oapi.api.im.v1 import (
    CreateMessageRequest,
    CreateMessageRequestBody,
    GetMessageRequest,
    PatchMessageRequest,
    PatchMessageRequestBody,
    ReplyMessageRequest,
    ReplyMessageRequestBody,
)
from lark_oapi.core.exception import ObtainAccessTokenException
from lark_oapi.core.token import TokenManager

from interactions.lark.cardjson import card_bytes, describe_card
from interactions.lark.dryrun import DryRunGateway
from interactions.lark.receivers import RECEIVE_ID_TYPES

log = logging.getLogger(__name__)

#: Feishu codes meaning "too many requests" (message 230020, platform 99991400).
RATE_LIMIT_CODES = frozenset({230020, 99991400})
#: Other codes worth retrying later: the card is in an ongoing interaction (200810), the
#: tenant access token is invalid or expired (99991661 / 99991663: the cached token is dropped).
TRANSIENT_CODES = frozenset({200810, 99991661, 99991663})
TOKEN_CODES = frozenset({99991661, 99991663})
#: Seconds per Open API request.
TIMEOUT = 10


def retry_after_seconds(headers: dict[str, str] | None) -> float | None:
    """Seconds the server asked us to wait: `Retry-After` (seconds or an HTTP date) or
    Feishu's `x-ogw-ratelimit-reset` (seconds). None when absent or malformed."""
    if not headers:
        return None
    lowered = {str(k).lower(): str(v).strip() for k, v in headers.items()}
    for name in ("retry-after", "x-ogw-ratelimit-reset"):
        value = lowered.get(name)
        if not value:
            continue
        try:
            return max(0.0, float(value))
        except ValueError:
            pass
        try:
            when = parsedate_to_datetime(value)
        except (TypeError, ValueError):
            log.warning("ignoring malformed %s header", name)
            continue
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        return max(0.0, (when - datetime.now(UTC)).total_seconds())
    return None


class LarkApiError(Exception):
    """A Feishu Open API call failed.

    Attributes: `call` (e.g. "cardkit.card.update"), `code` (Feishu code; -1 for network or
    unreadable responses), `msg`, `log_id` (Feishu's X-Tt-Logid, for support), `http_status`
    (None without a response), `rate_limited`, `retryable` (rate limit, HTTP 429/5xx,
    network, transient codes; everything else is permanent) and `retry_after` (seconds the
    server asked to wait, or None).
    """

    def __init__(
        self,
        call: str,
        code: int,
        msg: str,
        *,
        log_id: str = "",
        http_status: int | None = None,
        retryable: bool | None = None,
        retry_after: float | None = None,
    ):
        self.call = call
        self.code = code
        self.msg = msg
        self.log_id = log_id or ""
        self.http_status = http_status
        self.retry_after = retry_after
        self.rate_limited = code in RATE_LIMIT_CODES or http_status == 429
        if retryable is None:
            retryable = (
                self.rate_limited
                or code in TRANSIENT_CODES
                or (http_status is not None and http_status >= 500)
            )
        self.retryable = retryable
        super().__init__(str(self))

    def __str__(self) -> str:
        status = f" http={self.http_status}" if self.http_status is not None else ""
        log_id = f" log_id={self.log_id}" if self.log_id else ""
        return f"{self.call} failed: code={self.code} msg={self.msg[:200]}{status}{log_id}"


class Gateway(Protocol):
    """What Cardloop calls on Feishu. `LarkGateway` and `DryRunGateway` implement it."""

    dry_run: bool

    def create_card(self, card: dict[str, Any]) -> str: ...

    def send_card(
        self,
        *,
        receive_id: str,
        receive_id_type: str = "chat_id",
        card_id: str | None = None,
        card: dict[str, Any] | None = None,
        uuid: str | None = None,
    ) -> str: ...

    def update_element(
        self,
        card_id: str,
        element_id: str,
        element: dict[str, Any],
        *,
        sequence: int,
        uuid: str | None = None,
    ) -> None: ...

    def batch_update_elements(
        self,
        card_id: str,
        elements: dict[str, dict[str, Any]],
        *,
        sequence: int,
        uuid: str | None = None,
    ) -> None: ...

    def update_card(
        self, card_id: str, card: dict[str, Any], *, sequence: int, uuid: str | None = None
    ) -> None: ...

    def patch_message(self, open_message_id: str, card: dict[str, Any]) -> None: ...

    def get_message(self, open_message_id: str) -> dict[str, Any]: ...

    def reply_text(self, open_message_id: str, text: str, *, uuid: str | None = None) -> str: ...


def is_dry_run(bot) -> bool:
    """True when calls for `bot` are logged instead of made: `CARDLOOP_LARK_DRY_RUN` true, or
    unset and the bot has no app secret."""
    forced = settings.CARDLOOP_LARK_DRY_RUN
    if forced is not None:
        return bool(forced)
    return not bot.has_credentials


def domain_for(bot) -> str:
    """The Open API base URL for `bot`: `CARDLOOP_LARK_DOMAIN` if set, else Feishu or Lark."""
    if settings.CARDLOOP_LARK_DOMAIN:
        return settings.CARDLOOP_LARK_DOMAIN.rstrip("/")
    return lark.LARK_DOMAIN if bot.domain == "lark" else lark.FEISHU_DOMAIN


def gateway_for(bot) -> Gateway:
    """The gateway for `bot`: real (`LarkGateway`) or `DryRunGateway` (see `is_dry_run`).

    Raises `LarkApiError` (permanent, code -1) when a real call is required but the bot has no
    app secret (`CARDLOOP_LARK_DRY_RUN=false` without credentials).
    """
    if is_dry_run(bot):
        return DryRunGateway(bot)
    secret = bot.secret("app_secret")
    if not secret:
        raise LarkApiError("client", -1, "bot has no app secret", retryable=False)
    return LarkGateway(bot.app_id, _client(bot.app_id, secret, domain_for(bot)))


_clients: dict[tuple[str, str, str], lark.Client] = {}
_clients_lock = threading.Lock()


def _client(app_id: str, secret: str, domain: str) -> lark.Client:
    """A cached lark-oapi client per (app_id, secret, domain); a rotated secret or another
    domain builds a new one. The secret is only part of the key as a hash."""
    key = (app_id, hashlib.sha256(secret.encode()).hexdigest(), domain)
    with _clients_lock:
        client = _clients.get(key)
        if client is None:
            client = (
                lark.Client.builder()
                .app_id(app_id)
                .app_secret(secret)
                .domain(domain)
                .timeout(TIMEOUT)
                .log_level(lark.LogLevel.WARNING)
                .build()
            )
            _clients[key] = client
        return client


def reset_clients() -> None:
    """Forget cached clients and lark-oapi's process-wide tenant-token cache (tests, rotation)."""
    with _clients_lock:
        _clients.clear()
    TokenManager.cache.cache.clear()


def _dumps(obj: Any) -> str:
    return card_bytes(obj).decode("utf-8")


class LarkGateway:
    """The real gateway: lark-oapi's sync client (requests) for one bot. Thread-safe."""

    dry_run = False

    def __init__(self, app_id: str, client: lark.Client):
        self.app_id = app_id
        self.client = client

    def _call(self, call: str, fn, request):
        try:
            response = fn(request)
        except ObtainAccessTokenException as exc:
            raise LarkApiError(
                call,
                int(exc.code or -1),
                f"tenant token: {exc.msg}",
                retryable=exc.code in RATE_LIMIT_CODES,
            ) from None
        except (requests.RequestException, OSError) as exc:
            raise LarkApiError(call, -1, f"network: {type(exc).__name__}", retryable=True) from None
        except ValueError as exc:  # JSONDecodeError: a proxy's HTML error page, a cut body
            raise LarkApiError(
                call, -1, f"unreadable response: {type(exc).__name__}", retryable=True
            ) from None
        if not response.success():
            raw = response.raw
            code = int(response.code) if response.code is not None else -1
            if code in TOKEN_CODES:
                TokenManager.cache.cache.pop(f"self_tenant_token:{self.app_id}", None)
            raise LarkApiError(
                call,
                code,
                response.msg or "",
                log_id=response.get_log_id() or "",
                http_status=raw.status_code if raw is not None else None,
                retry_after=retry_after_seconds(raw.headers if raw is not None else None),
            )
        return response

    def create_card(self, card: dict[str, Any]) -> str:
        """Create a CardKit card entity from Card JSON 2.0; returns its `card_id`."""
        request = (
            CreateCardRequest.builder()
            .request_body(
                CreateCardRequestBody.builder().type("card_json").data(_dumps(card)).build()
            )
            .build()
        )
        response = self._call("cardkit.card.create", self.client.cardkit.v1.card.create, request)
        return response.data.card_id

    def send_card(
        self,
        *,
        receive_id: str,
        receive_id_type: str = "chat_id",
        card_id: str | None = None,
        card: dict[str, Any] | None = None,
        uuid: str | None = None,
    ) -> str:
        """Send an interactive message to `receive_id` (a chat_id, or a person's open_id …)
        showing card entity `card_id` or the raw `card`; `uuid` (≤ 50 chars) makes a retry
        within an hour return the first message. Returns the `open_message_id`."""
        if (card_id is None) == (card is None):
            raise ValueError("pass exactly one of card_id and card")
        if receive_id_type not in RECEIVE_ID_TYPES:
            raise ValueError(f"receive_id_type must be one of {sorted(RECEIVE_ID_TYPES)}")
        content = (
            _dumps({"type": "card", "data": {"card_id": card_id}}) if card_id else _dumps(card)
        )
        body = (
            CreateMessageRequestBody.builder()
            .receive_id(receive_id)
            .msg_type("interactive")
            .content(content)
        )
        if uuid:
            body = body.uuid(uuid[:50])
        request = (
            CreateMessageRequest.builder()
            .receive_id_type(receive_id_type)
            .request_body(body.build())
            .build()
        )
        response = self._call("im.message.create", self.client.im.v1.message.create, request)
        return response.data.message_id

    def update_element(
        self,
        card_id: str,
        element_id: str,
        element: dict[str, Any],
        *,
        sequence: int,
        uuid: str | None = None,
    ) -> None:
        """Replace component `element_id` of card entity `card_id` (CardKit, `sequence` must be
        greater than any sequence used on this card before)."""
        body = UpdateCardElementRequestBody.builder().element(_dumps(element)).sequence(sequence)
        if uuid:
            body = body.uuid(uuid)
        request = (
            UpdateCardElementRequest.builder()
            .card_id(card_id)
            .element_id(element_id)
            .request_body(body.build())
            .build()
        )
        self._call(
            "cardkit.card_element.update", self.client.cardkit.v1.card_element.update, request
        )

    def batch_update_elements(
        self,
        card_id: str,
        elements: dict[str, dict[str, Any]],
        *,
        sequence: int,
        uuid: str | None = None,
    ) -> None:
        """Replace several components of card entity `card_id` in one CardKit `batch_update`
        (one `sequence`, applied atomically by Feishu)."""
        actions = [
            {"action": "update_element", "params": {"element_id": eid, "element": element}}
            for eid, element in elements.items()
        ]
        body = BatchUpdateCardRequestBody.builder().actions(_dumps(actions)).sequence(sequence)
        if uuid:
            body = body.uuid(uuid)
        request = (
            BatchUpdateCardRequest.builder().card_id(card_id).request_body(body.build()).build()
        )
        self._call("cardkit.card.batch_update", self.client.cardkit.v1.card.batch_update, request)

    def update_card(
        self, card_id: str, card: dict[str, Any], *, sequence: int, uuid: str | None = None
    ) -> None:
        """Replace the whole content of card entity `card_id` with `card` (CardKit, `sequence`)."""
        body = (
            UpdateCardRequestBody.builder()
            .card(Card.builder().type("card_json").data(_dumps(card)).build())
            .sequence(sequence)
        )
        if uuid:
            body = body.uuid(uuid)
        request = UpdateCardRequest.builder().card_id(card_id).request_body(body.build()).build()
        self._call("cardkit.card.update", self.client.cardkit.v1.card.update, request)

    def patch_message(self, open_message_id: str, card: dict[str, Any]) -> None:
        """Replace the card of interactive message `open_message_id` (PATCH, never PUT: a PUT
        replaces the card for the caller only)."""
        request = (
            PatchMessageRequest.builder()
            .message_id(open_message_id)
            .request_body(PatchMessageRequestBody.builder().content(_dumps(card)).build())
            .build()
        )
        self._call("im.message.patch", self.client.im.v1.message.patch, request)

    def get_message(self, open_message_id: str) -> dict[str, Any]:
        """Read message `open_message_id`: `{"message_id", "msg_type", "chat_id", "content"}`.
        `content` is Feishu's rendering, not the JSON Cardloop sent."""
        request = GetMessageRequest.builder().message_id(open_message_id).build()
        response = self._call("im.message.get", self.client.im.v1.message.get, request)
        items = response.data.items or []
        if not items:
            raise LarkApiError("im.message.get", -1, "no such message", retryable=False)
        item = items[0]
        return {
            "message_id": item.message_id,
            "msg_type": item.msg_type,
            "chat_id": item.chat_id,
            "content": item.body.content if item.body is not None else "",
        }

    def reply_text(self, open_message_id: str, text: str, *, uuid: str | None = None) -> str:
        """Reply to message `open_message_id` with plain `text` (e.g. the answer to a typed
        `/_interaction` command); `uuid` dedupes a retried reply. Returns the reply's id."""
        body = (
            ReplyMessageRequestBody.builder()
            .msg_type("text")
            .content(json.dumps({"text": text}, ensure_ascii=False))
        )
        if uuid:
            body = body.uuid(uuid[:50])
        request = (
            ReplyMessageRequest.builder()
            .message_id(open_message_id)
            .request_body(body.build())
            .build()
        )
        response = self._call("im.message.reply", self.client.im.v1.message.reply, request)
        return response.data.message_id


__all__ = [
    "Gateway",
    "LarkApiError",
    "LarkGateway",
    "describe_card",
    "domain_for",
    "gateway_for",
    "is_dry_run",
    "reset_clients",
]
