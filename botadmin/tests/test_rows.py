"""`plumbing.db.rows.insert_row` writes exactly the row `Model.save()` writes, and `select_one`
reads exactly the instance `raw()` reads (SQLite and PostgreSQL): defaults, `auto_now`, JSON,
datetimes, booleans, foreign keys, unique constraints and extra columns."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import IntegrityError, transaction
from django.utils import timezone

from interactions.cardqueue import service as cards
from interactions.models import CardUpdate, InboundEvent
from plumbing.db.rows import insert_row, quoted_table, select_one

pytestmark = pytest.mark.django_db


def _stored(model, pk):
    return model.objects.filter(pk=pk).values().get()


def _two_cards_and_an_update(bot, digit: str, element: str, text: str):
    """Two cards of `bot` and the field values of a pending update with `text` (quotes, a
    `%s` and non-ASCII, which a hand-written statement must pass through untouched)."""
    first, second = (cards.register_card(bot, card_id=f"7355{digit * 14}{i}") for i in (1, 2))
    values = dict(
        card_json=None,
        elements={element: {"tag": "markdown", "content": text}},
        next_attempt_at=timezone.now() + timedelta(seconds=3),
        hold_token=digit * 32,
    )
    return first, second, values


def test_inserted_card_update_reads_back_like_one_the_orm_saved(make_bot):
    bot = make_bot()
    first, second, values = _two_cards_and_an_update(bot, "1", "fb_prompt", '选择 ✓ "quoted" %s')
    due = values["next_attempt_at"]
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


def _fields(obj):
    return {f.attname: getattr(obj, f.attname) for f in type(obj)._meta.concrete_fields}


def test_select_one_reads_the_instance_raw_reads_with_extra_columns_as_attributes(make_bot):
    bot = make_bot()
    card = cards.register_card(bot, card_id="7355111111111111119")
    CardUpdate.objects.create(
        card=card,
        elements={"fb_prompt": {"tag": "markdown", "content": "选择 ✓"}},
        next_attempt_at=timezone.now(),
    )
    table, updates = quoted_table(type(card)), quoted_table(CardUpdate)
    # the extra column first and the entity's columns in the table's order: both must land
    sql = (
        f"SELECT (SELECT u.id FROM {updates} u WHERE u.card_id = e.id) AS pending_pk, e.* "  # noqa: S608
        f"FROM {table} e WHERE e.id = %s"
    )
    fast = select_one(type(card), sql, [card.pk])
    orm = next(iter(type(card).objects.raw(sql, [card.pk])))
    assert _fields(fast) == _fields(orm) == _fields(type(card).objects.get(pk=card.pk))
    assert fast.pending_pk == orm.pending_pk == CardUpdate.objects.get().pk
    assert not fast._state.adding and fast._state.db == "default"
    again = select_one(type(card), sql, [card.pk])  # the worked-out reader is reused
    assert _fields(again) == _fields(fast)


def test_select_one_converts_json_datetimes_and_booleans_like_the_orm(make_bot):
    bot = make_bot()
    type(bot).objects.filter(pk=bot.pk).update(api_only=True)
    table = quoted_table(type(bot))
    read = select_one(type(bot), f"SELECT * FROM {table} WHERE id = %s", [bot.pk])  # noqa: S608
    assert read.api_only is True  # SQLite stores 1
    assert _fields(read) == _fields(type(bot).objects.get(pk=bot.pk))
    card = cards.register_card(bot, card_id="7355111111111111118")
    update = CardUpdate.objects.create(
        card=card,
        card_json={"schema": "2.0", "body": {"elements": []}},
        elements={"a": {"tag": "hr"}},
        next_attempt_at=timezone.now() + timedelta(seconds=5),
    )
    fast = select_one(
        CardUpdate, f"SELECT * FROM {quoted_table(CardUpdate)} WHERE id = %s", [update.pk]
    )  # noqa: S608
    assert _fields(fast) == _fields(CardUpdate.objects.get(pk=update.pk))
    assert fast.card_json == {"schema": "2.0", "body": {"elements": []}}
    assert fast.next_attempt_at.tzinfo is not None


def test_select_one_without_a_row_is_none_and_without_the_primary_key_refuses(make_bot):
    bot = make_bot()
    table = quoted_table(InboundEvent)
    assert select_one(InboundEvent, f"SELECT * FROM {table} WHERE id = %s", [-1]) is None  # noqa: S608
    insert_row(InboundEvent(bot=bot, event_id="evt_rows_3", received_at=timezone.now()))
    with pytest.raises(ValueError, match="primary key"):
        select_one(InboundEvent, f"SELECT event_id FROM {table}", [])  # noqa: S608


def test_first_pending_update_is_inserted_from_the_card_row_like_one_the_orm_saved(make_bot):
    bot = make_bot()
    first, second, values = _two_cards_and_an_update(bot, "2", "fb_status", '已记录 ✓ "quoted" %s')
    fast = CardUpdate.objects.insert_first_pending(CardUpdate(**values), bot, first.card_id)
    orm = CardUpdate.objects.create(card=second, **values)
    assert fast is not None and fast.pk != orm.pk and fast.card_id == first.pk
    assert not fast._state.adding
    a, b = _stored(CardUpdate, fast.pk), _stored(CardUpdate, orm.pk)
    for row in (a, b):
        for column in ("id", "updated_at", "created_at"):
            row.pop(column)
    assert (a.pop("card_id"), b.pop("card_id")) == (first.pk, second.pk)
    assert a == b


def test_no_first_pending_update_for_a_card_with_one_pending_or_an_unknown_card(make_bot):
    bot, other = make_bot(), make_bot(app_id="cli_other_app")
    card = cards.register_card(bot, card_id="7355333333333333331")
    pending = CardUpdate.objects.create(card=card, elements={"fb_a": {"tag": "hr"}})
    new = dict(elements={"fb_b": {"tag": "hr"}})
    assert CardUpdate.objects.insert_first_pending(CardUpdate(**new), bot, card.card_id) is None
    assert CardUpdate.objects.insert_first_pending(CardUpdate(**new), other, card.card_id) is None
    assert CardUpdate.objects.insert_first_pending(CardUpdate(**new), bot, "") is None
    assert list(CardUpdate.objects.values_list("pk", flat=True)) == [pending.pk]
    # once the pending one was taken by a worker, the card may have a new pending update
    CardUpdate.objects.filter(pk=pending.pk).update(status="inflight")
    fresh = CardUpdate.objects.insert_first_pending(CardUpdate(**new), bot, card.card_id)
    assert fresh is not None and fresh.card_id == card.pk
    assert CardUpdate.objects.get(pk=fresh.pk).elements == new["elements"]
