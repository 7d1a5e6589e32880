"""`force_reply` prompts sent from a tap's handler, at most one per tap
(https://core.telegram.org/bots/api#forcereply).

The dispatcher may run a tap's handler more than once: again after a transient database
error, and after a crash when its claim is taken over (`interactions.callbacks.dispatcher`).
A prompt is therefore a row first and a message second:

1. `claim(model, bot=, event_id=, **fields)`, inside the transaction that holds the row lock
   the prompt depends on (the ask, the delivery): the tap's row (`event_id`, unique per bot)
   is created with `message_id` null. It returns whether this run sends: yes when it created
   the row, or when the row has no `message_id` yet and was claimed more than `STALE_AFTER`
   ago (the run that claimed it died before Telegram answered); no otherwise — another run
   sent it or is sending it.
2. `send(row, token, chat_id, prompt, base_url)`, after that transaction committed (no
   network call holds a lock): `sendMessage`, then the row's `message_id` (and the chat id
   Telegram answered with) is filled in; when Telegram refuses, the unsent row is deleted so
   the next run of the tap may try again.

A model used here has `bot`, `event_id` ("" when the tap had none: then every run sends),
`chat_id`, a nullable `message_id` and `created_at`.
"""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

from django.db import models
from django.utils import timezone

from interactions.channels.telegram import botapi

log = logging.getLogger(__name__)

#: A claimed prompt without a `message_id` this long after its claim was abandoned: three
#: times the Bot API call's timeout, so a run still waiting for Telegram is never doubled.
STALE_AFTER = timedelta(seconds=3 * botapi.TIMEOUT_SECONDS)


def claim(model: type[models.Model], *, bot, event_id: str, chat_id: str, **fields: Any):
    """`(row, send)`: the prompt row of tap `event_id` of `bot` (created with `chat_id`,
    `fields` and a null `message_id` when missing) and whether this run sends it (see the
    module docstring). Call inside the transaction holding the lock the prompt depends on."""
    if not event_id:
        return model.objects.create(bot=bot, event_id="", chat_id=chat_id, **fields), True
    row, created = model.objects.get_or_create(
        bot=bot, event_id=event_id, defaults={"chat_id": chat_id, **fields}
    )
    if created:
        return row, True
    now = timezone.now()
    if row.message_id is None and row.created_at <= now - STALE_AFTER:
        row.created_at = now
        row.save(update_fields=["created_at"])
        return row, True
    return row, False


def send(row: models.Model, token: str, prompt: Any, base_url: str) -> bool:
    """Send `prompt` (`render.Prompt`: `text`, `reply_markup`) to `row.chat_id` with `token`
    and record the sent message on `row` (`message_id`, Telegram's `chat.id`). Returns False,
    with the unsent row deleted, when Telegram refuses (`botapi.TelegramApiError`, logged
    without text); True otherwise."""
    model = type(row)
    try:
        sent = botapi.send_message(token, row.chat_id, prompt.text, prompt.reply_markup, base_url)
    except botapi.TelegramApiError as exc:
        log.warning("telegram prompt %s not sent: %s", row.pk, exc.description)
        model.objects.filter(pk=row.pk, message_id__isnull=True).delete()
        return False
    chat = sent.get("chat") if isinstance(sent.get("chat"), dict) else {}
    row.chat_id = str(chat.get("id", row.chat_id))
    row.message_id = int(sent["message_id"])
    model.objects.filter(pk=row.pk, message_id__isnull=True).update(
        chat_id=row.chat_id, message_id=row.message_id
    )
    return True
