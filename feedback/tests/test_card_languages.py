"""Cards in each reader's language: Cardloop's feedback area carries Chinese and English through
Card JSON 2.0's component-level `i18n_content`, the content default is the bot's
`card_language`, and policy labels show their English form to English readers. Read here as a
Feishu client in each locale would (`tests.feishu.read_text`), without a browser."""

from __future__ import annotations

import itertools

import pytest

from botadmin.policy import default_policy
from feedback import cards
from feedback.tests.conftest import answer_card
from feedback.tests.test_feedback_cards import CHOICES, POLICIES
from interactions.lark.cardjson import validate_card
from tests.feishu import assert_bilingual_card, read_text

LANGUAGES = ("zh-hans", "en")


def _card(snapshot, choice, language):
    area = cards.feedback_area({**snapshot, "card_language": language}, "del_x", choice)
    return cards.compose(answer_card("The answer"), area)


@pytest.mark.parametrize(
    ("policy_name", "choice_name", "language"),
    list(itertools.product(POLICIES, CHOICES, LANGUAGES)),
)
def test_every_feedback_state_is_valid_in_both_card_languages(policy_name, choice_name, language):
    card = _card(POLICIES[policy_name], CHOICES[choice_name], language)
    assert_bilingual_card(card)
    zh, en = read_text(card, "zh_cn"), read_text(card, "en_us")
    assert len(zh) == len(en)
    assert "反馈由 Cardloop 记录" in zh and "Feedback is recorded by Cardloop" in en
    # the reader's language, whatever the content default is
    assert "Feedback is recorded by Cardloop" not in zh and "反馈由 Cardloop 记录" not in en


def test_a_reader_sees_the_negative_form_in_their_language():
    snapshot = default_policy() | {"enabled": True, "audience_open_ids": ["ou_r"]}
    card = _card(snapshot, CHOICES["negative"], "zh-hans")
    assert read_text(card, "zh_cn") == [
        "Answer",
        "The answer",
        "已选择：**结论有误**",
        "结论可用",
        "有效推进",
        "✓ 结论有误",
        "哪里有问题？（可补充说明）",
        "可以补充哪里需要改进",
        "提交",
        "反馈由 Cardloop 记录",
    ]
    assert read_text(card, "en_us") == [
        "Answer",
        "The answer",
        "Selected: **Incorrect**",
        "Usable conclusion",
        "Real progress",
        "✓ Incorrect",
        "What was wrong? (optional details)",
        "What could be improved?",
        "Submit",
        "Feedback is recorded by Cardloop",
    ]


def test_the_bots_card_language_is_the_content_default():
    snapshot = default_policy() | {"enabled": True, "audience_open_ids": ["ou_r"]}
    zh_default = cards.feedback_area(snapshot | {"card_language": "zh-hans"}, "del_x", None)
    en_default = cards.feedback_area(snapshot | {"card_language": "en"}, "del_x", None)
    assert zh_default[cards.STATUS]["content"] == "这个回答有帮助吗？"
    assert en_default[cards.STATUS]["content"] == "Was this answer helpful?"
    assert zh_default[cards.STATUS]["i18n_content"] == en_default[cards.STATUS]["i18n_content"]
    # a snapshot frozen before card languages existed renders Chinese
    assert cards.feedback_area(snapshot, "del_x", None)[cards.STATUS]["content"] == (
        "这个回答有帮助吗？"
    )


def test_a_label_without_an_english_form_shows_its_main_wording_to_everyone():
    buttons = [
        {"key": "yes", "label": "可用", "semantic": "positive", "style": "primary"},
        {"key": "no", "label": "不行", "label_en": "No good", "semantic": "negative"},
    ]
    snapshot = default_policy() | {
        "enabled": True,
        "audience_open_ids": ["ou_r"],
        "visible_semantics": ["positive", "negative"],
        "buttons": buttons,
        "negative_followup": {
            "reasons": [{"key": "stale", "label": "过时", "label_en": "Out of date"}],
            "comment": {"enabled": True, "required": False, "placeholder": "说说", "max_length": 9},
        },
    }
    area = cards.feedback_area(snapshot, "del_x", cards.Choice("fb_1", "no", "negative"))
    yes, no = (c["elements"][0]["text"] for c in area[cards.BUTTONS]["columns"])
    assert yes == {"tag": "plain_text", "content": "可用"}  # nothing to translate
    assert no["i18n_content"] == {"zh_cn": "✓ 不行", "en_us": "✓ No good"}
    form = area[cards.DETAIL]["elements"]
    (select,) = [e for e in form if e["tag"] == "select_static"]
    assert select["options"][0]["text"]["i18n_content"] == {
        "zh_cn": "过时",
        "en_us": "Out of date",
    }
    (comment,) = [e for e in form if e["tag"] == "input"]
    assert "i18n_content" not in comment["placeholder"]  # no placeholder_en: the main form
    assert comment["placeholder"]["content"] == "说说"


def _one(element):
    return {"schema": "2.0", "config": {"update_multi": True}, "body": {"elements": [element]}}


def test_validator_knows_the_multilingual_fields_and_locale_keys():
    good = {"tag": "markdown", "content": "a", "i18n_content": {"zh_cn": "甲", "en_us": "a"}}
    assert validate_card(_one(good)) == []
    assert validate_card(_one({**good, "i18n_content": {"en": "a"}})) == [
        "$.body.elements[0].i18n_content.en: not a Feishu card locale"
    ]
    assert validate_card(_one({**good, "i18n_content": {"en_us": 1}})) == [
        "$.body.elements[0].i18n_content.en_us: must be a string"
    ]
    assert validate_card(_one({"tag": "hr", "i18n_content": {"en_us": "x"}})) == [
        "$.body.elements[0].i18n_content: only lark_md, markdown, plain_text take i18n_content"
    ]
    assert validate_card(_one({**good, "i18n_text": {"en_us": "x"}})) == [
        "$.body.elements[0].i18n_text: unknown multilingual field"
    ]
    card = _one(good) | {"i18n_elements": {"en_us": []}}
    assert validate_card(card) == [
        "$.i18n_elements: schema 2.0 has no card-wide multilingual content; use i18n_content"
    ]
    # a callback value is the caller's data: its keys are never read as card fields
    button = {
        "tag": "button",
        "text": {"tag": "plain_text", "content": "好"},
        "behaviors": [{"type": "callback", "value": {"i18n_content": 1, "i18n_x": "y"}}],
    }
    assert validate_card(_one(button)) == []
    long_english = {
        "tag": "button",
        "text": {"tag": "plain_text", "content": "好", "i18n_content": {"en_us": "x" * 101}},
        "behaviors": [{"type": "callback", "value": {}}],
    }
    assert validate_card(_one(long_english)) == [
        "$.body.elements[0].text.i18n_content.en_us: 101 characters; at most 100"
    ]
