"""The progress message of an agent session on Telegram, with its pending asks as inline
keyboards: pure functions, state in, `render.TelegramMessage` (text + keyboard JSON) out.

`render_progress(session, asks, selections)` reads only the `ProgressSession` columns, the
given asks and each ask's keyboard state (`selections`: `{ask public_id: render.Selection}`, held
server-side in `interactions.models.TelegramAskState`; the channel loads it). Text is plain
(no parse mode) in the active language.

What is shown (the rules of the Feishu progress card, `interactions.render.progress_cards`,
in Telegram's means):

- `[title]`, the status, the summary, the latest tool lines (`• …`), the recovery note of a
  `recovering` session and "cancellation requested";
- while the session runs, every pending ask, its questions numbered across the message
  (`1.`, `2.` …), each option on its own line (`✓` before a ticked one, the description after
  `—`) and the "Other" text received so far; its keyboard:
  - one button per option (`aq:<ask id>:<q>:<o>`), prefixed by the question's number when the
    message shows more than one question;
  - an ask of exactly **one single-select question** is answered by the tap on an option;
    every other ask is answered by its **Submit** button (`as:<ask id>`) once every question
    has an option or "Other" text: taps on a single-select option pick it (replacing the
    earlier pick), taps on a multi-select option tick or untick it (`✓`);
  - "Other…" per question (`ao:<ask id>:<q>`): Cardloop sends a `force_reply` prompt and the
    requester's reply to it becomes the question's text;
- below the asks: "Cancel task" (`pg:c`, while running and not yet requested) and "Session
  details" (a `url` button to `details_url`, else `pg:d`, a toast with the status).
A terminal or recovering session shows no ask and no ask button.

Telegram's limits (https://core.telegram.org/bots/api#sendmessage,
https://core.telegram.org/bots/api#inlinekeyboardbutton): text 1-4096 characters,
`callback_data` 1-64 bytes (every datum here is at most `aq:` + a 40-character id + `:3:9`,
49 bytes), at most 100 buttons (`render.MAX_BUTTONS`). When the whole message would not fit,
it is shortened as the Feishu card is (`progress_cards.LEVELS`: option descriptions, then
question text, summary and tool lines), and as a last resort only the oldest asks that fit
are shown, with a note that more questions wait (they appear when earlier ones are answered;
panels and the API always have every ask).
"""

from __future__ import annotations

from typing import Any

from django.utils.translation import gettext as _

from interactions.channels.telegram import render
from interactions.models import Interaction, ProgressSession
from interactions.render import progress_cards

#: Callback data verb of the progress buttons and its acts (`progress_act`).
PROGRESS = "pg"
CANCEL, DETAILS = "c", "d"
ACTS = {CANCEL: "cancel", DETAILS: "details"}

PS = ProgressSession.Status


def progress_data(act: str) -> str:
    """The `callback_data` of a progress button: `pg:c` (cancel) or `pg:d` (details). The
    session is found from the tapped message, never from the data."""
    if act not in ACTS:
        raise ValueError(f"unknown progress act {act!r}")
    return f"{PROGRESS}:{act}"


def progress_act(data: Any) -> str | None:
    """The act ("cancel" or "details") of a progress button's `callback_data`, else None."""
    if not isinstance(data, str):
        return None
    verb, sep, act = data.partition(":")
    return ACTS.get(act) if verb == PROGRESS and sep else None


def render_progress(
    session: ProgressSession,
    asks: list[Interaction] = (),
    selections: dict[str, render.Selection] | None = None,
) -> render.TelegramMessage:
    """The message of `session` with its pending `asks` (any order; final ones are left out)
    and their keyboard states `selections` (`{ask public_id: Selection}`; missing = nothing chosen).
    Pure; always within Telegram's limits (see the module docstring)."""
    selections = selections or {}
    pending = progress_cards.pending_in_order(asks) if session.shows_forms else []
    message = progress_cards.fit(
        pending,
        lambda shown, level, hidden: _render(session, shown, selections, level, hidden),
        render.limit_problems,
    )
    if not render.limit_problems(message):
        return message
    return render.checked(render.TelegramMessage(render.fit(message.text), message.reply_markup))


def _cut(text: str, limit: int | None) -> str:
    return render.fit(str(text), limit) if limit else str(text)


def _button(text: str, data: str) -> dict[str, str]:
    return {"text": render.fit(text.strip() or "?", render.MAX_BUTTON_TEXT), "callback_data": data}


def _head(session: ProgressSession, level: int) -> list[str]:
    _q, _d, summary_limit, tool_limit = progress_cards.LEVELS[level]
    lines = [
        f"[{session.title or _('Task in progress')}]",
        progress_cards.status_label(session.status),
    ]
    if session.summary:
        lines.append(_cut(session.summary, summary_limit))
    tools = [str(line)[: progress_cards.MAX_TOOL_LINE] for line in (session.tool_lines or [])]
    for line in tools[-tool_limit:] if tool_limit else []:
        lines.append(f"• {line}")
    if session.status == PS.RECOVERING:
        lines.append(
            _(
                "⏳ The agent is restarting and will resume this task. Questions asked "
                "before the restart were withdrawn; they will be asked again if needed."
            )
        )
    if session.cancel_requested_at and not session.is_terminal:
        lines.append(_("Cancellation requested; waiting for the agent to stop."))
    return lines


def _ask_part(
    ask: Interaction, selection: render.Selection, first: int, numbered: bool, level: int
) -> tuple[list[str], list[list[dict[str, str]]]]:
    """Text lines and keyboard rows of one pending ask whose first question is number
    `first` on the message (`numbered`: prefix buttons with the question's number)."""
    q_limit, d_limit, _s, _t = progress_cards.LEVELS[level]
    lines: list[str] = [""]
    rows: list[list[dict[str, str]]] = []
    for q, question in enumerate(ask.questions or []):
        number = first + q
        prefix = f"{number}. " if numbered else ""
        header = question.get("header") or ""
        multi = bool(question.get("multiSelect"))
        lines.append(
            f"❓ {number}. "
            + (f"[{header}] " if header else "")
            + _cut(question["question"], q_limit)
            + (" " + _("(choose one or more)") if multi else "")
        )
        chosen = selection.picked.get(q, ())
        for o, option in enumerate(question.get("options", [])):
            mark = "✓ " if o in chosen else ""
            description = (option.get("description") or "") if d_limit != 0 else ""
            lines.append(
                f"   {mark}{option['label']}"
                + (f" — {_cut(description, d_limit)}" if description else "")
            )
            rows.append(
                [
                    _button(
                        prefix + mark + option["label"],
                        render.callback_data(render.PICK, ask.public_id, q, o),
                    )
                ]
            )
        if selection.other.get(q):
            lines.append(
                "   " + _("Other: %(text)s") % {"text": render.fit(selection.other[q], 200)}
            )
        rows.append(
            [_button(prefix + _("Other…"), render.callback_data(render.OTHER, ask.public_id, q))]
        )
    if render.needs_submit(ask):
        lines.append(_("Tap the options, then Submit."))
        label = _("Submit")
        count = len(ask.questions or [])
        if numbered:
            label += f" ({first}–{first + count - 1})" if count > 1 else f" ({first})"
        rows.append([_button("✅ " + label, render.callback_data(render.SUBMIT, ask.public_id))])
    else:
        lines.append(_("Tap an option to answer."))
    return lines, rows


def _progress_row(session: ProgressSession) -> list[dict[str, str]]:
    row = []
    if session.status == PS.RUNNING and not session.cancel_requested_at:
        row.append(_button(_("Cancel task"), progress_data(CANCEL)))
    if session.details_url:
        row.append({"text": _("Session details"), "url": session.details_url})
    else:
        row.append(_button(_("Session details"), progress_data(DETAILS)))
    return row


def _render(
    session: ProgressSession,
    pending: list[Interaction],
    selections: dict[str, render.Selection],
    level: int,
    hidden: int,
) -> render.TelegramMessage:
    lines = _head(session, level)
    rows: list[list[dict[str, str]]] = []
    numbered = sum(len(a.questions or []) for a in pending) > 1
    number = 1
    for ask in pending:
        ask_lines, ask_rows = _ask_part(
            ask, selections.get(ask.public_id) or render.Selection(), number, numbered, level
        )
        lines.extend(ask_lines)
        rows.extend(ask_rows)
        number += len(ask.questions or [])
    if hidden:
        lines.append("")
        lines.append(
            _(
                "%(n)s more question request(s) are waiting; they appear here when "
                "these are answered."
            )
            % {"n": hidden}
        )
    rows.append(_progress_row(session))
    # not cut here: a text over the limit makes `render_progress` try the next level
    return render.TelegramMessage("\n".join(lines), {"inline_keyboard": rows})
