"""Slack's limits on a message's Block Kit blocks, checked before anything is sent (pure).

`problems(blocks)` lists what Slack would refuse, as `$.blocks[i]…` paths with the rule broken,
so an API caller gets a 400 naming the field instead of Slack's bare `invalid_blocks`.

Rules (https://api.slack.com/reference/block-kit/blocks,
https://api.slack.com/reference/block-kit/block-elements,
https://api.slack.com/reference/block-kit/composition-objects):

| what | limit |
|---|---|
| blocks per message | 50 |
| `block_id`, `action_id` | ≤ 255 characters, each unique within the message |
| a section's `text`, a `fields` entry | ≤ 3000 / 2000 characters |
| a header's text | ≤ 150 characters |
| a context block | ≤ 10 elements |
| an actions block | ≤ 25 elements |
| a button's text / `value` / `url` | ≤ 75 / 2000 / 3000 characters |
| a static select | ≤ 100 options; an option's text ≤ 75, its `value` ≤ 150 characters |
| an input's `label` / `hint` | ≤ 2000 characters |
| a plain-text input's `max_length` | ≤ 3000 |
| placeholder | ≤ 150 characters |
"""

from __future__ import annotations

from typing import Any

MAX_BLOCKS = 50
MAX_ID = 255
MAX_SECTION_TEXT = 3000
MAX_FIELD_TEXT = 2000
MAX_HEADER_TEXT = 150
MAX_CONTEXT_ELEMENTS = 10
MAX_ACTIONS_ELEMENTS = 25
MAX_BUTTON_TEXT = 75
MAX_BUTTON_VALUE = 2000
MAX_URL = 3000
MAX_OPTIONS = 100
MAX_OPTION_TEXT = 75
MAX_OPTION_VALUE = 150
MAX_LABEL = 2000
MAX_PLACEHOLDER = 150
MAX_INPUT_LENGTH = 3000
#: The block types Slack accepts in a message (`input` included: its values arrive in the
#: `state.values` of a later `block_actions` payload).
MESSAGE_BLOCK_TYPES = frozenset(
    {
        "actions",
        "context",
        "divider",
        "file",
        "header",
        "image",
        "input",
        "rich_text",
        "section",
        "video",
        "markdown",
    }
)


def _text_of(obj: Any) -> str:
    if isinstance(obj, dict):
        text = obj.get("text")
        return text if isinstance(text, str) else ""
    return ""


def problems(blocks: Any) -> list[str]:
    """Every limit `blocks` (a message's Block Kit list) breaks, as `"<path>: <rule>"` strings
    in message order; `[]` when Slack would accept it. Pure; never raises."""
    if not isinstance(blocks, list):
        return ["$.blocks: must be a list of Block Kit blocks"]
    found: list[str] = []
    if len(blocks) > MAX_BLOCKS:
        found.append(f"$.blocks: {len(blocks)} blocks; Slack allows at most {MAX_BLOCKS}")
    block_ids: dict[str, str] = {}
    action_ids: dict[str, str] = {}

    def too_long(path: str, value: Any, limit: int) -> None:
        if isinstance(value, str) and len(value) > limit:
            found.append(f"{path}: {len(value)} characters; at most {limit}")

    def unique(path: str, value: Any, seen: dict[str, str], name: str) -> None:
        if value is None:
            return
        if not isinstance(value, str) or not value:
            found.append(f"{path}.{name}: must be a non-empty string")
            return
        too_long(f"{path}.{name}", value, MAX_ID)
        if value in seen:
            found.append(f"{path}.{name}: {value!r} is already used at {seen[value]}")
        else:
            seen[value] = path

    def element(path: str, el: Any) -> None:
        if not isinstance(el, dict):
            found.append(f"{path}: must be an object")
            return
        unique(path, el.get("action_id"), action_ids, "action_id")
        kind = el.get("type")
        if kind == "button":
            too_long(f"{path}.text", _text_of(el.get("text")), MAX_BUTTON_TEXT)
            too_long(f"{path}.value", el.get("value"), MAX_BUTTON_VALUE)
            too_long(f"{path}.url", el.get("url"), MAX_URL)
        if "placeholder" in el:
            too_long(f"{path}.placeholder", _text_of(el.get("placeholder")), MAX_PLACEHOLDER)
        options = el.get("options")
        if isinstance(options, list):
            if len(options) > MAX_OPTIONS:
                found.append(f"{path}.options: {len(options)} options; at most {MAX_OPTIONS}")
            for j, option in enumerate(options):
                if isinstance(option, dict):
                    too_long(
                        f"{path}.options[{j}].text", _text_of(option.get("text")), MAX_OPTION_TEXT
                    )
                    too_long(f"{path}.options[{j}].value", option.get("value"), MAX_OPTION_VALUE)
        max_length = el.get("max_length")
        if isinstance(max_length, int) and max_length > MAX_INPUT_LENGTH:
            found.append(f"{path}.max_length: at most {MAX_INPUT_LENGTH}")

    for i, block in enumerate(blocks[: MAX_BLOCKS * 2]):
        path = f"$.blocks[{i}]"
        if not isinstance(block, dict):
            found.append(f"{path}: must be an object")
            continue
        kind = block.get("type")
        if kind not in MESSAGE_BLOCK_TYPES:
            found.append(f"{path}.type: {kind!r} is not a message block type")
        unique(path, block.get("block_id"), block_ids, "block_id")
        if kind == "section":
            too_long(f"{path}.text", _text_of(block.get("text")), MAX_SECTION_TEXT)
            for j, field in enumerate(block.get("fields") or []):
                too_long(f"{path}.fields[{j}]", _text_of(field), MAX_FIELD_TEXT)
            if "accessory" in block:
                element(f"{path}.accessory", block["accessory"])
        elif kind == "header":
            too_long(f"{path}.text", _text_of(block.get("text")), MAX_HEADER_TEXT)
        elif kind in ("actions", "context"):
            elements = block.get("elements")
            limit = MAX_ACTIONS_ELEMENTS if kind == "actions" else MAX_CONTEXT_ELEMENTS
            if not isinstance(elements, list) or not elements:
                found.append(f"{path}.elements: must be a non-empty list")
                continue
            if len(elements) > limit:
                found.append(f"{path}.elements: {len(elements)} elements; at most {limit}")
            if kind == "actions":
                for j, el in enumerate(elements):
                    element(f"{path}.elements[{j}]", el)
        elif kind == "input":
            too_long(f"{path}.label", _text_of(block.get("label")), MAX_LABEL)
            too_long(f"{path}.hint", _text_of(block.get("hint")), MAX_LABEL)
            element(f"{path}.element", block.get("element"))
    return found
