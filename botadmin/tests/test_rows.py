"""`plumbing.db.rows.insert_row` writes exactly the row `Model.save()` writes (SQLite and
PostgreSQL): defaults, `auto_now`, JSON, datetimes, foreign keys and unique constraints."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import IntegrityError, transaction
from django.utils import timezone

from interactions.cardqueue import service as cards
from interactions.models import CardUpdate, InboundEvent
from plumbing.db.rows import insert_row

pytestmark = pytest.mark.django_db


def _stored(model, pk):
    return model.objects.filter(pk=pk).values().get()


def test_inserted_card_update_reads_back_like_one_the_orm_saved(make_bot):
    bot = make_bot()
    first, second = (cards.register_card(bot, card_id=f"735511111111111111{i}") for i in (1, 2))
    due = timezone.now() + timedelta(seconds=3)
    values = dict(
        card_json=None,
        elements={"fb_prompt": {"tag": "markdown", "content": '选择 ✓ "quoted" %s'}},
        next_attempt_at=due,
        hold_token="a" * 32,
    )
    before = timezone.now()
    fast = insert_row(CardUpdate(card=first, **values))
    orm = CardUpdate.objects.create(card=second, **values)  # one pending update per card
    assert fast.pk is not None and fast.pk != orm.pk
    assert not fast._state.adding
    a, b = _stored(CardUpdate, fast.pk), _stored(CardUpdate, orm.pk)
    for row in (a, b):
        assert row.pop("id")
        assert before <= row.pop("updated_at") <= timezone.now()  # auto_now applied
        row.pop("created_at")
    assert (a.pop("card_id"), b.pop("card_id")) == (first.pk, second.pk)
    assert a == b
    assert a["status"] == "pending" and a["attempts"] == 0 and a["next_attempt_at"] == due
    assert a["elements"]["fb_prompt"]["content"] == '选择 ✓ "quoted" %s'
    fast.refresh_from_db()  # the instance is a normal saved row
    fast.attempts = 2
    fast.save(update_fields=["attempts"])
    assert _stored(CardUpdate, fast.pk)["attempts"] == 2


def test_a_unique_conflict_raises_integrity_error_and_writes_nothing(make_bot):
    bot = make_bot()
    now = timezone.now()
    insert_row(InboundEvent(bot=bot, event_id="evt_rows_1", event_type="x", received_at=now))
    with pytest.raises(IntegrityError), transaction.atomic():
        insert_row(InboundEvent(bot=bot, event_id="evt_rows_1", event_type="y", received_at=now))
    assert list(InboundEvent.objects.values_list("event_type", flat=True)) == ["x"]


def test_an_instance_with_its_primary_key_set_is_saved_by_the_orm(make_bot):
    bot = make_bot()
    row = insert_row(
        InboundEvent(pk=987654, bot=bot, event_id="evt_rows_2", received_at=timezone.now())
    )
    assert InboundEvent.objects.get(pk=987654).event_id == row.event_id == "evt_rows_2"
