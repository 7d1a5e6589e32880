"""Every card is recorded before its message is sent (`cards.send_card`), so a process that
dies after Feishu accepted a message but before Cardloop recorded it cannot make a second card:
the retry finds the recorded CardKit entity, sends it again with the same message `uuid`, and
Feishu's dedupe answers with the first message. Progress cards, interactions and deliveries
share one stale-send rule (`cards.SEND_STALE`, `cards.send_is_stale`). Real lark-oapi client
against the loopback stub (`tests/lark_stub.py`)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from interactions.approvals import service as approvals
from interactions.asks import progress
from interactions.cardqueue import service as cards
from interactions.models import CardEntity, Interaction, ProgressSession
from interactions.tests.test_cardjson import feedback_card

pytestmark = pytest.mark.django_db(transaction=True)

CHAT = "oc_group_chat"
CREATE = "/open-apis/cardkit/v1/cards"
MESSAGES = "/open-apis/im/v1/messages"


def _accepted_then_died(monkeypatch) -> None:
    """The first message send reaches Feishu, which accepts it; then the process dies before
    it sees the answer (as a SIGKILL would)."""
    from interactions.lark import client

    real = client.LarkGateway.send_card
    calls = {"n": 0}

    def dying(self, **kwargs):
        calls["n"] += 1
        result = real(self, **kwargs)
        if calls["n"] == 1:
            raise KeyboardInterrupt("killed after Feishu accepted the message")
        return result

    monkeypatch.setattr(client.LarkGateway, "send_card", dying)


def test_the_card_entity_is_recorded_with_its_send_uuid_before_the_message_is_sent(
    lark_stub, lark_bot, monkeypatch
):
    from interactions.lark import client

    real = client.LarkGateway.send_card
    seen = []

    def spy(self, **kwargs):
        seen.append(list(CardEntity.objects.values_list("send_uuid", "card_id", "open_message_id")))
        return real(self, **kwargs)

    monkeypatch.setattr(client.LarkGateway, "send_card", spy)
    entity = cards.send_card(lark_bot, feedback_card(), receive_id=CHAT, uuid="u-first")
    assert seen == [[("u-first", entity.card_id, "")]]
    assert (entity.send_uuid, entity.open_message_id) == ("u-first", *lark_stub.messages)


def test_sending_a_recorded_uuid_again_returns_the_recorded_card_and_calls_nothing(
    lark_stub, lark_bot
):
    first = cards.send_card(lark_bot, feedback_card(), receive_id=CHAT, uuid="u-again")
    calls = len(lark_stub.calls)
    again = cards.send_card(lark_bot, feedback_card(), receive_id=CHAT, uuid="u-again")
    assert again.pk == first.pk
    assert len(lark_stub.calls) == calls


def test_a_raw_card_message_is_recorded_before_it_is_sent_too(lark_stub, lark_bot, monkeypatch):
    _accepted_then_died(monkeypatch)
    with pytest.raises(KeyboardInterrupt):
        cards.send_card(lark_bot, feedback_card(), receive_id=CHAT, uuid="u-raw", entity=False)
    recorded = CardEntity.objects.get()
    assert (recorded.send_uuid, recorded.card_id, recorded.open_message_id) == ("u-raw", "", "")
    again = cards.send_card(lark_bot, feedback_card(), receive_id=CHAT, uuid="u-raw", entity=False)
    assert again.pk == recorded.pk and again.open_message_id == next(iter(lark_stub.messages))
    assert len(lark_stub.messages) == 1


def test_a_progress_card_feishu_took_before_the_process_died_is_one_card(
    lark_stub, lark_bot, monkeypatch
):
    _accepted_then_died(monkeypatch)
    with pytest.raises(KeyboardInterrupt):
        progress.update_progress(
            lark_bot, "sess_crash", status="running", title="Build", receive_id=CHAT
        )
    (message_id,) = lark_stub.messages
    assert ProgressSession.objects.get().card is None
    ProgressSession.objects.update(sending_since=timezone.now() - cards.SEND_STALE * 2)

    result = progress.update_progress(lark_bot, "sess_crash", status="running", summary="Step 1")
    assert result.sent
    assert len(lark_stub.messages) == 1
    assert len(lark_stub.calls_to("POST", CREATE)) == 1  # the recorded entity was sent again
    card = result.session.card
    assert card.open_message_id == message_id
    assert card.card_id == lark_stub.messages[message_id]["card_id"]  # the card on screen


def test_an_interaction_feishu_took_before_the_process_died_is_one_card(
    lark_stub, lark_bot, monkeypatch
):
    ia, _ = approvals.create_interaction(
        lark_bot,
        kind="approval",
        channel="feishu",
        chat_id=CHAT,
        requester_open_id="ou_requester",
        session_id="sess_1",
        title="Run a shell command?",
        body="ls",
        tool="bash",
        request_id="req-died",
    )
    _accepted_then_died(monkeypatch)
    with pytest.raises(KeyboardInterrupt):
        approvals.send_to_chat(ia)
    (message_id,) = lark_stub.messages
    Interaction.objects.filter(pk=ia.pk).update(created_at=ia.created_at - cards.SEND_STALE * 2)
    ia.refresh_from_db()
    assert approvals.send_was_interrupted(ia)

    shown = approvals.send_to_chat(ia)
    assert shown.open_message_id == message_id
    assert len(lark_stub.calls_to("POST", CREATE)) == 1
    assert shown.card.card_id == lark_stub.messages[message_id]["card_id"]


@pytest.mark.parametrize(("age", "resent"), [(0.5, False), (2, True)], ids=["young", "stale"])
def test_a_progress_first_send_is_retried_by_the_one_stale_send_rule(
    lark_stub, lark_bot, monkeypatch, age, resent
):
    """A first send that began `age` × SEND_STALE ago: the next PUT sends again only once it is
    stale (the rule deliveries and interactions use), not after a shorter progress-only time."""
    _accepted_then_died(monkeypatch)
    with pytest.raises(KeyboardInterrupt):
        progress.update_progress(lark_bot, "sess_age", status="running", receive_id=CHAT)
    ProgressSession.objects.update(sending_since=timezone.now() - cards.SEND_STALE * age)
    result = progress.update_progress(lark_bot, "sess_age", status="running", summary="next")
    assert result.sent is resent
    assert len(lark_stub.calls_to("POST", MESSAGES)) == (2 if resent else 1)


def test_send_is_stale_is_the_one_rule_and_counts_from_when_the_send_began():
    now = timezone.now()
    assert cards.send_is_stale(now - cards.SEND_STALE - timedelta(seconds=1), now)
    assert not cards.send_is_stale(now - cards.SEND_STALE + timedelta(seconds=1), now)
    assert not cards.send_is_stale(None, now)
    from feedback import deliveries

    assert deliveries.STALE_SEND is cards.SEND_STALE
    assert approvals.SEND_STALE is cards.SEND_STALE
    assert not hasattr(progress, "SENDING_STALE")


def test_two_racing_sends_of_one_uuid_record_one_card_and_show_it_once(
    lark_stub, lark_bot, monkeypatch
):
    """Both calls pass the record step before either has created its CardKit entity (the
    barrier): one entity is recorded, both send that one with the same uuid, one message."""
    import threading

    from django.db import connections

    from interactions.lark import client

    real = client.LarkGateway.create_card
    barrier = threading.Barrier(2, timeout=10)

    def create_together(self, card):
        barrier.wait()
        return real(self, card)

    monkeypatch.setattr(client.LarkGateway, "create_card", create_together)
    results, errors = [], []

    def send():
        try:
            results.append(
                cards.send_card(lark_bot, feedback_card(), receive_id=CHAT, uuid="u-race")
            )
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=send) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    recorded = CardEntity.objects.get()
    assert {r.pk for r in results} == {recorded.pk}
    (message_id,) = lark_stub.messages
    assert recorded.open_message_id == message_id
    assert lark_stub.messages[message_id]["card_id"] == recorded.card_id
