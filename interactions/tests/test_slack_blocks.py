"""Block Kit rendering for Slack (pure, no I/O) and the limits checker, against the limits
Slack documents (https://api.slack.com/reference/block-kit/blocks,
https://api.slack.com/reference/block-kit/block-elements)."""

from __future__ import annotations

import json

from interactions.channels.slack import blocks
from interactions.models import Interaction
from interactions.tests.ia_helpers import FORM_FIELDS, QUICK_ACTIONS, build

S = Interaction.Status


def _types(message):
    return [b["type"] for b in message["blocks"]]


def _buttons(message):
    return [e for b in message["blocks"] if b["type"] == "actions" for e in b["elements"]]


def test_a_pending_approval_has_approve_deny_always_buttons_with_styles_and_valid_limits():
    message = blocks.interaction_message(build(channel="slack"), "en")
    buttons = _buttons(message)
    assert [b["text"]["text"] for b in buttons] == ["Approve", "Deny", "Always allow"]
    assert [b.get("style") for b in buttons] == ["primary", "danger", None]
    assert json.loads(buttons[0]["value"]) == {
        "kind": "interaction",
        "interaction_id": "ia_0123456789abcdef",
        "action_id": "approve",
        "action_value": "approve",
    }
    assert blocks.problems(message) == []
    assert message["text"] == "Run a shell command?"


def test_a_resolved_approval_replaces_the_buttons_with_who_decided():
    ia = build(
        channel="slack",
        status=S.RESOLVED,
        resolution={"action_id": "approve", "value": "approve", "operator": "U0ALICE"},
    )
    message = blocks.interaction_message(ia, "en")
    assert "actions" not in _types(message)
    status = message["blocks"][-1]["text"]["text"]
    assert "*Approved*" in status and "<@U0ALICE>" in status
    assert blocks.problems(message) == []


def test_an_expired_approval_says_denied_and_has_nothing_to_click():
    message = blocks.interaction_message(build(channel="slack", status=S.EXPIRED), "en")
    assert "actions" not in _types(message)
    assert "denied" in message["blocks"][-1]["text"]["text"]


def test_a_quick_reply_has_one_button_per_action_and_only_slack_styles():
    ia = build(channel="slack", kind=Interaction.Kind.QUICK_REPLY, actions=QUICK_ACTIONS)
    buttons = _buttons(blocks.interaction_message(ia, "en"))
    assert [b["text"]["text"] for b in buttons] == ["Yes please", "No", "Later"]
    assert [b.get("style") for b in buttons] == ["primary", None, None]


def test_a_form_is_input_blocks_in_the_message_with_one_submit_button():
    ia = build(channel="slack", kind=Interaction.Kind.FORM, actions=[], fields=FORM_FIELDS)
    message = blocks.interaction_message(ia, "en")
    inputs = [b for b in message["blocks"] if b["type"] == "input"]
    assert [b["block_id"] for b in inputs] == ["f_env", "f_note"]
    assert inputs[0]["element"]["type"] == "static_select" and not inputs[0]["optional"]
    assert inputs[1]["element"]["type"] == "plain_text_input" and inputs[1]["optional"]
    assert [json.loads(b["value"])["action_id"] for b in _buttons(message)] == ["submit"]
    assert blocks.problems(message) == []


def test_the_callers_text_is_escaped_so_it_cannot_mention_or_link():
    ia = build(channel="slack", body="<!channel> & <https://evil|click>")
    body = blocks.interaction_message(ia, "en")["blocks"][1]["text"]["text"]
    assert "<" not in body and "&amp;" in body


def test_long_texts_are_cut_to_slacks_limits():
    long = "x" * 5000
    ia = build(
        channel="slack",
        kind=Interaction.Kind.QUICK_REPLY,
        title=long,
        body=long,
        actions=[{"id": "a", "label": long, "value": "a"}],
    )
    assert blocks.problems(blocks.interaction_message(ia, "en")) == []


def test_cardloops_own_text_follows_the_language():
    message = blocks.interaction_message(build(channel="slack"), "zh-hans")
    assert _buttons(message)[0]["text"]["text"] == "批准"


def test_the_limits_checker_names_each_broken_rule():
    button = {"type": "button", "action_id": "a", "text": {"type": "plain_text", "text": "x" * 76}}
    message = {
        "text": "t",
        "blocks": [{"type": "divider", "block_id": "same"}] * 2
        + [{"type": "section", "text": {"type": "mrkdwn", "text": "y" * 3001}}]
        + [
            {
                "type": "actions",
                "elements": [dict(button, value="v" * 2001), button, dict(button, style="default")],
            }
        ]
        + [{"type": "divider"}] * 47,
    }
    found = "\n".join(blocks.problems(message))
    assert "51 blocks; Slack allows at most 50" in found
    assert "block_id: 'same' is already used at $.blocks[0]" in found
    assert "$.blocks[2].text: 3001 characters; at most 3000" in found
    assert "elements[0].value: 2001 characters; at most 2000" in found
    assert "elements[0].text: 76 characters; at most 75" in found
    assert "action_id: 'a' is already used" in found
    assert "elements[2].style: primary or danger only" in found


def test_every_input_element_has_its_own_action_id():
    ia = build(channel="slack", kind=Interaction.Kind.FORM, actions=[], fields=FORM_FIELDS)
    message = blocks.interaction_message(ia, "en")
    ids = [b["element"]["action_id"] for b in message["blocks"] if b["type"] == "input"]
    assert ids == ["f_env_v", "f_note_v"]
