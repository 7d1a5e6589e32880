"""Renderers of interactions (pure): Feishu Card JSON 2.0 for every kind and state (validated
by the card validator: values in `behaviors`, no live controls once final), the text fallback,
and the channel capability tables."""

from __future__ import annotations

import pytest
from django.utils import translation

from interactions import kinds as channels
from interactions.models import Interaction
from interactions.render import interaction_cards
from interactions.render.interaction_cards import fallback_text, feishu_card, render
from interactions.tests.ia_helpers import FORM_FIELDS, QUICK_ACTIONS, build
from tests.feishu import assert_valid_card


@pytest.fixture(autouse=True)
def english():
    with translation.override("en"):
        yield


def _buttons(card) -> list[dict]:
    found = []

    def walk(node):
        if isinstance(node, dict):
            if node.get("tag") == "button":
                found.append(node)
            for key in ("elements", "columns"):
                for child in node.get(key, []) or []:
                    walk(child)

    for element in card["body"]["elements"]:
        walk(element)
    return found


def _text_of(card) -> str:
    import json

    return json.dumps(card, ensure_ascii=False)


def _final(ia, status, **resolution):
    ia.status = status
    ia.resolution = {"via": "card", "at": "2026-01-01T00:00:00+00:00", **resolution}
    return ia


KINDS_AND_STATES = [
    (kind, status) for kind in Interaction.Kind.values for status in Interaction.Status.values
]


@pytest.mark.parametrize(("kind", "status"), KINDS_AND_STATES)
def test_every_kind_and_state_renders_a_valid_card_and_only_pending_has_controls(kind, status):
    extra = {"kind": kind}
    if kind == "quick_reply":
        extra["actions"] = QUICK_ACTIONS
    if kind == "form":
        extra["fields"] = FORM_FIELDS
        extra["actions"] = []
    if kind == "command":
        extra["actions"] = []
    ia = build(**extra)
    if status != "pending":
        _final(ia, status, action_id="approve", value="approve", operator="ou_requester")
    card = feishu_card(ia)
    assert_valid_card(card)
    assert card["config"]["update_multi"] is True
    has_form = any(e.get("tag") == "form" for e in card["body"]["elements"])
    if status == "pending" and kind in ("approval", "quick_reply", "form"):
        assert _buttons(card), "a pending card offers its actions"
    if status != "pending":
        assert _buttons(card) == [] and not has_form, "a final card has no live controls"


def test_pending_approval_has_approve_primary_deny_danger_always_default_with_callback_values():
    ia = build()
    buttons = _buttons(feishu_card(ia, "en"))  # a bot whose card language is English
    assert [(b["text"]["content"], b["type"]) for b in buttons] == [
        ("Approve", "primary"),
        ("Deny", "danger"),
        ("Always allow", "default"),
    ]
    for button, action_id in zip(buttons, ["approve", "deny", "always"], strict=True):
        assert "value" not in button, "2.0 buttons carry the value in behaviors"
        assert button["behaviors"] == [
            {
                "type": "callback",
                "value": {
                    "kind": "interaction",
                    "interaction_id": ia.public_id,
                    "action_id": action_id,
                    "action_value": action_id,
                },
            }
        ]


def test_pending_card_says_the_typed_command_works_too():
    ia = build()
    assert f"/_interaction {ia.public_id} approve" in _text_of(feishu_card(ia))


def test_approval_without_always_has_two_buttons():
    ia = build(actions=interaction_cards.approval_actions(allow_always=False))
    assert [b["name"] for b in _buttons(feishu_card(ia))] == ["ia_approve", "ia_deny"]


def test_final_cards_say_what_happened_and_who_answered():
    approved = _final(build(), "resolved", action_id="approve", operator="ou_requester")
    text = _text_of(feishu_card(approved))
    assert "Approved" in text and '<at id=\\"ou_requester\\"></at>' in text
    assert feishu_card(approved)["header"]["template"] == "green"
    denied = _final(build(), "resolved", action_id="deny", operator="ou_requester")
    assert "Denied" in _text_of(feishu_card(denied))
    assert feishu_card(denied)["header"]["template"] == "red"
    always = _final(build(), "resolved", action_id="always", operator="ou_requester")
    assert "always for this session" in _text_of(feishu_card(always))
    timed_out = _final(build(), "expired", action_id="deny", via="timeout")
    assert "Expired without an answer: denied." in _text_of(feishu_card(timed_out))
    cancelled = _final(build(), "cancelled")
    assert "Cancelled." in _text_of(feishu_card(cancelled))
    quick = _final(build(kind="quick_reply", actions=QUICK_ACTIONS), "resolved", action_id="yes")
    assert "Answered: **Yes please**" in _text_of(feishu_card(quick))


def test_form_card_has_named_fields_and_a_named_submit_button_in_one_form():
    ia = build(kind="form", fields=FORM_FIELDS, actions=[])
    card = feishu_card(ia)
    assert_valid_card(card)
    form = next(e for e in card["body"]["elements"] if e.get("tag") == "form")
    tags = {e.get("name"): e["tag"] for e in form["elements"] if e.get("name")}
    assert tags == {"f_env": "select_static", "f_note": "input", "ia_submit": "button"}
    submit = next(e for e in form["elements"] if e.get("name") == "ia_submit")
    assert submit["form_action_type"] == "submit"
    assert submit["behaviors"][0]["value"]["action_id"] == "submit"


def test_question_text_cannot_inject_mentions_into_the_card():
    ia = build(body='hi <at id="ou_x"></at>')
    assert '<at id=\\"ou_x\\">' not in _text_of(feishu_card(ia))


def test_a_long_question_still_gives_a_valid_card():
    ia = build(body="长" * 4000, title="t" * 200)
    assert_valid_card(feishu_card(ia))


# ---------------------------------------------------------------------------------------------
# Text fallback
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("channel", "reason"),
    [
        ("wechat", "WeChat messages cannot carry buttons"),
        ("text", "plain-text channel"),
        ("webhook", "cannot show interactive cards"),
    ],
)
def test_text_fallback_lists_numbered_options_commands_and_why_there_are_no_buttons(
    channel, reason
):
    ia = build(channel=channel)
    text = fallback_text(ia)
    assert reason in text
    assert f"1. Approve — /_interaction {ia.public_id} approve" in text
    assert f"2. Deny — /_interaction {ia.public_id} deny" in text
    assert f"3. Always allow — /_interaction {ia.public_id} always" in text
    assert f"/_interaction {ia.public_id} 1" in text
    assert ia.body in text and "bash" in text


def test_text_fallback_of_a_form_shows_the_line_to_type_and_the_fields():
    ia = build(kind="form", fields=FORM_FIELDS, actions=[], channel="text")
    text = fallback_text(ia)
    assert f"/_interaction {ia.public_id} env=…; note=…" in text
    assert "env: Environment (staging, prod) *" in text


def test_text_fallback_of_a_final_interaction_shows_the_result_without_commands():
    ia = _final(build(channel="wechat"), "resolved", action_id="approve", operator="ou_requester")
    text = fallback_text(ia)
    assert "Approved" in text and "/_interaction" not in text and "<at" not in text


def test_render_picks_a_card_only_for_channels_with_buttons():
    assert render(build(channel="feishu")).card is not None
    for channel in ("wechat", "text", "webhook"):
        rendered = render(build(channel=channel))
        assert rendered.card is None and "/_interaction" in rendered.text


def test_text_fallback_is_translated():
    with translation.override("zh-hans"):
        text = fallback_text(build(channel="wechat"))
    assert "Reply with one of these commands" not in text


# ---------------------------------------------------------------------------------------------
# Channel capabilities and the session rule
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "buttons", "forms", "update", "markdown"),
    [
        ("feishu", True, True, True, True),
        ("lark", True, True, True, True),
        ("wechat", False, False, False, False),
        ("text", False, False, False, False),
        ("cli", False, False, False, False),
        ("webhook", False, False, False, False),
        ("other", False, False, False, False),
        ("carrier-pigeon", False, False, False, False),
    ],
)
def test_channel_capabilities_table(kind, buttons, forms, update, markdown):
    caps = channels.capabilities(kind)
    assert (caps.buttons, caps.forms, caps.update, caps.markdown) == (
        buttons,
        forms,
        update,
        markdown,
    )
    assert caps.text_fallback is (not buttons)


SEED_RULE = [
    # project_key, workspace, subagent → channel, session, ask_user_questions, reason
    ("feishu-cli_a1-private-ou_42", "/w/x", "", "feishu", "private", True, "feishu_private"),
    ("proj", "/home/a/feishu-chat/oc_1/", "", "feishu", "group", True, "feishu_group"),
    ("feishu-cli_a1-private-ou_42", "", "foreground", "feishu", "private", False, "subagent"),
    ("proj", "/home/a/feishu-chat/oc_1", "background", "feishu", "group", False, "subagent"),
    ("wechat-wx1-private-u1", "/w", "", "wechat", None, False, "wechat"),
    ("proj", "/data/wechat-chat/room1/", "", "wechat", None, False, "wechat"),
    ("wechat-wx1-private-u1", "/w", "background", "wechat", None, False, "subagent"),
    ("my-project", "/home/a/code", "", None, None, None, "default"),
    ("", "", "", None, None, None, "default"),
    ("my-project", "/home/a/code", "true", None, None, False, "subagent"),
    ("feishu-cli_a1-group-ou_42", "/w/x", "", None, None, None, "default"),
    ("feishu-cli_a1-private-ou_42", "/w", "false", "feishu", "private", True, "feishu_private"),
    ("proj", "C:\\work\\feishu-chat\\oc_2", "", "feishu", "group", True, "feishu_group"),
]


@pytest.mark.parametrize(
    ("project_key", "workspace", "subagent", "channel", "session", "ask", "reason"), SEED_RULE
)
def test_seed_rule_for_ask_user_questions(
    project_key, workspace, subagent, channel, session, ask, reason
):
    answer = channels.session_capabilities(project_key, workspace, subagent).to_json()
    assert answer["channel"] == channel
    assert answer["session"] == session
    assert answer["tools"]["ask_user_questions"] is ask
    assert answer["reason"] == reason
    if channel:
        assert answer["capabilities"] == channels.capabilities(channel).to_json()
    else:
        assert answer["capabilities"] is None
