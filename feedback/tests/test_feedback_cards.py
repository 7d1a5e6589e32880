"""The feedback area renderer (`feedback.cards`): every state Cardloop can render is valid
Card JSON 2.0 (shared and updatable: `update_multi`), carries its callback values in `behaviors`, and never shows a
comment."""

from __future__ import annotations

import itertools
import json

import pytest
from django.utils import translation

from botadmin.policy import default_policy
from feedback import cards
from feedback.tests.conftest import answer_card
from interactions.lark.cardjson import MAX_CARD_BYTES, card_bytes, validate_card
from tests import feishu


def policy(**changes):
    p = default_policy()
    p["enabled"] = True
    p["audience_open_ids"] = ["ou_requester"]
    for key, value in changes.items():
        p[key] = value
    return p


FOUR_BUTTONS = [
    {"key": "great_" + "x" * 40, "label": "好" * 24, "semantic": "positive", "style": "primary"},
    {"key": "ok", "label": "还行", "semantic": "progress", "style": "default"},
    {"key": "wrong", "label": "错" * 24, "semantic": "negative", "style": "danger"},
    {"key": "offtopic", "label": "跑题", "semantic": "negative", "style": "default"},
]
SIX_REASONS = [{"key": f"r{i}", "label": "原" * 32} for i in range(6)]

POLICIES = {
    "defaults": policy(),
    "reasons_and_required_comment": policy(
        negative_followup={
            "reasons": SIX_REASONS,
            "comment": {
                "enabled": True,
                "required": True,
                "placeholder": "说" * 100,
                "max_length": 2000,
            },
        }
    ),
    "reasons_only": policy(
        negative_followup={
            "reasons": SIX_REASONS[:2],
            "comment": {"enabled": False, "required": False, "placeholder": "x", "max_length": 10},
        }
    ),
    "no_followup": policy(
        negative_followup={
            "reasons": [],
            "comment": {"enabled": False, "required": False, "placeholder": "x", "max_length": 10},
        }
    ),
    "four_buttons_reselect_everyone": policy(
        buttons=FOUR_BUTTONS, allow_reselect=True, audience="everyone", audience_open_ids=None
    ),
    "reviewers": policy(audience="reviewers", reviewers=["ou_r1", "ou_r2"]),
}
CHOICES = {
    "none": None,
    "positive": cards.Choice("fb_1", "conclusive_usable", "positive"),
    "progress": cards.Choice("fb_2", "effective_progress", "progress"),
    "negative": cards.Choice("fb_3", "incorrect", "negative"),
    "negative_reason": cards.Choice("fb_4", "incorrect", "negative", reason_key="r1"),
    "negative_comment": cards.Choice("fb_5", "incorrect", "negative", has_comment=True),
}


def _walk(node):
    if isinstance(node, dict):
        yield node
        for key in ("elements", "columns"):
            for child in node.get(key) or []:
                yield from _walk(child)


def _buttons(card):
    return [n for n in _walk({"elements": card["body"]["elements"]}) if n.get("tag") == "button"]


@pytest.mark.parametrize(("policy_name", "choice_name"), list(itertools.product(POLICIES, CHOICES)))
def test_every_feedback_area_state_composes_into_a_valid_card(policy_name, choice_name):
    snapshot = POLICIES[policy_name]
    area = cards.feedback_area(snapshot, "del_" + "a" * 32, CHOICES[choice_name])
    assert list(area) == list(cards.AREA_IDS)
    card = cards.compose(answer_card("x" * 20_000), area)
    assert validate_card(card) == []
    assert len(card_bytes(card)) <= MAX_CARD_BYTES
    assert card["config"]["update_multi"] is True
    for element_id, element in area.items():
        assert element["element_id"] == element_id
        # each element alone is a valid replacement body (what an element update sends)
        assert (
            validate_card(
                {"schema": "2.0", "config": {"update_multi": True}, "body": {"elements": [element]}}
            )
            == []
        )
    serialized = json.dumps(card, ensure_ascii=False)
    assert '"action"' not in serialized.replace('"form_action_type"', "")
    assert '"tag": "note"' not in serialized


def test_buttons_carry_the_callback_value_in_behaviors_and_a_click_built_from_them_round_trips(
    lark_callback, register_card_handler
):
    """No top-level value (Card JSON 2.0): a simulated click gives back the same keys."""
    seen = []
    register_card_handler("feedback", lambda action: seen.append(action.value) or None)
    area = cards.feedback_area(POLICIES["defaults"], "del_x", CHOICES["positive"])
    buttons = _buttons({"body": {"elements": list(area.values())}})
    assert [b["name"] for b in buttons] == [
        "fb_conclusive_usable",
        "fb_effective_progress",
        "fb_incorrect",
    ]
    for button in buttons:
        assert "value" not in button
        ((behavior,),) = [button["behaviors"]]
        assert behavior["type"] == "callback"
        assert set(behavior["value"]) == {"kind", "delivery", "key", "rev"}
        assert behavior["value"]["rev"] == "fb_1"
        body = feishu.payload("card_action_feedback_click")
        body["event"]["action"] = {"tag": "button", "value": behavior["value"]}
        assert lark_callback(body).status_code == 200
    assert seen == [b["behaviors"][0]["value"] for b in buttons]


def test_hidden_semantics_get_no_button():
    snapshot = policy(visible_semantics=["positive", "negative"])
    area = cards.feedback_area(snapshot, "del_x", None)
    keys = [
        b["behaviors"][0]["value"]["key"]
        for b in _buttons({"body": {"elements": [area[cards.BUTTONS]]}})
    ]
    assert keys == ["conclusive_usable", "incorrect"]


def test_first_choice_locks_the_buttons_and_shows_the_selection_when_reselect_is_off():
    area = cards.feedback_area(POLICIES["defaults"], "del_x", CHOICES["positive"])
    buttons = _buttons({"body": {"elements": [area[cards.BUTTONS]]}})
    assert all(b["disabled"] for b in buttons)
    assert buttons[0]["text"]["content"] == "✓ 结论可用"
    assert area[cards.STATUS]["content"] == "已选择：**结论可用**"


def test_reselect_or_a_shared_audience_keeps_the_buttons_enabled():
    for name in ("four_buttons_reselect_everyone",):
        area = cards.feedback_area(POLICIES[name], "del_x", CHOICES["positive"])
        assert not any(
            b["disabled"] for b in _buttons({"body": {"elements": [area[cards.BUTTONS]]}})
        )
    everyone_no_reselect = policy(audience="everyone", audience_open_ids=None)
    area = cards.feedback_area(everyone_no_reselect, "del_x", CHOICES["positive"])
    assert not any(b["disabled"] for b in _buttons({"body": {"elements": [area[cards.BUTTONS]]}}))


def test_negative_choice_opens_the_reasons_and_comment_form_with_the_current_rev():
    snapshot = POLICIES["reasons_and_required_comment"]
    detail = cards.feedback_area(snapshot, "del_x", CHOICES["negative"])[cards.DETAIL]
    assert detail["tag"] == "form" and detail["name"] == cards.FORM_NAME
    by_name = {e.get("name"): e for e in detail["elements"]}
    assert [o["value"] for o in by_name[cards.REASON_FIELD]["options"]] == [
        r["key"] for r in SIX_REASONS
    ]
    comment = by_name[cards.COMMENT_FIELD]
    assert comment["required"] is True
    assert "max_length" not in comment  # checked on the server (Feishu caps inputs at 1000)
    submit = by_name[cards.SUBMIT_NAME]
    assert submit["form_action_type"] == "submit"
    assert submit["behaviors"][0]["value"] == {
        "kind": "feedback_detail",
        "delivery": "del_x",
        "rev": "fb_3",
    }


def test_details_replace_the_form_with_a_note_and_never_the_comment_text():
    snapshot = POLICIES["reasons_and_required_comment"]
    area = cards.feedback_area(snapshot, "del_x", CHOICES["negative_comment"])
    assert area[cards.DETAIL] == {
        "tag": "markdown",
        "element_id": cards.DETAIL,
        "content": "已补充说明，谢谢",
        "i18n_content": {"zh_cn": "已补充说明，谢谢", "en_us": "Details added, thank you"},
        "text_size": "notation",
    }
    area = cards.feedback_area(snapshot, "del_x", CHOICES["negative_reason"])
    assert area[cards.STATUS]["content"] == "已选择：**结论有误** · 原因：" + "原" * 32


def test_no_detail_step_keeps_the_audience_hint_after_a_negative_choice():
    area = cards.feedback_area(POLICIES["no_followup"], "del_x", CHOICES["negative"])
    assert area[cards.DETAIL]["tag"] == "markdown"
    assert area[cards.DETAIL]["content"] == "仅本次提问者可反馈"


def test_callers_card_using_reserved_ids_is_refused_and_left_untouched():
    card = answer_card()
    card["body"]["elements"].append({"tag": "markdown", "content": "x", "element_id": "fb_status"})
    before = json.dumps(card)
    with pytest.raises(cards.ReservedIds) as info:
        cards.compose(card, cards.feedback_area(POLICIES["defaults"], "del_x", None))
    assert "fb_status" in info.value.problems[0]
    assert json.dumps(card) == before


def test_compose_turns_update_multi_on_and_appends_the_area_after_the_answer():
    card = answer_card()
    del card["config"]
    composed = cards.compose(card, cards.feedback_area(POLICIES["defaults"], "del_x", None))
    assert composed["config"] == {"update_multi": True}
    ids = [e.get("element_id") for e in composed["body"]["elements"]]
    assert ids == ["answer", *cards.AREA_IDS]
    assert "config" not in card


def test_content_hash_is_canonical():
    a = {"schema": "2.0", "body": {"elements": []}, "config": {"update_multi": True}}
    b = json.loads(json.dumps(a, sort_keys=True))
    assert cards.content_hash(a) == cards.content_hash(b)
    assert cards.content_hash(a).startswith("sha256:") and len(cards.content_hash(a)) == 71
    assert cards.content_hash(a) != cards.content_hash({**a, "schema": "1.0"})


def _choice(key, semantic, **kwargs):
    return cards.Choice(revision_id="fb_rev1", verdict_key=key, semantic=semantic, **kwargs)


def test_area_state_opens_the_follow_up_after_a_negative_choice_and_closes_it_with_details():
    p = POLICIES["reasons_and_required_comment"]
    before = cards.area_state(p, "del_1", None)
    assert before.selected is None and before.rev == "" and before.clickable
    assert before.followup == cards.FOLLOWUP_NONE and not before.final
    negative_key = next(b["key"] for b in p["buttons"] if b["semantic"] == "negative")
    opened = cards.area_state(p, "del_1", _choice(negative_key, "negative"))
    assert opened.followup == cards.FOLLOWUP_OPEN and opened.rev == "fb_rev1"
    assert [r.key for r in opened.reasons] == [r["key"] for r in SIX_REASONS]
    assert opened.comment_enabled and opened.comment_required
    assert opened.selected.key == negative_key and opened.selected.chosen
    done = cards.area_state(p, "del_1", _choice(negative_key, "negative", reason_key="r2"))
    assert done.followup == cards.FOLLOWUP_DONE and done.reason_label == "原" * 32


def test_area_state_is_final_once_the_only_allowed_person_chose_without_reselect():
    p = policy(allow_reselect=False, audience="requester")
    positive_key = next(b["key"] for b in p["buttons"] if b["semantic"] == "positive")
    state = cards.area_state(p, "del_1", _choice(positive_key, "positive"))
    assert not state.clickable and state.final
    assert cards.area_state(policy(allow_reselect=True), "del_1", None).clickable
    everyone = cards.area_state(
        policy(allow_reselect=False, audience="everyone"),
        "del_1",
        _choice(positive_key, "positive"),
    )
    assert everyone.clickable and not everyone.final


def test_area_state_leaves_out_hidden_semantics_and_localizes_labels():
    p = policy(visible_semantics=["positive", "negative"])
    p["buttons"] = [dict(b, label_en=f"EN {b['key']}") for b in p["buttons"]]
    with translation.override("en"):
        state = cards.area_state(p, "del_1", None)
    assert {b.semantic for b in state.buttons} <= {"positive", "negative"}
    assert all(b.label == f"EN {b.key}" for b in state.buttons)


@pytest.mark.parametrize(("policy_name", "choice_name"), list(itertools.product(POLICIES, CHOICES)))
def test_the_cached_area_is_the_area_rendered_for_each_delivery_and_revision(
    policy_name, choice_name
):
    snapshot, choice = POLICIES[policy_name], CHOICES[choice_name]
    for delivery_id in ("del_" + "a" * 32, 'del_"quoted"\\ 好'):
        area = cards.feedback_area(snapshot, delivery_id, choice)
        assert area == cards._render_area(snapshot, delivery_id, choice)
        again = cards.feedback_area(snapshot, delivery_id, choice)
        assert again == area and again is not area
        again[cards.STATUS]["content"] = "changed by one caller"  # never seen by the next
        assert cards.feedback_area(snapshot, delivery_id, choice) == area


def test_the_area_does_not_show_the_snapshot_keys_its_cache_leaves_out():
    choice = CHOICES["negative"]
    base = cards._render_area(POLICIES["defaults"], "del_x", choice)
    for key in cards._NOT_RENDERED:
        for value in (None, ["ou_someone_else"], "oc_other_chat", "not_final"):
            changed = policy(**{key: value})
            assert cards._render_area(changed, "del_x", choice) == base, key
            assert cards.feedback_area(changed, "del_x", choice) == base, key
