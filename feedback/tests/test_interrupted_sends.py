"""A delivery whose send was interrupted (the process died between recording it and Feishu's
answer) is not stuck `pending` for good: a retry after `STALE_SEND` sends it again with the
CardKit entity and message `uuid` of the first attempt, so the chat shows one card, and
`fail_interrupted_sends` marks such deliveries `send_failed` for analytics. Real lark-oapi
client against the loopback stub."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.management import call_command
from django.utils import timezone

from feedback import deliveries
from feedback.models import Delivery
from feedback.tests.conftest import answer_card
from interactions.cardqueue import service as cards
from interactions.models import CardEntity

pytestmark = pytest.mark.django_db(transaction=True)

CREATE = "/open-apis/cardkit/v1/cards"
MESSAGES = "/open-apis/im/v1/messages"


def _request(**fields) -> deliveries.DeliveryRequest:
    values = {
        "chat_id": "oc_group_chat",
        "requester_open_id": "ou_requester",
        "response_kind": "final",
        "session_id": "s-crash",
        "turn_id": "t-crash",
        "card": answer_card(),
        **fields,
    }
    return deliveries.DeliveryRequest(**values)


def _crash_in(monkeypatch, module, name):
    """Make `module.name` die once, as a killed process would at that step."""
    real = getattr(module, name)
    calls = {"n": 0}

    def dying(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 1:
            raise KeyboardInterrupt(f"killed in {name}")
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, dying)


def _died_before_the_message(bot, monkeypatch) -> Delivery:
    """Deliver `_request()` with the process dying as the message is sent: the delivery stays
    `pending` with its CardKit entity recorded."""
    from interactions.lark import client

    _crash_in(monkeypatch, client.LarkGateway, "send_card")
    with pytest.raises(KeyboardInterrupt):
        deliveries.deliver(bot, _request())
    return Delivery.objects.get()


def _age(delivery_id: str, by) -> None:
    Delivery.objects.filter(delivery_id=delivery_id).update(updated_at=timezone.now() - by)


def test_a_crash_after_feishu_took_the_message_is_resent_as_the_same_message_and_card(
    feedback_api, monkeypatch
):
    bot, stub = feedback_api.bot, feedback_api.stub
    _crash_in(monkeypatch, cards, "_record_message")  # after the message went out
    with pytest.raises(KeyboardInterrupt):
        deliveries.deliver(bot, _request())
    delivery = Delivery.objects.get()
    assert delivery.status == "pending" and delivery.platform_message_id == ""
    assert delivery.card_id  # recorded before the message was sent
    (first_message,) = stub.messages

    # a retry while the first send may still be running sends nothing
    early = deliveries.deliver(bot, _request())
    assert (early.created, early.resent, early.delivery.status) == (False, False, "pending")
    assert len(stub.calls_to("POST", MESSAGES)) == 1

    _age(delivery.delivery_id, deliveries.STALE_SEND + timedelta(seconds=1))
    late = deliveries.deliver(bot, _request())
    assert (late.created, late.resent, late.delivery.status) == (False, True, "sent")
    assert late.delivery.platform_message_id == first_message  # Feishu's uuid dedupe
    assert late.delivery.card_id == delivery.card_id
    assert len(stub.calls_to("POST", CREATE)) == 1  # the entity was reused
    assert len(stub.messages) == 1
    sends = stub.calls_to("POST", MESSAGES)
    assert [c.body["uuid"] for c in sends] == [delivery.delivery_id] * 2
    entity = CardEntity.objects.get(card_id=delivery.card_id)
    assert entity.open_message_id == first_message


def test_a_crash_before_the_message_reuses_the_entity_and_sends_it_once(feedback_api, monkeypatch):
    bot, stub = feedback_api.bot, feedback_api.stub
    _died_before_the_message(bot, monkeypatch)
    delivery = Delivery.objects.get()
    assert delivery.card_id and stub.messages == {}
    _age(delivery.delivery_id, deliveries.STALE_SEND * 2)
    late = deliveries.deliver(bot, _request())
    assert late.resent and late.delivery.status == "sent"
    assert late.delivery.card_id == delivery.card_id
    assert len(stub.calls_to("POST", CREATE)) == 1
    (message,) = stub.messages.values()
    assert message["card_id"] == delivery.card_id


@pytest.mark.parametrize(
    "dies_in", ["_record_message", "_mark_sent"], ids=["before-record", "after-register"]
)
def test_an_edited_card_in_the_resend_keeps_the_first_entity_that_feishu_shows(
    feedback_api, monkeypatch, dies_in
):
    """The message went out with the first entity: Feishu's uuid dedupe answers a resend with
    that message, so a new entity for the edited card would be recorded but never seen, and
    once the first entity was registered a new one could not be registered to that message
    at all (every later retry failed with card_conflict)."""
    bot, stub = feedback_api.bot, feedback_api.stub
    _crash_in(monkeypatch, cards if dies_in == "_record_message" else deliveries, dies_in)
    with pytest.raises(KeyboardInterrupt):
        deliveries.deliver(bot, _request())
    first = Delivery.objects.get()
    (message,) = stub.messages
    _age(first.delivery_id, deliveries.STALE_SEND * 2)
    late = deliveries.deliver(bot, _request(card=answer_card("edited answer")))
    assert late.resent and late.delivery.status == "sent"
    assert (late.delivery.card_id, late.delivery.platform_message_id) == (first.card_id, message)
    assert len(stub.calls_to("POST", CREATE)) == 1
    assert stub.messages[message]["card_id"] == first.card_id


def test_a_resend_goes_to_the_chat_the_delivery_was_made_for(feedback_api, monkeypatch):
    bot, stub = feedback_api.bot, feedback_api.stub
    _died_before_the_message(bot, monkeypatch)
    _age(Delivery.objects.get().delivery_id, deliveries.STALE_SEND * 2)
    late = deliveries.deliver(bot, _request(chat_id="oc_somewhere_else"))
    assert late.resent
    (message,) = stub.messages.values()
    assert message["receive_id"] == "oc_group_chat"


def test_the_dry_run_answers_a_repeated_uuid_with_the_same_message(make_bot):
    from interactions.lark.dryrun import DryRunGateway

    gateway = DryRunGateway(make_bot(app_id="cli_dry_uuid"))
    first = gateway.send_card(receive_id="oc_x", card_id="dry_card_1", uuid="del_1")
    again = gateway.send_card(receive_id="oc_x", card_id="dry_card_1", uuid="del_1")
    other = gateway.send_card(receive_id="oc_x", card_id="dry_card_2", uuid="del_2")
    assert first == again != other and first.startswith("om_dry_")


def test_interrupted_sends_are_marked_send_failed_and_a_retry_then_sends(feedback_api, monkeypatch):
    bot = feedback_api.bot
    stuck = _died_before_the_message(bot, monkeypatch)
    fresh = Delivery.objects.create(
        delivery_id="del_fresh", bot=bot, session_id="s-f", turn_id="t-f", status="pending"
    )
    assert deliveries.fail_interrupted_sends() == 0  # nothing is old enough yet
    _age(stuck.delivery_id, deliveries.STALE_SEND * 2)
    call_command("outbox_worker", "--once")  # runs the sweep with its periodic jobs
    stuck.refresh_from_db()
    fresh.refresh_from_db()
    assert (stuck.status, stuck.error_code) == ("send_failed", "send_interrupted")
    assert fresh.status == "pending"
    retry = deliveries.deliver(bot, _request())
    assert retry.resent and retry.delivery.status == "sent"


def test_racing_retries_of_an_interrupted_send_send_it_once(feedback_api, monkeypatch):
    bot, stub = feedback_api.bot, feedback_api.stub
    _died_before_the_message(bot, monkeypatch)
    _age(Delivery.objects.get().delivery_id, deliveries.STALE_SEND * 2)
    # the first claim moves updated_at; the second, with the same stale row in hand, loses
    stale_row = Delivery.objects.get()
    first = deliveries._retry(stale_row, _request())
    second = deliveries._retry(stale_row, _request())
    assert first.resent and not second.resent
    assert len(stub.calls_to("POST", MESSAGES)) == 1
