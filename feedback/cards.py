"""Cardloop's feedback area on a final-answer card: pure renderers (state in, Card JSON out).

A final answer is the bot backend's own Card JSON 2.0 with Cardloop's feedback area appended
to `body.elements`. Every component of the area has a stable `element_id`, so after a click
only those components are replaced (CardKit element updates through
`interactions.cardqueue.service.enqueue_elements`); the answer body is never re-sent nor stored.

```
fb_divider  hr
fb_status   markdown   "这个回答有帮助吗？" | "已选择：**label**" (· 原因：label)
fb_buttons  column_set one column per policy button; callback value
                       {"kind": "feedback", "delivery": id, "key": verdict key, "rev": rev}
fb_detail   markdown   who may give feedback            (no choice yet, positive, progress)
            form       reasons (select_static fb_reason) + comment (input fb_comment) +
                       submit fb_detail_submit {"kind": "feedback_detail", "delivery", "rev"}
                                                        (negative choice without details)
            markdown   "已补充说明" / the reason chosen  (negative choice with details)
fb_footer   markdown   "由 Cardloop 记录反馈"
```

`rev` is the revision id of the delivery's current revision ("" before the first one): the
stale-click guard of `feedback.revisions` refuses a click made on an older state.
Feishu's rules for Card JSON 2.0: a button's callback value goes in its `behaviors` (a 2.0
button has no top-level `value`), and a card is updatable for every viewer only with
`config.update_multi: true`; the callback answer is a toast only, the card is updated after it.
The comment text is never rendered. Input `max_length` is left
out on purpose (Feishu caps it at 1000; the policy allows 2000): the server checks length.
"""

from __future__ import annotations

import copy
import hashlib
import json
from dataclasses import dataclass
from typing import Any

from django.utils import translation
from django.utils.translation import gettext as _

from interactions.lark.cardjson import callback_behaviors
from interactions.render.bilingual import bilingual

#: element_ids of the feedback area, in card order.
DIVIDER, STATUS, BUTTONS, DETAIL, FOOTER = (
    "fb_divider",
    "fb_status",
    "fb_buttons",
    "fb_detail",
    "fb_footer",
)
AREA_IDS: tuple[str, ...] = (DIVIDER, STATUS, BUTTONS, DETAIL, FOOTER)
#: Component names Cardloop uses (card-unique, like element_ids).
FORM_NAME = "fb_form"
REASON_FIELD = "fb_reason"
COMMENT_FIELD = "fb_comment"
SUBMIT_NAME = "fb_detail_submit"
#: Element ids and names starting with this are reserved for the feedback area.
RESERVED_PREFIX = "fb_"
#: Content default of the text Cardloop renders on cards when the snapshot names none (the
#: snapshot's `card_language`, frozen from the bot at send). Every text also carries English and
#: Chinese in `i18n_content`, so each reader's Feishu shows their own language.
CARD_LANGUAGE = "zh-hans"


@dataclass(frozen=True)
class Choice:
    """What the card shows as chosen: the delivery's current revision (or None)."""

    revision_id: str
    verdict_key: str
    semantic: str
    reason_key: str = ""
    has_comment: bool = False

    @property
    def has_details(self) -> bool:
        return bool(self.reason_key or self.has_comment)

    @classmethod
    def of(cls, revision) -> Choice | None:
        """From a `feedback.models.Revision` (or None)."""
        if revision is None:
            return None
        return cls(
            revision_id=revision.revision_id,
            verdict_key=revision.verdict_key,
            semantic=revision.semantic,
            reason_key=revision.reason_key,
            has_comment=bool(revision.comment),
        )


def content_hash(card: Any) -> str:
    """`sha256:<64 hex>` of the canonical JSON of `card` (sorted keys, compact, UTF-8): what a
    delivery keeps instead of the answer (the answer body is never stored)."""
    canonical = json.dumps(card, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    return "sha256:" + hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def has_detail_step(policy: dict[str, Any]) -> bool:
    """True when a negative choice opens the reasons / comment form (reasons or comment on)."""
    followup = policy.get("negative_followup") or {}
    return bool(followup.get("reasons")) or bool((followup.get("comment") or {}).get("enabled"))


def localized(item: dict[str, Any], field: str = "label") -> str:
    """`item[field + "_en"]` while English is active and the item has that English form, else
    `item[field]` (a policy label or placeholder: the main form is the bot's wording)."""
    english = item.get(f"{field}_en")
    if english and (translation.get_language() or "").startswith("en"):
        return english
    return item.get(field) or ""


def button_label(policy: dict[str, Any], verdict_key: str) -> str:
    """The label of `verdict_key` in the snapshot in the active language (`localized`), or the
    key itself when it is not there."""
    for button in policy.get("buttons") or []:
        if button.get("key") == verdict_key:
            return localized(button) or verdict_key
    return verdict_key


def reason_label(policy: dict[str, Any], reason_key: str) -> str:
    """The label of negative reason `reason_key` in the snapshot in the active language (or
    the key)."""
    for reason in (policy.get("negative_followup") or {}).get("reasons") or []:
        if reason.get("key") == reason_key:
            return localized(reason) or reason_key
    return reason_key


def is_locked(policy: dict[str, Any], choice: Choice | None) -> bool:
    """Buttons are shown disabled: reselect is off, only the requester may answer, and they
    did (with other audiences the card stays open for the others; the server still refuses a
    second choice per operator)."""
    return (
        choice is not None
        and not policy.get("allow_reselect")
        and policy.get("audience", "requester") == "requester"
    )


def feedback_area(
    policy: dict[str, Any], delivery_id: str, choice: Choice | None
) -> dict[str, dict[str, Any]]:
    """The feedback area for one state: `{element_id: component}` in card order (AREA_IDS).

    `policy` is the delivery's policy snapshot (`botadmin.policy` shape); `choice` the current
    revision. Pure. Every text is in Chinese and English (`interactions.render.bilingual`;
    labels use their `label_en` / `placeholder_en` in English), `content` in the snapshot's
    `card_language` (default `CARD_LANGUAGE`).
    """
    language = policy.get("card_language") or CARD_LANGUAGE
    return bilingual(lambda: _area(policy, delivery_id, choice), language)


def _area(
    policy: dict[str, Any], delivery_id: str, choice: Choice | None
) -> dict[str, dict[str, Any]]:
    rev = choice.revision_id if choice else ""
    return {
        DIVIDER: {"tag": "hr", "element_id": DIVIDER},
        STATUS: _status(policy, choice),
        BUTTONS: _buttons(policy, delivery_id, choice, rev),
        DETAIL: _detail(policy, delivery_id, choice, rev),
        FOOTER: {
            "tag": "markdown",
            "element_id": FOOTER,
            "content": _("Feedback is recorded by Cardloop"),
            "text_size": "notation",
        },
    }


def _status(policy: dict[str, Any], choice: Choice | None) -> dict[str, Any]:
    if choice is None:
        content = _("Was this answer helpful?")
    else:
        content = _("Selected: **%(label)s**") % {"label": button_label(policy, choice.verdict_key)}
        if choice.reason_key:
            content += " · " + _("Reason: %(label)s") % {
                "label": reason_label(policy, choice.reason_key)
            }
    return {"tag": "markdown", "element_id": STATUS, "content": content}


def _buttons(
    policy: dict[str, Any], delivery_id: str, choice: Choice | None, rev: str
) -> dict[str, Any]:
    locked = is_locked(policy, choice)
    visible = set(policy.get("visible_semantics") or [])
    columns = []
    for button in policy.get("buttons") or []:
        if visible and button.get("semantic") not in visible:
            continue
        key = button["key"]
        chosen = choice is not None and choice.verdict_key == key
        label = localized(button) or key
        columns.append(
            {
                "tag": "column",
                "width": "auto",
                "elements": [
                    {
                        "tag": "button",
                        "name": f"fb_{key}",
                        "text": {"tag": "plain_text", "content": f"✓ {label}" if chosen else label},
                        "type": button.get("style") or "default",
                        "size": "small",
                        "disabled": locked,
                        "behaviors": callback_behaviors(
                            {"kind": "feedback", "delivery": delivery_id, "key": key, "rev": rev}
                        ),
                    }
                ],
            }
        )
    return {
        "tag": "column_set",
        "element_id": BUTTONS,
        "flex_mode": "none",
        "horizontal_spacing": "8px",
        "columns": columns,
    }


def audience_hint(policy: dict[str, Any]) -> str:
    """Who may give feedback on an answer with snapshot `policy`, in the active language (and
    that the choice can be changed, when reselect is on)."""
    audience = policy.get("audience", "requester")
    if audience == "everyone":
        hint = _("Anyone in this chat can give feedback")
    elif audience == "reviewers":
        hint = _("Only the designated reviewers can give feedback")
    else:
        hint = _("Only the person who asked can give feedback")
    if policy.get("allow_reselect"):
        hint += " · " + _("you can change your choice")
    return hint


def _detail(
    policy: dict[str, Any], delivery_id: str, choice: Choice | None, rev: str
) -> dict[str, Any]:
    negative = choice is not None and choice.semantic == "negative"
    if negative and choice.has_details:
        content = _("Details added, thank you") if choice.has_comment else _("Reason recorded")
        return {
            "tag": "markdown",
            "element_id": DETAIL,
            "content": content,
            "text_size": "notation",
        }
    if not negative or not has_detail_step(policy):
        return {
            "tag": "markdown",
            "element_id": DETAIL,
            "content": audience_hint(policy),
            "text_size": "notation",
        }
    followup = policy.get("negative_followup") or {}
    comment = followup.get("comment") or {}
    elements: list[dict[str, Any]] = [
        {"tag": "markdown", "content": _("What was wrong? (optional details)")}
    ]
    reasons = followup.get("reasons") or []
    if reasons:
        elements.append(
            {
                "tag": "select_static",
                "name": REASON_FIELD,
                "required": False,
                "placeholder": {"tag": "plain_text", "content": _("Choose a reason")},
                "options": [
                    {"text": {"tag": "plain_text", "content": localized(r)}, "value": r["key"]}
                    for r in reasons
                ],
            }
        )
    if comment.get("enabled"):
        elements.append(
            {
                "tag": "input",
                "name": COMMENT_FIELD,
                "required": bool(comment.get("required")),
                "input_type": "multiline_text",
                "rows": 3,
                "placeholder": {
                    "tag": "plain_text",
                    "content": (localized(comment, "placeholder") or _("Add details"))[:100],
                },
            }
        )
    elements.append(
        {
            "tag": "button",
            "name": SUBMIT_NAME,
            "text": {"tag": "plain_text", "content": _("Submit")},
            "type": "primary",
            "form_action_type": "submit",
            "behaviors": callback_behaviors(
                {"kind": "feedback_detail", "delivery": delivery_id, "rev": rev}
            ),
        }
    )
    return {"tag": "form", "element_id": DETAIL, "name": FORM_NAME, "elements": elements}


class ReservedIds(ValueError):
    """The caller's card uses element_ids or names reserved for the feedback area."""

    def __init__(self, problems: list[str]):
        self.problems = problems
        super().__init__("; ".join(problems))


def reserved_problems(card: dict[str, Any]) -> list[str]:
    """Paths in the caller's card whose `element_id` or `name` starts with `fb_` (reserved)."""
    problems: list[str] = []

    def visit(node: Any, path: str) -> None:
        if not isinstance(node, dict):
            return
        for attr in ("element_id", "name"):
            value = node.get(attr)
            if isinstance(value, str) and value.startswith(RESERVED_PREFIX):
                problems.append(
                    f"{path}.{attr}: {value!r} is reserved for Cardloop's feedback area"
                )
        for key in ("elements", "columns"):
            children = node.get(key)
            if isinstance(children, list):
                for index, child in enumerate(children):
                    visit(child, f"{path}.{key}[{index}]")

    body = card.get("body") if isinstance(card, dict) else None
    elements = body.get("elements") if isinstance(body, dict) else None
    for index, element in enumerate(elements if isinstance(elements, list) else []):
        visit(element, f"$.body.elements[{index}]")
    return problems


def compose(card: dict[str, Any], area: dict[str, dict[str, Any]] | None) -> dict[str, Any]:
    """The card to send: a deep copy of the caller's `card` with `config.update_multi: true`
    (a shared card, which CardKit can update for every viewer) and `area` (from `feedback_area`, or None for no feedback)
    appended to `body.elements`. Raises `ReservedIds` when the caller's card uses `fb_` ids."""
    problems = reserved_problems(card)
    if problems:
        raise ReservedIds(problems)
    result = copy.deepcopy(card)
    config = result.get("config")
    if not isinstance(config, dict):
        config = result["config"] = {}
    config["update_multi"] = True
    if area:
        body = result.setdefault("body", {})
        if isinstance(body, dict):
            elements = body.setdefault("elements", [])
            if isinstance(elements, list):
                elements.extend(area[element_id] for element_id in AREA_IDS if element_id in area)
    return result
