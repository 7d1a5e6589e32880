"""The progress message of an agent session on Slack, with its pending asks as forms: pure
functions (a `ProgressSession` and its pending asks in, `{"text", "blocks"}` out). No I/O.

`message(session, asks)` reads only the session's columns and the given asks (unsaved
instances work; the bot's `card_language` is read by `bot_id`) and renders in one language
(Slack has no per-reader text): the bot's `card_language`.

- a header (the title), a context line with the status (an emoji stands in for Feishu's
  header colour), the summary, the latest tool lines, and the recovery / "cancellation
  requested" notes — the same content and rules as the Feishu card
  (`interactions.render.progress_cards`);
- `running`: for each pending ask (n = `Ask.form_index`), for each question i: a section
  (header, question, option descriptions), an **input block whose `block_id` is the select's
  field name** (`progress_cards.field_names(n, i)`: `q<i>` / `q<i>_<n>`) holding a
  `static_select` (single) or a `multi_static_select` (multi; a select, never one button per
  option, so no click submits half a choice) whose option values are the option indices
  `"0"…`, and an input block named like the "other" field (`c<i>` / `c<i>_<n>`) with a
  `plain_text_input`; then an actions block with the Submit button whose `value` is the
  Feishu submit's callback value (`progress_cards.submit_value`, kind `feishu_ask`) as JSON.
  Slack keys `state.values` by `block_id`, and
  `interactions.channels.slack.channel.form_values` turns them into the `form_value` that
  `interactions.asks.service.answers_from_form` reads — so the Feishu handlers answer the
  Slack submit unchanged;
- last an actions block: "Cancel task" (`danger`, with a confirm dialog; running, until
  requested) and "Session details" (a link button to `details_url`, else a callback that
  answers with the session's status); terminal states and `recovering` show no form.

Why input blocks in the message and not a modal: a modal needs `views.open` with the click's
`trigger_id` within 3 seconds (https://api.slack.com/surfaces/modals#opening), a Web API call
inside the click's answer budget that the card-update queue exists to keep out of it, plus a
second round trip (the modal's `view_submission`) that the callback dispatcher does not route;
input blocks in the message need neither, their values arrive with the Submit button's
`block_actions` payload (`state.values`,
https://api.slack.com/reference/interaction-payloads/block-actions), and everyone in the
conversation sees the question and then, after `chat.update`, that it was answered. The
caveat: Slack sends the state of **every** input block of the message with **any** button
click in it, so a submit carries the other asks' half-filled fields too; each ask reads only
its own field names, and the Cancel / details buttons ignore them.

Slack's limits (`interactions.channels.slack.limits`, checked by `blocks.problems`): when the
full message would not fit (≤ 50 blocks is the usual one: each question takes 3 blocks, an
ask up to 13), the renderer shortens the texts (`progress_cards.LEVELS`) and, as a last
resort, shows only the oldest forms that fit with a note that more questions wait; they
appear as earlier ones are answered (panels always get every ask).

Links: a "Session details" link button makes Slack open the URL itself and still send a
`block_actions` payload; its `action_id` starts with `LINK_PREFIX`, which the ingress
acknowledges without handling (https://api.slack.com/reference/block-kit/block-elements#button).
"""

from __future__ import annotations

import json
from typing import Any

from django.utils import translation
from django.utils.translation import gettext as _

from interactions.channels.slack.blocks import (
    MAX_BUTTON_TEXT,
    MAX_HEADER,
    MAX_LABEL,
    MAX_OPTION_TEXT,
    MAX_PLACEHOLDER,
    MAX_TEXT,
    MAX_VALUE,
    _cut,
    escape,
    field_action,
    mrkdwn,
    plain,
    problems,
)
from interactions.models import Interaction, ProgressSession
from interactions.render import progress_cards as pc
from interactions.render.bilingual import language_of

#: `action_id` prefix of link buttons: Slack opens their URL; the ingress only acknowledges.
LINK_PREFIX = "link_"
#: Emoji standing in for the Feishu header colour of each status.
STATUS_EMOJI = {
    ProgressSession.Status.RUNNING: ":large_blue_circle:",
    ProgressSession.Status.COMPLETED: ":white_check_mark:",
    ProgressSession.Status.FAILED: ":x:",
    ProgressSession.Status.CANCELLED: ":black_circle:",
    ProgressSession.Status.RECOVERING: ":hourglass_flowing_sand:",
}
#: Longest "other" text Slack lets the person type (the Feishu card's limit).
MAX_CUSTOM_INPUT = pc.MAX_CUSTOM_INPUT


def _json(value: dict[str, Any]) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def message(
    session: ProgressSession, asks: list[Interaction] = (), language: str | None = None
) -> dict[str, Any]:
    """`{"text", "blocks"}` of `session` with `asks` (its pending asks, any order) as forms
    while it is running, in `language` (default: the bot's `card_language`). Shortened, then
    forms hidden, to pass `blocks.problems` (module docstring); the last, shortest form is
    returned even if it still breaks a limit, and `SlackChannel.send` refuses that one."""
    with translation.override(language or language_of(session)):
        return pc.fit(
            pc.pending_in_order(asks),
            lambda shown, level, hidden: _message(session, shown, level, hidden=hidden),
            problems,
        )


def question_text(question: dict[str, Any], level: int = 0) -> str:
    """The mrkdwn shown above a question's select (`progress_cards.question_markdown` in
    Slack's markup): header, question, "(choose one or more)" for a multi-select, option
    descriptions (shortened at `level` > 0, `progress_cards.LEVELS`); the caller's text
    escaped."""
    return pc.question_markdown(question, level, bold="*", bullet="•", escape=escape)


def ask_blocks(ask: Interaction, level: int = 0) -> list[dict[str, Any]]:
    """The blocks of one pending ask's form (module docstring): per question a section and
    two input blocks named by `progress_cards.field_names`, then the Submit button."""
    n = ask.form_index
    out: list[dict[str, Any]] = []
    for i, question in enumerate(ask.questions):
        select_name, other_name = pc.field_names(n, i)
        multi = bool(question.get("multiSelect"))
        out.append(
            {
                "type": "section",
                "block_id": f"ask_{n}_text{i}",
                "text": mrkdwn(question_text(question, level)),
            }
        )
        choose = _("Choose one or more") if multi else _("Choose one")
        out.append(
            {
                "type": "input",
                "block_id": select_name,
                "optional": True,
                "label": plain(choose, MAX_LABEL),
                "element": {
                    "type": "multi_static_select" if multi else "static_select",
                    "action_id": field_action(select_name),
                    "placeholder": plain(choose, MAX_PLACEHOLDER),
                    "options": [
                        {"text": plain(str(o["label"]), MAX_OPTION_TEXT), "value": str(index)}
                        for index, o in enumerate(question.get("options", []))
                    ],
                },
            }
        )
        out.append(
            {
                "type": "input",
                "block_id": other_name,
                "optional": True,
                "label": plain(_("Other (optional)"), MAX_LABEL),
                "element": {
                    "type": "plain_text_input",
                    "action_id": field_action(other_name),
                    "max_length": MAX_CUSTOM_INPUT,
                    "placeholder": plain(_("Other (optional)"), MAX_PLACEHOLDER),
                },
            }
        )
    out.append(
        {
            "type": "actions",
            "block_id": pc.form_name(n),
            "elements": [
                {
                    "type": "button",
                    "action_id": pc.submit_name(n),
                    "style": "primary",
                    "text": plain(_("Submit"), MAX_BUTTON_TEXT),
                    "value": _json(pc.submit_value(ask))[:MAX_VALUE],
                }
            ],
        }
    )
    return out


def _buttons(session: ProgressSession) -> dict[str, Any]:
    elements: list[dict[str, Any]] = []
    if session.status == ProgressSession.Status.RUNNING and not session.cancel_requested_at:
        elements.append(
            {
                "type": "button",
                "action_id": "progress_cancel",
                "style": "danger",
                "text": plain(_("Cancel task"), MAX_BUTTON_TEXT),
                "value": _json(
                    {"kind": pc.PROGRESS_KIND, "act": "cancel", "sessionId": session.session_id}
                ),
                "confirm": {
                    "title": plain(_("Cancel this task?"), 100),
                    "text": plain(_("The agent will be asked to stop."), 300),
                    "confirm": plain(_("Cancel task"), 30),
                    "deny": plain(_("Keep running"), 30),
                    "style": "danger",
                },
            }
        )
    details: dict[str, Any] = {
        "type": "button",
        "action_id": "progress_details",
        "text": plain(_("Session details"), MAX_BUTTON_TEXT),
    }
    if session.details_url:
        details["action_id"] = f"{LINK_PREFIX}progress_details"
        details["url"] = session.details_url
    else:
        details["value"] = _json(
            {"kind": pc.PROGRESS_KIND, "act": "details", "sessionId": session.session_id}
        )
    elements.append(details)
    return {"type": "actions", "block_id": "progress_buttons", "elements": elements}


def _message(
    session: ProgressSession, pending: list[Interaction], level: int, *, hidden: int
) -> dict[str, Any]:
    _q, _d, summary_limit, tool_limit = pc.LEVELS[level]
    title = session.title or _("Task in progress")
    status = pc.status_label(session.status)
    out: list[dict[str, Any]] = [
        {"type": "header", "block_id": "progress_title", "text": plain(title, MAX_HEADER)},
        {
            "type": "context",
            "block_id": "progress_status",
            "elements": [mrkdwn(f"{STATUS_EMOJI.get(session.status, '')} *{status}*".strip())],
        },
    ]
    if session.summary:
        out.append(
            {
                "type": "section",
                "block_id": "progress_summary",
                "text": mrkdwn(escape(pc._cut(session.summary, summary_limit))),
            }
        )
    lines = [str(line)[: pc.MAX_TOOL_LINE] for line in (session.tool_lines or [])]
    lines = lines[-tool_limit:] if tool_limit else []
    if lines:
        out.append(
            {
                "type": "section",
                "block_id": "progress_tools",
                "text": mrkdwn("\n".join(f"• {escape(line)}" for line in lines)),
            }
        )
    if session.status == ProgressSession.Status.RECOVERING:
        recovery = _(
            "⏳ The agent is restarting and will resume this task. Questions asked "
            "before the restart were withdrawn; they will be asked again if needed."
        )
        out.append({"type": "section", "block_id": "progress_recovery", "text": mrkdwn(recovery)})
    if session.cancel_requested_at and not session.is_terminal:
        requested = _("Cancellation requested; waiting for the agent to stop.")
        out.append(
            {"type": "section", "block_id": "progress_cancel_note", "text": mrkdwn(requested)}
        )
    if session.shows_forms:
        for ask in pending:
            out.extend(ask_blocks(ask, level))
        if hidden:
            more = _(
                "%(n)s more question request(s) are waiting; they appear here when "
                "these are answered."
            ) % {"n": hidden}
            out.append({"type": "context", "block_id": "progress_more", "elements": [mrkdwn(more)]})
    out.append(_buttons(session))
    return {"text": _cut(f"{title} — {status}", MAX_TEXT), "blocks": out}
