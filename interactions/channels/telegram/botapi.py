"""The Telegram Bot API adapter: a leaf on `httpx` (no Django models, no other Cardloop layer).
It takes plain values (token, base URL) and returns plain dicts.

Why `httpx` and not `python-telegram-bot` or `aiogram`: both are built around their own async
application (an event loop, update polling or their own webhook server, handler dispatch).
Cardloop already owns those parts — the ASGI ingress, the callback dispatcher with its
threads and budget, the durable card-update queue and its worker — and calls the API from
plain threads. The Bot API is one HTTPS POST per method (`<base>/bot<token>/<method>`, JSON
in, `{ok, result}` or `{ok: false, error_code, description, parameters}` out), so a small
synchronous client is the whole adapter.

Dry run: with no token nothing is sent; the call is logged (method and group chat only, never
the token, the message text or a private chat's id, which is the person's user id) and a
synthetic result is returned (`message_id` negative, so it can never collide with a real one,
and taken from the clock in microseconds, so a restarted or second process never repeats
one), so a bot works end to end before its token is set.

Public source of every method and shape: https://core.telegram.org/bots/api
(`getMe`, `setWebhook`, `sendMessage`, `editMessageText`, `editMessageReplyMarkup`,
`answerCallbackQuery`; errors: "Making requests", `ResponseParameters.retry_after`).
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import Any

import httpx

logger = logging.getLogger("cardloop.telegram")

#: The public Bot API root; tests point the client at a loopback stub instead.
DEFAULT_BASE_URL = "https://api.telegram.org"

#: Seconds before a Bot API call is given up.
TIMEOUT_SECONDS = 10.0

_synthetic_lock = threading.Lock()
_last_synthetic = 0


def synthetic_message_id() -> int:
    """A dry run's `message_id`: minus the clock in microseconds, strictly decreasing within
    the process (so unique across restarts and, but for the same microsecond, processes)."""
    global _last_synthetic
    with _synthetic_lock:
        _last_synthetic = max(time.time_ns() // 1000, _last_synthetic + 1)
        return -_last_synthetic


class TelegramApiError(Exception):
    """A Bot API call failed.

    `method`: the Bot API method; `error_code`: Telegram's `error_code` (HTTP-like: 400, 401,
    403, 429…; -1 for a transport failure); `description`: Telegram's description (never
    contains the token; may be logged); `retryable`: True for 429, 5xx and transport failures;
    `retry_after`: seconds Telegram asked to wait (`parameters.retry_after` of a 429), else None.
    The card-update worker reads `retryable` and `retry_after`.
    """

    def __init__(
        self,
        method: str,
        error_code: int,
        description: str,
        *,
        retryable: bool = False,
        retry_after: float | None = None,
    ):
        super().__init__(f"{method}: {error_code} {description}")
        self.method = method
        self.error_code = error_code
        self.description = description
        self.retryable = retryable
        self.retry_after = retry_after

    @property
    def not_modified(self) -> bool:
        """Telegram refused an edit because the message already looks like that (harmless)."""
        return self.error_code == 400 and "not modified" in self.description.lower()


@dataclass(frozen=True)
class ConnectionCheck:
    """The result of `check_connection`: `ok`, and on success the bot's `bot_user_id` and
    `username`; `dry_run` when no token is set (nothing was called); `error` otherwise
    (`transport` for a network failure, else Telegram's description)."""

    ok: bool
    dry_run: bool = False
    bot_user_id: int = 0
    username: str = ""
    error: str = ""


def call(
    token: str,
    method: str,
    params: dict[str, Any],
    base_url: str = DEFAULT_BASE_URL,
    *,
    timeout: float = TIMEOUT_SECONDS,
) -> Any:
    """POST `params` as JSON to Bot API `method` with `token`; returns Telegram's `result`.

    Raises `TelegramApiError` (retryable for 429 with `retry_after`, 5xx and transport
    failures). The token is part of the URL, so neither the URL nor httpx's exception text is
    ever put into the error or a log line. `token` must be non-empty (see `dry_run_result`)."""
    url = f"{base_url.rstrip('/')}/bot{token}/{method}"
    try:
        resp = httpx.post(url, json=params, timeout=timeout)
    except httpx.HTTPError as exc:
        raise TelegramApiError(
            method, -1, f"transport: {type(exc).__name__}", retryable=True
        ) from None
    try:
        body = resp.json()
    except ValueError:
        body = {}
    if not isinstance(body, dict):
        body = {}
    if resp.status_code == 200 and body.get("ok") is True:
        return body.get("result")
    code = body.get("error_code")
    code = code if isinstance(code, int) else resp.status_code
    description = str(body.get("description") or f"HTTP {resp.status_code}")[:200]
    parameters = body.get("parameters") if isinstance(body.get("parameters"), dict) else {}
    retry_after = parameters.get("retry_after")
    retry_after = float(retry_after) if isinstance(retry_after, int | float) else None
    if code == 429 and retry_after is None:
        retry_after = 1.0
    raise TelegramApiError(
        method,
        code,
        description,
        retryable=code == 429 or code >= 500,
        retry_after=retry_after if code == 429 else None,
    )


def dry_run_result(method: str, params: dict[str, Any]) -> Any:
    """The synthetic result of `method` when no token is set, logged without token or text:
    `sendMessage` → a Message `{message_id (negative), chat: {id}, date: 0, dry_run: True}`;
    other methods → True (what Telegram answers for edits and answers of callback queries)."""
    chat = params.get("chat_id")
    if chat is None:
        logger.info("telegram dry run: %s not called (no bot token)", method)
    else:
        # a private chat's id is the person's user id: only group ids are logged
        shown = chat if str(chat).startswith("-") else "(a private chat)"
        logger.info("telegram dry run: %s to chat %s not called (no bot token)", method, shown)
    if method == "sendMessage":
        return {
            "message_id": synthetic_message_id(),
            "chat": {"id": chat},
            "date": 0,
            "dry_run": True,
        }
    return True


def invoke(
    token: str, method: str, params: dict[str, Any], base_url: str = DEFAULT_BASE_URL
) -> Any:
    """`call`, or the dry run's `dry_run_result` when `token` is empty."""
    if not token:
        return dry_run_result(method, params)
    return call(token, method, params, base_url)


def check_connection(token: str, base_url: str = DEFAULT_BASE_URL) -> ConnectionCheck:
    """Call `getMe` with `token`; never raises. No token → `dry_run=True`, nothing called."""
    if not token:
        logger.info("telegram dry run: getMe not called (no bot token)")
        return ConnectionCheck(ok=False, dry_run=True, error="no_token")
    try:
        me = call(token, "getMe", {}, base_url)
    except TelegramApiError as exc:
        return ConnectionCheck(
            ok=False, error="transport" if exc.error_code == -1 else exc.description
        )
    me = me if isinstance(me, dict) else {}
    return ConnectionCheck(
        ok=True, bot_user_id=int(me.get("id") or 0), username=str(me.get("username") or "")
    )


def set_webhook(
    token: str,
    url: str,
    secret_token: str,
    base_url: str = DEFAULT_BASE_URL,
    *,
    allowed_updates: tuple[str, ...] = ("message", "callback_query"),
) -> bool:
    """`setWebhook(url, secret_token, allowed_updates)`: Telegram then POSTs every update to
    `url` with header `X-Telegram-Bot-Api-Secret-Token: <secret_token>`. Returns True when it
    was set, False in dry run (no token). Raises `TelegramApiError`."""
    params = {"url": url, "secret_token": secret_token, "allowed_updates": list(allowed_updates)}
    if not token:
        logger.info("telegram dry run: setWebhook not called (no bot token)")
        return False
    return bool(call(token, "setWebhook", params, base_url))


def send_message(
    token: str,
    chat_id: int | str,
    text: str,
    reply_markup: dict[str, Any] | None = None,
    base_url: str = DEFAULT_BASE_URL,
    *,
    reply_to_message_id: int | None = None,
) -> dict[str, Any]:
    """`sendMessage`; returns the sent Message (dict; `message_id`, `chat.id`). Dry run
    without a token. Raises `TelegramApiError`."""
    params: dict[str, Any] = {"chat_id": chat_id, "text": text}
    if reply_markup is not None:
        params["reply_markup"] = reply_markup
    if reply_to_message_id is not None:
        params["reply_parameters"] = {"message_id": reply_to_message_id}
    return invoke(token, "sendMessage", params, base_url)


def edit_message_text(
    token: str,
    chat_id: int | str,
    message_id: int,
    text: str,
    reply_markup: dict[str, Any] | None = None,
    base_url: str = DEFAULT_BASE_URL,
) -> Any:
    """`editMessageText` (the keyboard is replaced by `reply_markup`, removed when None).
    Raises `TelegramApiError`; an edit to the same content raises one with `not_modified`."""
    params: dict[str, Any] = {"chat_id": chat_id, "message_id": message_id, "text": text}
    if reply_markup is not None:
        params["reply_markup"] = reply_markup
    return invoke(token, "editMessageText", params, base_url)


def edit_message_reply_markup(
    token: str,
    chat_id: int | str,
    message_id: int,
    reply_markup: dict[str, Any] | None,
    base_url: str = DEFAULT_BASE_URL,
) -> Any:
    """`editMessageReplyMarkup`: replace (or, with None, remove) the inline keyboard only."""
    params: dict[str, Any] = {"chat_id": chat_id, "message_id": message_id}
    if reply_markup is not None:
        params["reply_markup"] = reply_markup
    return invoke(token, "editMessageReplyMarkup", params, base_url)


def answer_callback_query(
    token: str,
    callback_query_id: str,
    text: str = "",
    base_url: str = DEFAULT_BASE_URL,
    *,
    show_alert: bool = False,
) -> Any:
    """`answerCallbackQuery`: ends the client's spinner; `text` (0–200 characters, cut here)
    is the toast. Raises `TelegramApiError`."""
    params: dict[str, Any] = {"callback_query_id": callback_query_id}
    if text:
        params["text"] = text[:200]
    if show_alert:
        params["show_alert"] = True
    return invoke(token, "answerCallbackQuery", params, base_url)
