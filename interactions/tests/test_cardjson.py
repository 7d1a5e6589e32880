"""The Card JSON 2.0 validator (Feishu's 2.0 rules: values in `behaviors`, valid answer cards,
`update_multi`) and the pure helpers
the card-update queue uses to merge updates."""

from __future__ import annotations

import copy

import pytest

from interactions.lark.cardjson import (
    MAX_CARD_BYTES,
    callback_behaviors,
    card_bytes,
    merge_updates,
    replace_elements,
    validate_card,
)


def feedback_card() -> dict:
    """A realistic card: markdown, a button row (column_set), a reason form with a submit."""
    return {
        "schema": "2.0",
        "config": {"update_multi": True},
        "header": {"title": {"tag": "plain_text", "content": "Answer"}},
        "body": {
            "elements": [
                {"tag": "markdown", "content": "Was this helpful?", "element_id": "fb_prompt"},
                {
                    "tag": "column_set",
                    "element_id": "fb_buttons",
                    "columns": [
                        {
                            "tag": "column",
                            "width": "auto",
                            "elements": [
                                {
                                    "tag": "button",
                                    "name": "fb_up",
                                    "text": {"tag": "plain_text", "content": "👍"},
                                    "behaviors": callback_behaviors(
                                        {"kind": "feedback", "key": "up"}
                                    ),
                                }
                            ],
                        },
                        {
                            "tag": "column",
                            "width": "auto",
                            "elements": [
                                {
                                    "tag": "button",
                                    "name": "fb_down",
                                    "text": {"tag": "plain_text", "content": "👎"},
                                    "behaviors": callback_behaviors(
                                        {"kind": "feedback", "key": "down"}
                                    ),
                                }
                            ],
                        },
                    ],
                },
                {
                    "tag": "form",
                    "name": "fb_form",
                    "element_id": "fb_form",
                    "elements": [
                        {
                            "tag": "select_static",
                            "name": "fb_reason",
                            "options": [
                                {
                                    "text": {"tag": "plain_text", "content": "Wrong"},
                                    "value": "wrong",
                                }
                            ],
                        },
                        {"tag": "multi_select_static", "name": "fb_tags", "options": []},
                        {"tag": "input", "name": "fb_comment"},
                        {
                            "tag": "button",
                            "name": "fb_submit",
                            "form_action_type": "submit",
                            "text": {"tag": "plain_text", "content": "Send"},
                            "behaviors": callback_behaviors({"kind": "feedback_detail"}),
                        },
                    ],
                },
            ]
        },
    }


def _problems_mention(card: dict, text: str) -> bool:
    return any(text in problem for problem in validate_card(card))


def test_a_well_formed_card_has_no_problems():
    assert validate_card(feedback_card()) == []


def _set(card, path, value):
    node = card
    for part in path[:-1]:
        node = node[part]
    if value is _DELETE:
        del node[path[-1]]
    else:
        node[path[-1]] = value


_DELETE = object()
_UP = ("body", "elements", 1, "columns", 0, "elements", 0)
_FORM = ("body", "elements", 2)
_SUBMIT = (*_FORM, "elements", 3)


@pytest.mark.parametrize(
    ("path", "value", "expected"),
    [
        (("schema",), "1.0", '$.schema: must be "2.0"'),
        (("schema",), _DELETE, '$.schema: must be "2.0"'),
        (("config", "update_multi"), False, "update_multi"),
        (("config",), _DELETE, "update_multi"),
        (("elements",), [], "elements under body.elements"),
        (("body",), _DELETE, "$.body.elements"),
        ((*_UP, "value"), {"kind": "feedback"}, "outside a form carries its value in behaviors"),
        ((*_UP, "form_action_type"), "submit", "only buttons inside a form"),
        ((*_UP, "behaviors"), [{"type": "callback"}], "a callback needs a value"),
        ((*_UP, "action_type"), "form_submit", "form_action_type"),
        (
            (*_SUBMIT, "form_action_type"),
            "reset",
            "at least one button with form_action_type submit",
        ),
        ((*_SUBMIT, "name"), "", "needs a non-empty name"),
        ((*_FORM, "elements", 2, "name"), _DELETE, "input inside a form needs a non-empty name"),
        ((*_FORM, "name"), _DELETE, "a form needs a non-empty name"),
        ((*_FORM, "elements", 0, "name"), "fb_up", "'fb_up' is also used"),
        (("body", "elements", 0, "element_id"), "fb_form", "'fb_form' is also used"),
        (("body", "elements", 0, "element_id"), "1starts_with_digit", "must be letters"),
        (("body", "elements", 0, "element_id"), "a" * 21, "at most 20 characters"),
        (("body", "elements", 0, "element_id"), "has-dash", "must be letters"),
        (("body", "elements", 0, "tag"), "note", "does not exist in schema 2.0"),
        (("body", "elements", 0), {"tag": "action", "actions": []}, "does not exist in schema 2.0"),
    ],
)
def test_each_rule_reports_its_problem(path, value, expected):
    card = feedback_card()
    _set(card, path, value)
    problems = validate_card(card)
    assert any(expected in p for p in problems), problems


def test_multi_select_outside_a_form_is_refused():
    card = feedback_card()
    card["body"]["elements"].append({"tag": "multi_select_static", "name": "loose", "options": []})
    assert _problems_mention(card, "only allowed inside a form")


def test_form_nested_in_a_container_or_another_form_is_refused():
    card = feedback_card()
    form = card["body"]["elements"].pop(2)
    card["body"]["elements"][1]["columns"][0]["elements"].append(form)
    assert _problems_mention(card, "may only sit directly in body.elements")

    card = feedback_card()
    inner = copy.deepcopy(card["body"]["elements"][2])
    for element in [inner, *inner["elements"]]:
        element["name"] = "inner_" + element["name"]
    inner.pop("element_id")
    card["body"]["elements"][2]["elements"].append(inner)
    assert _problems_mention(card, "forms cannot be nested")


def test_form_submit_button_may_sit_in_a_column_inside_the_form():
    card = feedback_card()
    form = card["body"]["elements"][2]
    submit = form["elements"].pop(3)
    form["elements"].append(
        {"tag": "column_set", "columns": [{"tag": "column", "elements": [submit]}]}
    )
    assert validate_card(card) == []


def test_too_large_card_is_refused():
    card = feedback_card()
    card["body"]["elements"].append({"tag": "markdown", "content": "x" * MAX_CARD_BYTES})
    assert len(card_bytes(card)) > MAX_CARD_BYTES
    assert _problems_mention(card, f"at most {MAX_CARD_BYTES}")


def test_size_counts_utf8_bytes_not_characters():
    card = feedback_card()
    card["body"]["elements"].append({"tag": "markdown", "content": "汉" * (MAX_CARD_BYTES // 3)})
    assert len(str(card)) < MAX_CARD_BYTES < len(card_bytes(card))
    assert _problems_mention(card, "bytes of JSON")


def test_more_than_200_components_is_refused_and_text_objects_do_not_count():
    card = feedback_card()
    card["body"]["elements"] = [{"tag": "markdown", "content": str(i)} for i in range(200)]
    assert validate_card(card) == []
    card["body"]["elements"].append({"tag": "hr"})
    assert _problems_mention(card, "201 components")


def test_containers_nested_deeper_than_five_levels_are_refused():
    def nest(levels):
        node = {"tag": "markdown", "content": "deep"}
        for _ in range(levels):
            node = {"tag": "collapsible_panel", "elements": [node]}
        return node

    card = feedback_card()
    card["body"]["elements"] = [nest(5)]
    assert validate_card(card) == []
    card["body"]["elements"] = [nest(6)]
    assert _problems_mention(card, "nested 6 deep")


def test_non_object_inputs_are_reported_not_raised():
    assert validate_card("{}") == ["$: a card must be a JSON object"]
    card = feedback_card()
    card["body"]["elements"].append("text")
    card["body"]["elements"].append({"content": "no tag"})
    problems = validate_card(card)
    assert any("must be a JSON object" in p for p in problems)
    assert any("needs a tag" in p for p in problems)


def test_replace_elements_swaps_components_by_element_id_and_reports_missing_ones():
    card = feedback_card()
    new_status = {"tag": "markdown", "content": "Chosen: 👍"}
    replaced, missing = replace_elements(card, {"fb_prompt": new_status, "nope": {"tag": "hr"}})
    assert replaced["body"]["elements"][0] == {**new_status, "element_id": "fb_prompt"}
    assert missing == {"nope"}
    assert card["body"]["elements"][0]["content"] == "Was this helpful?"  # input untouched


def test_merge_updates_newer_elements_win_and_a_newer_whole_card_replaces_everything():
    a = {"tag": "markdown", "content": "a"}
    b = {"tag": "markdown", "content": "b"}
    c = {"tag": "markdown", "content": "c"}
    card, elements, dropped = merge_updates(None, {"x": a, "y": b}, None, {"y": c})
    assert (card, elements, dropped) == (None, {"x": a, "y": c}, set())

    whole = feedback_card()
    card, elements, _ = merge_updates(None, {"fb_prompt": a}, whole, {})
    assert card == whole and elements == {}

    card, elements, dropped = merge_updates(whole, {}, None, {"fb_prompt": c, "gone": a})
    assert card["body"]["elements"][0]["content"] == "c"
    assert elements == {} and dropped == {"gone"}
