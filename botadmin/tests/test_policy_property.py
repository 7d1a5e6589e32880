"""Property tests: arbitrary JSON given to validation yields a valid layer or a PolicyError."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from botadmin.policy import (
    AGENT_OPTIONS,
    AUDIENCES,
    FIELD_PATHS,
    REASONS,
    SEMANTICS,
    STYLES,
    PolicyError,
    resolve,
    validate_layer,
)

json_scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text()
any_json = st.recursive(
    json_scalars,
    lambda children: (
        st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=8), children, max_size=5)
    ),
    max_leaves=30,
)

# Values close to the schema, so the deeper rules are exercised too, mixed with arbitrary JSON.
key = st.from_regex(r"[a-z0-9_-]{1,6}", fullmatch=True) | st.text(max_size=4)
label = st.text(min_size=0, max_size=34)
near_button = st.fixed_dictionaries(
    {"key": key, "label": label, "semantic": st.sampled_from(SEMANTICS) | any_json},
    optional={
        "style": st.sampled_from(STYLES) | st.text(max_size=3),
        "label_en": label | any_json,
        "extra": any_json,
    },
)
near_reason = st.fixed_dictionaries(
    {"key": key, "label": label}, optional={"label_en": label | any_json, "x": any_json}
)
near_comment = st.fixed_dictionaries(
    {},
    optional={
        "enabled": st.booleans() | any_json,
        "required": st.booleans() | any_json,
        "placeholder": st.text(max_size=102),
        "placeholder_en": st.text(max_size=102) | any_json,
        "max_length": st.integers(-2, 2002) | any_json,
    },
)
near_layer = st.fixed_dictionaries(
    {},
    optional={
        "enabled": st.booleans() | any_json,
        "visible_semantics": st.lists(st.sampled_from(SEMANTICS), max_size=4) | any_json,
        "buttons": st.lists(near_button, max_size=5) | any_json,
        "negative_followup": st.fixed_dictionaries(
            {}, optional={"reasons": st.lists(near_reason, max_size=7), "comment": near_comment}
        )
        | any_json,
        "allow_reselect": st.booleans(),
        "audience": st.sampled_from(AUDIENCES) | any_json,
        "reviewers": st.lists(st.from_regex(r"ou_[a-z0-9]{1,4}", fullmatch=True), max_size=3)
        | any_json,
        "agent_options": st.sampled_from(AGENT_OPTIONS) | any_json,
        "unknown": any_json,
    },
)


def check_outcome(layer):
    before = json.dumps(layer, sort_keys=True, default=repr)
    try:
        result = validate_layer(layer)
    except PolicyError as exc:
        assert exc.errors, "a PolicyError always names at least one problem"
        assert all(isinstance(p, str) and isinstance(m, str) and m for p, m in exc.errors)
        valid = False
    else:
        valid = True
        assert result == layer
        assert validate_layer(result) == result  # idempotent
    assert json.dumps(layer, sort_keys=True, default=repr) == before  # input untouched
    # Whatever the layer, the resolver never raises and always reports a known reason.
    resolution = resolve(layer, layer, layer)
    assert resolution.reason in REASONS
    assert set(resolution.sources) == set(FIELD_PATHS)
    if not valid and layer is not None:  # None means "no layer" to the resolver
        assert resolution.problems
    return valid


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(any_json)
def test_arbitrary_json_is_a_valid_layer_or_a_policy_error(value):
    check_outcome(value)


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(near_layer)
def test_near_valid_layers_are_a_valid_layer_or_a_policy_error(layer):
    check_outcome(layer)


def test_deeply_nested_json_is_refused_without_a_crash():
    deep: object = {}
    for _ in range(5000):
        deep = {"negative_followup": deep}
    with pytest.raises(PolicyError):
        validate_layer(deep)
    assert resolve(deep, None, None).problems


near_options = st.fixed_dictionaries(
    {"buttons": st.lists(near_button, max_size=5) | any_json},
    optional={"reasons": st.lists(near_reason, max_size=7) | any_json, "x": any_json},
)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(any_json | near_options, st.sampled_from(AGENT_OPTIONS))
def test_proposed_options_are_valid_or_a_policy_error_and_never_break_the_policy(value, mode):
    from botadmin.policy import apply_agent_options, check_consistency, validate_agent_options

    try:
        options = validate_agent_options(value)
    except PolicyError as exc:
        assert exc.errors
        return
    policy = resolve({"enabled": True, "agent_options": mode}).policy
    applied, used, ignored = apply_agent_options(policy, options, shown=True)
    assert check_consistency(applied) == []
    assert used in ("none", "buttons", "buttons_and_reasons")
    assert (used == "none") == (ignored in ("agent_options_off", "not_consistent"))
