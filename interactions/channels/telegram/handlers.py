"""What a verified Telegram update does, run by `interactions.callbacks.dispatcher` (threads,
budget, dedupe on `update_id`, durable claims):

- `on_callback` (registry kind `telegram`): a tap on an inline button. Its `callback_data`
  (`interactions.channels.telegram.render.parse_callback_data`) names the interaction and the
  action by number; the tap becomes the same click the Feishu card sends
  (`{"kind": "interaction", "interaction_id", "action_id", "action_value"}`) and is answered by
  `interactions.approvals.handlers.on_card_action` — so the operator (`callback_query.from.id`,
  from the authenticated update), the chat (`message.chat.id`: in a group only the requester or
  the allowed operators may answer) and first-answer-wins are exactly Feishu's (the handler is
  found through the registry: this package imports no domain module). The answer
  keeps only the toast (`answerCallbackQuery`'s `text`); the message is edited by the card
  queue after the answer.
- asks and progress messages: a tap on an ask's button (`aq:` / `as:` / `ao:`) or on "Cancel
  task" / "Session details" (`pg:`) goes to `interactions.channels.telegram.asks`;
- `on_message` (event type `telegram.message`): a reply to an "Other…" prompt is that
  question's text (`asks.on_reply`, answered in the sender's language); a
  `/_interaction <id> <value>` text is the typed command
  (`interactions.approvals.textcommands.handle`, handed over at startup with
  `use_text_commands`), replied to in the sender's language (`from.language_code`).

Never logs message text, button data or user ids.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.utils import translation
from django.utils.translation import gettext_lazy as _

from interactions.callbacks import registry
from interactions.callbacks.registry import Answer, CardAction
from interactions.channels.telegram import asks, botapi, progress, render
from interactions.models import Interaction
from interactions.render import bilingual

log = logging.getLogger(__name__)

#: Registry kind of Telegram button taps and event type of Telegram messages.
CALLBACK_KIND = "telegram"
MESSAGE_EVENT = "telegram.message"
#: The registry kind whose handler answers interaction clicks on every channel.
INTERACTION_KIND = "interaction"


#: Handlers of callback_data verbs other than this package's (`render.VERBS`), handed over
#: from `ready()` by apps above interactions (the feedback app's `fv`, `fr`, `fc`, `fs`).
_callback_handlers: dict[str, Callable[[CardAction], Any]] = {}
#: Handlers of replies to a bot message (`reply_to_message`), tried in order before typed
#: commands: `fn(bot, message) -> bool` (True: the reply was theirs).
_reply_handlers: list[Callable[[Any, dict], bool]] = []


def use_callback_handler(verb: str, fn: Callable[[CardAction], Any]) -> None:
    """Answer taps whose `callback_data` starts with `<verb>:` (or is `verb`) with
    `fn(action)` (a registry handler's signature). For apps above interactions, which this
    package must not import; call from `AppConfig.ready()`."""
    if verb in render.VERBS:
        raise ValueError(f"callback_data verb {verb!r} is the Telegram channel's own")
    _callback_handlers[verb] = fn


def use_reply_handler(fn: Callable[[Any, dict], bool]) -> None:
    """Offer every person's reply to a message (a `Message` with `reply_to_message`) to
    `fn(bot, message)` first; it returns True when the reply was its own (e.g. the answer to a
    `force_reply` prompt it sent). Call from `AppConfig.ready()`."""
    if fn not in _reply_handlers:
        _reply_handlers.append(fn)


@dataclasses.dataclass
class _TextCommands:
    handle: Callable[..., Any] | None = None
    silent: frozenset[str] = frozenset()


_text_commands = _TextCommands()


def use_text_commands(handle: Callable[..., Any], silent_in_chats: frozenset[str]) -> None:
    """Answer typed commands with `handle(bot, text, open_id=, chat_id=)` (the approvals'
    `textcommands.handle`, which lives beside the domain this package must not import: it is
    handed over in `InteractionsConfig.ready()`), staying silent in group chats on the codes
    `silent_in_chats`."""
    _text_commands.handle = handle
    _text_commands.silent = frozenset(silent_in_chats)


def reader_language(user: dict | None) -> str:
    """The language Cardloop answers a Telegram user in: zh-hans when their client's
    `language_code` (https://core.telegram.org/bots/api#user) is Chinese, else English
    (`bilingual.reader_language`; English too when the client sends none)."""
    code = user.get("language_code") if isinstance(user, dict) else ""
    return bilingual.reader_language(code) or "en"


def toast_text(answer: dict, language: str) -> str:
    """The toast of a dispatcher answer (`{"toast": {"i18n": {zh_cn, en_us}}}`) in `language`,
    cut to the 200 characters `answerCallbackQuery` allows; "" without a toast."""
    toast = answer.get("toast") if isinstance(answer, dict) else None
    if not isinstance(toast, dict):
        return ""
    i18n = toast.get("i18n") if isinstance(toast.get("i18n"), dict) else {}
    text = i18n.get("zh_cn" if language == "zh-hans" else "en_us") or toast.get("content") or ""
    return str(text)[:200]


def on_callback(action: CardAction):
    """Registry handler of `{"kind": "telegram", "data": <callback_data>}` (see the module
    docstring). Unknown or foreign data → a warning toast, nothing written."""
    data = action.value.get("data")
    handed_over = _callback_handlers.get(data.partition(":")[0]) if isinstance(data, str) else None
    if handed_over is not None:
        return handed_over(action)
    parsed = render.parse_callback_data(data)
    if parsed is None:
        act = progress.progress_act(action.value.get("data"))
        if act is not None:
            return asks.on_progress_tap(action, act)
        return Answer.warning(_("This button has no action Cardloop understands."))
    verb, public_id, numbers = parsed
    if verb in (render.PICK, render.SUBMIT, render.OTHER):
        return asks.on_ask_tap(action, verb, public_id, numbers)
    if verb != render.INTERACTION:
        return Answer.warning(_("This button is not supported. Please refresh the card."))
    ia = Interaction.objects.filter(bot=action.bot, public_id=public_id).only("actions").first()
    chosen = render.action_for(ia, numbers[0]) if ia is not None else None
    value = {
        "kind": "interaction",
        "interaction_id": public_id,
        "action_id": str(chosen["id"]) if chosen else "",
        "action_value": str(chosen.get("value", chosen["id"])) if chosen else "",
    }
    handler = registry.handler_for(INTERACTION_KIND)
    if handler is None:
        return Answer.warning(_("This button is not supported. Please refresh the card."))
    result = handler(dataclasses.replace(action, kind=INTERACTION_KIND, value=value))
    # Telegram shows the message itself; only the toast goes back (the edit is queued)
    return Answer(toast=result.toast) if isinstance(result, Answer) else result


def on_message(event) -> None:
    """Registry handler of `telegram.message` events (`LarkEvent.event` is the Telegram
    `Message`, https://core.telegram.org/bots/api#message): a reply to an "Other…" prompt
    goes to `asks.on_reply` and its outcome is replied; a `/_interaction` text from a
    person is answered like the API's text command and replied to in their language, except
    unknown ids and incomplete commands in chats (`SILENT_IN_CHATS`: they may be for another
    bot). Everything else is ignored."""
    message = event.event
    sender = message.get("from") if isinstance(message.get("from"), dict) else {}
    chat = message.get("chat") if isinstance(message.get("chat"), dict) else {}
    text = message.get("text")
    if sender.get("is_bot"):
        return
    if isinstance(message.get("reply_to_message"), dict):
        for reply_handler in _reply_handlers:
            if reply_handler(event.bot, message):
                return
    handle = _text_commands.handle
    answered = asks.on_reply(event.bot, message, event_id=event.event_id)
    if answered is not None:
        _reply(event.bot, message, answered, sender)
        return
    if not isinstance(text, str) or handle is None:
        return
    reply = handle(
        event.bot, text, open_id=str(sender.get("id") or ""), chat_id=str(chat.get("id") or "")
    )
    if not reply.handled:
        return
    if reply.code in _text_commands.silent and chat.get("type") != "private":
        log.info("telegram text command: %s; not answered", reply.code)
        return
    log.info(
        "telegram text command: %s (%s)",
        reply.code,
        reply.interaction.public_id if reply.interaction else "-",
    )
    _reply(event.bot, message, reply.text, sender)


def _reply(bot, message: dict, text, sender: dict) -> None:
    """Reply `text` (lazy or str) to `message` in the sender's language; failures logged."""
    chat = message.get("chat") if isinstance(message.get("chat"), dict) else {}
    tg = getattr(bot, "telegram_bot", None)
    if tg is None or not chat.get("id"):
        return
    with translation.override(reader_language(sender)):
        body = str(text)
    try:
        botapi.send_message(
            tg.secret("bot_token"),
            chat["id"],
            render.fit(body),
            None,
            settings.CARDLOOP_TELEGRAM_API_BASE_URL,
            reply_to_message_id=message.get("message_id"),
        )
    except botapi.TelegramApiError as exc:
        log.warning("telegram reply failed: %s", exc.description)
