"""Card JSON 2.0: the validator every card renderer's tests use, and pure helpers for the
card-update queue (element replacement, merging queued updates).

No I/O and no Django here: state in, dict or problems out.

Rules from Feishu's Card JSON 2.0 documentation, and what Feishu does otherwise: a button
carries its callback value in `behaviors` (a top-level `value` is not sent back), a card in a
callback answer must be valid 2.0 (else the whole answer is rejected), and
`config.update_multi` stays true before and after an update (else the card is updated only
for the person who clicked).
"""

from __future__ import annotations

import copy
import json
import re
from typing import Any

#: Feishu rejects cards above 30 KB for send, patch and update (errors 230025 / 200860).
MAX_CARD_BYTES = 30 * 1024
#: At most 200 components per 2.0 card.
MAX_COMPONENTS = 200
#: Containers nest at most 5 levels.
MAX_CONTAINER_DEPTH = 5
#: element_id: letters, digits and `_`, starting with a letter, at most 20 characters.
ELEMENT_ID_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,19}$")

#: Tags removed in schema 2.0 (patch sub-error 200861).
REMOVED_TAGS = frozenset({"action", "note"})
#: Components that contain other components.
CONTAINER_TAGS = frozenset(
    {"column_set", "column", "form", "collapsible_panel", "interactive_container"}
)
#: Interactive components that need a card-unique, non-empty `name` inside a form (200530).
FORM_FIELD_TAGS = frozenset(
    {
        "input",
        "select_static",
        "multi_select_static",
        "select_person",
        "multi_select_person",
        "select_img",
        "date_picker",
        "picker_time",
        "picker_datetime",
        "checker",
        "button",
    }
)
#: Tagged property objects that are not components (not counted, not walked).
TEXT_OBJECT_TAGS = frozenset({"plain_text", "lark_md", "standard_icon", "custom_icon"})
#: Keys under which a component holds child components.
CHILD_KEYS = ("elements", "columns")

#: Locale keys of Feishu's multilingual cards (16 languages).
CARD_LOCALES = frozenset(
    {
        "zh_cn",
        "en_us",
        "zh_hk",
        "zh_tw",
        "ja_jp",
        "id_id",
        "vi_vn",
        "th_th",
        "pt_br",
        "es_es",
        "ko_kr",
        "de_de",
        "fr_fr",
        "it_it",
        "ru_ru",
        "ms_my",
    }
)
#: Component-level multilingual fields of Card JSON 2.0: field → the field it translates and
#: the tags that may carry it (`i18n_content` on text objects and markdown, `i18n_default_value`
#: on an input, `i18n_img_key` on an image). 2.0 has no card-wide `i18n_elements`/`i18n_header`.
I18N_FIELDS: dict[str, tuple[str, frozenset[str]]] = {
    "i18n_content": ("content", frozenset({"plain_text", "lark_md", "markdown"})),
    "i18n_default_value": ("default_value", frozenset({"input"})),
    "i18n_img_key": ("img_key", frozenset({"img"})),
}
#: Card-wide multilingual fields of schema 1.0, refused by 2.0.
GLOBAL_I18N_FIELDS = ("i18n_elements", "i18n_header")
#: Properties whose content is the caller's data, not card structure (callback values).
OPAQUE_KEYS = frozenset({"behaviors", "value"})
#: Button text and placeholders hold at most 100 characters (in every language).
TEXT_LIMIT = 100


def card_bytes(card: Any) -> bytes:
    """The compact UTF-8 JSON of `card`, as Cardloop sends it (what the 30 KB limit counts)."""
    return json.dumps(card, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def validate_card(card: Any) -> list[str]:
    """Check a Card JSON 2.0 object; returns a list of problems (empty = valid).

    Each problem is `"<json path>: <what is wrong>"`. Checked: `schema` is "2.0";
    `config.update_multi` is true; elements live under `body.elements` (no top-level
    `elements`); no `action`/`note` tags; a button outside a form has no top-level `value`
    (its callback value lives in `behaviors`) and no `form_action_type`; a form button uses
    `form_action_type` (not the old `action_type`), and a submit button has a `name`;
    `multi_select_static` only inside a form; forms only directly in `body.elements`, not nested,
    each with at least one submit button; every form component has a non-empty `name`; `name`s
    and `element_id`s are unique in the card; `element_id` matches `ELEMENT_ID_RE`; at most
    30 KB of JSON, 200 components and 5 nested container levels. Multilingual text (Feishu,
    "Configure multilingual cards": https://open.feishu.cn/document/feishu-cards/configure-multi-language-content):
    no card-wide `i18n_elements` / `i18n_header` (schema 2.0 refuses them); `i18n_content`,
    `i18n_default_value`, `i18n_img_key` only on the tags of `I18N_FIELDS`, each an object of
    `CARD_LOCALES` keys to strings; button text and placeholders at most 100 characters in
    every language.
    """
    problems: list[str] = []
    if not isinstance(card, dict):
        return ["$: a card must be a JSON object"]
    if card.get("schema") != "2.0":
        problems.append('$.schema: must be "2.0"')
    config = card.get("config")
    if not isinstance(config, dict) or config.get("update_multi") is not True:
        problems.append("$.config.update_multi: must be true (shared card, updatable)")
    if "elements" in card:
        problems.append("$.elements: schema 2.0 puts elements under body.elements")
    body = card.get("body")
    elements = body.get("elements") if isinstance(body, dict) else None
    if not isinstance(elements, list):
        problems.append("$.body.elements: must be a list of components")
        elements = []

    for name in GLOBAL_I18N_FIELDS:
        if name in card:
            problems.append(
                f"$.{name}: schema 2.0 has no card-wide multilingual content; use i18n_content"
            )
    _check_i18n(card, "$", problems)

    state = _WalkState()
    for index, element in enumerate(elements):
        _walk(element, f"$.body.elements[{index}]", state, problems, depth=0, form=None, root=True)

    if state.components > MAX_COMPONENTS:
        problems.append(f"$: {state.components} components; at most {MAX_COMPONENTS}")
    size = len(card_bytes(card))
    if size > MAX_CARD_BYTES:
        problems.append(f"$: {size} bytes of JSON; at most {MAX_CARD_BYTES}")
    return problems


class _WalkState:
    def __init__(self) -> None:
        self.components = 0
        self.names: dict[str, str] = {}
        self.element_ids: dict[str, str] = {}


class _Form:
    def __init__(self) -> None:
        self.submit_buttons = 0


def _walk(
    node: Any,
    path: str,
    state: _WalkState,
    problems: list[str],
    *,
    depth: int,
    form: _Form | None,
    root: bool = False,
) -> None:
    if not isinstance(node, dict):
        problems.append(f"{path}: a component must be a JSON object")
        return
    tag = node.get("tag")
    if not isinstance(tag, str) or not tag:
        problems.append(f"{path}: a component needs a tag")
        return
    if tag in TEXT_OBJECT_TAGS:
        return
    state.components += 1

    if tag in REMOVED_TAGS:
        problems.append(f"{path}: tag {tag!r} does not exist in schema 2.0 (use column_set)")

    element_id = node.get("element_id")
    if element_id is not None:
        if not isinstance(element_id, str) or not ELEMENT_ID_RE.match(element_id):
            problems.append(
                f"{path}.element_id: {element_id!r} must be letters, digits or _, "
                "start with a letter, at most 20 characters"
            )
        elif element_id in state.element_ids:
            problems.append(
                f"{path}.element_id: {element_id!r} is also used at {state.element_ids[element_id]}"
            )
        else:
            state.element_ids[element_id] = path

    name = node.get("name")
    if isinstance(name, str) and name:
        if name in state.names:
            problems.append(f"{path}.name: {name!r} is also used at {state.names[name]}")
        else:
            state.names[name] = path
    elif form is not None and tag in FORM_FIELD_TAGS:
        problems.append(f"{path}.name: a {tag} inside a form needs a non-empty name (200530)")

    if tag == "multi_select_static" and form is None:
        problems.append(f"{path}: multi_select_static is only allowed inside a form")

    if tag == "button":
        _check_button(node, path, problems, form)

    child_form = form
    if tag == "form":
        if not root:
            problems.append(f"{path}: a form may only sit directly in body.elements")
        if form is not None:
            problems.append(f"{path}: forms cannot be nested")
        if not (isinstance(name, str) and name):
            problems.append(f"{path}.name: a form needs a non-empty name")
        child_form = _Form()
    if tag == "table" and form is not None:
        problems.append(f"{path}: a table cannot sit inside a form")

    child_depth = depth + 1 if tag in CONTAINER_TAGS else depth
    if tag in CONTAINER_TAGS and child_depth > MAX_CONTAINER_DEPTH:
        problems.append(
            f"{path}: containers nested {child_depth} deep; at most {MAX_CONTAINER_DEPTH}"
        )
    for key in CHILD_KEYS:
        children = node.get(key)
        if children is None:
            continue
        if not isinstance(children, list):
            problems.append(f"{path}.{key}: must be a list")
            continue
        for index, child in enumerate(children):
            _walk(
                child, f"{path}.{key}[{index}]", state, problems, depth=child_depth, form=child_form
            )

    if tag == "form" and child_form is not None and child_form.submit_buttons == 0:
        problems.append(f"{path}: a form needs at least one button with form_action_type submit")


def _check_i18n(node: Any, path: str, problems: list[str]) -> None:
    """Every component-level multilingual field anywhere in the card: on a tag that takes it,
    an object of Feishu locale keys to strings; a button's text and a placeholder at most
    `TEXT_LIMIT` characters in every language."""
    if isinstance(node, list):
        for index, child in enumerate(node):
            _check_i18n(child, f"{path}[{index}]", problems)
        return
    if not isinstance(node, dict):
        return
    tag = node.get("tag")
    for key, value in node.items():
        if key.startswith("i18n_") and key not in GLOBAL_I18N_FIELDS:
            where = f"{path}.{key}"
            spec = I18N_FIELDS.get(key)
            if spec is None:
                problems.append(f"{where}: unknown multilingual field")
            elif tag not in spec[1]:
                problems.append(f"{where}: only {', '.join(sorted(spec[1]))} take {key}")
            elif not isinstance(value, dict) or not value:
                problems.append(f"{where}: must be an object of locale → text")
            else:
                for locale, text in value.items():
                    if locale not in CARD_LOCALES:
                        problems.append(f"{where}.{locale}: not a Feishu card locale")
                    elif not isinstance(text, str):
                        problems.append(f"{where}.{locale}: must be a string")
        elif isinstance(value, dict | list) and key not in OPAQUE_KEYS:
            _check_i18n(value, f"{path}.{key}", problems)
    if tag == "button":
        _check_limit(node.get("text"), f"{path}.text", problems)
    if tag in FORM_FIELD_TAGS:
        _check_limit(node.get("placeholder"), f"{path}.placeholder", problems)


def _check_limit(text: Any, path: str, problems: list[str]) -> None:
    if not isinstance(text, dict):
        return
    variants = {"content": text.get("content")}
    i18n = text.get("i18n_content")
    if isinstance(i18n, dict):
        variants.update({f"i18n_content.{k}": v for k, v in i18n.items()})
    for where, value in variants.items():
        if isinstance(value, str) and len(value) > TEXT_LIMIT:
            problems.append(f"{path}.{where}: {len(value)} characters; at most {TEXT_LIMIT}")


def merge_locales(renders: dict[str, Any], default: str) -> Any:
    """One card (or component tree) from the same renderer's output in several languages.

    `renders` maps a Feishu locale (`zh_cn`, `en_us`) to the tree rendered in it; the result
    is a deep copy of `renders[default]` where every translatable field (`content` of a text
    object or markdown, an input's `default_value`) that differs between languages also carries
    its component-level multilingual field (`i18n_content`: `{locale: text}` for every locale).
    Feishu shows each reader the text of their client's language and `content` elsewhere.
    Parts whose shape differs between languages are left in the default language. Pure.
    """
    return _merged(renders[default], dict(renders))


def _merged(node: Any, variants: dict[str, Any]) -> Any:
    """A new tree: `node` (the default language's) with the multilingual fields added. Built
    node by node rather than `copy.deepcopy` and then changed in place (a deep copy's memo
    made it most of the merge's cost, on every click that repaints a card); only parts whose
    shape differs between languages are deep-copied as they are."""
    if isinstance(node, list):
        if all(isinstance(v, list) and len(v) == len(node) for v in variants.values()):
            return [
                _merged(child, {loc: v[index] for loc, v in variants.items()})
                for index, child in enumerate(node)
            ]
        return copy.deepcopy(node)
    if not isinstance(node, dict):
        return node  # str, number, bool or None: immutable
    if not all(isinstance(v, dict) for v in variants.values()):
        return copy.deepcopy(node)
    merged: dict[str, Any] = {}
    for key, value in node.items():
        if not isinstance(value, dict | list):
            merged[key] = value
        elif key.startswith("i18n_"):
            merged[key] = copy.deepcopy(value)
        else:
            merged[key] = _merged(value, {loc: v.get(key) for loc, v in variants.items()})
    tag = node.get("tag")
    for i18n_key, (field, tags) in I18N_FIELDS.items():
        if tag in tags and isinstance(node.get(field), str) and i18n_key not in node:
            texts = {loc: v.get(field) for loc, v in variants.items()}
            if all(isinstance(t, str) for t in texts.values()) and len(set(texts.values())) > 1:
                merged[i18n_key] = texts
    return merged


def _check_button(node: dict, path: str, problems: list[str], form: _Form | None) -> None:
    if "action_type" in node:
        problems.append(f"{path}.action_type: the 2.0 name is form_action_type")
    behaviors = node.get("behaviors")
    if behaviors is not None:
        if not isinstance(behaviors, list):
            problems.append(f"{path}.behaviors: must be a list")
        else:
            for index, behavior in enumerate(behaviors):
                kind = behavior.get("type") if isinstance(behavior, dict) else None
                if kind == "callback" and "value" not in behavior:
                    problems.append(f"{path}.behaviors[{index}]: a callback needs a value")
                elif kind not in ("callback", "open_url"):
                    problems.append(f"{path}.behaviors[{index}]: type must be callback or open_url")
    if form is None:
        if "value" in node:
            problems.append(
                f"{path}.value: a 2.0 button outside a form carries its value in "
                'behaviors [{"type":"callback","value":…}], not at the top level (Feishu does not send that back)'
            )
        if "form_action_type" in node:
            problems.append(f"{path}.form_action_type: only buttons inside a form submit it")
        return
    action = node.get("form_action_type")
    if action == "submit":
        form.submit_buttons += 1
    elif action not in (None, "reset"):
        problems.append(f"{path}.form_action_type: must be submit or reset")


# ---------------------------------------------------------------------------------------------
# Helpers for the card-update queue
# ---------------------------------------------------------------------------------------------


def replace_elements(card: dict, elements: dict[str, dict]) -> tuple[dict, set[str]]:
    """Return a copy of `card` with every component whose `element_id` is a key of `elements`
    replaced by that element (which keeps the `element_id`), and the set of ids not found."""
    result = copy.deepcopy(card)
    missing = set(elements)

    def visit(node: Any) -> Any:
        if isinstance(node, dict):
            element_id = node.get("element_id")
            if isinstance(element_id, str) and element_id in elements:
                missing.discard(element_id)
                replacement = copy.deepcopy(elements[element_id])
                replacement["element_id"] = element_id
                return replacement
            for key in CHILD_KEYS:
                if isinstance(node.get(key), list):
                    node[key] = [visit(child) for child in node[key]]
        return node

    body = result.get("body")
    if isinstance(body, dict) and isinstance(body.get("elements"), list):
        body["elements"] = [visit(child) for child in body["elements"]]
    return result, missing


def merge_updates(
    older_card: dict | None,
    older_elements: dict[str, dict],
    newer_card: dict | None,
    newer_elements: dict[str, dict],
) -> tuple[dict | None, dict[str, dict], set[str]]:
    """Merge two queued updates of one card, the newer winning.

    Returns `(card, elements, dropped)`: a whole card when either side has one (a newer whole
    card replaces everything; newer element updates are folded into an older whole card by
    `element_id`), otherwise the union of element updates with the newer value per id.
    `dropped` lists element ids that had no matching component in the whole card.
    """
    if newer_card is not None:
        card, dropped = (
            replace_elements(newer_card, newer_elements)
            if newer_elements
            else (
                newer_card,
                set(),
            )
        )
        return card, {}, dropped
    if older_card is not None:
        card, dropped = replace_elements(older_card, {**older_elements, **newer_elements})
        return card, {}, dropped
    return None, {**older_elements, **newer_elements}, set()


def callback_behaviors(value: dict[str, Any]) -> list[dict[str, Any]]:
    """`behaviors` for a 2.0 button whose click sends `value` to Cardloop's callback (a
    top-level `value` is not sent back by Card JSON 2.0)."""
    return [{"type": "callback", "value": value}]


def describe_card(card: Any) -> str:
    """`"<n> bytes"`: how Open API calls are logged (never the card's text)."""
    return f"{len(card_bytes(card))} bytes"
