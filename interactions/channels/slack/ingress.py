"""Slack's request URLs: `POST /slack/<app_id>/interactivity` and `POST /slack/<app_id>/events`.

Every request is verified before anything parses it: the signature
(`X-Slack-Signature`, `v0=` HMAC-SHA256 of `v0:<timestamp>:<raw body>` with the app's signing
secret) is checked by slack-sdk's `SignatureVerifier` over the **raw bytes** Django received,
and a timestamp (`X-Slack-Request-Timestamp`) more than 5 minutes from now is refused
(https://api.slack.com/authentication/verifying-requests-from-slack). Refusals are JSON
(400 for a missing or malformed header or body, 401 for a bad signature, a stale timestamp or
an app without a signing secret, 404 for an unknown app) and write nothing. A verified request
is always answered HTTP 200, within Slack's 3 seconds (https://api.slack.com/interactivity/handling#acknowledgment_response):
the click runs through `interactions.callbacks.dispatcher` (threads, dedupe, the 2 s budget).

- **interactivity** (form-encoded `payload`): `block_actions` clicks and submits become the
  channel-neutral `CardAction` (`channel.neutral_payload`) and run the registered handler.
  The same click delivered again (same team, user, message, `action_id` and `action_ts`) is
  deduplicated by `interactions.callbacks.inbound`. Slack has no toast: what Feishu shows as a
  toast goes to the clicker as an **ephemeral** message through the payload's `response_url`
  (slack-sdk `WebhookClient`), after the answer, in the clicker's language: their Slack
  locale from `users.info` (scope `users:read`, looked up once per person and process), else
  the bot's card language. Card updates are
  released to the queue after the answer too. A click on a link button (`action_id`
  `link_…`: Slack opened its URL) is acknowledged and not handled. Modals are not used (`view_submission` is
  acknowledged and ignored; see `blocks` for why forms are input blocks in the message).
- **events** (JSON): the `url_verification` challenge is echoed; `event_callback` `message`
  events whose text is `/_interaction <id> <value>` are answered like Feishu's typed commands
  (a reply in the message's thread). Retries (`X-Slack-Retry-Num`) and repeats are
  deduplicated on `event_id` (https://api.slack.com/apis/connections/events-api#retries).

Identity is the verified payload's `user.id` (and `team.id`), never a value in a button.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from typing import Any
from urllib.parse import parse_qs

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.db import close_old_connections
from django.http import JsonResponse
from django.views.decorators.csrf import csrf_exempt

from botadmin.models import SlackApp
from interactions.callbacks import dispatcher
from interactions.render.bilingual import bot_language, card_locale, reader_language
from plumbing import metrics
from plumbing.parsers import contains_unstorable

log = logging.getLogger(__name__)

#: Slack's rule: refuse requests whose timestamp is more than 5 minutes from now.
MAX_AGE_SECONDS = 5 * 60


class SlackResponse(JsonResponse):
    """A JSON answer that runs `after_answer` once it has been sent (servers call `close()`
    after the body went out)."""

    def __init__(self, data: dict[str, Any], *, status: int = 200, after_answer=None):
        super().__init__(data, status=status, json_dumps_params={"ensure_ascii": False})
        self["X-Content-Type-Options"] = "nosniff"
        self._after_answer = after_answer

    def close(self) -> None:
        action, self._after_answer = self._after_answer, None
        try:
            if action is not None:
                action()
        except Exception:
            log.exception("slack after-answer action failed")
        finally:
            super().close()


def refuse(status: int, code: str, detail: str) -> SlackResponse:
    """A refusal: `{"error": code, "detail": detail}` with HTTP `status`, counted."""
    metrics.count_refused(f"slack_{code}")
    return SlackResponse({"error": code, "detail": detail}, status=status)


def verify(app: SlackApp | None, body: bytes, headers) -> SlackResponse | None:
    """None when `body` carries a valid signature of `app` and a fresh timestamp, else the
    refusal to answer. Reads only the two headers and the raw bytes."""
    from slack_sdk.signature import SignatureVerifier

    if app is None:
        return refuse(404, "unknown_app", "No Slack app is configured with this app id.")
    secret = app.secret("signing_secret")
    if not secret:
        return refuse(401, "no_signing_secret", "This Slack app has no signing secret set.")
    timestamp = headers.get("X-Slack-Request-Timestamp") or ""
    signature = headers.get("X-Slack-Signature") or ""
    # Slack's timestamp is Unix seconds in ASCII digits; anything else (other Unicode digits,
    # thousands of digits) is refused before int() or the verifier see it
    if not (timestamp.isascii() and timestamp.isdigit() and len(timestamp) <= 12):
        return refuse(400, "bad_timestamp", "X-Slack-Request-Timestamp is missing or malformed.")
    if not signature:
        return refuse(401, "bad_signature", "X-Slack-Signature is missing.")
    if abs(time.time() - int(timestamp)) > MAX_AGE_SECONDS:
        return refuse(401, "stale_request", "The request timestamp is older than 5 minutes.")
    try:  # slack-sdk's verifier decodes the body as UTF-8 to sign it
        body.decode("utf-8")
    except UnicodeDecodeError:
        return refuse(400, "bad_payload", "The body is not UTF-8.")
    if not SignatureVerifier(secret).is_valid(body=body, timestamp=timestamp, signature=signature):
        return refuse(401, "bad_signature", "The signature does not match this app's secret.")
    return None


def _body(request) -> tuple[bytes, SlackResponse | None]:
    """The raw body, or the 413 refusal of one over `DATA_UPLOAD_MAX_MEMORY_SIZE`."""
    try:
        return request.body, None
    except RequestDataTooBig:
        return b"", refuse(413, "too_large", "The body is larger than Cardloop accepts.")


def well_formed(payload: dict[str, Any]) -> bool:
    """Whether a signed `block_actions` payload has the shapes Slack documents for the parts
    Cardloop reads (https://api.slack.com/reference/interaction-payloads/block-actions):
    `user`, `team`, `container`, `channel`, `message` and `state` objects (or absent),
    `state.values` an object, `actions` a list of objects, and no NUL or lone surrogate
    anywhere (nothing could store it). Slack sends nothing else; anything else is refused."""
    if contains_unstorable(payload):
        return False
    for name in ("user", "team", "container", "channel", "message", "state"):
        if payload.get(name) is not None and not isinstance(payload.get(name), dict):
            return False
    values = (payload.get("state") or {}).get("values")
    if values is not None and not isinstance(values, dict):
        return False
    actions = payload.get("actions")
    return isinstance(actions, list) and all(isinstance(a, dict) for a in actions)


def _app(app_id: str) -> SlackApp | None:
    return SlackApp.objects.select_related("bot").filter(app_id=app_id[:32]).first()


def toast_text(bot, answer: dict[str, Any], slack_locale: str = "") -> str:
    """The text of the answer's toast ("" without a toast) in the reader's language: their
    Slack locale (`users.info`, e.g. "zh-CN") when known, else the bot's card language."""
    toast = answer.get("toast") if isinstance(answer, dict) else None
    if not isinstance(toast, dict):
        return ""
    i18n = toast.get("i18n") if isinstance(toast.get("i18n"), dict) else {}
    language = reader_language(slack_locale) or bot_language(bot)
    return str(i18n.get(card_locale(language)) or toast.get("content") or "")


#: Slack locales already looked up, by (app id, user id): `users.info` once per person and
#: process for `LOCALE_SECONDS` (the ephemeral message waits for it after the answer).
_locales: dict[tuple[str, str], tuple[float, str]] = {}
_locales_lock = threading.Lock()
LOCALE_SECONDS = 3600
LOCALE_CACHE_SIZE = 10_000


def forget_locales() -> None:
    """Empty the per-process cache of clickers' Slack locales (tests; a changed locale is
    otherwise picked up after `LOCALE_SECONDS`)."""
    with _locales_lock:
        _locales.clear()


def clicker_locale(app: SlackApp, user: str) -> str:
    """The Slack locale of `user` in `app`'s workspace ("" when it cannot be known: dry run,
    no `users:read` scope, a Slack error), cached per process. Network I/O: call after the
    answer."""
    key = (app.app_id, user)
    now = time.monotonic()
    with _locales_lock:
        hit = _locales.get(key)
    if hit is not None and now - hit[0] < LOCALE_SECONDS:
        return hit[1]
    from interactions.channels.slack import webapi

    locale = webapi.user_locale(app.secret("bot_token"), user, settings.CARDLOOP_SLACK_API_BASE_URL)
    if locale is None:  # Slack may tell next time (rate limit, 5xx, network): not kept
        return ""
    with _locales_lock:
        if len(_locales) >= LOCALE_CACHE_SIZE:
            _locales.clear()
        _locales[key] = (now, locale)
    return locale


@csrf_exempt
def interactivity(request, app_id: str):
    """`POST /slack/<app_id>/interactivity` (module docstring)."""
    if request.method != "POST":
        return refuse(405, "method_not_allowed", "Use POST.")
    app = _app(app_id)
    body, refusal = _body(request)
    refusal = refusal or verify(app, body, request.headers)
    if refusal is not None:
        return refusal
    try:
        form = parse_qs(body.decode("utf-8"), strict_parsing=True)
        payload = json.loads(form["payload"][0])
        if not isinstance(payload, dict):
            raise ValueError("payload is not an object")
    except (UnicodeDecodeError, ValueError, KeyError, IndexError, RecursionError):
        return refuse(400, "bad_payload", "payload: a form field holding a JSON object.")
    kind = payload.get("type")
    if kind != "block_actions" or not payload.get("actions"):
        return SlackResponse({})  # view_submission and others: acknowledged, not used
    if not well_formed(payload):
        return refuse(400, "bad_payload", "payload: not a block_actions payload as Slack sends.")
    if _is_link_click(payload):
        return SlackResponse({})  # Slack opened the link button's URL; nothing to handle
    from interactions.channels.slack.channel import neutral_payload

    dispatcher.set_route("slack")
    answer = dispatcher.handle_card_action(app.bot, neutral_payload(payload))
    release = dispatcher.take_after_answer()
    response_url = str(payload.get("response_url") or "")
    user = str((payload.get("user") or {}).get("id") or "")

    def after_answer() -> None:
        try:
            if release is not None:
                release()
        finally:
            if toast_text(app.bot, answer) and _response_url_allowed(response_url):
                from interactions.channels.slack import webapi

                if app.secret("bot_token"):
                    text = toast_text(app.bot, answer, clicker_locale(app, user))
                    webapi.post_ephemeral(response_url, text)
                else:  # dry run, like every other Slack call without a token
                    log.info("slack dry run: ephemeral message not sent")
            close_old_connections()

    return SlackResponse({}, after_answer=after_answer)


def _is_link_click(payload: dict[str, Any]) -> bool:
    """Whether the click was on one of Cardloop's link buttons (`action_id` starting with
    `progress.LINK_PREFIX`): Slack opens their URL and still sends the click, which only needs
    the acknowledgement."""
    from interactions.channels.slack.progress import LINK_PREFIX

    first = (payload.get("actions") or [None])[0]
    action_id = first.get("action_id") if isinstance(first, dict) else None
    return isinstance(action_id, str) and action_id.startswith(LINK_PREFIX)


def _response_url_allowed(url: str) -> bool:
    """Only Slack's own hooks host gets an ephemeral message — or, when the Web API base URL
    is a loopback stub (tests, the dry-run walk-through), a loopback URL."""
    if url.startswith("https://hooks.slack.com/"):
        return True
    loopback = ("http://127.0.0.1:", "http://localhost:")
    return settings.CARDLOOP_SLACK_API_BASE_URL.startswith(loopback) and url.startswith(loopback)


@csrf_exempt
def events(request, app_id: str):
    """`POST /slack/<app_id>/events` (module docstring)."""
    if request.method != "POST":
        return refuse(405, "method_not_allowed", "Use POST.")
    app = _app(app_id)
    body, refusal = _body(request)
    refusal = refusal or verify(app, body, request.headers)
    if refusal is not None:
        return refusal
    try:
        payload = json.loads(body.decode("utf-8"))
        if not isinstance(payload, dict):
            raise ValueError("not an object")
    except (UnicodeDecodeError, ValueError, RecursionError):
        return refuse(400, "bad_payload", "The body must be a JSON object.")
    if payload.get("type") == "url_verification":
        return SlackResponse({"challenge": str(payload.get("challenge") or "")})
    event = payload.get("event")
    if payload.get("type") != "event_callback" or not isinstance(event, dict):
        return SlackResponse({})
    if event.get("type") != "message" or event.get("subtype") or event.get("bot_id"):
        return SlackResponse({})
    recorded = dispatcher.handle_event(
        app.bot,
        {
            "header": {
                "event_id": str(payload.get("event_id") or "")[:64],
                "event_type": SLACK_MESSAGE,
                "tenant_key": str(payload.get("team_id") or ""),
            },
            "event": event,
        },
    )
    if not recorded:  # Slack retries an event it got no 2xx for (X-Slack-Retry-Num)
        response = refuse(503, "database_unavailable", "Not recorded; send the event again.")
        response["Retry-After"] = "2"
        return response
    return SlackResponse({})


#: The registry event type Slack `message` events are delivered under.
SLACK_MESSAGE = "slack.message"


_text_commands: tuple | None = None


def use_text_commands(handle, silent) -> None:
    """Answer typed commands with `handle(bot, text, open_id=, chat_id=)` (the approvals app's
    `textcommands.handle`, which lives above the channels and so is handed over), staying
    silent for the reply codes in `silent`."""
    global _text_commands
    _text_commands = (handle, frozenset(silent))


def on_message(event) -> None:
    """Registry handler of `SLACK_MESSAGE` (a verified Slack `message` event as a
    `registry.LarkEvent`): `/_interaction <id> <value>` is handled like the Feishu typed
    command (the handed-over `textcommands.handle`, the sender = the event's `user`), and answered in the
    message's thread in the bot's card language — except unknown ids and incomplete commands
    (`textcommands.SILENT_IN_CHATS`: another bot in the channel may own them). Never logs the
    text or the sender."""
    from django.utils import translation

    from interactions import channels, kinds

    if _text_commands is None:
        log.warning("slack text command: no handler was handed over; ignored")
        return
    handle, silent = _text_commands
    message = event.event
    text = message.get("text")
    if not isinstance(text, str) or not text.lstrip().startswith("/_interaction"):
        return
    if not all(
        isinstance(message.get(k) or "", str) for k in ("channel", "user", "ts", "thread_ts")
    ):
        log.info("slack text command: a message field is not a string; ignored")
        return
    channel_id = str(message.get("channel") or "")
    reply = handle(event.bot, text, open_id=str(message.get("user") or ""), chat_id=channel_id)
    if not reply.handled or reply.code in silent:
        log.info("slack text command in %s: %s; not answered", channel_id, reply.code)
        return
    log.info("slack text command in %s: %s", channel_id, reply.code)
    with translation.override(bot_language(event.bot)):
        answer = str(reply.text)
    channel = channels.get(kinds.SLACK)
    try:
        channel.reply_text(
            event.bot,
            {"channel": channel_id, "ts": message.get("thread_ts") or message.get("ts")},
            answer,
        )
    except channel.send_errors as exc:
        log.warning("slack text command reply in %s failed: %s", channel_id, exc)
