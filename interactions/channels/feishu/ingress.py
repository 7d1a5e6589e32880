"""`POST /lark/<app_id>/callback`: Feishu's HTTP callback and event URL for one app.

The raw body and headers go to lark-oapi's `EventDispatcherHandler` (subclassed here), with the
bot's Encrypt Key and Verification Token from `webhook_credentials_provider`. lark-oapi
decrypts, checks the token, answers url_verification and dispatches; Cardloop's processors
hand the verified payload to `interactions.callbacks.dispatcher`. What Cardloop changes:

- every answer is JSON (`Content-Type: application/json`), never lark-oapi's 500:
  bad token / signature → 401, undecryptable or malformed → 400, unknown app_id → 404,
  legacy v1 card callbacks → 400 `legacy_card_callback` (subscribe to v2 only), a bot without a
  Verification Token → 403; rejected requests have no side effect;
- url_verification (plain or encrypted) is answered `{"challenge": …}` without signature
  headers, but only when the token inside matches (an unverified challenge is never echoed);
- the signature is `sha256(timestamp + nonce + encrypt_key + raw body)`, compared in constant
  time, **lower-case hex only** (Feishu sends lower case; an upper-case signature → 401, a
  deliberate choice: one spelling, one comparison); requests older than
  `inbound.MAX_REQUEST_AGE` are refused so a captured request cannot be replayed after its
  dedupe row expired;
- card callbacks are read from the raw JSON (lark-oapi's typed model raises on string values
  and drops unknown keys); every event type is acked, registered or not;
- held card updates are released when the response has been sent (`close()`).
"""

from __future__ import annotations

import hmac
import json
import logging
import time
import traceback
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lark_oapi as lark
from django.core.exceptions import RequestDataTooBig
from django.http import JsonResponse
from django.views.decorators.csrf import csrf_exempt
from lark_oapi.core.exception import AccessDeniedException, NoAuthorizationException
from lark_oapi.event.processor import ICallBackProcessor, IEventProcessor

from botadmin.models import Bot
from interactions.callbacks import dispatcher, inbound
from interactions.lark import signing
from plumbing import metrics
from plumbing.parsers import ascii_int, contains_unstorable, loads_untrusted

log = logging.getLogger(__name__)

CARD_ACTION_KEY = "p2.card.action.trigger"


class Rejection(Exception):
    """Why a request was refused: HTTP `status` and an `{"error": code, "detail": …}` body."""

    def __init__(self, status: int, code: str, detail: str):
        super().__init__(code)
        self.status = status
        self.code = code
        self.detail = detail


_rejection: ContextVar[Rejection | None] = ContextVar("lark_ingress_rejection", default=None)


def _reject(status: int, code: str, detail: str):
    rejection = Rejection(status, code, detail)
    _rejection.set(rejection)
    raise rejection


#: Inside `process()`: a list collecting what lark-oapi failed on (one line each), else None.
_lark_failures: ContextVar[list[str] | None] = ContextVar("lark_ingress_failures", default=None)

#: Source folders of Cardloop's own code (a failure raised there is a bug: keep its traceback).
_OWN_CODE = tuple(
    str(Path(__file__).resolve().parents[3] / app)
    for app in ("botadmin", "interactions", "feedback")
)


def _raised_in_own_code(exc: BaseException) -> bool:
    return any(
        frame.f_code.co_filename.startswith(_OWN_CODE)
        for frame, _line in traceback.walk_tb(exc.__traceback__)
    )


class _SilenceRejections(logging.Filter):
    """lark-oapi logs every request it cannot handle at ERROR with a traceback, so anyone who
    can POST to the callback URL could fill the log with tracebacks. Cardloop logs one WARNING
    line per refusal itself (`process`), so inside `process()` such a record is dropped and its
    exception kept for that line: a `Rejection` (bad token, signature, …) always, any other
    failure (a payload lark-oapi cannot read, e.g. `{"schema": "2.0"}`) unless it was raised in
    Cardloop's own code, whose tracebacks stay in the log."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if isinstance(exc, Rejection):
            return False
        failures = _lark_failures.get()
        if failures is None or record.levelno < logging.ERROR:
            return True
        if exc is not None and _raised_in_own_code(exc):
            return True
        summary = f"{type(exc).__name__}: {exc}" if exc is not None else record.getMessage()
        failures.append(summary[:200])
        return False


logging.getLogger("Lark").addFilter(_SilenceRejections())


class _RawPayload:
    """What lark-oapi unmarshals a payload into for Cardloop: the plain dict, untouched."""

    def __init__(self, d: Any = None):
        self.raw = d if isinstance(d, dict) else {}


class _CardActionProcessor(ICallBackProcessor[_RawPayload]):
    def __init__(self, bot):
        self.bot = bot

    def type(self):
        return _RawPayload

    def do(self, data: _RawPayload) -> dict[str, Any]:
        return dispatcher.handle_card_action(self.bot, data.raw)


class _EventProcessor(IEventProcessor[_RawPayload]):
    def __init__(self, bot):
        self.bot = bot

    def type(self):
        return _RawPayload

    def do(self, data: _RawPayload) -> None:
        dispatcher.handle_event(self.bot, data.raw)


class _EveryEvent(dict):
    """lark-oapi's processor map, answering every event key with Cardloop's event processor
    (so unregistered event types are acked instead of failing with "processor not found")."""

    def __init__(self, processor: _EventProcessor):
        super().__init__()
        self._processor = processor

    def get(self, key, default=None):
        if isinstance(key, str) and key.startswith(("p2.", "p1.")):
            return self._processor
        return default

    def __contains__(self, key) -> bool:
        return self.get(key) is not None


class CardloopEventDispatcher(lark.EventDispatcherHandler):
    """lark-oapi's dispatcher with Cardloop's processors and classified failures.

    Relies on lark-oapi 1.7.5's handler internals (`_callback_processor_map`, `_processorMap`,
    `_decrypt`, `_verify_token`, `_verify_sign`, `_webhook_credentials_provider`); the
    requirement is pinned and the tests drive every path.
    """

    def __init__(self, bot, credentials: lark.WebhookCredentials | None = None):
        super().__init__()
        self.bot = bot
        #: The decrypted payload of the HTTP request being handled (`_inspect`), else None.
        self.payload: dict[str, Any] | None = None
        if credentials is not None:
            self._webhook_credentials_provider = lambda: credentials
        else:  # long connection: frames are authenticated by the connection itself
            self._encrypt_key = ""
            self._verification_token = ""
        self._callback_processor_map = {CARD_ACTION_KEY: _CardActionProcessor(bot)}
        self._processorMap = _EveryEvent(_EventProcessor(bot))

    def _decrypt(self, content: bytes, encrypt_key):
        try:
            plaintext = super()._decrypt(content, encrypt_key)
        except NoAuthorizationException:
            _reject(
                400, "encrypt_key_missing", "The body is encrypted but the bot has no Encrypt Key."
            )
        except (ValueError, TypeError, AttributeError):  # base64, padding, UTF-8, shape
            _reject(
                400, "undecryptable", "The body could not be decrypted with the bot's Encrypt Key."
            )
        self._inspect(plaintext)
        return plaintext

    def _inspect(self, plaintext: str) -> None:
        """Keep the decrypted payload for the checks lark-oapi does not make (`_verify_sign`,
        `process`) and refuse a verification token that cannot be compared: one holding a
        lone surrogate has no UTF-8 form, so lark-oapi's comparison would raise (400
        `malformed_payload`, one warning line, no traceback). A plaintext that is not a JSON
        object is left to lark-oapi's own failure path."""
        try:
            payload = loads_untrusted(plaintext)
        except ValueError:
            return
        if not isinstance(payload, dict):
            return
        self.payload = payload
        token = _token_of(payload)
        if isinstance(token, str) and contains_unstorable(token):
            _reject(
                400,
                "malformed_payload",
                "The verification token holds characters that are not valid text.",
            )

    def _verify_token(self, token, verification_token) -> None:
        try:
            super()._verify_token(token, verification_token)
        except AccessDeniedException:
            _reject(401, "invalid_token", "The verification token does not match.")

    def _verify_sign(self, request: lark.RawRequest, encrypt_key) -> None:
        if not encrypt_key:
            return
        timestamp = request.headers.get(signing.TIMESTAMP_HEADER)
        nonce = request.headers.get(signing.NONCE_HEADER)
        given = request.headers.get(signing.SIGNATURE_HEADER)
        if not (timestamp and nonce and given):
            _reject(
                401,
                "missing_signature",
                "X-Lark-Request-Timestamp, -Nonce and X-Lark-Signature are required.",
            )
        seconds = ascii_int(timestamp, max_digits=12)
        if seconds is None or abs(time.time() - seconds) > inbound.MAX_REQUEST_AGE.total_seconds():
            _reject(
                401, "stale_request", "X-Lark-Request-Timestamp is missing, malformed or too old."
            )
        expected = signing.signature(timestamp, nonce, encrypt_key, request.body)
        if not hmac.compare_digest(expected.encode(), given.encode()):
            _reject(401, "invalid_signature", "X-Lark-Signature does not match the body.")
        self._check_signed_payload()

    def _check_signed_payload(self) -> None:
        """Defence in depth once the signature matched (Feishu's callback verification:
        https://open.feishu.cn/document/event-subscription-guide/callback-subscription/receive-and-handle-callbacks):
        lark-oapi skips the Verification Token when a signed body carries none, and never looks
        at `header.app_id`. Cardloop refuses both gaps: a bot with a Verification Token (every
        bot on this route) gets it in every callback (401 `missing_token`), and the body's
        `header.app_id`, when present, must be the app of the URL (401 `app_id_mismatch`: an
        Encrypt Key shared by two apps must not let one app's events act as the other's)."""
        payload = self.payload or {}
        if not (payload.get("schema") or payload.get("uuid")):
            return  # not an event or callback at all: lark-oapi refuses it (400)
        if self._verification_token_configured() and _token_of(payload) is None:
            _reject(401, "missing_token", "The callback carries no verification token.")
        header = payload.get("header")
        app_id = header.get("app_id") if isinstance(header, dict) else None
        if app_id is not None and app_id != self.bot.app_id:
            _reject(401, "app_id_mismatch", "header.app_id is not the app of this callback URL.")

    def _verification_token_configured(self) -> bool:
        _key, token = self._resolve_webhook_credentials()
        return bool(token)


def _token_of(payload: dict[str, Any]) -> Any:
    """The verification token where lark-oapi reads it: `header.token` of a schema-2.0 body,
    the top-level `token` otherwise (url_verification, schema 1.0); None when absent."""
    if payload.get("schema"):
        header = payload.get("header")
        return header.get("token") if isinstance(header, dict) else None
    return payload.get("token")


@dataclass
class IngressResult:
    """What the view sends: HTTP `status`, JSON `body`, and `after_answer` to run once sent."""

    status: int
    body: dict[str, Any]
    after_answer: Any = None


def _error(status: int, code: str, detail: str) -> IngressResult:
    metrics.count_refused(code)
    return IngressResult(status, {"error": code, "detail": detail})


def _is_legacy_card_callback(outer: dict[str, Any]) -> bool:
    """The old flat message-card callback (card.action.trigger_v1): no schema/header, an
    `action` and an `open_message_id` at the top level, never encrypted."""
    return (
        "schema" not in outer
        and "header" not in outer
        and "encrypt" not in outer
        and outer.get("type") != "url_verification"
        and ("open_message_id" in outer or "action" in outer)
    )


def process(bot: Bot, body: bytes, headers) -> IngressResult:
    """Verify and dispatch one HTTP callback of `bot` (`headers`: a mapping with `.get`,
    case-insensitive like Django's `request.headers`). Never raises."""
    try:
        outer = loads_untrusted(body)
    except ValueError:
        return _error(400, "malformed_body", "The body is not JSON.")
    if not isinstance(outer, dict):
        return _error(400, "malformed_body", "The body must be a JSON object.")
    if _is_legacy_card_callback(outer):
        log.warning("lark ingress %s: legacy v1 card callback refused", bot.app_id)
        return _error(
            400,
            "legacy_card_callback",
            "Message-card callbacks (v1) are not supported; subscribe to card.action.trigger.",
        )
    verification_token = bot.secret("verification_token")
    if not verification_token:
        return _error(
            403, "callback_not_configured", "This bot has no Verification Token configured."
        )
    credentials = lark.WebhookCredentials(bot.secret("encrypt_key"), verification_token)

    raw = lark.RawRequest()
    raw.uri = f"/lark/{bot.app_id}/callback"
    raw.body = body
    raw.headers = headers
    dispatcher.reset_after_answer()
    reset = _rejection.set(None)
    failures: list[str] = []
    reset_failures = _lark_failures.set(failures)
    try:
        handler = CardloopEventDispatcher(bot, credentials)
        response = handler.do(raw)
        rejection = _rejection.get()
    finally:
        _rejection.reset(reset)
        _lark_failures.reset(reset_failures)
    after_answer = dispatcher.take_after_answer()
    if response.status_code == 200 and rejection is None and _is_challenge(handler.payload):
        return _challenge_answer(bot, handler.payload)
    if response.status_code == 200:
        try:
            answer = json.loads(response.content)
        except ValueError:
            answer = None
        if isinstance(answer, dict):
            return IngressResult(200, answer, after_answer)
        log.warning("lark ingress %s: lark-oapi produced a non-JSON answer", bot.app_id)
        return _error(400, "malformed_payload", "The payload could not be answered.")
    if rejection is not None:
        log.warning(
            "lark ingress %s: refused (%s %s: %s)",
            bot.app_id,
            rejection.status,
            rejection.code,
            rejection.detail,
        )
        metrics.count_refused(rejection.code)
        return IngressResult(
            rejection.status, {"error": rejection.code, "detail": rejection.detail}
        )
    log.warning(
        "lark ingress %s: payload lark-oapi could not process (%r); refused with 400",
        bot.app_id,
        "; ".join(failures) or "no reason given",
    )
    return _error(400, "malformed_payload", "The payload is not a Feishu event or callback.")


def _is_challenge(payload: dict[str, Any] | None) -> bool:
    return isinstance(payload, dict) and payload.get("type") == "url_verification"


def _challenge_answer(bot: Bot, payload: dict[str, Any]) -> IngressResult:
    """The answer to a verified url_verification: `{"challenge": …}` serialized as JSON from
    the parsed value (lark-oapi formats it into a string, so a quote in the challenge would
    change the answer's shape). A challenge that is not a string → 400 `malformed_payload`.
    Feishu's rule (reply `{"challenge": "<same value>"}`):
    https://open.feishu.cn/document/event-subscription-guide/callback-subscription/step-1-choose-a-subscription-mode/send-callbacks-to-developers-server
    """
    challenge = payload.get("challenge")
    if not isinstance(challenge, str):
        log.warning("lark ingress %s: url_verification without a string challenge", bot.app_id)
        return _error(400, "malformed_payload", "challenge must be a string.")
    return IngressResult(200, {"challenge": challenge})


class AnswerResponse(JsonResponse):
    """A JSON response that runs `after_answer` once it has been sent (WSGI and ASGI servers,
    and Django's test clients, call `close()` after the body went out)."""

    def __init__(self, data: dict[str, Any], *, status: int, after_answer=None):
        super().__init__(data, status=status, json_dumps_params={"ensure_ascii": False})
        self["Content-Type"] = "application/json"
        self["Content-Length"] = str(len(self.content))
        self["X-Content-Type-Options"] = "nosniff"
        self._after_answer = after_answer

    def close(self) -> None:
        # Servers call close() once the body went out; run the action before Django's
        # request_finished handlers (inside super().close()) tidy up database connections.
        action, self._after_answer = self._after_answer, None
        try:
            if action is not None:
                action()
        except Exception:
            log.exception("after-answer action failed")
        finally:
            super().close()


@csrf_exempt
def callback(request, app_id: str):
    """Django view for `POST /lark/<app_id>/callback` (see module docstring)."""
    if request.method != "POST":
        return AnswerResponse({"error": "method_not_allowed", "detail": "Use POST."}, status=405)
    bot = Bot.objects.for_callback(app_id)
    if bot is None:
        metrics.count_refused("unknown_app")
        return AnswerResponse(
            {"error": "unknown_app", "detail": "No bot is configured with this app_id."}, status=404
        )
    try:
        body = request.body
    except RequestDataTooBig:
        metrics.count_refused("too_large")
        return AnswerResponse(
            {"error": "too_large", "detail": "The body is too large."}, status=413
        )
    result = process(bot, body, request.headers)
    return AnswerResponse(result.body, status=result.status, after_answer=result.after_answer)
