"""The Telegram channel: `TelegramChannel` implements `interactions.channels.base.Channel`.

| interface | Telegram |
|---|---|
| `render_interaction` | `render.render_interaction` (text + inline keyboard, Telegram's limits) |
| `render_progress` | `progress.render_progress` (text + inline keyboard: the asks' options, Submit, Other…, Cancel task, Session details), with each ask's keyboard state read from `TelegramAskState` |
| `render_feedback_area` | the feedback app's inline keyboard (`feedback.telegram_cards.keyboard`, handed over with `use_feedback_renderer`) |
| `send` | `sendMessage`, recorded first as a `CardEntity` (`channel="telegram"`, `address={"chat_id", "message_id"}`) |
| `update` | `interactions.cardqueue.service.enqueue_card` (the durable card-update queue) |
| `apply_update` | `editMessageText` with the new keyboard (none for a final state), or `editMessageReplyMarkup` for an update without `text` (a final answer's feedback keyboard: its text is never stored); 429 → retry after Telegram's `retry_after` |
| `reply_text` | `sendMessage` replying to the typed command |
| `parse_callback` | a verified webhook `callback_query` → `CardAction` (`ingress.card_action_payload`); taps on asks and progress buttons: `asks` |
| `operator` | `callback_query.from.id` |

Telegram allows about one message per second per chat (https://core.telegram.org/bots/faq#my-bot-is-hitting-limits-how-do-i-avoid-this),
so updates of one message are spaced `update_interval` (1 s) apart.
"""

from __future__ import annotations

import logging
import uuid as uuidlib
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import translation

from interactions import kinds
from interactions.callbacks.registry import CardAction
from interactions.cardqueue import service as cards
from interactions.channels.base import Channel, ChannelSendError, Unsupported
from interactions.channels.telegram import asks, botapi, ingress, progress, render
from interactions.models import CardEntity
from interactions.render.bilingual import language_of

log = logging.getLogger(__name__)


def _token(bot) -> str:
    tg = getattr(bot, "telegram_bot", None)
    return tg.secret("bot_token") if tg is not None else ""


def message_key(chat_id: Any, message_id: Any) -> str:
    """The `CardEntity.open_message_id` of a Telegram message: `tg:<chat_id>:<message_id>`
    (unique per bot; what a callback's context carries, so a tap finds its card)."""
    return f"tg:{chat_id}:{message_id}"


def record_send(bot, send_uuid: str, purpose: str) -> CardEntity:
    """The card row of send `send_uuid` of `bot`, written (and committed) before the message
    is sent, so a retried send finds it. A concurrent first write wins; its row is returned."""
    try:
        with transaction.atomic():
            return CardEntity.objects.create(
                bot=bot, channel=kinds.TELEGRAM, send_uuid=send_uuid, purpose=purpose[:32]
            )
    except IntegrityError:
        return CardEntity.objects.for_send(bot, send_uuid).get()


def record_message(card: CardEntity, chat_id: Any, message_id: int) -> CardEntity:
    """Record where `card` is shown: `address = {"chat_id", "message_id"}` and its
    `open_message_id` key (`message_key`)."""
    with transaction.atomic():
        locked = CardEntity.objects.select_for_update().get(pk=card.pk)
        locked.address = {"chat_id": chat_id, "message_id": message_id}
        locked.open_message_id = message_key(chat_id, message_id)
        locked.save(update_fields=["address", "open_message_id", "updated_at"])
    return locked


class TelegramChannel(Channel):
    """Telegram: messages with inline keyboards, edited in place (`editMessageText`)."""

    name = kinds.TELEGRAM
    capabilities = kinds.CAPABILITIES[kinds.TELEGRAM]
    update_interval = timedelta(seconds=1)

    def render_interaction(self, ia) -> dict[str, Any]:
        """`{"text", "reply_markup"}` (`render.render_interaction`) in the bot's
        `card_language`: a Telegram message shows one text to everyone in the chat."""
        with translation.override(language_of(ia)):
            return render.render_interaction(ia).to_json()

    shows_progress = True

    def render_progress(self, session, asks_shown) -> dict[str, Any]:
        """`{"text", "reply_markup"}` of `session`'s progress message with the pending asks
        `asks_shown` (`progress.render_progress`, pure) in the bot's `card_language`. Reads
        one thing besides its arguments: the asks' keyboard state (`TelegramAskState`, one
        query), which Telegram cannot hold in the message."""
        selections = asks.selections_for(list(asks_shown))
        with translation.override(language_of(session)):
            return progress.render_progress(session, list(asks_shown), selections).to_json()

    _feedback_renderer = None

    def use_feedback_renderer(self, fn) -> None:
        """Render feedback areas with `fn(policy, delivery_id, choice)` (the feedback app's
        inline keyboard; it lives above this app, so it is handed over instead of imported)."""
        self._feedback_renderer = fn

    def render_feedback_area(self, policy, delivery_id, choice):
        """The feedback area's `InlineKeyboardMarkup` (the handed-over renderer). Raises
        `Unsupported` when the feedback app handed none over."""
        if self._feedback_renderer is None:
            raise Unsupported("telegram: no feedback-area renderer was handed over")
        return self._feedback_renderer(policy, delivery_id, choice)

    def send(self, bot, message, *, receive_id, receive_id_type="chat_id", uuid=None, purpose=""):
        """Record, then `sendMessage` `message` (`{"text", "reply_markup"}`) to chat
        `receive_id`, then record its address. A repeated `uuid` whose send was recorded
        returns that card without a request (Telegram has no idempotency key: a send that
        died between Telegram's answer and the record is sent again). Raises
        `cards.InvalidCard` (nothing sent) for a message over Telegram's limits and
        `ChannelSendError` (`code` = Telegram's error_code) when Telegram refused it."""
        tg_message = render.TelegramMessage.from_json(message)
        problems = render.limit_problems(tg_message)
        if problems:
            raise cards.InvalidCard(problems)
        send_uuid = (uuid or f"tg_{uuidlib.uuid4().hex}")[: cards.UUID_MAX]
        earlier = CardEntity.objects.for_send(bot, send_uuid).first()
        if earlier is not None and earlier.address:
            return earlier
        recorded = earlier or record_send(bot, send_uuid, purpose)
        try:
            sent = botapi.send_message(
                _token(bot),
                receive_id,
                tg_message.text,
                tg_message.reply_markup,
                settings.CARDLOOP_TELEGRAM_API_BASE_URL,
            )
        except botapi.TelegramApiError as exc:
            raise ChannelSendError(exc.description, code=exc.error_code) from None
        chat = sent.get("chat") if isinstance(sent.get("chat"), dict) else {}
        return record_message(recorded, chat.get("id", receive_id), int(sent["message_id"]))

    def update(self, sent, message, *, version=None):
        """`cards.enqueue_card`: the whole message replaced, coalesced and paced by the card
        worker (`apply_update`)."""
        return cards.enqueue_card(sent, message, version=version)

    def apply_update(self, card, update) -> None:
        """`editMessageText` of `card`'s message with `update.card_json` (`{"text",
        "reply_markup"}`; no keyboard removes the buttons), or `editMessageReplyMarkup` when
        it has no `text` (`{"reply_markup"}`: only the keyboard changes, so a text Cardloop
        does not keep is left as it is). "Message is not modified" counts as applied. Raises `cards.UpdateFailed`: retryable for 429 (with Telegram's
        `retry_after`), 5xx and transport failures; permanent otherwise. Dry run without a
        token (nothing called)."""
        address = card.address or {}
        if update.card_json is None or not address.get("message_id"):
            raise cards.UpdateFailed(
                "a Telegram card needs a whole message and its address", retryable=False
            )
        message = render.TelegramMessage.from_json(update.card_json)
        try:
            if "text" not in update.card_json:
                botapi.edit_message_reply_markup(
                    _token(card.bot),
                    address["chat_id"],
                    int(address["message_id"]),
                    message.reply_markup,
                    settings.CARDLOOP_TELEGRAM_API_BASE_URL,
                )
                return None
            botapi.edit_message_text(
                _token(card.bot),
                address["chat_id"],
                int(address["message_id"]),
                message.text,
                message.reply_markup,
                settings.CARDLOOP_TELEGRAM_API_BASE_URL,
            )
        except botapi.TelegramApiError as exc:
            if exc.not_modified:
                return None
            raise cards.UpdateFailed(
                f"{exc.method}: {exc.error_code} {exc.description}",
                retryable=exc.retryable,
                rate_limited=exc.error_code == 429,
                retry_after=exc.retry_after,
                code=exc.error_code,
            ) from None
        return None

    def reply_text(self, bot, reply_to: dict[str, Any], text: str, *, uuid: str = "") -> None:
        """`sendMessage` of `text` to `reply_to["chat_id"]`, replying to
        `reply_to["message_id"]` when given. Raises `ChannelSendError`."""
        try:
            botapi.send_message(
                _token(bot),
                reply_to["chat_id"],
                render.fit(text),
                None,
                settings.CARDLOOP_TELEGRAM_API_BASE_URL,
                reply_to_message_id=reply_to.get("message_id"),
            )
        except botapi.TelegramApiError as exc:
            raise ChannelSendError(exc.description, code=exc.error_code) from None

    def parse_callback(self, bot, payload: dict[str, Any]) -> CardAction:
        """`payload` is a verified Update with a `callback_query`. Raises `InvalidCallback`
        when it has none (or no message)."""
        from interactions.callbacks.registry import InvalidCallback

        query = payload.get("callback_query") if isinstance(payload, dict) else None
        converted = (
            ingress.card_action_payload(int(payload.get("update_id") or 0), query)
            if isinstance(query, dict)
            else None
        )
        if converted is None:
            raise InvalidCallback("not a callback_query with a message")
        return CardAction.from_payload(bot, converted)

    def operator(self, action: CardAction) -> str:
        return action.operator_open_id
