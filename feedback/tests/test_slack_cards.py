"""The Block Kit feedback area (pure): the Feishu area's rules as Slack blocks, within Slack's
limits for every policy × choice, and the read-back splice that replaces only the area."""

from __future__ import annotations

import json

import pytest

from feedback import cards, slack_cards
from feedback.tests.test_feedback_cards import CHOICES, FOUR_BUTTONS, POLICIES, policy
from interactions.channels.slack import limits

ANSWER = [
    {"type": "section", "block_id": "answer", "text": {"type": "mrkdwn", "text": "*42*"}},
    {
        "type": "actions",
        "block_id": "backend_actions",
        "elements": [
            {
                "type": "button",
                "action_id": "open",
                "text": {"type": "plain_text", "text": "Open"},
                "url": "https://example.com",
            }
        ],
    },
]


def _ids(blocks):
    return [b["block_id"] for b in blocks]


def _buttons(blocks):
    (actions,) = [b for b in blocks if b["block_id"] == slack_cards.BUTTONS]
    return actions["elements"]


@pytest.mark.parametrize("choice", list(CHOICES))
@pytest.mark.parametrize("name", list(POLICIES))
def test_every_policy_and_choice_gives_blocks_slack_accepts_with_the_answer(name, choice):
    area = slack_cards.feedback_area(POLICIES[name], "del_" + "a" * 32, CHOICES[choice])
    assert limits.problems(slack_cards.compose(ANSWER, area)) == []
    assert all(b["block_id"].startswith("fb_") for b in area)
    assert _ids(area)[:2] == [slack_cards.DIVIDER, slack_cards.STATUS]
    assert _ids(area)[-1] == slack_cards.FOOTER


def test_buttons_carry_the_delivery_key_and_current_revision_in_their_value():
    area = slack_cards.feedback_area(policy(), "del_1", None)
    buttons = _buttons(area)
    assert [b["action_id"] for b in buttons] == [
        "fb_conclusive_usable",
        "fb_effective_progress",
        "fb_incorrect",
    ]
    assert json.loads(buttons[0]["value"]) == {
        "kind": "feedback",
        "delivery": "del_1",
        "key": "conclusive_usable",
        "rev": "",
    }
    assert buttons[0]["style"] == "primary" and buttons[2]["style"] == "danger"
    assert "style" not in buttons[1]  # Slack has no "default" style: it is left out
    reselect = slack_cards.feedback_area(policy(allow_reselect=True), "del_1", CHOICES["positive"])
    chosen = _buttons(reselect)
    assert json.loads(chosen[1]["value"])["rev"] == "fb_1"
    assert chosen[0]["text"]["text"].startswith("✓ ")


def test_a_final_requester_choice_removes_the_buttons_and_shows_the_selection():
    area = slack_cards.feedback_area(policy(), "del_1", CHOICES["positive"])
    assert slack_cards.BUTTONS not in _ids(area)
    assert area[1]["text"]["text"] == "已选择：*结论可用*"
    # with another audience the buttons stay for the others (the server refuses a second
    # choice per operator)
    everyone = POLICIES["four_buttons_reselect_everyone"] | {"allow_reselect": False}
    assert slack_cards.BUTTONS in _ids(
        slack_cards.feedback_area(everyone, "d", CHOICES["positive"])
    )


def test_visible_semantics_hide_buttons_and_an_empty_row_is_left_out():
    only_positive = policy(visible_semantics=["positive"])
    assert [
        b["action_id"] for b in _buttons(slack_cards.feedback_area(only_positive, "d", None))
    ] == ["fb_conclusive_usable"]
    nothing = policy(visible_semantics=["none_of_these"])
    assert slack_cards.BUTTONS not in _ids(slack_cards.feedback_area(nothing, "d", None))


def test_a_negative_choice_opens_the_reasons_and_comment_inputs_with_a_submit():
    area = slack_cards.feedback_area(
        POLICIES["reasons_and_required_comment"], "del_1", CHOICES["negative"]
    )
    by_id = {b["block_id"]: b for b in area}
    reason = by_id[slack_cards.DETAIL_REASON]
    assert reason["element"]["action_id"] == cards.REASON_FIELD
    assert [o["value"] for o in reason["element"]["options"]] == [f"r{i}" for i in range(6)]
    comment = by_id[slack_cards.DETAIL_COMMENT]
    assert comment["element"]["action_id"] == cards.COMMENT_FIELD
    assert comment["optional"] is False and comment["element"]["max_length"] == 2000
    assert len(comment["element"]["placeholder"]["text"]) <= 150
    (submit,) = by_id[slack_cards.DETAIL_SUBMIT]["elements"]
    assert json.loads(submit["value"]) == {
        "kind": "feedback_detail",
        "delivery": "del_1",
        "rev": "fb_3",
    }


@pytest.mark.parametrize(
    ("choice", "text"),
    [("negative_reason", "已记录原因"), ("negative_comment", "已补充说明，谢谢")],
)
def test_details_given_replace_the_form_with_a_thank_you(choice, text):
    area = slack_cards.feedback_area(
        POLICIES["reasons_and_required_comment"], "del_1", CHOICES[choice]
    )
    by_id = {b["block_id"]: b for b in area}
    assert slack_cards.DETAIL_SUBMIT not in by_id
    assert by_id[slack_cards.DETAIL]["elements"][0]["text"] == text


def test_no_followup_keeps_the_audience_hint_and_the_area_follows_the_card_language():
    area = slack_cards.feedback_area(POLICIES["no_followup"], "d", CHOICES["negative"])
    hint = {b["block_id"]: b for b in area}[slack_cards.DETAIL]["elements"][0]["text"]
    assert hint == "仅本次提问者可反馈"
    english = slack_cards.feedback_area(policy(card_language="en"), "d", None)
    assert english[1]["text"]["text"] == "Was this answer helpful?"
    assert [b["text"]["text"] for b in _buttons(english)][0] == "Usable conclusion"


def test_labels_are_escaped_for_mrkdwn():
    buttons = [
        {"key": "x", "label": "<!channel> & *bold*", "semantic": "positive", "style": "primary"}
    ]
    area = slack_cards.feedback_area(
        policy(buttons=buttons), "d", cards.Choice("fb", "x", "positive")
    )
    assert "&lt;!channel&gt; &amp;" in area[1]["text"]["text"]
    assert "<!channel>" not in area[1]["text"]["text"]


def test_long_labels_are_cut_to_slacks_button_text_limit():
    area = slack_cards.feedback_area(policy(buttons=FOUR_BUTTONS * 1), "d", None)
    assert limits.problems(area) == []
    long = [{"key": "k", "label": "好" * 100, "semantic": "positive", "style": "primary"}]
    (button,) = _buttons(slack_cards.feedback_area(policy(buttons=long), "d", None))
    assert len(button["text"]["text"]) == 75


def test_the_callers_blocks_may_not_use_reserved_ids():
    blocks = [
        {"type": "section", "block_id": "fb_mine", "text": {"type": "mrkdwn", "text": "x"}},
        {"type": "actions", "elements": [{"type": "button", "action_id": "fb_click"}]},
    ]
    with pytest.raises(cards.ReservedIds) as raised:
        slack_cards.compose(blocks, None)
    assert raised.value.problems == [
        "$.blocks[0].block_id: 'fb_mine' is reserved for Cardloop's feedback area",
        "$.blocks[1].elements[0].action_id: 'fb_click' is reserved for Cardloop's feedback area",
    ]


def test_replace_area_swaps_only_the_feedback_blocks_of_a_message_read_back():
    sent = slack_cards.compose(ANSWER, slack_cards.feedback_area(policy(), "d", None))
    # Slack may add its own keys to blocks it returns; the answer's blocks are kept verbatim
    read_back = [dict(b) for b in sent]
    read_back[0]["extra"] = "kept"
    new_area = slack_cards.feedback_area(policy(), "d", CHOICES["positive"])
    replaced = slack_cards.replace_area(read_back, new_area)
    assert replaced[:2] == read_back[:2]
    assert replaced[2:] == new_area
    assert slack_cards.replace_area(ANSWER, new_area) == [*ANSWER, *new_area]


def test_limits_name_each_broken_rule():
    blocks = [
        {"type": "section", "block_id": "a", "text": {"type": "mrkdwn", "text": "x" * 3001}},
        {
            "type": "actions",
            "block_id": "a",
            "elements": [
                {
                    "type": "button",
                    "action_id": "b",
                    "text": {"type": "plain_text", "text": "y" * 76},
                    "value": "v" * 2001,
                },
                {"type": "button", "action_id": "b", "text": {"type": "plain_text", "text": "ok"}},
            ],
        },
        {"type": "modal"},
    ] + [{"type": "divider"}] * 48
    assert limits.problems(blocks) == [
        "$.blocks: 51 blocks; Slack allows at most 50",
        "$.blocks[0].text: 3001 characters; at most 3000",
        "$.blocks[1].block_id: 'a' is already used at $.blocks[0]",
        "$.blocks[1].elements[0].text: 76 characters; at most 75",
        "$.blocks[1].elements[0].value: 2001 characters; at most 2000",
        "$.blocks[1].elements[1].action_id: 'b' is already used at $.blocks[1].elements[0]",
        "$.blocks[2].type: 'modal' is not a message block type",
    ]
    assert limits.problems({"blocks": []}) == ["$.blocks: must be a list of Block Kit blocks"]
