"""Cardloop's feedback area on a final answer sent to Slack: pure renderers (state in, Block
Kit blocks out), with the rules of the Feishu area (`feedback.cards`).

A Slack final answer is the bot backend's own `blocks` with these blocks appended. Every block
of the area has a `block_id` starting with `fb_`, so after a click the message is read back
from Slack and only those blocks are replaced (`replace_area`); the answer's blocks are never
stored by Cardloop.

```
fb_divider         divider
fb_status          section (mrkdwn)  "Was this answer helpful?" | "Selected: *label*" (· Reason)
fb_buttons         actions           one button per policy button (action_id `fb_<key>`), value
                                     {"kind": "feedback", "delivery": id, "key": key, "rev": rev};
                                     left out once the choice is final (Slack buttons cannot be
                                     disabled)
fb_detail          context           who may give feedback   (no choice yet, positive, progress)
                   section + inputs  "What was wrong?" + input fb_reason (static_select
                                     action_id fb_reason) + input fb_comment
                                     (plain_text_input action_id fb_comment) + actions
                                     fb_detail_submit (button value {"kind": "feedback_detail",
                                     "delivery": id, "rev": rev})  (negative choice, no details)
                   context           "Details added" / "Reason recorded" (negative with details)
fb_footer          context           "Feedback is recorded by Cardloop"
```

Button values are the JSON of the action value, as for every Cardloop button; the input
blocks' values arrive in the `state.values` of the submit click
(https://api.slack.com/reference/interaction-payloads/block-actions), keyed by their
`block_id`s, which are `feedback.cards.REASON_FIELD` / `COMMENT_FIELD` so the same
`feedback.revisions` handlers read them. Slack shows one text to every reader, so the area is
rendered in the snapshot's `card_language` (the bot's). User-given labels are escaped for
mrkdwn (https://api.slack.com/reference/surfaces/formatting#escaping). Slack's limits are
checked with `interactions.channels.slack.limits` by the caller.
"""

from __future__ import annotations

import copy
import json
from typing import Any

from django.utils import translation
from django.utils.translation import gettext as _

from feedback import cards as feedback_cards

DIVIDER, STATUS, BUTTONS, DETAIL, FOOTER = (
    "fb_divider",
    "fb_status",
    "fb_buttons",
    "fb_detail",
    "fb_footer",
)
#: The input blocks' block_ids are the form fields `feedback.revisions` reads: Slack's
#: `state.values` is keyed by block_id, and the channel hands the handlers `{block_id: value}`.
DETAIL_REASON, DETAIL_COMMENT, DETAIL_SUBMIT = (
    feedback_cards.REASON_FIELD,
    feedback_cards.COMMENT_FIELD,
    "fb_detail_submit",
)
#: block_ids and action_ids starting with this are reserved for the feedback area.
RESERVED_PREFIX = feedback_cards.RESERVED_PREFIX
#: Slack's limits the area keeps itself within (`interactions.channels.slack.limits`).
BUTTON_TEXT_MAX = 75
PLACEHOLDER_MAX = 150
OPTION_TEXT_MAX = 75
COMMENT_MAX = 3000


def escape(text: str) -> str:
    """`text` with `&`, `<` and `>` escaped for Slack mrkdwn (so a label cannot mention
    anyone or link anywhere)."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _plain(text: str, limit: int | None = None) -> dict[str, Any]:
    if limit is not None and len(text) > limit:
        text = text[: limit - 1] + "…"
    return {"type": "plain_text", "text": text, "emoji": True}


def _value(data: dict[str, Any]) -> str:
    return json.dumps(data, ensure_ascii=False, separators=(",", ":"))


def feedback_area(
    policy: dict[str, Any], delivery_id: str, choice: feedback_cards.Choice | None
) -> list[dict[str, Any]]:
    """The feedback area for one state: a list of Block Kit blocks in message order.

    `policy` is the delivery's policy snapshot, `choice` its current revision
    (`feedback.cards.Choice` or None). Pure: renders `feedback.cards.area_state`; text in the
    snapshot's `card_language` (default `feedback.cards.CARD_LANGUAGE`)."""
    language = policy.get("card_language") or feedback_cards.CARD_LANGUAGE
    with translation.override(language):
        state = feedback_cards.area_state(policy, delivery_id, choice)
        blocks: list[dict[str, Any]] = [
            {"type": "divider", "block_id": DIVIDER},
            {
                "type": "section",
                "block_id": STATUS,
                "text": {"type": "mrkdwn", "text": feedback_cards.status_text(state, "*", escape)},
            },
        ]
        if state.clickable and state.buttons:
            blocks.append(_buttons(state))
        blocks.extend(_detail(state))
        blocks.append(_context(FOOTER, _("Feedback is recorded by Cardloop")))
        return blocks


def _context(block_id: str, text: str) -> dict[str, Any]:
    return {"type": "context", "block_id": block_id, "elements": [_plain(text)]}


def _buttons(state: feedback_cards.AreaState) -> dict[str, Any]:
    elements = []
    for button in state.buttons:
        element: dict[str, Any] = {
            "type": "button",
            "action_id": f"{RESERVED_PREFIX}{button.key}",
            "text": _plain(f"✓ {button.label}" if button.chosen else button.label, BUTTON_TEXT_MAX),
            "value": _value(
                {
                    "kind": "feedback",
                    "delivery": state.delivery_id,
                    "key": button.key,
                    "rev": state.rev,
                }
            ),
        }
        if button.style in ("primary", "danger"):
            element["style"] = button.style
        elements.append(element)
    return {"type": "actions", "block_id": BUTTONS, "elements": elements}


def _detail(state: feedback_cards.AreaState) -> list[dict[str, Any]]:
    if state.followup == feedback_cards.FOLLOWUP_DONE:
        return [_context(DETAIL, state.detail_text)]
    if state.followup != feedback_cards.FOLLOWUP_OPEN:
        return [_context(DETAIL, state.audience_text)]
    blocks: list[dict[str, Any]] = [
        {
            "type": "section",
            "block_id": DETAIL,
            "text": {"type": "mrkdwn", "text": _("What was wrong? (optional details)")},
        }
    ]
    if state.reasons:
        blocks.append(
            {
                "type": "input",
                "block_id": DETAIL_REASON,
                "optional": True,
                "label": _plain(_("Choose a reason")),
                "element": {
                    "type": "static_select",
                    "action_id": feedback_cards.REASON_FIELD,
                    "placeholder": _plain(_("Choose a reason"), PLACEHOLDER_MAX),
                    "options": [
                        {"text": _plain(r.label, OPTION_TEXT_MAX), "value": r.key}
                        for r in state.reasons
                    ],
                },
            }
        )
    if state.comment_enabled:
        blocks.append(
            {
                "type": "input",
                "block_id": DETAIL_COMMENT,
                "optional": not state.comment_required,
                "label": _plain(_("Add details")),
                "element": {
                    "type": "plain_text_input",
                    "action_id": feedback_cards.COMMENT_FIELD,
                    "multiline": True,
                    "max_length": min(state.comment_max_length, COMMENT_MAX),
                    "placeholder": _plain(state.comment_placeholder, PLACEHOLDER_MAX),
                },
            }
        )
    blocks.append(
        {
            "type": "actions",
            "block_id": DETAIL_SUBMIT,
            "elements": [
                {
                    "type": "button",
                    "action_id": DETAIL_SUBMIT,
                    "style": "primary",
                    "text": _plain(_("Submit")),
                    "value": _value(
                        {"kind": "feedback_detail", "delivery": state.delivery_id, "rev": state.rev}
                    ),
                }
            ],
        }
    )
    return blocks


def reserved_problems(blocks: Any) -> list[str]:
    """Paths in the caller's `blocks` whose `block_id` or `action_id` starts with `fb_`
    (reserved for the feedback area)."""
    problems: list[str] = []

    def check(node: Any, path: str) -> None:
        if not isinstance(node, dict):
            return
        for attr in ("block_id", "action_id"):
            value = node.get(attr)
            if isinstance(value, str) and value.startswith(RESERVED_PREFIX):
                problems.append(
                    f"{path}.{attr}: {value!r} is reserved for Cardloop's feedback area"
                )
        if isinstance(node.get("accessory"), dict):
            check(node["accessory"], f"{path}.accessory")
        if isinstance(node.get("element"), dict):
            check(node["element"], f"{path}.element")
        for index, child in enumerate(
            node.get("elements") or [] if isinstance(node.get("elements"), list) else []
        ):
            check(child, f"{path}.elements[{index}]")

    for index, block in enumerate(blocks if isinstance(blocks, list) else []):
        check(block, f"$.blocks[{index}]")
    return problems


def compose(
    blocks: list[dict[str, Any]], area: list[dict[str, Any]] | None
) -> list[dict[str, Any]]:
    """The blocks to send: a deep copy of the caller's `blocks` with `area` (from
    `feedback_area`, or None) appended. Raises `feedback.cards.ReservedIds` when the caller's
    blocks use `fb_` ids."""
    problems = reserved_problems(blocks)
    if problems:
        raise feedback_cards.ReservedIds(problems)
    return [*copy.deepcopy(blocks), *(area or [])]


def replace_area(
    message_blocks: list[dict[str, Any]], area: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """The blocks of a sent message (as read back from Slack) with its feedback area replaced
    by `area`: every block whose `block_id` starts with `fb_` is dropped and `area` appended
    where the first one was (at the end when there was none). The answer's own blocks are kept
    as Slack returned them. Pure."""
    kept: list[dict[str, Any]] = []
    at = None
    for block in message_blocks or []:
        block_id = block.get("block_id") if isinstance(block, dict) else None
        if isinstance(block_id, str) and block_id.startswith(RESERVED_PREFIX):
            if at is None:
                at = len(kept)
            continue
        kept.append(block)
    if at is None:
        at = len(kept)
    return [*kept[:at], *area, *kept[at:]]
