"""The Telegram webhook: `POST /telegram/<bot_user_id>/webhook` (set with `setWebhook`,
https://core.telegram.org/bots/api#setwebhook; updates: https://core.telegram.org/bots/api#update).

1. unknown bot id → 404 JSON; the `X-Telegram-Bot-Api-Secret-Token` header is compared in
   constant time (`hmac.compare_digest`) with the bot's stored webhook secret: missing, wrong,
   or no secret stored → 401 JSON, nothing parsed, nothing written;
2. a body that is not a JSON object with an integer `update_id` → 400 JSON naming the field;
3. dedupe on `update_id`: the dispatcher claims `tg:<update_id>` through
   `interactions.callbacks.inbound` before any handler runs, so a redelivered update (Telegram
   retries until it gets a 2xx) is handled once;
4. `callback_query` → the dispatcher's card action (`handle_card_action`, budget and threads
   as for Feishu) with value `{"kind": "telegram", "data": <callback_data>}`, operator
   `callback_query.from.id`, chat `message.chat.id`; then `answerCallbackQuery` with the toast
   in the reader's language (`from.language_code`), and only after that the card updates the
   handler queued are released to the card worker (Telegram edits follow the answer);
5. `message` → the dispatcher's event `telegram.message` (typed `/_interaction` commands);
6. anything else is acknowledged and ignored. Every accepted update is answered 200 `{}`.

Bot API calls go through `botapi` (dry run without a token); their failures are logged and
never turn the answer into an error (Telegram would redeliver the update).
"""

from __future__ import annotations

import hmac
import json
import logging
from typing import Any

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.http import JsonResponse
from django.views.decorators.csrf import csrf_exempt

from botadmin.models import TelegramBot
from interactions.callbacks import dispatcher
from interactions.channels.telegram import botapi, handlers
from plumbing import metrics
from plumbing.parsers import contains_unstorable

log = logging.getLogger(__name__)

SECRET_HEADER = "X-Telegram-Bot-Api-Secret-Token"  # noqa: S105 - a header name


def _error(status: int, code: str, detail: str, field: str | None = None) -> JsonResponse:
    body: dict[str, Any] = {"error": code, "detail": detail}
    if field:
        body["field"] = field
    return JsonResponse(body, status=status)


def event_id(update_id: int) -> str:
    """The dedupe id of Telegram update `update_id` (unique per bot, like Feishu's event ids)."""
    return f"tg:{update_id}"


def card_action_payload(update_id: int, query: dict[str, Any]) -> dict[str, Any] | None:
    """The dispatcher's card-action payload for a verified `callback_query`, or None when it
    has no message (an inline-mode query Cardloop never creates). Identity from `from.id`."""
    message = query.get("message") if isinstance(query.get("message"), dict) else None
    sender = query.get("from") if isinstance(query.get("from"), dict) else {}
    if message is None or not isinstance(message.get("chat"), dict):
        return None
    chat_id = str(message["chat"].get("id") or "")
    return {
        "schema": "2.0",
        "header": {
            "event_id": event_id(update_id),
            "event_type": "card.action.trigger",
            # the click names its channel, so the dispatcher never treats a handler's
            # answer card as a Feishu card to send or queue (Telegram shows no answer card)
            "channel": "telegram",
        },
        "event": {
            "operator": {"open_id": str(sender.get("id") or "")},
            "action": {
                "tag": "button",
                "value": {"kind": handlers.CALLBACK_KIND, "data": query.get("data")},
            },
            "context": {
                "open_message_id": f"tg:{chat_id}:{message.get('message_id')}",
                "open_chat_id": chat_id,
            },
        },
    }


def verify(tg: TelegramBot, header: str | None) -> bool:
    """Whether `header` is `tg`'s webhook secret (constant time; False when none is stored)."""
    secret = tg.secret("webhook_secret")
    if not secret or not header:
        return False
    return hmac.compare_digest(header.encode("utf-8"), secret.encode("utf-8"))


@csrf_exempt
def webhook(request, bot_user_id: int):
    """Django view of `POST /telegram/<bot_user_id>/webhook` (see the module docstring)."""
    if request.method != "POST":
        return _error(405, "method_not_allowed", "Use POST.")
    tg = TelegramBot.objects.select_related("bot").filter(bot_user_id=bot_user_id).first()
    if tg is None:
        metrics.count_refused("unknown_app")
        return _error(404, "not_found", "No Telegram bot is configured with this id.", "bot_id")
    if not verify(tg, request.headers.get(SECRET_HEADER)):
        metrics.count_refused("bad_token")
        return _error(401, "unauthorized", f"Missing or wrong {SECRET_HEADER}.", SECRET_HEADER)
    try:
        update = json.loads(request.body)
    except RequestDataTooBig:
        return _error(413, "too_large", "The body is larger than Cardloop accepts.", "body")
    except (ValueError, RecursionError):
        return _error(400, "invalid", "The body is not JSON.", "body")
    if not isinstance(update, dict):
        return _error(400, "invalid", "The body must be a JSON object (an Update).", "body")
    update_id = update.get("update_id")
    if not isinstance(update_id, int) or isinstance(update_id, bool) or update_id < 0:
        return _error(400, "invalid", "update_id must be a non-negative integer.", "update_id")
    if contains_unstorable(update):
        metrics.count_refused("unstorable_characters")
        log.warning("telegram update %s carries a NUL or a lone surrogate; dropped", update_id)
        return JsonResponse({})
    query = update.get("callback_query")
    if isinstance(query, dict):
        _callback_query(tg, update_id, query)
    elif isinstance(update.get("message"), dict):
        recorded = dispatcher.handle_event(
            tg.bot,
            {
                "header": {"event_id": event_id(update_id), "event_type": handlers.MESSAGE_EVENT},
                "event": update["message"],
            },
        )
        if not recorded:  # Telegram delivers an update again until it gets a 2xx
            response = _error(
                503, "database_unavailable", "Not recorded; send the update again.", "body"
            )
            response["Retry-After"] = "2"
            return response
    return JsonResponse({})


def _callback_query(tg: TelegramBot, update_id: int, query: dict[str, Any]) -> None:
    dispatcher.reset_after_answer()
    payload = card_action_payload(update_id, query)
    if payload is None:
        answer = {}
    else:
        answer = dispatcher.handle_card_action(tg.bot, payload)
    language = handlers.reader_language(query.get("from"))
    try:
        botapi.answer_callback_query(
            tg.secret("bot_token"),
            str(query.get("id") or ""),
            handlers.toast_text(answer, language),
            settings.CARDLOOP_TELEGRAM_API_BASE_URL,
        )
    except botapi.TelegramApiError as exc:
        # a repeated update's query is already answered: Telegram says so, nothing to do
        log.info("telegram update %s: answerCallbackQuery failed: %s", update_id, exc.description)
    after = dispatcher.take_after_answer()
    if after is not None:
        after()
