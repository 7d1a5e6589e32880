"""Interactions through the real Feishu ingress: the `card_action_approval.json` fixture
encrypted and signed as Feishu does, the `im_message_receive.json` typed command, answers
within the budget, held card updates (answer first); approval cards answer JSON, carry values
in `behaviors`, are valid in an answer and keep `update_multi`."""

from __future__ import annotations

import json
import time
from datetime import timedelta

import pytest
from django.utils import timezone

from interactions.approvals import service as approvals
from interactions.cardqueue import worker as cardworker
from interactions.cardqueue.releases import RELEASES
from interactions.lifecycle import resolve as lifecycle
from interactions.models import CardEntity, CardUpdate, InboundEvent, Interaction
from interactions.tests.ia_helpers import *  # noqa: F403
from interactions.tests.ia_helpers import CHAT, OTHER, REQUESTER
from plumbing.workqueue import WorkStatus
from tests import feishu

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def approval(lark_stub, lark_bot, make_interaction):
    return approvals.send_to_chat(make_interaction(lark_bot))


def click_payload(ia, value="approve", **changes):
    return feishu.payload(
        "card_action_approval",
        {
            "event.action.value.interaction_id": ia.public_id,
            "event.action.value.action_id": value,
            "event.action.value.action_value": value,
            "event.context.open_message_id": ia.open_message_id,
            **changes,
        },
    )


def answer_of(response):
    assert response.status_code == 200
    assert response["Content-Type"] == "application/json"
    return json.loads(response.content)


def run_queue():
    CardEntity.objects.update(next_send_at=timezone.now() - timedelta(seconds=1))
    return cardworker.run_due(10)


def has_buttons(card) -> bool:
    return '"tag": "button"' in json.dumps(card)


def test_approval_click_fixture_is_answered_with_toast_and_final_card_then_the_card_updates(
    lark_callback, lark_stub, approval
):
    body = answer_of(lark_callback(click_payload(approval)))
    assert body["toast"]["type"] == "success"
    assert body["toast"]["i18n"] == {"zh_cn": "已批准", "en_us": "Approved."}
    card = body["card"]
    assert card["type"] == "raw"
    feishu.assert_valid_card(card["data"])
    assert not has_buttons(card["data"])
    ia = Interaction.objects.get(pk=approval.pk)
    assert (ia.status, ia.resolution["via"], ia.resolution["operator"]) == (
        "resolved",
        "card",
        REQUESTER,
    )
    assert RELEASES.flush()  # the process's release batch after the answer
    update = CardUpdate.objects.get(card=ia.card)
    assert update.hold_token == "", "released once the answer was sent"
    assert run_queue() == 1
    stub_card = lark_stub.cards[ia.card.card_id]
    assert not has_buttons(stub_card.card) and stub_card.sequences == [1]
    assert lark_stub.calls_to("PUT", "/open-apis/im/v1/messages") == []
    assert lark_stub.calls_to("PATCH", "/open-apis/im/v1/messages") == []


def test_same_click_delivered_twice_is_answered_the_same_and_written_once(lark_callback, approval):
    payload = click_payload(approval)
    first = answer_of(lark_callback(payload))
    second = answer_of(lark_callback(payload))
    assert second["toast"] == first["toast"]
    assert InboundEvent.objects.filter(event_id=payload["header"]["event_id"]).count() == 1
    assert Interaction.objects.get(pk=approval.pk).resolution["via"] == "card"


def test_later_click_on_a_resolved_card_gets_already_handled_and_the_final_card(
    lark_callback, approval
):
    answer_of(lark_callback(click_payload(approval, "deny")))
    body = answer_of(lark_callback(click_payload(approval, "approve")))
    assert body["toast"]["i18n"]["zh_cn"] == "已处理"
    assert not has_buttons(body["card"]["data"])
    assert Interaction.objects.get(pk=approval.pk).resolution["action_id"] == "deny"


def test_click_by_someone_else_is_refused_with_a_toast_through_the_ingress(lark_callback, approval):
    body = answer_of(lark_callback(click_payload(approval, **{"event.operator.open_id": OTHER})))
    assert body["toast"]["type"] == "warning" and "card" not in body
    assert Interaction.objects.get(pk=approval.pk).status == "pending"
    assert CardUpdate.objects.count() == 0


def test_unknown_action_value_through_the_ingress_is_a_json_toast_not_a_denial(
    lark_callback, approval
):
    body = answer_of(lark_callback(click_payload(approval, "rm_rf")))
    assert body["toast"]["type"] == "warning"
    assert Interaction.objects.get(pk=approval.pk).status == "pending"


def test_placeholder_fixture_with_an_unknown_id_is_a_toast(lark_callback, lark_stub):
    body = answer_of(lark_callback(feishu.payload("card_action_approval")))
    assert body["toast"]["i18n"]["en_us"] == "This request was not found."


def test_expired_card_click_shows_expired_and_the_sweeper_then_updates_the_card(
    lark_callback, lark_stub, approval
):
    Interaction.objects.filter(pk=approval.pk).update(expires_at=timezone.now())
    body = answer_of(lark_callback(click_payload(approval)))
    assert body["toast"]["i18n"]["zh_cn"] == "已过期"
    assert lifecycle.expire_due() == 1
    run_queue()
    stub_card = lark_stub.cards[approval.card.card_id].card
    assert not has_buttons(stub_card) and "超时未回答：已拒绝" in json.dumps(
        stub_card, ensure_ascii=False
    )


# ---------------------------------------------------------------------------------------------
# Typed commands from Feishu chats (im.message.receive_v1)
# ---------------------------------------------------------------------------------------------


def message_payload(text, **changes):
    return feishu.payload(
        "im_message_receive",
        {"event.message.content": json.dumps({"text": text}), **changes},
    )


def wait_for(predicate, seconds=10.0):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


def test_message_fixture_with_a_typed_command_denies_and_replies_in_the_chat(
    lark_callback, lark_stub, approval
):
    payload = message_payload(f"/_interaction {approval.public_id} deny")
    assert answer_of(lark_callback(payload)) == {"msg": "success"}
    assert wait_for(lambda: lark_stub.replies)
    (reply,) = lark_stub.replies
    assert reply["parent_id"] == "om_user_msg"
    assert reply["text"] == "已拒绝\nDenied."
    ia = Interaction.objects.get(pk=approval.pk)
    assert (ia.status, ia.resolution["via"], ia.resolution["action_id"]) == (
        "resolved",
        "text",
        "deny",
    )
    assert run_queue() == 1
    assert not has_buttons(lark_stub.cards[ia.card.card_id].card)


def test_typed_command_from_someone_else_gets_a_refusal_reply_and_changes_nothing(
    lark_callback, lark_stub, approval
):
    payload = message_payload(
        f"@_user_1 /_interaction {approval.public_id} approve",
        **{"event.sender.sender_id.open_id": OTHER},
    )
    answer_of(lark_callback(payload))
    assert wait_for(lambda: lark_stub.replies)
    assert "仅被询问的人可以回答" in lark_stub.replies[0]["text"]
    assert Interaction.objects.get(pk=approval.pk).status == "pending"


@pytest.mark.parametrize("content", [{"text": "/_interaction x approve"}, 7, ["x"]])
def test_a_message_whose_content_is_not_a_json_string_is_acked_and_ignored(
    lark_callback, lark_stub, approval, caplog, content
):
    payload = feishu.payload("im_message_receive", {"event.message.content": content})
    assert answer_of(lark_callback(payload)) == {"msg": "success"}
    assert not [r for r in caplog.records if r.exc_info]
    assert lark_stub.replies == []
    assert Interaction.objects.get(pk=approval.pk).status == "pending"


def test_typed_command_in_another_chat_is_refused(lark_callback, lark_stub, approval):
    payload = message_payload(
        f"/_interaction {approval.public_id} approve",
        **{"event.message.chat_id": "oc_other_chat"},
    )
    answer_of(lark_callback(payload))
    assert wait_for(lambda: lark_stub.replies)
    assert Interaction.objects.get(pk=approval.pk).status == "pending"


@pytest.mark.parametrize(
    "text", ["good morning", "/_interaction ia_belongs_to_another_bot approve", "/_interaction"]
)
def test_ordinary_messages_and_unknown_ids_get_no_reply_and_no_write(
    lark_callback, lark_stub, approval, text
):
    payload = message_payload(text)
    assert answer_of(lark_callback(payload)) == {"msg": "success"}
    assert InboundEvent.objects.get(event_id=payload["header"]["event_id"]).status == "answered"
    assert lark_stub.replies == []
    assert Interaction.objects.get(pk=approval.pk).status == "pending"


def test_messages_from_bots_are_ignored(lark_callback, lark_stub, approval):
    payload = message_payload(
        f"/_interaction {approval.public_id} approve", **{"event.sender.sender_type": "app"}
    )
    answer_of(lark_callback(payload))
    assert InboundEvent.objects.get(event_id=payload["header"]["event_id"]).status == "answered"
    assert Interaction.objects.get(pk=approval.pk).status == "pending"
    assert lark_stub.replies == []


def test_a_card_update_failure_keeps_the_decision_and_retries(lark_callback, lark_stub, approval):
    answer_of(lark_callback(click_payload(approval)))
    lark_stub.fail("PUT", "/open-apis/cardkit/v1/cards/", code=230020, times=1)
    run_queue()
    update = CardUpdate.objects.get(card=approval.card)
    assert update.status == WorkStatus.PENDING and update.attempts == 1
    CardUpdate.objects.filter(pk=update.pk).update(next_attempt_at=timezone.now())
    run_queue()
    assert not has_buttons(lark_stub.cards[approval.card.card_id].card)
    assert Interaction.objects.get(pk=approval.pk).status == "resolved"


def test_chat_of_the_click_must_match(lark_callback, approval):
    body = answer_of(
        lark_callback(click_payload(approval, **{"event.context.open_chat_id": "oc_other"}))
    )
    assert body["toast"]["type"] == "warning"
    assert Interaction.objects.get(pk=approval.pk).status == "pending"
    assert CHAT == approval.chat_id
