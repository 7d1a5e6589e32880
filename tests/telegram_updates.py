"""Telegram `Update` objects for tests, in the shapes the Bot API documents:

- Update: https://core.telegram.org/bots/api#update (`update_id` plus one of `message`,
  `callback_query`, …);
- CallbackQuery: https://core.telegram.org/bots/api#callbackquery (`id`, `from`, `message`,
  `chat_instance`, `data`);
- Message: https://core.telegram.org/bots/api#message (`message_id`, `from`, `date`, `chat`,
  `text`, `reply_to_message`);
- User: https://core.telegram.org/bots/api#user (`id`, `is_bot`, `first_name`,
  `language_code`); Chat: https://core.telegram.org/bots/api#chat (`id`, `type`: private |
  group | supergroup | channel; group ids are negative).
"""

from __future__ import annotations

import itertools

_ids = itertools.count(700_000_001)

REQUESTER_ID = 4242
OTHER_ID = 5353
GROUP_CHAT_ID = -1001234567890


def user(user_id: int = REQUESTER_ID, language_code: str = "en") -> dict:
    return {
        "id": user_id,
        "is_bot": False,
        "first_name": "Ada",
        "username": "ada",
        "language_code": language_code,
    }


def chat(chat_id: int = GROUP_CHAT_ID) -> dict:
    if chat_id > 0:
        return {"id": chat_id, "type": "private", "first_name": "Ada"}
    return {"id": chat_id, "type": "supergroup", "title": "Agents"}


def bot_message(message_id: int, chat_id: int = GROUP_CHAT_ID, text: str = "[Run?]") -> dict:
    """A message the bot sent (what a callback query's `message` is)."""
    return {
        "message_id": message_id,
        "from": {"id": 123456789, "is_bot": True, "first_name": "Cardloop", "username": "cl_bot"},
        "date": 1764720000,
        "chat": chat(chat_id),
        "text": text,
    }


def callback_query(
    data: str,
    *,
    message_id: int = 1001,
    chat_id: int = GROUP_CHAT_ID,
    from_id: int = REQUESTER_ID,
    language_code: str = "en",
    update_id: int | None = None,
) -> dict:
    """An Update carrying a callback query (a tap on an inline button)."""
    update_id = next(_ids) if update_id is None else update_id
    return {
        "update_id": update_id,
        "callback_query": {
            "id": f"cbq{update_id}",
            "from": user(from_id, language_code),
            "message": bot_message(message_id, chat_id),
            "chat_instance": "-7012345678901234567",
            "data": data,
        },
    }


def text_message(
    text: str,
    *,
    chat_id: int = GROUP_CHAT_ID,
    from_id: int = REQUESTER_ID,
    language_code: str = "en",
    reply_to: dict | None = None,
    update_id: int | None = None,
) -> dict:
    """An Update carrying a text message from a person."""
    update_id = next(_ids) if update_id is None else update_id
    message = {
        "message_id": 2000 + update_id % 1000,
        "from": user(from_id, language_code),
        "date": 1764720001,
        "chat": chat(chat_id),
        "text": text,
    }
    if reply_to is not None:
        message["reply_to_message"] = reply_to
    return {"update_id": update_id, "message": message}
