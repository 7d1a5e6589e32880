"""Delivering outbox rows to a real HTTPS receiver on loopback (CARDLOOP_WEBHOOK_ALLOW_PRIVATE
on, the test CA trusted): signatures, retries, Retry-After, status classes, dead letters,
secret rotation, limits. The scheduling clock is fake; nothing here asserts durations."""

from __future__ import annotations

import email.utils
import json
from datetime import timedelta

import pytest
from django.utils import timezone
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from botadmin.models import AuditEntry
from feedback import destinations, outbox, webhooks
from feedback.models import OutboxItem, WebhookAttempt
from feedback.tests.receiver import Reply
from plumbing.secretstore import delete_secret

pytestmark = pytest.mark.usefixtures("webhook_settings", "dns")


def _row(event):
    return OutboxItem.objects.get(event=event)


def test_delivered_request_is_signed_and_verified_by_standardwebhooks(
    receiver, make_destination, emit_event, make_worker
):
    destination, secret = make_destination(receiver.url("/hook"))
    event = emit_event("interaction.resolved", {"interaction_id": "int_1"})
    make_worker().run_until_idle()

    assert receiver.wait_for(1)
    request = receiver.requests[0]
    payload = Webhook(secret).verify(request.body, request.headers)
    assert payload["id"] == event.event_id
    assert payload["type"] == "interaction.resolved"
    assert payload["version"] == 1
    assert payload["data"] == {"interaction_id": "int_1"}
    assert request.headers["webhook-id"] == event.event_id
    assert request.headers["webhook-event-type"] == "interaction.resolved"
    assert request.headers["content-type"] == "application/json"
    assert request.body == event.body.encode()
    assert request.path == "/hook"
    item = _row(event)
    assert (item.status, item.attempts, item.last_status_code) == ("done", 1, 200)
    assert item.delivered_at is not None
    log = WebhookAttempt.objects.get(outbox_item=item)
    assert (log.attempt, log.status_code, log.outcome) == (1, 200, "delivered")
    assert log.destination_id == destination.pk
    assert json.loads(log.response_excerpt) == {"ok": True}


def test_retries_send_identical_bytes_with_the_same_webhook_id(
    receiver, make_destination, emit_event, make_worker, clock
):
    _destination, secret = make_destination(receiver.url())
    event = emit_event()
    receiver.reply(Reply(500), Reply(503))
    worker = make_worker()
    for _ in range(3):
        worker.run_until_idle()
        clock.advance(301)

    assert receiver.wait_for(3)
    assert len(receiver.requests) == 3
    assert {r.body for r in receiver.requests} == {event.body.encode()}
    assert {r.headers["webhook-id"] for r in receiver.requests} == {event.event_id}
    for request in receiver.requests:
        Webhook(secret).verify(request.body, request.headers)
    item = _row(event)
    assert (item.status, item.attempts) == ("done", 3)
    outcomes = list(
        WebhookAttempt.objects.filter(outbox_item=item)
        .order_by("attempt")
        .values_list("outcome", "status_code")
    )
    assert outcomes == [("retryable_status", 500), ("retryable_status", 503), ("delivered", 200)]


def test_retry_after_seconds_and_http_date_are_floors_of_the_next_attempt(
    receiver, make_destination, emit_event, make_worker, clock
):
    """A receiver's Retry-After is honoured: 429 Retry-After: 120, then 503 with a date 5 min ahead, then 200."""
    make_destination(receiver.url())
    event = emit_event()
    worker = make_worker()

    receiver.reply(Reply(429, {"Retry-After": "120"}))
    worker.run_until_idle()
    item = _row(event)
    assert (item.status, item.attempts) == ("pending", 1)
    assert item.next_attempt_at == clock.now + timedelta(seconds=120)
    clock.advance(119)
    worker.run_until_idle()
    assert receiver.count == 1  # not before t+120 s

    clock.advance(1)
    date = timezone.now().replace(microsecond=0) + timedelta(minutes=5)
    receiver.reply(Reply(503, {"Retry-After": email.utils.format_datetime(date, usegmt=True)}))
    worker.run_until_idle()
    assert receiver.wait_for(2)
    item.refresh_from_db()
    assert (item.status, item.attempts) == ("pending", 2)
    assert item.next_attempt_at >= date
    assert item.next_attempt_at <= clock.now + timedelta(minutes=5)
    clock.now = item.next_attempt_at - timedelta(seconds=1)
    worker.run_until_idle()
    assert receiver.count == 2  # not before the given date

    clock.now = item.next_attempt_at
    worker.run_until_idle()
    assert receiver.wait_for(3)
    item.refresh_from_db()
    assert (item.status, item.attempts) == ("done", 3)


def test_retry_after_of_a_day_is_capped_at_one_hour(
    receiver, make_destination, emit_event, make_worker, clock
):
    make_destination(receiver.url())
    event = emit_event()
    receiver.reply(Reply(503, {"Retry-After": "86400"}))
    make_worker().run_until_idle()
    assert _row(event).next_attempt_at == clock.now + timedelta(hours=1)


def test_malformed_retry_after_is_logged_and_normal_backoff_applies(
    receiver, make_destination, emit_event, make_worker, clock, caplog
):
    make_destination(receiver.url())
    event = emit_event()
    receiver.reply(Reply(429, {"Retry-After": "soon"}))
    make_worker().run_until_idle()
    item = _row(event)
    assert item.status == "pending"
    # attempt 1: full jitter in [0, 1 s]
    assert clock.now <= item.next_attempt_at <= clock.now + timedelta(seconds=1)
    assert any("malformed Retry-After" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize(
    ("status", "row_status", "outcome"),
    [
        (200, "done", "delivered"),
        (201, "done", "delivered"),
        (204, "done", "delivered"),
        (408, "pending", "retryable_status"),
        (429, "pending", "retryable_status"),
        (500, "pending", "retryable_status"),
        (502, "pending", "retryable_status"),
        (503, "pending", "retryable_status"),
        (504, "pending", "retryable_status"),
        (400, "failed", "rejected"),
        (401, "failed", "rejected"),
        (403, "failed", "rejected"),
        (404, "failed", "rejected"),
        (422, "failed", "rejected"),
        (301, "failed", "redirect_refused"),
        (302, "failed", "redirect_refused"),
        (307, "failed", "redirect_refused"),
        (308, "failed", "redirect_refused"),
        (410, "failed", "gone"),
    ],
)
def test_status_classes_decide_the_rows_fate(
    status, row_status, outcome, receiver, make_destination, emit_event, make_worker
):
    make_destination(receiver.url())
    event = emit_event()
    body = b"" if status == 204 else b'{"answer":"scripted"}'
    receiver.reply(Reply(status, {"Location": receiver.url("/elsewhere")}, body=body))
    make_worker().run_until_idle()

    item = _row(event)
    assert (item.status, item.attempts, item.last_status_code) == (row_status, 1, status)
    attempt = WebhookAttempt.objects.get(outbox_item=item)
    assert (attempt.outcome, attempt.status_code) == (outcome, status)
    assert [r.path for r in receiver.requests] == ["/hook"]  # never follows a Location


def test_a_302_is_a_failed_attempt_and_is_not_followed(
    receiver, make_destination, emit_event, make_worker, clock
):
    make_destination(receiver.url())
    event = emit_event()
    receiver.reply(Reply(302, {"Location": receiver.url("/moved")}))
    worker = make_worker()
    worker.run_until_idle()
    clock.advance(3600)
    worker.run_until_idle()

    assert receiver.count == 1
    item = _row(event)
    assert item.status == "failed"
    assert "redirects are not followed" in item.last_error


def test_a_refused_redirect_records_its_location_truncated_in_the_attempt_log(
    receiver, make_destination, emit_event, make_worker
):
    make_destination(receiver.url())
    event = emit_event()
    target = receiver.url("/moved?" + "x" * 2000)
    receiver.reply(Reply(307, {"Location": target}))
    make_worker().run_until_idle()

    attempt = WebhookAttempt.objects.get(outbox_item=_row(event))
    assert attempt.outcome == "redirect_refused"
    assert target[:200] in attempt.error
    assert target not in attempt.error and len(attempt.error) <= 500
    assert [r.path for r in receiver.requests] == ["/hook"]  # recorded, never followed


def test_410_disables_the_destination_and_its_other_rows_wait(
    receiver, make_destination, emit_event, make_worker
):
    destination, _secret = make_destination(receiver.url())
    first = emit_event()
    second = emit_event()
    receiver.reply(Reply(410))
    make_worker(concurrency=1).run_until_idle()

    destination.refresh_from_db()
    assert destination.enabled is False
    assert "410" in destination.disabled_reason
    assert AuditEntry.objects.filter(
        action="webhook_destination.disabled", target_id=str(destination.pk)
    ).exists()
    assert _row(first).status == "failed"
    assert _row(second).status == "pending"  # claimed only for enabled destinations
    assert receiver.count == 1

    destination.enabled = True
    destinations.save_destination(destination, actor=None)
    make_worker().run_until_idle()
    assert _row(second).status == "done"
    destination.refresh_from_db()
    assert destination.disabled_reason == ""


def test_a_row_is_dead_after_max_attempts_and_requeue_delivers_it(
    receiver, make_destination, emit_event, make_worker, clock
):
    make_destination(receiver.url())
    event = emit_event()
    receiver.default = Reply(500)
    worker = make_worker(max_attempts=3)
    for _ in range(5):
        worker.run_until_idle()
        clock.advance(301)

    item = _row(event)
    assert (item.status, item.attempts, receiver.count) == ("dead", 3, 3)
    assert "gave up after 3 attempts" in item.last_error
    assert "HTTP 500" in item.last_error

    assert outbox.requeue([item], actor=None, now=clock.now) == 1
    item.refresh_from_db()
    assert (item.status, item.attempts, item.last_error) == ("pending", 0, "")
    receiver.default = Reply(200)
    worker.run_until_idle()
    item.refresh_from_db()
    assert (item.status, item.attempts, receiver.count) == ("done", 1, 4)


def test_max_attempts_defaults_to_the_setting(settings, make_worker):
    settings.CARDLOOP_WEBHOOK_MAX_ATTEMPTS = 15
    assert make_worker().max_attempts == 15
    settings.CARDLOOP_WEBHOOK_MAX_ATTEMPTS = 4
    assert make_worker().max_attempts == 4


def test_rotated_secret_signs_beside_the_new_one_until_the_grace_period_ends(
    receiver, make_destination, emit_event, make_worker, clock
):
    destination, old_secret = make_destination(receiver.url())
    new_secret = webhooks.generate_secret()
    destinations.save_destination(
        destination,
        actor=None,
        secret=destinations.SecretChange("set", new_secret, grace=timedelta(hours=24)),
        now=clock.now,
    )
    worker = make_worker()
    emit_event()
    worker.run_until_idle()
    assert receiver.wait_for(1)
    during = receiver.requests[0]
    assert len(during.headers["webhook-signature"].split(" ")) == 2
    Webhook(old_secret).verify(during.body, during.headers)
    Webhook(new_secret).verify(during.body, during.headers)

    clock.advance(24 * 3600 + 1)
    emit_event()
    worker.run_until_idle()
    assert receiver.wait_for(2)
    after = receiver.requests[1]
    assert len(after.headers["webhook-signature"].split(" ")) == 1
    Webhook(new_secret).verify(after.body, after.headers)
    with pytest.raises(WebhookVerificationError):
        Webhook(old_secret).verify(after.body, after.headers)

    assert worker.purge_expired_secrets() == 1
    destination.refresh_from_db()
    assert destination.previous_secret_ref == ""


def test_a_body_over_256_kib_fails_permanently_without_a_connection(
    receiver, make_destination, emit_event, make_worker
):
    make_destination(receiver.url())
    event = emit_event(data={"blob": "x" * (256 * 1024)})
    make_worker().run_until_idle()
    item = _row(event)
    assert item.status == "failed"
    assert WebhookAttempt.objects.get(outbox_item=item).outcome == "body_too_large"
    assert receiver.connections == 0


def test_only_the_first_16_kib_of_the_response_is_kept(
    receiver, make_destination, emit_event, make_worker
):
    make_destination(receiver.url())
    event = emit_event()
    receiver.reply(Reply(200, body=b"a" * 40_000))
    make_worker().run_until_idle()
    attempt = WebhookAttempt.objects.get(outbox_item=_row(event))
    assert attempt.response_excerpt == "a" * 16 * 1024


def test_a_receiver_slower_than_the_timeout_is_retried(
    receiver, make_destination, emit_event, make_worker
):
    make_destination(receiver.url(), timeout_ms=200)
    event = emit_event()
    receiver.reply(Reply(200, delay=3))
    make_worker().run_until_idle()
    item = _row(event)
    assert (item.status, item.attempts) == ("pending", 1)
    attempt = WebhookAttempt.objects.get(outbox_item=item)
    assert attempt.outcome == "timeout"
    assert receiver.count == 1


def test_a_destination_whose_secret_is_missing_fails_without_sending(
    receiver, make_destination, emit_event, make_worker
):
    destination, _secret = make_destination(receiver.url())
    delete_secret(destination.secret_ref)
    event = emit_event()
    make_worker().run_until_idle()
    item = _row(event)
    assert item.status == "failed"
    assert WebhookAttempt.objects.get(outbox_item=item).outcome == "no_secret"
    assert receiver.connections == 0


def test_proxy_settings_in_the_environment_are_ignored(
    receiver, make_destination, emit_event, make_worker, monkeypatch
):
    """A proxy would make its own DNS lookup and defeat the pinned, checked address."""
    monkeypatch.setenv("HTTPS_PROXY", "http://127.0.0.1:9")
    monkeypatch.setenv("ALL_PROXY", "http://127.0.0.1:9")
    make_destination(receiver.url())
    event = emit_event()
    make_worker().run_until_idle()
    assert _row(event).status == "done"


def test_rows_of_one_batch_are_attempted_concurrently(
    receiver, make_destination, emit_event, make_worker
):
    """The receiver answers nobody until all 8 requests are in: one at a time would time out."""
    make_destination(receiver.url(), timeout_ms=5000)
    events = [emit_event() for _ in range(8)]
    receiver.default = Reply(200, hold_until=8)
    worker = make_worker(concurrency=8)
    worker.run_until_idle()
    assert {_row(e).status for e in events} == {"done"}
    assert receiver.count == 8
