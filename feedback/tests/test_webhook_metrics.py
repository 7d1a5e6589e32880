"""The outbox worker records each webhook attempt's duration for `/metrics`, by destination
(primary key, never the URL) and outcome."""

from __future__ import annotations

import pytest
from django.db import connection, transaction

from cardloop.tests.metrics_scrape import value
from feedback.events import emit
from feedback.models import OutboxItem
from feedback.outbox import OutboxWorker
from feedback.tests.receiver import Reply
from plumbing import metrics

pytestmark = [
    pytest.mark.usefixtures("webhook_settings", "dns"),
    pytest.mark.django_db(transaction=True),
]


def test_webhook_attempts_are_timed_by_destination_and_outcome(
    receiver, make_bot, make_destination
):
    bot = make_bot()
    destination, _secret = make_destination(receiver.url("/hook-secret-path"))
    key = str(destination.pk)

    def attempts(outcome):
        body, _content_type = metrics.render()
        return value(
            body.decode(),
            "cardloop_webhook_attempt_seconds_count",
            destination=key,
            outcome=outcome,
        )

    before = {o: attempts(o) for o in ("delivered", "retryable_status")}
    receiver.reply(Reply(503))
    with transaction.atomic():
        emit("interaction.resolved", "evt_webhook_metrics", {"n": 1}, bot=bot)
    worker = OutboxWorker(concurrency=1, idle_wait=0.05)
    try:
        worker.tick()
        while worker.in_flight:
            worker.tick()
        OutboxItem.objects.update(next_attempt_at=OutboxItem.objects.get().created_at)
        worker.tick()
        while worker.in_flight:
            worker.tick()
    finally:
        worker.close()
        connection.close()
    assert OutboxItem.objects.get().status == "done"
    assert attempts("retryable_status") == before["retryable_status"] + 1
    assert attempts("delivered") == before["delivered"] + 1
    body, _content_type = metrics.render()
    assert "hook-secret-path" not in body.decode()
