"""Rendering an interaction for its channel: Feishu Card JSON 2.0 or the text fallback.

Pure functions (an `Interaction` in — only its own columns are read, so unsaved instances work
— a dict or a string out). The text fallback is rendered in the active language
(`LANGUAGE_CODE`, zh-hans by default); a Feishu card carries Cardloop's text in Chinese and
English (`interactions.render.bilingual`: `i18n_content`, `content` in the bot's
`card_language`), the caller's text (title, body, labels) as given.

- `feishu_card(ia)`: pending → header, the question, the tool, buttons (approval: Approve
  `primary`, Deny `danger`, Always `default`; callback values `{"kind": "interaction",
  "interaction_id", "action_id", "action_value"}` in `behaviors`, where Card JSON 2.0 sends
  them back) or a form, and a note that typing `/_interaction <id> <value>` works too. Resolved
  / expired / cancelled → the same card with its final state and **no buttons or form** (nothing
  left to click once the answer is in).
- `fallback_text(ia, channel)`: numbered options, the exact commands to type, and why there
  are no buttons on this channel (so a person who sees only text knows to type).
- `render(ia)`: what the channel needs (`Rendered(card=…, text=…)`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from django.utils.translation import gettext as _

from interactions import kinds as channels
from interactions.lark.cardjson import callback_behaviors
from interactions.models import Interaction
from interactions.render.bilingual import bilingual, language_of

#: The typed command (also accepted from Feishu text messages).
COMMAND = "/_interaction"
#: Callback `kind` of interaction buttons (the registry routes it to
#: `interactions.approvals.handlers.on_card_action`).
CALLBACK_KIND = "interaction"
#: action_id of a form's submit button.
SUBMIT = "submit"

APPROVE, DENY, ALWAYS = "approve", "deny", "always"

HEADER_TEMPLATE = {
    "pending": "orange",
    "approved": "green",
    "denied": "red",
    "resolved": "green",
    "expired": "grey",
    "cancelled": "grey",
}


@dataclass(frozen=True)
class Rendered:
    """`card`: Card JSON 2.0 for Feishu (None elsewhere); `text`: the text fallback (always)."""

    card: dict[str, Any] | None
    text: str


def approval_actions(allow_always: bool = True) -> list[dict[str, str]]:
    """The fixed actions of an approval: approve (primary), deny (danger), always (default)."""
    actions = [
        {"id": APPROVE, "label": _("Approve"), "value": APPROVE, "style": "primary"},
        {"id": DENY, "label": _("Deny"), "value": DENY, "style": "danger"},
    ]
    if allow_always:
        actions.append(
            {"id": ALWAYS, "label": _("Always allow"), "value": ALWAYS, "style": "default"}
        )
    return actions


def _action_text(ia: Interaction, action: dict[str, Any]) -> str:
    """A button's text: an approval's fixed actions in the active language (their stored label
    is in the language they were created in), the caller's labels as given."""
    if ia.kind == Interaction.Kind.APPROVAL:
        fixed = {a["id"]: a["label"] for a in approval_actions()}
        if action.get("id") in fixed:
            return str(fixed[action["id"]])
    return str(action["label"])


def callback_value(ia: Interaction, action: dict[str, Any]) -> dict[str, str]:
    """The callback value a button of `ia` carries: its `kind` routes the click, the ids name
    the interaction and the action (never who may answer: that comes from the callback)."""
    return {
        "kind": CALLBACK_KIND,
        "interaction_id": ia.public_id,
        "action_id": str(action["id"]),
        "action_value": str(action.get("value", action["id"])),
    }


def command_for(ia: Interaction, value: str) -> str:
    """`/_interaction <id> <value>`: what a person types to answer `ia` with `value`."""
    return f"{COMMAND} {ia.public_id} {value}"


def render(ia: Interaction) -> Rendered:
    """The rendering `ia`'s channel needs: a card where the channel has buttons, and always
    the text fallback (the API returns it for channels without cards)."""
    caps = channels.capabilities(ia.channel)
    return Rendered(
        card=feishu_card(ia) if caps.buttons else None, text=fallback_text(ia, ia.channel)
    )


# ---------------------------------------------------------------------------------------------
# Feishu
# ---------------------------------------------------------------------------------------------


def _md(content: str, element_id: str | None = None) -> dict[str, Any]:
    element: dict[str, Any] = {"tag": "markdown", "content": content}
    if element_id:
        element["element_id"] = element_id
    return element


def _plain(text: str) -> dict[str, str]:
    return {"tag": "plain_text", "content": text}


def _state_key(ia: Interaction) -> str:
    if ia.status == Interaction.Status.PENDING:
        return "pending"
    if ia.kind == Interaction.Kind.APPROVAL and ia.resolution:
        action_id = ia.resolution.get("action_id")
        if action_id in (APPROVE, ALWAYS):
            return "approved"
        if action_id == DENY and ia.status == Interaction.Status.RESOLVED:
            return "denied"
    return str(ia.status)


def _escape(text: str) -> str:
    """Keep user text from closing Cardloop's markdown constructs (no raw `<at>` tags)."""
    return text.replace("<", "&lt;").replace(">", "&gt;")


def feishu_card(ia: Interaction, language: str | None = None) -> dict[str, Any]:
    """Card JSON 2.0 for `ia` in its current state (see module docstring), in Chinese and
    English with `language` (default: the bot's `card_language`) as content. Valid for
    `interactions.lark.cardjson.validate_card` for every kind and state."""
    return bilingual(lambda: _feishu_card(ia), language or language_of(ia))


def _feishu_card(ia: Interaction) -> dict[str, Any]:
    elements: list[dict[str, Any]] = []
    if ia.body:
        elements.append(_md(_escape(ia.body), "ia_body"))
    if ia.tool:
        elements.append(_md(_("Tool: `%(tool)s`") % {"tool": _escape(ia.tool)}, "ia_tool"))
    if ia.status == Interaction.Status.PENDING:
        if ia.kind == Interaction.Kind.FORM:
            elements.append(_form(ia))
        elif ia.actions:
            elements.append(_buttons(ia))
        elements.append(_md(_note(ia), "ia_note"))
    else:
        elements.append(_md(final_status_line(ia), "ia_status"))
    subtitle = {
        Interaction.Kind.APPROVAL: _("Approval needed"),
        Interaction.Kind.QUICK_REPLY: _("Quick reply"),
        Interaction.Kind.FORM: _("Please fill in"),
        Interaction.Kind.COMMAND: _("Reply with a command"),
    }.get(ia.kind, "")
    return {
        "schema": "2.0",
        "config": {"update_multi": True, "summary": {"content": ia.title[:100]}},
        "header": {
            "title": _plain(ia.title),
            "subtitle": _plain(subtitle),
            "template": HEADER_TEMPLATE.get(_state_key(ia), "grey"),
        },
        "body": {"elements": elements},
    }


def _buttons(ia: Interaction) -> dict[str, Any]:
    columns = []
    for action in ia.actions:
        columns.append(
            {
                "tag": "column",
                "width": "auto",
                "elements": [
                    {
                        "tag": "button",
                        "name": f"ia_{action['id']}"[:64],
                        "text": _plain(_action_text(ia, action)),
                        "type": action.get("style") or "default",
                        "behaviors": callback_behaviors(callback_value(ia, action)),
                    }
                ],
            }
        )
    return {
        "tag": "column_set",
        "element_id": "ia_buttons",
        "flex_mode": "flow",
        "horizontal_spacing": "8px",
        "columns": columns,
    }


def form_field_name(field: dict[str, Any]) -> str:
    """The component name of form field `field` (card-unique: prefixed `f_`)."""
    return f"f_{field['name']}"


def _form(ia: Interaction) -> dict[str, Any]:
    components: list[dict[str, Any]] = []
    for field in ia.fields:
        label = str(field.get("label") or field["name"])
        if field.get("type") == "select":
            component: dict[str, Any] = {
                "tag": "select_static",
                "name": form_field_name(field),
                "required": bool(field.get("required")),
                "placeholder": _plain(str(field.get("placeholder") or label)[:100]),
                "options": [
                    {"text": _plain(str(o["label"])), "value": str(o["value"])}
                    for o in field.get("options", [])
                ],
            }
        else:
            component = {
                "tag": "input",
                "name": form_field_name(field),
                "required": bool(field.get("required")),
                "placeholder": _plain(str(field.get("placeholder") or label)[:100]),
                "max_length": int(field.get("max_length") or 1000),
            }
        components.append(_md(f"**{_escape(label)}**"))
        components.append(component)
    components.append(
        {
            "tag": "button",
            "name": "ia_submit",
            "text": _plain(_("Submit")),
            "type": "primary",
            "form_action_type": "submit",
            "behaviors": callback_behaviors(callback_value(ia, {"id": SUBMIT, "value": SUBMIT})),
        }
    )
    return {"tag": "form", "name": "ia_form", "element_id": "ia_form", "elements": components}


def _note(ia: Interaction) -> str:
    minutes = max(1, round((ia.expires_at - ia.created_at).total_seconds() / 60))
    if ia.kind == Interaction.Kind.FORM:
        typed = command_for(ia, "name=value; name2=value")
    elif ia.actions:
        typed = command_for(ia, str(ia.actions[0].get("value", ia.actions[0]["id"])))
    else:
        typed = command_for(ia, _("<your answer>"))
    return _(
        "You can also type `%(command)s` in this chat. Expires %(minutes)s min after it was sent."
    ) % {"command": _escape(typed), "minutes": minutes}


def _action_label(ia: Interaction, action_id: str) -> str:
    for action in ia.actions or []:
        if action.get("id") == action_id:
            return str(action.get("label") or action_id)
    return action_id


def final_status_line(ia: Interaction) -> str:
    """One markdown line with the final state: what was chosen, by whom (`<at>` renders the
    person's name in Feishu; the card stores no names), or why it ended."""
    resolution = ia.resolution or {}
    operator = resolution.get("operator") or ""
    by = f' · <at id="{operator}"></at>' if operator.startswith("ou_") else ""
    state = _state_key(ia)
    if ia.status == Interaction.Status.EXPIRED:
        if ia.kind == Interaction.Kind.APPROVAL:
            return "⌛ " + _("Expired without an answer: denied.")
        return "⌛ " + _("Expired without an answer.")
    if ia.status == Interaction.Status.CANCELLED:
        return "🚫 " + _("Cancelled.")
    if state == "approved":
        label = (
            _("Approved (always for this %(scope)s)")
            % {"scope": Interaction.Scope(ia.always_scope or "session").label}
            if resolution.get("action_id") == ALWAYS
            else _("Approved")
        )
        return f"✅ **{label}**" + by
    if state == "denied":
        return "⛔ **" + _("Denied") + "**" + by
    if ia.kind == Interaction.Kind.FORM:
        return "✅ **" + _("Submitted") + "**" + by
    chosen = _action_label(ia, str(resolution.get("action_id") or ""))
    if not chosen:
        chosen = str(resolution.get("value") or "")
    return "✅ " + _("Answered: **%(choice)s**") % {"choice": _escape(chosen[:200])} + by


# ---------------------------------------------------------------------------------------------
# Text fallback
# ---------------------------------------------------------------------------------------------


def fallback_text(ia: Interaction, channel: str | None = None) -> str:
    """Plain text for channels without buttons: the question, numbered options with the
    exact command for each, and why there are no buttons (`channels.NO_BUTTONS_REASON`).
    A final interaction renders its final state instead."""
    channel = channels.normalize(channel or ia.channel) or channels.WEBHOOK
    lines = [f"[{ia.title}]"]
    if ia.body:
        lines.append(ia.body)
    if ia.tool:
        lines.append(_("Tool: %(tool)s") % {"tool": ia.tool})
    if ia.status != Interaction.Status.PENDING:
        lines.append(_strip_markdown(final_status_line(ia)))
        return "\n".join(lines)
    reason = channels.NO_BUTTONS_REASON.get(channel)
    if reason:
        lines.append(_("There are no buttons here because %(reason)s.") % {"reason": reason})
    if ia.kind == Interaction.Kind.FORM:
        lines.append(_("Answer by typing one line:"))
        lines.append("  " + command_for(ia, "; ".join(f"{f['name']}=…" for f in ia.fields)))
        for field in ia.fields:
            detail = str(field.get("label") or field["name"])
            if field.get("type") == "select":
                detail += " (" + ", ".join(str(o["value"]) for o in field.get("options", [])) + ")"
            if field.get("required"):
                detail += " *"
            lines.append(f"  - {field['name']}: {detail}")
    elif ia.actions:
        lines.append(_("Reply with one of these commands:"))
        for number, action in enumerate(ia.actions, start=1):
            value = str(action.get("value", action["id"]))
            lines.append(f"  {number}. {action['label']} — {command_for(ia, value)}")
        lines.append(
            _("The option number works too, e.g. %(command)s") % {"command": command_for(ia, "1")}
        )
    else:
        lines.append(
            _("Reply with: %(command)s") % {"command": command_for(ia, _("<your answer>"))}
        )
    minutes = max(1, round((ia.expires_at - ia.created_at).total_seconds() / 60))
    lines.append(
        _("This request expires %(minutes)s min after it was sent.") % {"minutes": minutes}
    )
    return "\n".join(lines)


def _strip_markdown(text: str) -> str:
    text = re.sub(r' · <at id="[^"]*"></at>', "", text)
    return text.replace("**", "")
