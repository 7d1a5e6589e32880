"""Typed answers: `/_interaction <id> <value>` from any text channel.

    reply = handle(bot, "/_interaction ia_3f… approve", open_id="ou_…", chat_id="oc_…")
    reply.ok, reply.code, reply.text, reply.interaction

Two ways in, one function (`handle`):
- the bot backend forwards a typed message (`POST /api/v1/interactions/text-command`) and
  shows `reply.text` to the person;
- Feishu `im.message.receive_v1` text messages starting with `/_interaction` (the registry
  event handler `on_message`, registered in `InteractionsConfig.ready()`): Cardloop answers
  with a text reply to that message.

`<value>` is an action value, an action id or its number in the text fallback; free text for
`command` interactions; `name=value; name2=value` for forms. Validation (id, state, expiry,
sender, chat, action) is `interactions.approvals.service.answer`: nothing is written on a refusal.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass

from django.utils import translation
from django.utils.translation import gettext_lazy as _

from interactions import channels, kinds
from interactions.approvals import service as approvals
from interactions.lifecycle.resolve import REFUSALS, Refused, lazy_format
from interactions.models import Interaction
from interactions.render.interaction_cards import COMMAND

log = logging.getLogger(__name__)

#: Leading Feishu mention placeholders (`@_user_1 `) before the command in group messages.
MENTION_RE = re.compile(r"^(?:@_user_\d+\s*|@_all\s*)+")
#: Refusals not answered in a Feishu chat: the id may belong to another bot in the chat (or
#: the command is incomplete), and every bot there receives the message.
SILENT_IN_CHATS = frozenset({"unknown_interaction", "malformed"})
#: Longest typed message considered (characters).
MAX_TEXT = 4000


@dataclass(frozen=True)
class TextReply:
    """What a typed command led to. `handled`: the text was a `/_interaction` command at all
    (False: not for Cardloop, `text` empty); `ok`: this command resolved the interaction;
    `code`: "resolved" or the refusal code (`REFUSALS`, plus "lost" when another
    path won meanwhile); `text`: the reply to show (lazy, renders in the active language);
    `interaction`: the row concerned (None when unknown)."""

    handled: bool
    ok: bool
    code: str
    text: object
    interaction: Interaction | None = None


def strip_mentions(text: str) -> str:
    """The message text without leading Feishu mention placeholders and whitespace."""
    return MENTION_RE.sub("", (text or "").strip()).strip()


def parse(text: str) -> tuple[str, str] | None:
    """`/_interaction <id> <value…>` → `(id, value)` ("" when missing); None when the text is
    not a `/_interaction` command."""
    text = strip_mentions(text)[:MAX_TEXT]
    if (
        text != COMMAND
        and not text.startswith(COMMAND + " ")
        and not text.startswith(COMMAND + "\n")
    ):
        return None
    rest = text[len(COMMAND) :].strip()
    public_id, _sep, value = rest.partition(" ")
    if "\n" in public_id:
        public_id, _sep, more = public_id.partition("\n")
        value = f"{more} {value}".strip()
    return public_id.strip(), value.strip()


def handle(bot, text: str, *, open_id: str, chat_id: str) -> TextReply:
    """Answer an interaction of `bot` from a typed message by `open_id` in `chat_id`.

    Never raises for anything a person can type: malformed commands, unknown ids, other
    chats, other people, expired or already handled interactions and unknown values all come
    back as `TextReply(ok=False, code=…)` with a reply text, and nothing is written.
    """
    parsed = parse(text)
    if parsed is None:
        return TextReply(False, False, "not_a_command", "")
    public_id, value = parsed
    if not public_id or not value:
        return TextReply(True, False, "malformed", REFUSALS["malformed"])
    ia = approvals.find(bot, public_id)
    try:
        outcome = approvals.answer(
            ia, choice=value, via=Interaction.Via.TEXT, operator=open_id, chat_id=chat_id
        )
    except Refused as refused:
        return TextReply(True, False, refused.code, _refusal_text(refused), refused.interaction)
    if not outcome.won:
        return TextReply(
            True, False, "lost", approvals.lost_message(outcome.interaction), outcome.interaction
        )
    return TextReply(
        True, True, "resolved", approvals.success_message(outcome), outcome.interaction
    )


def _refusal_text(refused: Refused):
    if refused.code == "invalid_form" and refused.fields:
        return lazy_format(
            _("Please check these answers: %(fields)s"), fields=", ".join(refused.fields)
        )
    return refused.message


def bilingual(text) -> str:
    """A reply for a Feishu chat: the zh-hans text, then the English one when it differs."""
    with translation.override("zh-hans"):
        zh = str(text)
    with translation.override("en"):
        en = str(text)
    return zh if zh == en else f"{zh}\n{en}"


def on_message(event) -> None:
    """Registry handler of Feishu `im.message.receive_v1`
    (`interactions.callbacks.registry.LarkEvent`): a text message from a user that starts with
    `/_interaction` is handled like the API's text command, and the sender gets a text reply
    (in zh-hans and English) — except for unknown ids and incomplete commands
    (`SILENT_IN_CHATS`), which may be meant for another bot in the chat. Other messages are
    ignored. Never logs the text or the sender."""
    message = event.event.get("message") if isinstance(event.event, dict) else None
    sender = event.event.get("sender") if isinstance(event.event, dict) else None
    if not isinstance(message, dict) or not isinstance(sender, dict):
        return
    if message.get("message_type") != "text" or sender.get("sender_type") not in (None, "user"):
        return
    raw = message.get("content") or "{}"
    if not isinstance(raw, str):  # Feishu sends a JSON string; anything else is not a command
        return
    try:
        content = json.loads(raw)
    except ValueError:
        return
    text = content.get("text") if isinstance(content, dict) else None
    sender_id = sender.get("sender_id") if isinstance(sender.get("sender_id"), dict) else {}
    if not isinstance(text, str) or parse(text) is None:
        return
    reply = handle(
        event.bot,
        text,
        open_id=str(sender_id.get("open_id") or ""),
        chat_id=str(message.get("chat_id") or ""),
    )
    if reply.code in SILENT_IN_CHATS:
        # Several bots may share the chat: only the bot that owns the interaction answers.
        log.info("text command in %s: %s; not answered", message.get("chat_id", "?"), reply.code)
        return
    log.info(
        "text command in %s: %s (%s)",
        message.get("chat_id", "?"),
        reply.code,
        reply.interaction.public_id if reply.interaction else "-",
    )
    message_id = message.get("message_id")
    if not message_id:
        return
    channel = channels.get(kinds.FEISHU)
    try:
        channel.reply_text(
            event.bot,
            {"message_id": str(message_id)},
            bilingual(reply.text),
            uuid=f"ia_reply_{event.event_id}"[:50],
        )
    except channel.send_errors as exc:
        log.warning("text command reply in %s failed: %s", message.get("chat_id", "?"), exc)
