"""Cardloop's feedback area on a final answer sent to Telegram: pure renderers (state in, an
`InlineKeyboardMarkup` out) drawing `feedback.cards.area_state`, and the short callback_data
its buttons carry.

A Telegram answer is the backend's `text` with this keyboard. After a click only the keyboard
is replaced (`editMessageReplyMarkup`, https://core.telegram.org/bots/api#editmessagereplymarkup):
Telegram cannot give the text back and Cardloop never stores it.

```
no choice / reselect   [label] [label] [label]           one row, verdict buttons (✓ chosen)
negative, follow-up    [✓ label] …                       the verdict row while clickable
                       [reason] … one row per reason     fr:<i>:<rev>
                       [💬 Add a comment]                fc:<rev> (comments on): a force_reply
                                                         prompt whose reply is the comment
details given / final  [✓ Selected: label · Reason: …]   fs: taps answer with the status
```

`callback_data` is 1-64 bytes (https://core.telegram.org/bots/api#inlinekeyboardbutton), so a
button never carries JSON nor the delivery id (the tapped message names its delivery:
`Delivery.platform_message_id` is `tg:<chat_id>:<message_id>`): `fv:<i>:<rev>` verdict button
`i` of the snapshot's `buttons`, `fr:<i>:<rev>` reason `i` of its `negative_followup.reasons`,
`fc:<rev>` the comment prompt, `fs` the status. `<rev>` is the current revision id without its
`fb_` prefix (32 hex), `-` before the first revision: the stale-click guard of
`feedback.revisions`. The longest, `fr:5:` + 32, is 37 bytes.

Telegram shows one text to every reader, so labels are in the snapshot's `card_language`.
"""

from __future__ import annotations

from typing import Any

from django.utils import translation
from django.utils.translation import gettext as _

from feedback import cards as feedback_cards
from interactions.channels.telegram import render

VERDICT, REASON, COMMENT, STATUS = "fv", "fr", "fc", "fs"
VERBS: tuple[str, ...] = (VERDICT, REASON, COMMENT, STATUS)
#: `rev` before the first revision (a callback_data part is never empty).
NO_REV = "-"
_REV_PREFIX = "fb_"


def rev_code(rev: str) -> str:
    """The short form of revision id `rev` in callback_data (`fb_` dropped; `-` for "")."""
    return rev.removeprefix(_REV_PREFIX) if rev else NO_REV


def rev_of(code: str) -> str:
    """The revision id a callback_data `code` stands for ("" for `-`)."""
    return "" if code == NO_REV else _REV_PREFIX + code


def callback_data(verb: str, *parts: Any) -> str:
    """`<verb>[:<part>…]`; raises `render.LimitError` when it is not 1-64 bytes (UTF-8)."""
    data = ":".join([verb, *(str(p) for p in parts)])
    size = len(data.encode("utf-8"))
    if not 1 <= size <= render.MAX_CALLBACK_DATA:
        raise render.LimitError([f"callback_data is {size} bytes; Telegram allows 1-64"])
    return data


def parse_callback_data(data: Any) -> tuple[str, int, str] | None:
    """`(verb, index, rev)` of a feedback button's callback_data (`index` -1 and `rev` "" where
    the verb has none), or None when it is not one (unknown verb, bad shape, over 64 bytes)."""
    if not isinstance(data, str) or not 1 <= len(data.encode("utf-8")) <= render.MAX_CALLBACK_DATA:
        return None
    verb, *parts = data.split(":")
    shape = {VERDICT: 2, REASON: 2, COMMENT: 1, STATUS: 0}.get(verb)
    if shape is None or len(parts) != shape:
        return None
    index = -1
    if shape == 2:
        number = parts.pop(0)
        if not (number.isascii() and number.isdigit() and len(number) <= 2):
            return None
        index = int(number)
    rev = ""
    if parts:
        code = parts[0]
        if code != NO_REV and not (code.isascii() and code.isalnum() and len(code) <= 40):
            return None
        rev = rev_of(code)
    return verb, index, rev


def _button(text: str, data: str) -> dict[str, str]:
    return {"text": render.fit(text.strip() or "?", render.MAX_BUTTON_TEXT), "callback_data": data}


def keyboard(
    policy: dict[str, Any], delivery_id: str, choice: feedback_cards.Choice | None
) -> dict[str, Any]:
    """The feedback area for one state as an `InlineKeyboardMarkup` (see the module
    docstring). `policy` is the delivery's snapshot, `choice` its current revision (None
    before any); `delivery_id` is not carried by the buttons. Pure; within Telegram's limits
    (raises `render.LimitError` otherwise)."""
    language = policy.get("card_language") or feedback_cards.CARD_LANGUAGE
    with translation.override(language):
        state = feedback_cards.area_state(policy, delivery_id, choice)
        rev = rev_code(state.rev)
        position = {b.get("key"): i for i, b in enumerate(policy.get("buttons") or [])}
        rows: list[list[dict[str, str]]] = []
        if state.clickable and state.buttons:
            rows.append(
                [
                    _button(
                        f"✓ {b.label}" if b.chosen else b.label,
                        callback_data(VERDICT, position[b.key], rev),
                    )
                    for b in state.buttons[: render.MAX_ROW]
                ]
            )
        if state.followup == feedback_cards.FOLLOWUP_OPEN:
            rows.extend(
                [_button(r.label, callback_data(REASON, i, rev))]
                for i, r in enumerate(state.reasons)
            )
            if state.comment_enabled:
                rows.append([_button("💬 " + _("Add a comment"), callback_data(COMMENT, rev))])
        elif not state.clickable or state.followup == feedback_cards.FOLLOWUP_DONE:
            status = feedback_cards.status_text(state)
            if state.followup == feedback_cards.FOLLOWUP_DONE:
                status += " · " + state.detail_text
            rows.append([_button("✓ " + status, callback_data(STATUS))])
        markup = {"inline_keyboard": rows}
        render.checked(render.TelegramMessage("-", markup))
        return markup


def status_toast(policy: dict[str, Any], choice: feedback_cards.Choice | None) -> str:
    """What a tap on the status button says, in the active language: the status line and
    who may give feedback."""
    state = feedback_cards.area_state(policy, "", choice)
    return f"{feedback_cards.status_text(state)} · {state.audience_text}"


def comment_prompt(policy: dict[str, Any]) -> render.TelegramMessage:
    """The `force_reply` prompt for a comment (https://core.telegram.org/bots/api#forcereply):
    the reply to it is the comment. In the snapshot's `card_language`."""
    language = policy.get("card_language") or feedback_cards.CARD_LANGUAGE
    with translation.override(language):
        state = feedback_cards.area_state(policy, "", None)
        text = _("Reply to this message with your comment on the answer.")
        return render.checked(
            render.TelegramMessage(
                text,
                {
                    "force_reply": True,
                    "input_field_placeholder": state.comment_placeholder[:64],
                },
            )
        )
