"""`inbound.claim_event`: one `INSERT … ON CONFLICT DO NOTHING RETURNING` decides which
delivery of a Feishu event does the work — also between threads racing on PostgreSQL."""

from __future__ import annotations

import threading

import pytest
from django.db import connections

from interactions.callbacks import inbound
from interactions.models import InboundEvent


@pytest.mark.django_db(transaction=True)
def test_the_first_claim_creates_the_row_and_a_repeat_gets_it(lark_bot):
    row, created = inbound.claim_event(lark_bot, "evt_claim_1", "card.action.trigger")
    assert created
    stored = InboundEvent.objects.get(pk=row.pk)
    assert (stored.event_id, stored.event_type, stored.status) == (
        "evt_claim_1",
        "card.action.trigger",
        InboundEvent.Status.PROCESSING,
    )
    inbound.finish_event(row, {"toast": {"type": "success", "content": "ok"}})
    again, created_again = inbound.claim_event(lark_bot, "evt_claim_1", "card.action.trigger")
    assert not created_again
    assert again.pk == row.pk
    assert inbound.duplicate_answer(again) == {"toast": {"type": "success", "content": "ok"}}
    # the same event id of another bot is another event
    other = lark_bot.__class__.objects.create(app_id="cli_other_claim", name="other")
    assert inbound.claim_event(other, "evt_claim_1", "card.action.trigger")[1]


@pytest.mark.django_db(transaction=True)
def test_claim_and_finish_store_times_as_the_orm_does_so_pruning_compares_like_with_like(
    lark_bot,
):
    # On SQLite a datetime is text: the hand-written statements must write the ORM's format
    # (naive UTC), or range filters such as `prune_events` compare two formats as strings.
    from datetime import timedelta

    from django.db import connection
    from django.utils import timezone

    from plumbing.db.rows import quoted_table

    row, _ = inbound.claim_event(lark_bot, "evt_claim_times", "card.action.trigger")
    inbound.finish_event(row, {})
    orm = InboundEvent.objects.create(
        bot=lark_bot, event_id="evt_orm", event_type="x", received_at=timezone.now()
    )
    if connection.vendor == "sqlite":  # the stored text (`|| ''`: no datetime converter)
        table = quoted_table(InboundEvent)
        with connection.cursor() as cursor:
            cursor.execute(
                f"SELECT received_at || '', finished_at || '' FROM {table} WHERE id = %s",  # noqa: S608
                [row.pk],
            )
            received, finished = cursor.fetchone()
            cursor.execute(f"SELECT received_at || '' FROM {table} WHERE id = %s", [orm.pk])  # noqa: S608
            (orm_received,) = cursor.fetchone()
        assert "+" not in orm_received  # the ORM writes naive UTC
        assert "+" not in received and "+" not in finished
    assert inbound.prune_events(now=timezone.now() + inbound.RETENTION + timedelta(seconds=1))
    assert not InboundEvent.objects.exists()


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_racing_claims_of_one_event_create_exactly_one_row(lark_bot):
    results: list[bool] = []
    barrier = threading.Barrier(12)

    def claim():
        try:
            barrier.wait(5)
            results.append(inbound.claim_event(lark_bot, "evt_race", "card.action.trigger")[1])
        finally:
            connections.close_all()

    threads = [threading.Thread(target=claim) for _ in range(12)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert sorted(results) == [False] * 11 + [True]
    assert InboundEvent.objects.filter(event_id="evt_race").count() == 1
