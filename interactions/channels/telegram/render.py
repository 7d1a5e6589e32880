"""Telegram messages for interactions and asks: pure functions, state in, `TelegramMessage`
(text + inline keyboard JSON) out, and a pure checker of Telegram's limits.

Limits (https://core.telegram.org/bots/api#sendmessage,
https://core.telegram.org/bots/api#inlinekeyboardbutton):

- message text 1-4096 characters (`MAX_TEXT`; longer caller text is shortened with "…");
- `callback_data` 1-64 **bytes** (`MAX_CALLBACK_DATA`), so a button carries a short id, never
  JSON: `<verb>:<public id>[:<n>…]`, e.g. `ia:ia_0123456789abcdef:1` (23 bytes; public ids are
  at most 40 characters, so every id Cardloop issues fits);
- keyboard size: Telegram documents no number; the Bot API refuses more than 100 buttons
  (`BUTTONS_TOO_MUCH`) and clients show at most 8 per row, so Cardloop keeps to
  `MAX_BUTTONS` / `MAX_ROW`.

What is rendered:

- **approvals**: Approve / Deny on one row, Always on its own; **quick replies**: one button per
  action; **forms** (Telegram has no inputs): the typed `/_interaction <id> name=value; …`
  command. A final interaction (resolved, expired = denied for an approval, cancelled) renders
  its final state with **no keyboard**, so the edit that shows it removes the buttons.
- **asks** (`ask_user_questions`): single-select questions get one button per option;
  multi-select options toggle (✓ marks the selection, held server-side and passed in as
  `selection`) and a Submit button answers; "Other…" asks for free text with a `force_reply`
  prompt (`other_prompt`), answered by replying to it. A withdrawn (final) ask has no keyboard.

Callback data verbs (`parse_callback_data`): `ia:<id>:<action n>` interaction button;
`aq:<id>:<q>:<o>` pick (single) or toggle (multi) option o of question q; `as:<id>` submit;
`ao:<id>:<q>` "other" text for question q.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django.utils.translation import gettext as _

from interactions.models import Interaction
from interactions.render import interaction_cards

MAX_TEXT = 4096
MAX_CALLBACK_DATA = 64
MAX_BUTTON_TEXT = 64
MAX_ROW = 8
MAX_BUTTONS = 100

INTERACTION, PICK, SUBMIT, OTHER = "ia", "aq", "as", "ao"
VERBS = (INTERACTION, PICK, SUBMIT, OTHER)


class LimitError(ValueError):
    """A rendered message breaks one of Telegram's limits; `problems` lists them."""

    def __init__(self, problems: list[str]):
        super().__init__("; ".join(problems))
        self.problems = problems


@dataclass(frozen=True)
class TelegramMessage:
    """A message: `text` (plain, no parse mode) and `reply_markup` (an
    `InlineKeyboardMarkup` or `ForceReply` dict; None = no keyboard, which an edit uses to
    remove the buttons)."""

    text: str
    reply_markup: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        return {"text": self.text, "reply_markup": self.reply_markup}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TelegramMessage:
        return cls(str(data.get("text") or ""), data.get("reply_markup"))


@dataclass(frozen=True)
class Selection:
    """The server-side state of one ask's keyboard: option indices chosen per question
    (`picked[q]`) and "other" text per question (`other[q]`)."""

    picked: dict[int, tuple[int, ...]] = field(default_factory=dict)
    other: dict[int, str] = field(default_factory=dict)


# ---------------------------------------------------------------------------------------------
# Limits (pure)
# ---------------------------------------------------------------------------------------------


def callback_data(verb: str, public_id: str, *numbers: int) -> str:
    """`<verb>:<public_id>[:<n>…]`; raises LimitError when it is over 64 bytes (UTF-8)."""
    data = ":".join([verb, public_id, *(str(n) for n in numbers)])
    size = len(data.encode("utf-8"))
    if not 1 <= size <= MAX_CALLBACK_DATA:
        raise LimitError([f"callback_data is {size} bytes; Telegram allows 1-64"])
    return data


def parse_callback_data(data: Any) -> tuple[str, str, tuple[int, ...]] | None:
    """`(verb, public_id, numbers)` of a button's `callback_data`, or None when it is not one
    of Cardloop's (unknown verb, not ASCII numbers, over 64 bytes)."""
    if not isinstance(data, str) or not 1 <= len(data.encode("utf-8")) <= MAX_CALLBACK_DATA:
        return None
    verb, _sep, rest = data.partition(":")
    parts = rest.split(":")
    if verb not in VERBS or not parts[0]:
        return None
    numbers = []
    for part in parts[1:]:
        if not (part.isascii() and part.isdigit() and len(part) <= 3):
            return None
        numbers.append(int(part))
    wanted = {INTERACTION: 1, PICK: 2, SUBMIT: 0, OTHER: 1}[verb]
    if len(numbers) != wanted:
        return None
    return verb, parts[0], tuple(numbers)


def limit_problems(message: TelegramMessage) -> list[str]:
    """Every way `message` breaks Telegram's limits (empty when it is fine): text length,
    keyboard shape and size, button text, callback_data bytes (a button has callback_data,
    or an http(s) `url` instead)."""
    problems = []
    if not 1 <= tg_len(message.text) <= MAX_TEXT:
        problems.append(f"text is {tg_len(message.text)} characters; Telegram allows 1-4096")
    markup = message.reply_markup
    if markup is None or markup.get("force_reply") is True:
        return problems
    rows = markup.get("inline_keyboard")
    if not isinstance(rows, list) or not all(isinstance(r, list) for r in rows):
        return [*problems, "inline_keyboard must be a list of rows"]
    buttons = [b for row in rows for b in row]
    if len(buttons) > MAX_BUTTONS:
        problems.append(f"{len(buttons)} buttons; at most {MAX_BUTTONS}")
    if any(len(row) > MAX_ROW or not row for row in rows):
        problems.append(f"a row has no button or more than {MAX_ROW}")
    for n, button in enumerate(buttons):
        text = button.get("text") if isinstance(button, dict) else None
        if not isinstance(text, str) or not text.strip():
            problems.append(f"button {n} has no text")
        url = button.get("url") if isinstance(button, dict) else None
        if isinstance(url, str) and url.startswith(("https://", "http://")):
            if "callback_data" in button:
                problems.append(f"button {n} has both url and callback_data")
            continue
        data = button.get("callback_data") if isinstance(button, dict) else None
        size = len(data.encode("utf-8")) if isinstance(data, str) else 0
        if not 1 <= size <= MAX_CALLBACK_DATA:
            problems.append(f"button {n}: callback_data is {size} bytes; Telegram allows 1-64")
    return problems


def checked(message: TelegramMessage) -> TelegramMessage:
    """`message`, or LimitError naming what breaks Telegram's limits."""
    problems = limit_problems(message)
    if problems:
        raise LimitError(problems)
    return message


def tg_len(text: str) -> int:
    """The length of `text` as Telegram counts it for its limits, conservatively: UTF-16
    code units (Telegram measures entities in them; an emoji outside the BMP counts 2)."""
    return len(text.encode("utf-16-le")) // 2


def fit(text: str, limit: int = MAX_TEXT) -> str:
    """`text` cut to at most `limit` (`tg_len`), ending in "…" when it was cut."""
    if tg_len(text) <= limit:
        return text
    cut = text[: limit - 1]
    while tg_len(cut) > limit - 1:
        cut = cut[:-1]
    return cut + "…"


def _button(text: str, data: str) -> dict[str, str]:
    return {"text": fit(text.strip() or "?", MAX_BUTTON_TEXT), "callback_data": data}


def _keyboard(rows: list[list[dict[str, str]]]) -> dict[str, Any] | None:
    rows = [row for row in rows if row]
    return {"inline_keyboard": rows} if rows else None


# ---------------------------------------------------------------------------------------------
# Interactions (approvals, quick replies, forms)
# ---------------------------------------------------------------------------------------------


def _strip(text: str) -> str:
    return interaction_cards._strip_markdown(text)


def render_interaction(ia: Interaction) -> TelegramMessage:
    """The message of interaction `ia` (only its own columns are read) in the active
    language: pending → title, question, tool and a keyboard (approvals: Approve / Deny, then
    Always; quick replies: a button per action; forms: no keyboard, the typed command);
    final → the same text with its final state line and no keyboard. Pure; always within
    Telegram's limits (caller text is shortened)."""
    head = [f"[{ia.title}]"]
    if ia.tool:
        head.append(_("Tool: %(tool)s") % {"tool": ia.tool})
    if ia.status != Interaction.Status.PENDING:
        tail = [_strip(interaction_cards.final_status_line(ia))]
        return checked(TelegramMessage(_compose(head, ia.body, tail)))
    if ia.kind == Interaction.Kind.FORM or not ia.actions:
        return checked(TelegramMessage(_compose(head, ia.body, _typed_lines(ia))))
    actions = list(ia.actions)
    buttons = [
        _button(interaction_cards._action_text(ia, a), callback_data(INTERACTION, ia.public_id, n))
        for n, a in enumerate(actions[:MAX_BUTTONS])
    ]
    if ia.kind == Interaction.Kind.APPROVAL:
        rows = [buttons[:2], buttons[2:]]
    else:
        rows = [[b] for b in buttons]
    minutes = max(1, round((ia.expires_at - ia.created_at).total_seconds() / 60))
    first = str(actions[0].get("value", actions[0]["id"]))
    tail = [
        _("You can also type %(command)s. Expires %(minutes)s min after it was sent.")
        % {"command": interaction_cards.command_for(ia, first), "minutes": minutes}
    ]
    if ia.kind == Interaction.Kind.APPROVAL:
        tail.insert(0, _("If nobody answers in time, the request is denied."))
    return checked(TelegramMessage(_compose(head, ia.body, tail), _keyboard(rows)))


def _typed_lines(ia: Interaction) -> list[str]:
    """How to answer a form or an interaction without actions: the typed command."""
    if ia.kind != Interaction.Kind.FORM:
        return [
            _("Reply with: %(command)s")
            % {"command": interaction_cards.command_for(ia, _("<your answer>"))}
        ]
    lines = [
        _("Answer by typing one line:"),
        "  " + interaction_cards.command_for(ia, "; ".join(f"{f['name']}=…" for f in ia.fields)),
    ]
    for item in ia.fields:
        detail = str(item.get("label") or item["name"])
        if item.get("type") == "select":
            detail += " (" + ", ".join(str(o["value"]) for o in item.get("options", [])) + ")"
        if item.get("required"):
            detail += " *"
        lines.append(f"  - {item['name']}: {detail}")
    return lines


def _compose(head: list[str], body: str, tail: list[str]) -> str:
    """head, body, tail joined by lines; only the body (the caller's) is shortened so the
    whole text stays within MAX_TEXT."""
    fixed = "\n".join(head + tail)
    room = MAX_TEXT - tg_len(fixed) - 1
    parts = [*head, fit(body, max(room, 1))] if body else head
    return fit("\n".join([*parts, *tail]))


def action_for(ia: Interaction, n: int) -> dict[str, Any] | None:
    """Action number `n` of `ia` (the `ia:` button's index), or None."""
    actions = ia.actions or []
    return actions[n] if 0 <= n < len(actions) else None


# ---------------------------------------------------------------------------------------------
# Asks (ask_user_questions)
# ---------------------------------------------------------------------------------------------


def render_ask(ask: Interaction, selection: Selection | None = None) -> TelegramMessage:
    """The message of ask `ask` (its `questions`) with the keyboard for `selection`: per
    question its text and one button per option (multi-select: ✓ before chosen options),
    then "Other…" per question; Submit when the ask has more than one question or a
    multi-select one (a single single-select question is answered by its tap). A final ask
    (answered, expired, cancelled, withdrawn) has no keyboard. Pure."""
    selection = selection or Selection()
    lines: list[str] = []
    rows: list[list[dict[str, str]]] = []
    pending = ask.status == Interaction.Status.PENDING
    for q, question in enumerate(ask.questions or []):
        header = question.get("header") or ""
        lines.append(f"{q + 1}. " + (f"[{header}] " if header else "") + question["question"])
        chosen = selection.picked.get(q, ())
        for o, option in enumerate(question.get("options", [])):
            mark = "✓ " if o in chosen else ""
            description = option.get("description") or ""
            lines.append(
                f"   {mark}{option['label']}" + (f" — {description}" if description else "")
            )
            if pending:
                rows.append(
                    [_button(mark + option["label"], callback_data(PICK, ask.public_id, q, o))]
                )
        if selection.other.get(q):
            lines.append("   " + _("Other: %(text)s") % {"text": fit(selection.other[q], 200)})
        if pending:
            rows.append([_button(_("Other…"), callback_data(OTHER, ask.public_id, q))])
    if not pending:
        lines.append(_ask_final_line(ask))
        return checked(TelegramMessage(fit("\n".join(lines))))
    if needs_submit(ask):
        rows.append([_button(_("Submit"), callback_data(SUBMIT, ask.public_id))])
    return checked(TelegramMessage(fit("\n".join(lines)), _keyboard(rows)))


def needs_submit(ask: Interaction) -> bool:
    """Whether `ask` is answered with Submit (several questions or a multi-select one) rather
    than by the tap on an option."""
    questions = ask.questions or []
    return len(questions) != 1 or bool(questions[0].get("multiSelect"))


def _ask_final_line(ask: Interaction) -> str:
    if ask.status == Interaction.Status.RESOLVED:
        return "✅ " + _("Answered.")
    if ask.status == Interaction.Status.EXPIRED:
        return "⌛ " + _("Expired without an answer.")
    return "🚫 " + _("Withdrawn: this question is no longer asked.")


def toggle(ask: Interaction, selection: Selection, q: int, o: int) -> Selection:
    """The selection after a tap on option `o` of question `q`: multi-select toggles it,
    single-select picks it (replacing the pick and any "other" text). Pure; raises
    IndexError for a question or option `ask` does not have."""
    question = (ask.questions or [])[q]
    if not 0 <= o < len(question.get("options", [])):
        raise IndexError(o)
    picked = dict(selection.picked)
    other = dict(selection.other)
    current = set(picked.get(q, ()))
    if question.get("multiSelect"):
        current ^= {o}
    else:
        current = {o}
        other.pop(q, None)
    picked[q] = tuple(sorted(current))
    return Selection(picked, other)


def answers(ask: Interaction, selection: Selection) -> list[dict[str, Any]]:
    """`[{question, selectedLabels, customInput}]` for `selection` (what
    `interactions.asks.service.submit_answers` takes; it validates them)."""
    result = []
    for q, question in enumerate(ask.questions or []):
        options = question.get("options", [])
        result.append(
            {
                "question": question["question"],
                "selectedLabels": [
                    options[o]["label"] for o in selection.picked.get(q, ()) if o < len(options)
                ],
                "customInput": selection.other.get(q, ""),
            }
        )
    return result


def other_prompt(ask: Interaction, q: int) -> TelegramMessage:
    """The `force_reply` prompt asking for question `q`'s free text (its reply is the
    answer)."""
    question = (ask.questions or [])[q]
    text = _("Reply to this message with your answer to: %(question)s") % {
        "question": question["question"]
    }
    return checked(
        TelegramMessage(
            fit(text),
            {"force_reply": True, "input_field_placeholder": _("Your answer")[:64]},
        )
    )
