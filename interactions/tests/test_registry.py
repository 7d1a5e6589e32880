"""The card-action registry's own contract: registration rules, the typed action, answers."""

from __future__ import annotations

import pytest
from django.utils.translation import gettext_lazy as _

from interactions.callbacks import registry
from tests import feishu


def test_registering_the_same_handler_twice_is_harmless_but_a_second_handler_is_refused():
    def first(action):
        return None

    def second(action):
        return None

    registry.register("test_kind_a", first)
    try:
        registry.register("test_kind_a", first)
        with pytest.raises(registry.AlreadyRegistered):
            registry.register("test_kind_a", second)
        assert registry.handler_for("test_kind_a") is first
    finally:
        registry.unregister("test_kind_a")
    assert registry.handler_for("test_kind_a") is None


def test_event_handlers_are_kept_in_order_without_duplicates():
    calls = []

    def one(event):
        calls.append(1)

    def two(event):
        calls.append(2)

    for handler in (one, two, one):
        registry.register_event("test.event_v1", handler)
    try:
        assert registry.event_handlers("test.event_v1") == [one, two]
    finally:
        registry.unregister_event("test.event_v1", one)
        registry.unregister_event("test.event_v1", two)
    assert registry.event_handlers("test.event_v1") == []


def test_toast_carries_both_languages_and_answers_serialize_to_feishus_shapes():
    toast = registry.Toast.of(
        "warning", _("This button is not supported. Please refresh the card.")
    )
    assert toast.en_us == "This button is not supported. Please refresh the card."
    assert toast.zh_cn == "不支持此按钮，请刷新卡片。"
    assert toast.to_json() == {
        "type": "warning",
        "content": toast.zh_cn,
        "i18n": {"zh_cn": toast.zh_cn, "en_us": toast.en_us},
    }
    card = {"schema": "2.0"}
    assert registry.Answer().to_json() == {}
    assert registry.Answer(card=card).to_json() == {"card": {"type": "raw", "data": card}}
    assert registry.Answer.error("x").to_json()["toast"]["type"] == "error"
    with pytest.raises(ValueError):
        registry.Toast("loud", "a", "b")


def test_card_action_reads_the_payload_and_its_repr_hides_people_and_tokens():
    payload = feishu.payload("card_action_feedback_detail_submit")
    action = registry.CardAction.from_payload(None, payload)
    assert action.kind == "feedback_detail"
    assert action.form_value["fb_reason"] == "missing_context"
    assert (action.operator_open_id, action.operator_union_id) == ("ou_requester", "on_requester")
    assert action.tenant_key == "2df73991750tenant"
    text = repr(action)
    for hidden in ("ou_requester", "on_requester", "c-7a1f0c2d", "引用的文档"):
        assert hidden not in text
    assert payload["header"]["event_id"] in text


@pytest.mark.parametrize("value", [None, "", "{", "[]", 3, ["a"]])
def test_card_action_without_an_object_value_is_invalid(value):
    payload = feishu.payload("card_action_feedback_click", {"event.action.value": value})
    with pytest.raises(registry.InvalidCallback):
        registry.CardAction.from_payload(None, payload)
