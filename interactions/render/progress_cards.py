"""Rendering a session's progress card: pure functions, state in, Card JSON 2.0 out.

`render(session, asks)` reads only the `ProgressSession` columns and the given pending asks
(unsaved instances work; the bot's `card_language` is read by `bot_id`), with Cardloop's text
in Chinese and English (`interactions.render.bilingual`: `i18n_content`, `content` in the
bot's `card_language`):

- header: the title, a status subtitle and a colour (running blue, completed green, failed
  red, cancelled grey, recovering orange); the summary; the latest tool lines;
- `running`: one `form` per pending ask (`ask_<n>`, n = `Ask.form_index`), each question as
  markdown (header, question, option descriptions), a `select_static` (single) or
  `multi_select_static` (multi: a select, never one button per option, so a
  click never submits a half-made choice) named `q<i>` with option
  values `"0"…`, none required, an "其他（可选）" input `c<i>`, and the submit button
  `ask_<n>_submit` **inside** the form with the callback value `{"kind": "feishu_ask",
  "act": "submit", "sessionId", "requestId", "sender"}` (the submit inside the form, so
  Feishu sends the form's values with it);
- below every form, outside any form: "Cancel task" (running, until requested) and
  "Session details" (an `open_url` button to `details_url`, else a callback);
- terminal states and `recovering` render **no form**; `recovering` says that the agent
  restarted and earlier questions were withdrawn.

Feishu refuses cards over 30 KB or 200 components: when the full card would not fit, the
renderer shortens (option descriptions, then question text, summary and tool lines) and, as a
last resort, shows only the oldest forms that fit with a note that more questions wait (they
appear as earlier ones are answered; panels always get every ask).

Field names are unique across the card (Feishu: names are card-wide): the first form uses
`q<i>` / `c<i>`, form n ≥ 1 uses `q<i>_<n>` / `c<i>_<n>` (`field_names`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from django.utils.translation import gettext as _

from interactions.lark.cardjson import callback_behaviors, validate_card
from interactions.models import Interaction, ProgressSession
from interactions.render.bilingual import bilingual, language_of

#: Callback kinds routed by the registry.
ASK_KIND = "feishu_ask"
PROGRESS_KIND = "progress"
#: Tool lines shown (newest last) and the longest line.
MAX_TOOL_LINES = 10
MAX_TOOL_LINE = 200
#: Longest text of the "other" input.
MAX_CUSTOM_INPUT = 500

TEMPLATES = {
    ProgressSession.Status.RUNNING: "blue",
    ProgressSession.Status.COMPLETED: "green",
    ProgressSession.Status.FAILED: "red",
    ProgressSession.Status.CANCELLED: "grey",
    ProgressSession.Status.RECOVERING: "orange",
}


def form_name(n: int) -> str:
    """Name of the form of the ask with `form_index` n."""
    return f"ask_{n}"


def submit_name(n: int) -> str:
    return f"ask_{n}_submit"


def field_names(n: int, i: int) -> tuple[str, str]:
    """(select name, "other" input name) of question `i` of form `n`: `q<i>`/`c<i>` on form
    0, `q<i>_<n>`/`c<i>_<n>` after it (names are unique across the whole card)."""
    suffix = "" if n == 0 else f"_{n}"
    return f"q{i}{suffix}", f"c{i}{suffix}"


def submit_value(ask: Interaction) -> dict[str, str]:
    """The callback value of an ask's submit button (`sender` is informational: who may
    answer is decided from the verified callback)."""
    return {
        "kind": ASK_KIND,
        "act": "submit",
        "sessionId": ask.session_id,
        "requestId": ask.public_id,
        "sender": ask.requester_open_id,
    }


def _plain(text: str) -> dict[str, str]:
    return {"tag": "plain_text", "content": text}


def _md(content: str, element_id: str | None = None) -> dict[str, Any]:
    element: dict[str, Any] = {"tag": "markdown", "content": content}
    if element_id:
        element["element_id"] = element_id
    return element


def _escape(text: str) -> str:
    """Keep agent text from opening Feishu tags (`<at>`, `<font>` …) in markdown."""
    return str(text).replace("<", "&lt;").replace(">", "&gt;")


def status_label(status: str) -> str:
    return {
        ProgressSession.Status.RUNNING: _("Running"),
        ProgressSession.Status.COMPLETED: _("Completed"),
        ProgressSession.Status.FAILED: _("Failed"),
        ProgressSession.Status.CANCELLED: _("Cancelled"),
        ProgressSession.Status.RECOVERING: _("Recovering"),
    }.get(status, status)


#: Shortening levels used to fit Feishu's card limits: (question chars, description chars,
#: summary chars, tool lines); None = unlimited, 0 = omitted.
LEVELS = (
    (None, None, None, MAX_TOOL_LINES),
    (500, 100, 1000, 5),
    (200, 0, 500, 0),
    (100, 0, 200, 0),
)


def _cut(text: str, limit: int | None) -> str:
    text = str(text)
    if limit is None or len(text) <= limit:
        return text
    return text[: max(0, limit - 1)] + "…"


def question_markdown(
    question: dict[str, Any], level: int = 0, *, bold: str = "**", bullet: str = "-", escape=None
) -> str:
    """The markdown shown above a question's select: header, question, option descriptions
    (shortened at `level` > 0, see LEVELS). Feishu markdown by default; another channel's
    markup with its `bold` marker, list `bullet` and `escape` for the caller's text (Slack
    mrkdwn: `*`, `•`, `&`/`<`/`>` escaped)."""
    escape = escape or _escape
    q_limit, d_limit, _s, _t = LEVELS[level]
    lines = []
    header = question.get("header") or ""
    head = f"{bold}{escape(header)}{bold} · " if header else ""
    lines.append(f"{head}{escape(_cut(question['question'], q_limit))}")
    if question.get("multiSelect"):
        lines.append(_("(choose one or more)"))
    if d_limit != 0:
        for option in question.get("options", []):
            description = option.get("description") or ""
            if description:
                lines.append(
                    f"{bullet} {bold}{escape(option['label'])}{bold}: "
                    f"{escape(_cut(description, d_limit))}"
                )
    return "\n".join(lines)


def ask_form(ask: Interaction, level: int = 0) -> dict[str, Any]:
    """The `form` of one pending ask (see module docstring)."""
    n = ask.form_index
    components: list[dict[str, Any]] = []
    for i, question in enumerate(ask.questions):
        select_name, other_name = field_names(n, i)
        components.append(_md(question_markdown(question, level)))
        multi = bool(question.get("multiSelect"))
        components.append(
            {
                "tag": "multi_select_static" if multi else "select_static",
                "name": select_name,
                "required": False,
                "width": "fill",
                "placeholder": _plain(_("Choose one or more") if multi else _("Choose one")),
                "options": [
                    {"text": _plain(str(option["label"])[:100]), "value": str(index)}
                    for index, option in enumerate(question.get("options", []))
                ],
            }
        )
        components.append(
            {
                "tag": "input",
                "name": other_name,
                "required": False,
                "width": "fill",
                "max_length": MAX_CUSTOM_INPUT,
                "placeholder": _plain(_("Other (optional)")),
            }
        )
    components.append(
        {
            "tag": "button",
            "name": submit_name(n),
            "type": "primary",
            "form_action_type": "submit",
            "text": _plain(_("Submit")),
            "behaviors": callback_behaviors(submit_value(ask)),
        }
    )
    return {"tag": "form", "name": form_name(n), "elements": components}


def _buttons(session: ProgressSession) -> dict[str, Any] | None:
    columns = []
    if session.status == ProgressSession.Status.RUNNING and not session.cancel_requested_at:
        columns.append(
            {
                "tag": "button",
                "name": "progress_cancel",
                "type": "danger",
                "text": _plain(_("Cancel task")),
                "confirm": {
                    "title": _plain(_("Cancel this task?")),
                    "text": _plain(_("The agent will be asked to stop.")),
                },
                "behaviors": callback_behaviors(
                    {"kind": PROGRESS_KIND, "act": "cancel", "sessionId": session.session_id}
                ),
            }
        )
    if session.details_url:
        behaviors = [{"type": "open_url", "default_url": session.details_url}]
    else:
        behaviors = callback_behaviors(
            {"kind": PROGRESS_KIND, "act": "details", "sessionId": session.session_id}
        )
    columns.append(
        {
            "tag": "button",
            "name": "progress_details",
            "type": "default",
            "text": _plain(_("Session details")),
            "behaviors": behaviors,
        }
    )
    return {
        "tag": "column_set",
        "element_id": "progress_buttons",
        "flex_mode": "flow",
        "horizontal_spacing": "8px",
        "columns": [{"tag": "column", "width": "auto", "elements": [button]} for button in columns],
    }


M = TypeVar("M")


def pending_in_order(asks: Iterable[Interaction]) -> list[Interaction]:
    """The pending ones of `asks`, in the order their forms are shown (`form_index`, then
    creation)."""
    return sorted(
        (a for a in asks if a.status == Interaction.Status.PENDING),
        key=lambda a: (a.form_index, a.created_at),
    )


def fit(
    pending: list[Interaction],
    render_at: Callable[[list[Interaction], int, int], M],
    problems: Callable[[M], list],
) -> M:
    """The first rendering of a progress message that a channel's limits accept (`problems`
    empty): `render_at(asks shown, LEVELS index, asks hidden)` with every form at each
    shortening level, then at the shortest level with only the oldest forms (the rest
    counted as hidden). Every channel's renderer fits its message this way. Returns the last
    try (no form, shortest) when none is accepted; its sender then refuses it."""
    last = len(LEVELS) - 1
    tries = [(pending, level, 0) for level in range(len(LEVELS))] + [
        (pending[:shown], last, len(pending) - shown) for shown in range(len(pending) - 1, -1, -1)
    ]
    for shown_asks, level, hidden in tries:
        rendered = render_at(shown_asks, level, hidden)
        if not problems(rendered):
            return rendered
    return rendered


def render(
    session: ProgressSession, asks: list[Interaction] = (), language: str | None = None
) -> dict[str, Any]:
    """Card JSON 2.0 of `session` with `asks` (its pending asks, any order) as forms when the
    session is running, in Chinese and English with `language` (default: the bot's
    `card_language`) as content. Valid for `interactions.lark.cardjson.validate_card` in every
    state (shortened to fit Feishu's limits with both languages, see module docstring)."""
    language = language or language_of(session)
    return fit(
        pending_in_order(asks),
        lambda shown, level, hidden: bilingual(
            lambda: _render(session, shown, level, hidden=hidden), language
        ),
        validate_card,
    )


def _render(
    session: ProgressSession, pending: list[Interaction], level: int, *, hidden: int
) -> dict[str, Any]:
    _q, _d, summary_limit, tool_limit = LEVELS[level]
    title = session.title or _("Task in progress")
    elements: list[dict[str, Any]] = []
    if session.summary:
        elements.append(_md(_escape(_cut(session.summary, summary_limit)), "progress_summary"))
    lines = [str(line)[:MAX_TOOL_LINE] for line in (session.tool_lines or [])]
    lines = lines[-tool_limit:] if tool_limit else []
    if lines:
        elements.append(_md("\n".join(f"- {_escape(line)}" for line in lines), "progress_tools"))
    if session.status == ProgressSession.Status.RECOVERING:
        elements.append(
            _md(
                _(
                    "⏳ The agent is restarting and will resume this task. Questions asked "
                    "before the restart were withdrawn; they will be asked again if needed."
                ),
                "progress_recovery",
            )
        )
    if session.cancel_requested_at and not session.is_terminal:
        elements.append(
            _md(_("Cancellation requested; waiting for the agent to stop."), "progress_cancel")
        )
    if session.shows_forms:
        for ask in pending:
            elements.append(ask_form(ask, level))
        if hidden:
            elements.append(
                _md(
                    _(
                        "%(n)s more question request(s) are waiting; they appear here when "
                        "these are answered."
                    )
                    % {"n": hidden},
                    "progress_more",
                )
            )
    elements.append(_buttons(session))
    return {
        "schema": "2.0",
        "config": {"update_multi": True, "summary": {"content": title[:100]}},
        "header": {
            "title": _plain(title[:200]),
            "subtitle": _plain(status_label(session.status)),
            "template": TEMPLATES.get(session.status, "grey"),
        },
        "body": {"elements": elements},
    }
