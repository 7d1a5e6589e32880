"""The card-update worker applies each update through the card's own channel
(`CardEntity.channel` → `Channel.apply_update`): a card of another channel never reaches
Feishu, its rate limit's `retry_after` is honoured, its pacing is its own, and a card whose
channel applies no updates fails instead of being sent somewhere else."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from interactions.cardqueue import service as cards
from interactions.cardqueue import worker as cardworker
from interactions.models import CardEntity, CardUpdate
from plumbing.workqueue import WorkStatus


class RecordingApplier:
    """A channel's applier that records what it was asked to apply; `fail` is raised once."""

    update_interval = timedelta(seconds=2)

    def __init__(self):
        self.applied: list[tuple[dict, dict]] = []
        self.fail: cards.UpdateFailed | None = None

    def apply_update(self, card, update):
        if self.fail is not None:
            exc, self.fail = self.fail, None
            raise exc
        self.applied.append((dict(card.address), update.card_json))
        return None


@pytest.fixture
def other_channel():
    applier = RecordingApplier()
    cards.register_applier("otherchat", applier)
    yield applier
    cards._appliers.pop("otherchat", None)


@pytest.fixture
def other_card(db, lark_bot):
    return CardEntity.objects.create(
        bot=lark_bot,
        channel="otherchat",
        send_uuid="oc_send_1",
        address={"channel": "C1", "ts": "1.000100"},
    )


def _run_once():
    CardUpdate.objects.filter(status=WorkStatus.PENDING).update(
        next_attempt_at=timezone.now() - timedelta(seconds=1)
    )
    CardEntity.objects.update(next_send_at=timezone.now() - timedelta(seconds=1))
    return cardworker.run_due(10)


def test_an_update_of_another_channels_card_goes_through_that_channel_not_feishu(
    other_channel, other_card, lark_stub
):
    cards.enqueue_card(other_card, {"blocks": [], "text": "v1"})
    assert _run_once() == 1
    assert other_channel.applied == [
        ({"channel": "C1", "ts": "1.000100"}, {"blocks": [], "text": "v1"})
    ]
    assert lark_stub.calls == []  # nothing went to Feishu
    assert CardUpdate.objects.get().status == WorkStatus.DONE
    other_card.refresh_from_db()
    # paced by that channel's own interval, not Feishu's 200 ms
    assert other_card.next_send_at > timezone.now() + timedelta(seconds=1)


def test_a_rate_limited_update_waits_at_least_the_channels_retry_after(other_channel, other_card):
    other_channel.fail = cards.UpdateFailed(
        "ratelimited", retryable=True, rate_limited=True, retry_after=30
    )
    cards.enqueue_card(other_card, {"blocks": [], "text": "v1"})
    before = timezone.now()
    assert cardworker.run_due(10) == 1
    row = CardUpdate.objects.get()
    assert row.status == WorkStatus.PENDING and row.attempts == 1
    assert row.next_attempt_at >= before + timedelta(seconds=30)
    assert other_channel.applied == []


def test_a_permanent_channel_error_fails_the_update_with_its_code(other_channel, other_card):
    other_channel.fail = cards.UpdateFailed("message_not_found", retryable=False, code=404)
    cards.enqueue_card(other_card, {"blocks": [], "text": "v1"})
    assert cardworker.run_due(10) == 1
    row = CardUpdate.objects.get()
    assert row.status == WorkStatus.FAILED and row.error_code == 404
    assert "message_not_found" in row.last_error


def test_a_card_whose_channel_applies_no_updates_fails_and_is_never_sent_to_feishu(
    db, lark_bot, lark_stub
):
    card = CardEntity.objects.create(bot=lark_bot, channel="nosuchchat", send_uuid="x_1")
    cards.enqueue_card(card, {"text": "v1"})
    assert cardworker.run_due(10) == 1
    row = CardUpdate.objects.get()
    assert row.status == WorkStatus.FAILED and "nosuchchat" in row.last_error
    assert lark_stub.calls == []


def test_feishu_cards_record_their_channel_and_an_empty_address(db, lark_stub, lark_bot):
    from interactions.tests.test_cardjson import feedback_card

    entity = cards.send_card(lark_bot, feedback_card(), receive_id="oc_group_chat")
    assert (entity.channel, entity.address) == ("feishu", {})
