"""Layer validation: every schema limit of a policy layer at its boundary, types, unknown fields, consistency."""

from __future__ import annotations

import copy

import pytest

from botadmin.policy import PolicyError, default_policy, validate_layer


def errors_of(layer) -> list[tuple[str, str]]:
    with pytest.raises(PolicyError) as info:
        validate_layer(layer)
    return info.value.errors


def paths_of(layer) -> set[str]:
    return {path for path, _message in errors_of(layer)}


def button(key, semantic="positive", label=None, **extra):
    return {"key": key, "label": label or key[:24], "semantic": semantic, **extra}


THREE = [button("a", "positive"), button("b", "progress"), button("c", "negative")]


def with_buttons(buttons):
    return {"buttons": buttons}


# --- whole layer ------------------------------------------------------------------------------


def test_empty_layer_is_valid_and_means_inherit_everything():
    assert validate_layer({}) == {}


@pytest.mark.parametrize("value", [None, [], "x", 3, 1.5, True])
def test_a_layer_that_is_not_an_object_is_refused(value):
    assert errors_of(value) == [("", "must be an object")]


def test_partial_layer_is_returned_as_given_without_defaults():
    layer = {"allow_reselect": True, "negative_followup": {"comment": {"required": True}}}
    result = validate_layer(layer)
    assert result == layer
    assert "buttons" not in result and "enabled" not in result
    assert "enabled" not in result["negative_followup"]["comment"]


def test_validation_returns_a_copy_not_the_callers_object():
    layer = {"buttons": copy.deepcopy(THREE)}
    result = validate_layer(layer)
    result["buttons"][0]["label"] = "changed"
    assert layer["buttons"][0]["label"] == "a"


def test_every_problem_is_reported_at_once():
    paths = paths_of(
        {
            "enabled": "yes",
            "allow_reselect": 1,
            "audience": "all",
            "negative_followup": {"comment": {"max_length": 0}},
        }
    )
    assert paths == {
        "enabled",
        "allow_reselect",
        "audience",
        "negative_followup.comment.max_length",
    }


def test_error_string_is_path_style():
    layer = with_buttons([button("a"), button("b", "progress"), button("Bad Key", "negative")])
    with pytest.raises(PolicyError) as info:
        validate_layer(layer)
    assert str(info.value) == "buttons[2].key: must match [a-z0-9_-]+"
    assert info.value.as_dict() == {"buttons[2].key": ["must match [a-z0-9_-]+"]}


# --- unknown fields, at every level ----------------------------------------------------------


@pytest.mark.parametrize(
    ("layer", "path"),
    [
        ({"colour": "red"}, "colour"),
        ({"card": {"elements": []}}, "card"),
        (with_buttons([*THREE[:2], {**THREE[2], "url": "https://x"}]), "buttons[2].url"),
        ({"negative_followup": {"tags": []}}, "negative_followup.tags"),
        (
            {"negative_followup": {"reasons": [{"key": "a", "label": "A", "emoji": "x"}]}},
            "negative_followup.reasons[0].emoji",
        ),
        (
            {"negative_followup": {"comment": {"maxLength": 10}}},
            "negative_followup.comment.maxLength",
        ),
    ],
)
def test_unknown_fields_are_refused_at_every_level(layer, path):
    assert (path, "unknown field") in errors_of(layer)


# --- booleans and choices --------------------------------------------------------------------


@pytest.mark.parametrize(
    "path",
    [
        "enabled",
        "allow_reselect",
        "negative_followup.comment.enabled",
        "negative_followup.comment.required",
    ],
)
@pytest.mark.parametrize("value", [1, 0, "true", None, []])
def test_flags_must_be_real_booleans(path, value):
    layer: dict = {}
    *parents, leaf = path.split(".")
    node = layer
    for part in parents:
        node = node.setdefault(part, {})
    node[leaf] = value
    assert (path, "must be true or false") in errors_of(layer)


@pytest.mark.parametrize("audience", ["requester", "everyone"])
def test_known_audiences_are_accepted(audience):
    assert validate_layer({"audience": audience}) == {"audience": audience}


@pytest.mark.parametrize("audience", ["all", "", "Requester", None])
def test_unknown_audience_is_refused(audience):
    assert errors_of({"audience": audience}) == [
        ("audience", "must be one of requester, reviewers, everyone")
    ]


# --- visible semantics: 1–3 unique -------------------------------------------------------------


def test_one_visible_semantic_is_accepted_with_matching_buttons():
    layer = {
        "visible_semantics": ["positive"],
        "buttons": [button("good"), button("great")],
    }
    assert validate_layer(layer) == layer


def test_three_visible_semantics_are_accepted():
    assert validate_layer({"visible_semantics": ["negative", "positive", "progress"]})


def test_no_visible_semantic_is_refused():
    assert ("visible_semantics", "must have 1 to 3 semantics, got 0") in errors_of(
        {"visible_semantics": []}
    )


def test_four_visible_semantics_are_refused():
    errors = errors_of({"visible_semantics": ["positive", "progress", "negative", "positive"]})
    assert ("visible_semantics", "must have 1 to 3 semantics, got 4") in errors


def test_duplicate_visible_semantic_is_refused():
    assert ("visible_semantics[1]", "duplicate semantic positive") in errors_of(
        {"visible_semantics": ["positive", "positive"]}
    )


def test_unknown_semantic_is_refused():
    assert paths_of({"visible_semantics": ["neutral"]}) == {"visible_semantics[0]"}


# --- buttons: 2–4, key rule, label 1–24, style ---------------------------------------------


def test_two_buttons_are_accepted():
    layer = {
        "visible_semantics": ["positive", "negative"],
        "buttons": [button("y"), button("n", "negative")],
    }
    assert validate_layer(layer) == layer


def test_four_buttons_are_accepted():
    assert validate_layer(with_buttons([*THREE, button("d", "negative")]))


def test_one_button_is_refused():
    assert ("buttons", "must have 2 to 4 buttons, got 1") in errors_of(with_buttons([button("a")]))


def test_five_buttons_are_refused():
    five = [*THREE, button("d", "negative"), button("e", "negative")]
    assert ("buttons", "must have 2 to 4 buttons, got 5") in errors_of(with_buttons(five))


@pytest.mark.parametrize("key", ["a", "conclusive_usable", "x-1_y", "0", "k" * 64])
def test_button_keys_matching_the_rule_are_accepted(key):
    assert validate_layer(with_buttons([button(key), THREE[1], THREE[2]]))


@pytest.mark.parametrize("key", ["Bad Key", "A", "a.b", "ü", "", "a\n", 7, None])
def test_button_keys_outside_the_rule_are_refused(key):
    assert ("buttons[0].key", "must match [a-z0-9_-]+") in errors_of(
        with_buttons([button("x") | {"key": key}, THREE[1], THREE[2]])
    )


def test_button_key_longer_than_64_is_refused():
    assert ("buttons[0].key", "must be at most 64 characters") in errors_of(
        with_buttons([button("k" * 65), THREE[1], THREE[2]])
    )


def test_duplicate_button_key_is_refused():
    layer = with_buttons([button("a"), button("a", "progress"), button("c", "negative")])
    assert errors_of(layer) == [("buttons[1].key", "duplicate key a")]


@pytest.mark.parametrize("label", ["x", "y" * 24, "结" * 24])
def test_button_label_of_1_to_24_characters_is_accepted(label):
    assert validate_layer(with_buttons([button("a", label=label), THREE[1], THREE[2]]))


@pytest.mark.parametrize(
    "label",
    [
        "",
        "y" * 25,
        "结" * 25,
        "   ",
        5,
        None,
        "\u200b",
        " \u200b\u2060 ",
        "\u3164",
        "\u2800",
        "\u0301",
    ],
)
def test_button_label_outside_1_to_24_characters_is_refused(label):
    layer = with_buttons([{**button("a"), "label": label}, THREE[1], THREE[2]])
    assert ("buttons[0].label", "must be a non-blank string of 1 to 24 characters") in errors_of(
        layer
    )


@pytest.mark.parametrize(
    "label",
    ["a\x00b", "two\nlines", "tab\there", "esc\x1b[31m", "x\ud800", "a\u2028b", "ok\u202egnp.exe"],
)
def test_a_label_with_a_control_character_is_refused(label):
    # PostgreSQL's jsonb cannot store NUL, and a card shows none of these
    layer = with_buttons([{**button("a"), "label": label}, THREE[1], THREE[2]])
    assert errors_of(layer) == [("buttons[0].label", "must not contain control characters")]


@pytest.mark.parametrize("style", ["primary", "default", "danger"])
def test_known_button_styles_are_accepted(style):
    assert validate_layer(with_buttons([button("a", style=style), THREE[1], THREE[2]]))


@pytest.mark.parametrize("style", ["secondary", "", None])
def test_unknown_button_style_is_refused(style):
    assert paths_of(with_buttons([button("a", style=style), THREE[1], THREE[2]])) == {
        "buttons[0].style"
    }


@pytest.mark.parametrize("missing", ["key", "label", "semantic"])
def test_button_without_a_required_field_is_refused(missing):
    incomplete = {k: v for k, v in button("a").items() if k != missing}
    assert (f"buttons[0].{missing}", "is required") in errors_of(
        with_buttons([incomplete, *THREE[1:]])
    )


def test_button_that_is_not_an_object_is_refused():
    assert ("buttons[0]", "must be an object") in errors_of(with_buttons(["a", *THREE[1:]]))


# --- reasons: 0–6, key rule, label 1–32 --------------------------------------------------------


def reasons(n, label_len=5):
    return [{"key": f"r{i}", "label": "x" * label_len} for i in range(n)]


@pytest.mark.parametrize("n", [0, 6])
def test_zero_to_six_reasons_are_accepted(n):
    layer = {"negative_followup": {"reasons": reasons(n)}}
    assert validate_layer(layer) == layer


def test_seven_reasons_are_refused():
    assert ("negative_followup.reasons", "must have 0 to 6 reasons, got 7") in errors_of(
        {"negative_followup": {"reasons": reasons(7)}}
    )


def test_reason_label_of_32_characters_is_accepted():
    assert validate_layer({"negative_followup": {"reasons": reasons(1, 32)}})


@pytest.mark.parametrize("label", ["", "x" * 33])
def test_reason_label_outside_1_to_32_characters_is_refused(label):
    layer = {"negative_followup": {"reasons": [{"key": "a", "label": label}]}}
    assert errors_of(layer) == [
        ("negative_followup.reasons[0].label", "must be a non-blank string of 1 to 32 characters")
    ]


def test_reason_key_follows_the_key_rule_and_is_unique():
    layer = {
        "negative_followup": {
            "reasons": [
                {"key": "Wrong", "label": "a"},
                {"key": "ok", "label": "b"},
                {"key": "ok", "label": "c"},
            ]
        }
    }
    assert errors_of(layer) == [
        ("negative_followup.reasons[0].key", "must match [a-z0-9_-]+"),
        ("negative_followup.reasons[2].key", "duplicate key ok"),
    ]


# --- comment: placeholder 1–100, max_length 1–2000 --------------------------------------------


def comment(**fields):
    return {"negative_followup": {"comment": fields}}


@pytest.mark.parametrize("placeholder", ["a", "p" * 100])
def test_placeholder_of_1_to_100_characters_is_accepted(placeholder):
    assert validate_layer(comment(placeholder=placeholder))


@pytest.mark.parametrize("placeholder", ["", "p" * 101, " "])
def test_placeholder_outside_1_to_100_characters_is_refused(placeholder):
    assert errors_of(comment(placeholder=placeholder)) == [
        (
            "negative_followup.comment.placeholder",
            "must be a non-blank string of 1 to 100 characters",
        )
    ]


@pytest.mark.parametrize("n", [1, 1000, 2000])
def test_max_length_from_1_to_2000_is_accepted(n):
    assert validate_layer(comment(max_length=n)) == comment(max_length=n)


@pytest.mark.parametrize("n", [0, 2001, -1, 1000.0, "1000", True, None])
def test_max_length_outside_1_to_2000_or_not_an_integer_is_refused(n):
    assert errors_of(comment(max_length=n)) == [
        ("negative_followup.comment.max_length", "must be an integer from 1 to 2000")
    ]


def test_required_comment_must_be_enabled():
    assert errors_of(comment(enabled=False, required=True)) == [
        ("negative_followup.comment.required", "cannot be true while the comment is disabled")
    ]


def test_disabled_comment_alone_is_valid():
    assert validate_layer(comment(enabled=False)) == comment(enabled=False)


# --- audience and reviewers ------------------------------------------------------------------


def ids(n):
    return [f"ou_{i:032x}" for i in range(n)]


@pytest.mark.parametrize("n", [1, 50])
def test_reviewers_audience_with_1_to_50_open_ids_is_accepted(n):
    layer = {"audience": "reviewers", "reviewers": ids(n)}
    assert validate_layer(layer) == layer


def test_fifty_one_reviewers_are_refused():
    assert ("reviewers", "must have 0 to 50 open_ids, got 51") in errors_of(
        {"audience": "reviewers", "reviewers": ids(51)}
    )


def test_reviewers_audience_without_reviewers_is_refused():
    assert errors_of({"audience": "reviewers"}) == [
        ("reviewers", "must list at least one open_id when audience is reviewers")
    ]
    assert errors_of({"audience": "reviewers", "reviewers": []}) == [
        ("reviewers", "must list at least one open_id when audience is reviewers")
    ]


def test_reviewers_without_the_reviewers_audience_are_refused():
    assert errors_of({"reviewers": ids(1)}) == [
        ("reviewers", "must be empty unless audience is reviewers")
    ]
    assert errors_of({"audience": "everyone", "reviewers": ids(1)}) == [
        ("reviewers", "must be empty unless audience is reviewers")
    ]


@pytest.mark.parametrize(
    "bad", ["on_123", "ou_", "user@example.com", "ou_a b", 5, "ou_" + "a" * 62]
)
def test_reviewer_that_is_not_an_open_id_is_refused(bad):
    assert paths_of({"audience": "reviewers", "reviewers": [bad]}) == {"reviewers[0]"}


def test_duplicate_reviewer_is_refused():
    assert ("reviewers[1]", "duplicate open_id") in errors_of(
        {"audience": "reviewers", "reviewers": ["ou_a", "ou_a"]}
    )


# --- consistency once merged with the defaults ------------------------------------------------


def test_visible_semantic_without_a_button_is_refused():
    layer = with_buttons([button("a"), button("b", "progress")])  # negative visible by default
    assert errors_of(layer) == [("buttons", "semantic negative is visible but has no button")]


def test_button_on_a_hidden_semantic_is_refused():
    layer = {"visible_semantics": ["positive", "negative"], "buttons": THREE}
    assert errors_of(layer) == [
        ("buttons[1].semantic", "button b uses the hidden semantic progress")
    ]


def test_hiding_a_semantic_without_replacing_the_default_buttons_is_refused():
    assert errors_of({"visible_semantics": ["positive", "negative"]}) == [
        ("visible_semantics", "button effective_progress uses the hidden semantic progress")
    ]


def test_reasons_on_a_layer_without_the_negative_semantic_visible_are_refused():
    layer = {
        "visible_semantics": ["positive", "progress"],
        "buttons": [button("a"), button("b", "progress")],
        "negative_followup": {"reasons": reasons(1)},
    }
    assert errors_of(layer) == [
        ("negative_followup.reasons", "reasons need the negative semantic to be visible")
    ]


def test_hiding_negative_without_reasons_is_valid():
    layer = {
        "visible_semantics": ["positive", "progress"],
        "buttons": [button("a"), button("b", "progress")],
    }
    assert validate_layer(layer) == layer


def test_defaults_follow_the_reference_system():
    policy = default_policy()
    assert policy["enabled"] is False
    assert [(b["key"], b["label"], b["semantic"], b["style"]) for b in policy["buttons"]] == [
        ("conclusive_usable", "结论可用", "positive", "primary"),
        ("effective_progress", "有效推进", "progress", "default"),
        ("incorrect", "结论有误", "negative", "danger"),
    ]
    assert policy["negative_followup"] == {
        "reasons": [],
        "comment": {
            "enabled": True,
            "required": False,
            "placeholder": "可以补充哪里需要改进",
            "placeholder_en": "What could be improved?",
            "max_length": 1000,
        },
    }
    assert [b["label_en"] for b in policy["buttons"]] == [
        "Usable conclusion",
        "Real progress",
        "Incorrect",
    ]
    assert (policy["allow_reselect"], policy["audience"], policy["reviewers"]) == (
        False,
        "requester",
        [],
    )
    assert policy["agent_options"] == "off"
    assert validate_layer(policy) == policy  # a full policy is also a valid layer


def test_messages_follow_the_active_language():
    from django.utils import translation

    with translation.override("zh-hans"):
        assert errors_of({"colour": 1}) == [("colour", "未知字段")]


# --- English forms of labels and the placeholder; agent_options ------------------------------


@pytest.mark.parametrize("label", ["a", "e" * 24])
def test_english_button_label_of_1_to_24_characters_is_accepted(label):
    layer = with_buttons([button("a", label_en=label), button("b", "progress"), THREE[2]])
    assert validate_layer(layer) == layer


@pytest.mark.parametrize("label", ["", "e" * 25, " ", "\u200b", 7])
def test_english_button_label_outside_the_label_limits_is_refused(label):
    layer = with_buttons([button("a", label_en=label), button("b", "progress"), THREE[2]])
    assert errors_of(layer) == [
        ("buttons[0].label_en", "must be a non-blank string of 1 to 24 characters")
    ]


def test_english_button_label_with_a_control_character_is_refused():
    layer = with_buttons([button("a", label_en="ok\nno"), button("b", "progress"), THREE[2]])
    assert errors_of(layer) == [("buttons[0].label_en", "must not contain control characters")]


@pytest.mark.parametrize(("label", "valid"), [("r" * 32, True), ("r" * 33, False), ("", False)])
def test_english_reason_label_follows_the_reason_label_limits(label, valid):
    layer = {"negative_followup": {"reasons": [{"key": "r", "label": "原", "label_en": label}]}}
    if valid:
        assert validate_layer(layer) == layer
    else:
        assert paths_of(layer) == {"negative_followup.reasons[0].label_en"}


@pytest.mark.parametrize(("text", "valid"), [("p", True), ("p" * 100, True), ("p" * 101, False)])
def test_english_placeholder_follows_the_placeholder_limits(text, valid):
    layer = comment(placeholder_en=text)
    if valid:
        assert validate_layer(layer) == layer
    else:
        assert errors_of(layer) == [
            (
                "negative_followup.comment.placeholder_en",
                "must be a non-blank string of 1 to 100 characters",
            )
        ]


def test_english_forms_are_stored_partial_and_merge_like_their_main_form():
    from botadmin.policy import resolve

    team = {"negative_followup": {"comment": {"placeholder_en": "Tell us more"}}}
    bot = {"negative_followup": {"comment": {"max_length": 10}}}
    assert validate_layer(team) == team  # nothing filled in
    resolution = resolve(team, bot, None)
    comment_policy = resolution.policy["negative_followup"]["comment"]
    assert (comment_policy["placeholder"], comment_policy["placeholder_en"]) == (
        "可以补充哪里需要改进",
        "Tell us more",
    )
    assert resolution.sources["negative_followup.comment.placeholder_en"] == "team"
    # a new main wording without an English form drops the inherited English one
    chat = {"negative_followup": {"comment": {"placeholder": "请说明"}}}
    resolution = resolve(team, None, chat)
    assert "placeholder_en" not in resolution.policy["negative_followup"]["comment"]
    assert resolution.sources["negative_followup.comment.placeholder_en"] == "chat"


@pytest.mark.parametrize("value", ["off", "buttons", "buttons_and_reasons"])
def test_known_agent_options_are_accepted(value):
    assert validate_layer({"agent_options": value}) == {"agent_options": value}


@pytest.mark.parametrize("value", ["", "on", "reasons", True, None, ["buttons"]])
def test_unknown_agent_options_are_refused(value):
    assert errors_of({"agent_options": value}) == [
        ("agent_options", "must be one of off, buttons, buttons_and_reasons")
    ]
