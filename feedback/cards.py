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
import dataclasses
import functools
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


@dataclass(frozen=True)
class AreaButton:
    """One verdict button of the area: policy `key`, `label` in the active language
    (`localized`), `semantic` (positive | neutral | negative), the policy's `style` ("" when
    none) and whether it is the current choice (`chosen`)."""

    key: str
    label: str
    semantic: str
    style: str = ""
    chosen: bool = False


@dataclass(frozen=True)
class AreaReason:
    """One negative reason offered in the follow-up: policy `key` and `label` (active
    language)."""

    key: str
    label: str


#: `AreaState.followup`: no follow-up step shown, the reasons/comment step open, details given.
FOLLOWUP_NONE, FOLLOWUP_OPEN, FOLLOWUP_DONE = "none", "open", "done"


@dataclass(frozen=True)
class AreaState:
    """The feedback area of one delivery state, channel-neutral: what every channel's
    renderer (Feishu Card JSON here, Slack Block Kit in `feedback.slack_cards`, Telegram inline
    keyboards in `feedback.telegram_cards`) shows. Built by `area_state`; texts are in the
    language active when it was built.

    - `delivery_id`, `rev`: what every click carries; `rev` is the current revision id ("" before
      the first), the stale-click guard of `feedback.revisions`;
    - `buttons`: the visible verdict buttons in policy order (`visible_semantics` applied);
      `clickable`: False when the choice is final for everyone (`is_locked`: Feishu disables
      them, Slack and Telegram leave them out);
    - `selected`: the chosen button (None before a choice; a key no longer in the snapshot
      gives a button with the key as label), `reason_label` the chosen reason's label ("");
    - `followup`: `FOLLOWUP_OPEN` (negative choice without details and the policy has a
      follow-up: `reasons`, `comment_enabled`, `comment_required`, `comment_placeholder`,
      `comment_max_length` describe it), `FOLLOWUP_DONE` (`detail_text` says what was added) or
      `FOLLOWUP_NONE`;
    - `audience_text`: who may give feedback (`audience_hint`), shown while no follow-up is;
    - `final`: nothing in the area can be clicked any more (not clickable, no open follow-up).
    """

    delivery_id: str
    rev: str
    buttons: tuple[AreaButton, ...]
    clickable: bool
    selected: AreaButton | None
    reason_label: str
    followup: str
    reasons: tuple[AreaReason, ...]
    comment_enabled: bool
    comment_required: bool
    comment_placeholder: str
    comment_max_length: int
    detail_text: str
    audience_text: str

    @property
    def final(self) -> bool:
        return not self.clickable and self.followup != FOLLOWUP_OPEN


def area_state(policy: dict[str, Any], delivery_id: str, choice: Choice | None) -> AreaState:
    """The channel-neutral state of the feedback area of a delivery with snapshot `policy` and
    current revision `choice` (None before any), texts in the active language. Pure.

    The rules (docs/PRODUCT.md §3.3, the feedback area): buttons of the visible semantics in policy order,
    the chosen one marked; locked (not clickable) when reselect is off, only the requester may
    answer and they did; a negative choice without details opens the follow-up when the policy
    has reasons or comments; a choice with details shows what was added instead."""
    visible = set(policy.get("visible_semantics") or [])
    chosen_key = choice.verdict_key if choice is not None else None
    buttons = tuple(
        AreaButton(
            key=button["key"],
            label=localized(button) or button["key"],
            semantic=button.get("semantic") or "",
            style=button.get("style") or "",
            chosen=button["key"] == chosen_key,
        )
        for button in policy.get("buttons") or []
        if not visible or button.get("semantic") in visible
    )
    selected = None
    if choice is not None:
        selected = next((b for b in buttons if b.chosen), None) or AreaButton(
            key=choice.verdict_key,
            label=button_label(policy, choice.verdict_key),
            semantic=choice.semantic,
            chosen=True,
        )
    followup_policy = policy.get("negative_followup") or {}
    comment = followup_policy.get("comment") or {}
    negative = choice is not None and choice.semantic == "negative"
    detail_text = ""
    if negative and choice.has_details:
        followup = FOLLOWUP_DONE
        detail_text = _("Details added, thank you") if choice.has_comment else _("Reason recorded")
    elif negative and has_detail_step(policy):
        followup = FOLLOWUP_OPEN
    else:
        followup = FOLLOWUP_NONE
    return AreaState(
        delivery_id=delivery_id,
        rev=choice.revision_id if choice else "",
        buttons=buttons,
        clickable=not is_locked(policy, choice),
        selected=selected,
        reason_label=reason_label(policy, choice.reason_key)
        if choice and choice.reason_key
        else "",
        followup=followup,
        reasons=tuple(
            AreaReason(r["key"], localized(r) or r["key"])
            for r in followup_policy.get("reasons") or []
        ),
        comment_enabled=bool(comment.get("enabled")),
        comment_required=bool(comment.get("required")),
        comment_placeholder=localized(comment, "placeholder") or _("Add details"),
        comment_max_length=int(comment.get("max_length") or 1000),
        detail_text=detail_text,
        audience_text=audience_hint(policy),
    )


def feedback_area(
    policy: dict[str, Any], delivery_id: str, choice: Choice | None
) -> dict[str, dict[str, Any]]:
    """The feedback area for one state: `{element_id: component}` in card order (AREA_IDS).

    `policy` is the delivery's policy snapshot (`botadmin.policy` shape); `choice` the current
    revision. Pure: renders `area_state`. Every text is in Chinese and English
    (`interactions.render.bilingual`; labels use their `label_en` / `placeholder_en` in
    English), `content` in the snapshot's `card_language` (default `CARD_LANGUAGE`).
    """
    rev = choice.revision_id if choice is not None else ""
    try:
        shown = {k: v for k, v in policy.items() if k not in _NOT_RENDERED}
        policy_text = json.dumps(shown, ensure_ascii=False)
    except (TypeError, ValueError, AttributeError):  # not a stored snapshot: rendered as it is
        policy_text = None
    if policy_text is None or not isinstance(delivery_id, str) or "\x00" in delivery_id + rev:
        return _render_area(policy, delivery_id, choice)
    template = _area_template(
        policy_text, dataclasses.replace(choice, revision_id=_REV_MARK) if choice else None
    )
    text = template.replace(_json_inner(_DELIVERY_MARK), _json_inner(delivery_id))
    return json.loads(text.replace(_json_inner(_REV_MARK), _json_inner(rev)))


def _render_area(
    policy: dict[str, Any], delivery_id: str, choice: Choice | None
) -> dict[str, dict[str, Any]]:
    language = policy.get("card_language") or CARD_LANGUAGE
    return bilingual(lambda: _area(area_state(policy, delivery_id, choice)), language)


#: Snapshot keys that differ from one delivery to the next and that the area never shows (who
#: may click is checked by the click's handler, not drawn): left out of `_area_template`'s key,
#: so a bot's deliveries share their cached areas. A renderer that starts reading one of them
#: must take it off this list (`test_feedback_cards` renders with different values of each).
_NOT_RENDERED = frozenset({"audience_open_ids", "chat_id", "reason"})

#: Stand-ins for the delivery id and the revision id in a cached area (`_area_template`): a NUL
#: character never occurs in either (ids Cardloop makes; PostgreSQL text cannot hold one).
_DELIVERY_MARK, _REV_MARK = "\x00delivery\x00", "\x00rev\x00"


def _json_inner(text: str) -> str:
    """`text` as it appears inside a JSON string (`json.dumps` without the quotes)."""
    return json.dumps(text, ensure_ascii=False)[1:-1]


@functools.lru_cache(maxsize=256)
def _area_template(policy_text: str, choice: Choice | None) -> str:
    """The JSON text of the feedback area of snapshot `policy_text` (its JSON) and `choice`
    with `_DELIVERY_MARK` / `_REV_MARK` where the delivery id and the revision id go.

    Why cached: the area is rendered twice (zh-hans, English) and merged on every click that
    writes a revision or repaints (about 0.2–0.25 ms of CPU), while a bot's deliveries share
    one snapshot and a handful of states (no choice, each verdict, with or without details);
    the ids are the only per-delivery part, and they appear only verbatim, in the callback
    values. Every text comes from the snapshot and the compiled catalogues, which do not change
    while the process runs; `feedback_area` parses a fresh copy for every caller."""
    rendered = _render_area(json.loads(policy_text), _DELIVERY_MARK, choice)
    return json.dumps(rendered, ensure_ascii=False)


def _area(state: AreaState) -> dict[str, dict[str, Any]]:
    return {
        DIVIDER: {"tag": "hr", "element_id": DIVIDER},
        STATUS: {"tag": "markdown", "element_id": STATUS, "content": status_text(state, "**")},
        BUTTONS: _buttons(state),
        DETAIL: _detail(state),
        FOOTER: {
            "tag": "markdown",
            "element_id": FOOTER,
            "content": _("Feedback is recorded by Cardloop"),
            "text_size": "notation",
        },
    }


def status_text(state: AreaState, bold: str = "", escape=None) -> str:
    """The status line of `state` in the active language: the question before a choice, else
    the chosen label (between `bold` marks: `**` for CommonMark, `*` for Slack mrkdwn, "" for
    plain text) and the reason. `escape(label)` escapes user-given labels for the channel's
    markup."""
    if state.selected is None:
        return _("Was this answer helpful?")
    esc = escape or (lambda text: text)
    text = (_("Selected: **%(label)s**") % {"label": esc(state.selected.label)}).replace("**", bold)
    if state.reason_label:
        text += " · " + _("Reason: %(label)s") % {"label": esc(state.reason_label)}
    return text


def _buttons(state: AreaState) -> dict[str, Any]:
    columns = [
        {
            "tag": "column",
            "width": "auto",
            "elements": [
                {
                    "tag": "button",
                    "name": f"fb_{button.key}",
                    "text": {
                        "tag": "plain_text",
                        "content": f"✓ {button.label}" if button.chosen else button.label,
                    },
                    "type": button.style or "default",
                    "size": "small",
                    "disabled": not state.clickable,
                    "behaviors": callback_behaviors(
                        {
                            "kind": "feedback",
                            "delivery": state.delivery_id,
                            "key": button.key,
                            "rev": state.rev,
                        }
                    ),
                }
            ],
        }
        for button in state.buttons
    ]
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


def _note(text: str) -> dict[str, Any]:
    return {"tag": "markdown", "element_id": DETAIL, "content": text, "text_size": "notation"}


def _detail(state: AreaState) -> dict[str, Any]:
    if state.followup == FOLLOWUP_DONE:
        return _note(state.detail_text)
    if state.followup != FOLLOWUP_OPEN:
        return _note(state.audience_text)
    elements: list[dict[str, Any]] = [
        {"tag": "markdown", "content": _("What was wrong? (optional details)")}
    ]
    if state.reasons:
        elements.append(
            {
                "tag": "select_static",
                "name": REASON_FIELD,
                "required": False,
                "placeholder": {"tag": "plain_text", "content": _("Choose a reason")},
                "options": [
                    {"text": {"tag": "plain_text", "content": r.label}, "value": r.key}
                    for r in state.reasons
                ],
            }
        )
    if state.comment_enabled:
        elements.append(
            {
                "tag": "input",
                "name": COMMENT_FIELD,
                "required": state.comment_required,
                "input_type": "multiline_text",
                "rows": 3,
                "placeholder": {"tag": "plain_text", "content": state.comment_placeholder[:100]},
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
                {"kind": "feedback_detail", "delivery": state.delivery_id, "rev": state.rev}
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
