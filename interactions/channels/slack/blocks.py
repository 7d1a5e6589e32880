"""Block Kit messages for Slack: pure functions (an `Interaction` or plain values in, a
`{"text", "blocks"}` dict out) and the limits checker `problems(message)`. No I/O.

Rules of Slack this module follows (public sources): the Block Kit limits checked by
`interactions.channels.slack.limits` (≤ 50 blocks, text / `value` / option lengths, unique
`block_id` and `action_id`; every text here is cut to them), and:

- mrkdwn escaping: https://api.slack.com/reference/surfaces/formatting#escaping — `&`, `<`,
  `>` become `&amp;`, `&lt;`, `&gt;` in the caller's text, so it can neither mention anyone
  nor link.
- the top-level `text` is the notification / accessibility fallback
  (https://api.slack.com/methods/chat.postMessage#arg_text), ≤ 40000 characters.

Forms (and the asks on progress messages, `interactions.channels.slack.progress`) are **input blocks inside the message with a
submit button**, not a modal: a modal needs `views.open` with the click's `trigger_id` within
3 seconds, i.e. a Web API call inside the callback's answer budget, which the card-update
queue (updates after the answer) exists to avoid; and a modal is private to one person, while
the message shows everyone in the chat that the question is open and then, through
`chat.update`, how it was answered. Slack sends the values of a message's input blocks with
the button's `block_actions` payload (`state.values`,
https://api.slack.com/reference/interaction-payloads/block-actions).

Text is Cardloop's own in the active language (the caller renders under the bot's
`card_language`); the caller's text (title, body, labels) as given.
"""

from __future__ import annotations

import json
from typing import Any

from django.utils import translation
from django.utils.translation import gettext as _

from interactions.channels.slack import limits
from interactions.models import Interaction
from interactions.render import interaction_cards as ic
from interactions.render.bilingual import language_of

#: Slack's limits, from `limits` (the one place that states them).
MAX_BLOCKS = limits.MAX_BLOCKS
MAX_HEADER = limits.MAX_HEADER_TEXT
MAX_SECTION = limits.MAX_SECTION_TEXT
MAX_ACTIONS_ELEMENTS = limits.MAX_ACTIONS_ELEMENTS
MAX_BUTTON_TEXT = limits.MAX_BUTTON_TEXT
MAX_VALUE = limits.MAX_BUTTON_VALUE
MAX_ID = limits.MAX_ID
MAX_OPTIONS = limits.MAX_OPTIONS
MAX_OPTION_TEXT = limits.MAX_OPTION_TEXT
MAX_OPTION_VALUE = limits.MAX_OPTION_VALUE
MAX_LABEL = limits.MAX_LABEL
MAX_PLACEHOLDER = limits.MAX_PLACEHOLDER
#: The fallback `text` (https://api.slack.com/methods/chat.postMessage#arg_text).
MAX_TEXT = 40000

#: Block ids Cardloop gives its blocks (form fields are `f_<name>`, as on Feishu).
ACTIONS_BLOCK = "ia_actions"
SUBMIT_BLOCK = "ia_submit"


def field_action(block_id: str) -> str:
    """The action_id of the one input element in input block `block_id` (unique in the
    message: `limits.problems` keeps action_ids unique message-wide)."""
    return _cut(f"{block_id}_v", MAX_ID)


def escape(text: str) -> str:
    """Slack mrkdwn escaping of the caller's text (`&`, `<`, `>`)."""
    return str(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _cut(text: str, limit: int) -> str:
    text = str(text)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def plain(text: str, limit: int) -> dict[str, Any]:
    return {"type": "plain_text", "text": _cut(text, limit) or " ", "emoji": True}


def mrkdwn(text: str, limit: int = MAX_SECTION) -> dict[str, Any]:
    return {"type": "mrkdwn", "text": _cut(text, limit) or " "}


def button_value(ia: Interaction, action: dict[str, Any]) -> str:
    """The `value` a button of `ia` carries: the channel-neutral callback value
    (`interaction_cards.callback_value`: kind, interaction id, action id and value) as
    compact JSON. It names what was clicked, never who may click (that is the payload's
    `user.id`)."""
    return json.dumps(ic.callback_value(ia, action), separators=(",", ":"), ensure_ascii=False)


def interaction_message(ia: Interaction, language: str | None = None) -> dict[str, Any]:
    """`{"text": fallback, "blocks": [...]}` showing `ia` in its current state, rendered in
    `language` (default: the bot's `card_language`).

    Pending: a header (title), the body, the tool, then an approval's Approve (`primary`) /
    Deny (`danger`) / Always allow buttons, a quick reply's buttons, or a form's input
    blocks and a Submit button; last a context line with the typed command. Resolved,
    expired (an approval's timeout says "denied") or cancelled: the same message with its
    final state and no buttons or inputs left."""
    with translation.override(language or language_of(ia)):
        return _interaction_message(ia)


def _interaction_message(ia: Interaction) -> dict[str, Any]:
    blocks: list[dict[str, Any]] = [
        {"type": "header", "block_id": "ia_title", "text": plain(ia.title, MAX_HEADER)}
    ]
    if ia.body:
        blocks.append({"type": "section", "block_id": "ia_body", "text": mrkdwn(escape(ia.body))})
    if ia.tool:
        tool = _("Tool: `%(tool)s`") % {"tool": escape(ia.tool)}
        blocks.append({"type": "context", "block_id": "ia_tool", "elements": [mrkdwn(tool)]})
    if ia.status == Interaction.Status.PENDING:
        if ia.kind == Interaction.Kind.FORM:
            blocks.extend(_form_blocks(ia))
        elif ia.actions:
            blocks.append(
                {
                    "type": "actions",
                    "block_id": ACTIONS_BLOCK,
                    "elements": [_button(ia, a) for a in ia.actions[:MAX_ACTIONS_ELEMENTS]],
                }
            )
        blocks.append({"type": "context", "block_id": "ia_note", "elements": [mrkdwn(_note(ia))]})
        text = ia.title
    else:
        line = status_line(ia)
        blocks.append({"type": "section", "block_id": "ia_status", "text": mrkdwn(line)})
        text = f"{ia.title} — {line}"
    return {"text": _cut(text, MAX_TEXT), "blocks": blocks[:MAX_BLOCKS]}


def _button(ia: Interaction, action: dict[str, Any]) -> dict[str, Any]:
    element: dict[str, Any] = {
        "type": "button",
        "action_id": _cut(f"ia_{action['id']}", MAX_ID),
        "text": plain(ic._action_text(ia, action), MAX_BUTTON_TEXT),
        "value": button_value(ia, action),
    }
    if action.get("style") in ("primary", "danger"):
        element["style"] = action["style"]
    return element


def _form_blocks(ia: Interaction) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    for field in ia.fields:
        label = str(field.get("label") or field["name"])
        placeholder = plain(str(field.get("placeholder") or label), MAX_PLACEHOLDER)
        if field.get("type") == "select":
            element: dict[str, Any] = {
                "type": "static_select",
                "action_id": field_action(ic.form_field_name(field)),
                "placeholder": placeholder,
                "options": [
                    {
                        "text": plain(str(o["label"]), MAX_OPTION_TEXT),
                        "value": str(o["value"])[:MAX_OPTION_VALUE],
                    }
                    for o in field.get("options", [])[:MAX_OPTIONS]
                ],
            }
        else:
            element = {
                "type": "plain_text_input",
                "action_id": field_action(ic.form_field_name(field)),
                "placeholder": placeholder,
                "max_length": int(field.get("max_length") or 1000),
            }
        blocks.append(
            {
                "type": "input",
                "block_id": _cut(ic.form_field_name(field), MAX_ID),
                "label": plain(label, MAX_LABEL),
                "optional": not field.get("required"),
                "element": element,
            }
        )
    submit = {"id": ic.SUBMIT, "value": ic.SUBMIT}
    blocks.append(
        {
            "type": "actions",
            "block_id": SUBMIT_BLOCK,
            "elements": [
                {
                    "type": "button",
                    "action_id": "ia_submit",
                    "text": plain(_("Submit"), MAX_BUTTON_TEXT),
                    "style": "primary",
                    "value": button_value(ia, submit),
                }
            ],
        }
    )
    return blocks


def _note(ia: Interaction) -> str:
    minutes = max(1, round((ia.expires_at - ia.created_at).total_seconds() / 60))
    if ia.kind == Interaction.Kind.FORM:
        typed = ic.command_for(ia, "name=value; name2=value")
    elif ia.actions:
        typed = ic.command_for(ia, str(ia.actions[0].get("value", ia.actions[0]["id"])))
    else:
        typed = ic.command_for(ia, _("<your answer>"))
    return _(
        "You can also type `%(command)s` in this chat. Expires %(minutes)s min after it was sent."
    ) % {"command": escape(typed), "minutes": minutes}


def status_line(ia: Interaction) -> str:
    """The final state in Slack mrkdwn: what was chosen and by whom (`<@U…>` renders the
    person's name; Slack user ids only), or why it ended (an expired approval: denied)."""
    line = ic.final_status_line(ia).replace("**", "*")
    operator = str((ia.resolution or {}).get("operator") or "")
    if operator[:1] in ("U", "W") and operator.isalnum():
        line += f" · <@{operator}>"
    return line


# ---------------------------------------------------------------------------------------------
# Limits
# ---------------------------------------------------------------------------------------------


def problems(message: dict[str, Any]) -> list[str]:
    """What in `message` (`{"text", "blocks"}`) breaks Slack's documented limits, as
    JSON-path strings without the message's text; [] when it is valid. The blocks are checked
    by `limits.problems` (the one Block Kit checker, shared with deliveries; it keeps
    `action_id`s unique in the whole message, stricter than Slack's per-block rule, so a
    submitted `state.values` is unambiguous); this adds the fallback `text` length, button
    styles (`primary` / `danger` only) and the 10 options of `checkboxes`."""
    if not isinstance(message, dict):
        return ["$: a message object with blocks"]
    out = limits.problems(message.get("blocks"))
    if len(str(message.get("text", ""))) > MAX_TEXT:
        out.append(f"$.text: longer than {MAX_TEXT}")
    for i, block in enumerate(message.get("blocks") or []):
        if not isinstance(block, dict):
            continue
        elements = block.get("elements") if block.get("type") == "actions" else None
        for j, el in enumerate(elements or []):
            if isinstance(el, dict) and "style" in el and el["style"] not in ("primary", "danger"):
                out.append(f"$.blocks[{i}].elements[{j}].style: primary or danger only")
        el = block.get("element") if block.get("type") == "input" else None
        if isinstance(el, dict) and el.get("type") == "checkboxes":
            if len(el.get("options") or []) > 10:
                out.append(f"$.blocks[{i}].element.options: at most 10 checkboxes")
    return out
