"""The outbox worker: the retry policy, the claim fence, N workers on PostgreSQL, a worker
killed with SIGKILL or stopped with SIGTERM (real subprocesses of `manage.py outbox_worker`),
and the command itself."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from datetime import timedelta
from pathlib import Path

import pytest
from django.conf import settings
from django.core.management import call_command
from django.db import connection, transaction
from django.utils import timezone
from standardwebhooks.webhooks import Webhook

from feedback import outbox
from feedback.envelopes import stable_event_id
from feedback.events import emit
from feedback.models import (
    ATTEMPT_LOG_COLUMNS,
    OutboxItem,
    WebhookAttempt,
    WebhookAttemptQuerySet,
)
from feedback.outbox import OutboxWorker, _InFlight, backoff_delay, decide
from feedback.tests.receiver import Reply
from feedback.webhooks import AttemptResult, Outcome
from plumbing.workqueue import WorkStatus, claim_due, recover_stale, settle_many

ROOT = Path(__file__).resolve().parents[2]


# ---------------------------------------------------------------------------------------------
# Retry policy (pure)
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("attempts", range(1, 16))
def test_backoff_is_full_jitter_under_an_exponential_ceiling(attempts):
    rng = random.Random(attempts)
    ceiling = min(300.0, 2.0 ** (attempts - 1))
    delays = [backoff_delay(attempts, retry_after_s=None, rng=rng) for _ in range(500)]
    assert all(0 <= d <= ceiling for d in delays)
    assert max(delays) > ceiling * 0.9  # it really spreads over the whole window
    assert min(delays) < ceiling * 0.1


def test_retry_after_is_a_floor_the_jitter_never_goes_below():
    rng = random.Random(1)
    assert all(backoff_delay(1, retry_after_s=120, rng=rng) == 120 for _ in range(100))
    delays = [backoff_delay(12, retry_after_s=10, rng=rng) for _ in range(500)]
    assert all(10 <= d <= 300 for d in delays)
    assert max(delays) > 250


def test_decide_maps_outcomes_to_row_states():
    now = timezone.now()
    rng = random.Random(3)

    def fate(outcome, attempts=1, max_attempts=15, **kw):
        return decide(
            AttemptResult(outcome, **kw),
            attempts=attempts,
            max_attempts=max_attempts,
            now=now,
            rng=rng,
        )

    assert fate(Outcome.DELIVERED).status == WorkStatus.DONE
    for outcome in (Outcome.RETRYABLE_STATUS, Outcome.TIMEOUT, Outcome.NETWORK_ERROR):
        decision = fate(outcome, attempts=4)
        assert decision.status == WorkStatus.PENDING
        assert now <= decision.next_attempt_at <= now + timedelta(seconds=8)
        assert fate(outcome, attempts=15).status == WorkStatus.DEAD
    for outcome in (
        Outcome.REJECTED,
        Outcome.REDIRECT_REFUSED,
        Outcome.BLOCKED,
        Outcome.INVALID_DESTINATION,
        Outcome.BODY_TOO_LARGE,
        Outcome.NO_SECRET,
    ):
        decision = fate(outcome)
        assert (decision.status, decision.disable_destination) == (WorkStatus.FAILED, False)
    assert fate(Outcome.GONE).disable_destination is True
    assert fate(Outcome.INTERRUPTED, attempts=15) == outcome_pending_now(now)


def outcome_pending_now(now):
    return outbox.Decision(WorkStatus.PENDING, next_attempt_at=now)


# ---------------------------------------------------------------------------------------------
# Claim fence and recovery
# ---------------------------------------------------------------------------------------------


@pytest.mark.usefixtures("webhook_settings", "dns")
def test_a_worker_whose_claim_was_recovered_cannot_overwrite_the_new_outcome(
    receiver, make_destination, emit_event, make_worker, clock
):
    make_destination(receiver.url())
    event = emit_event()
    token_a, rows_a, _destinations = outbox.claim_for_delivery(limit=10, now=clock.now)
    assert len(rows_a) == 1  # worker A claimed it, then hung

    clock.advance(61)
    assert recover_stale(OutboxItem, stale_after=timedelta(seconds=60), now=clock.now) == 1
    make_worker().run_until_idle()  # worker B delivers it
    item = OutboxItem.objects.get(event=event)
    assert (item.status, item.attempts) == ("done", 2)

    late = make_worker()
    late._record(
        [(_InFlight(rows_a[0], token_a), AttemptResult(Outcome.REJECTED, 400, "HTTP 400"))]
    )
    item.refresh_from_db()
    assert (item.status, item.last_error) == ("done", "")
    # The late attempt is still in the log: it happened.
    assert WebhookAttempt.objects.filter(outbox_item=item).count() == 2


@pytest.mark.usefixtures("webhook_settings", "dns")
def test_an_answer_with_a_nul_byte_is_logged_with_a_replacement_and_settles_the_batch(
    receiver, make_destination, emit_event, make_worker
):
    """PostgreSQL text cannot hold NUL: a receiver's error body with one must not fail the
    settlement of the whole batch (which left every row of it in flight)."""
    make_destination(receiver.url())
    first, second = emit_event(), emit_event()
    receiver.reply(Reply(500, body=b"bad\x00body \xff\xfe"), Reply(200))
    make_worker().run_until_idle()
    rows = {r.event_id: r for r in OutboxItem.objects.all()}
    assert {rows[first.pk].status, rows[second.pk].status} == {"pending", "done"}
    failed = WebhookAttempt.objects.get(status_code=500)
    assert failed.response_excerpt == "bad\ufffdbody \ufffd\ufffd"
    assert OutboxItem.objects.filter(status="inflight").count() == 0


@pytest.mark.usefixtures("webhook_settings", "dns")
def test_a_settlement_that_fails_puts_the_rows_back_to_pending_instead_of_in_flight(
    receiver, make_destination, emit_event, make_worker, monkeypatch, caplog
):
    from django.db import DataError

    make_destination(receiver.url())
    events = [emit_event() for _ in range(3)]

    def refuse(self, rows):
        raise DataError("refused")

    monkeypatch.setattr(WebhookAttemptQuerySet, "log", refuse)
    dropped = []
    monkeypatch.setattr(outbox, "drop_claim", dropped.append)  # the lease stops renewing
    worker = make_worker()
    assert worker.claim_and_start(limit=10) == 3
    while worker.in_flight:
        worker.tick()
    assert receiver.count == 3  # the attempts happened
    rows = list(OutboxItem.objects.filter(event__in=events))
    assert {(r.status, r.claim_token) for r in rows} == {("pending", "")}
    assert all("settling the attempt failed (DataError)" in r.last_error for r in rows)
    assert "they are tried again" in caplog.text
    assert dropped  # and no claim of theirs is renewed any more


@pytest.mark.usefixtures("webhook_settings", "dns")
def test_a_transient_settlement_failure_is_tried_again_and_recorded(
    receiver, make_destination, emit_event, make_worker, monkeypatch
):
    from django.db import OperationalError

    make_destination(receiver.url())
    emit_event()
    real = WebhookAttemptQuerySet.log
    calls = []

    def deadlock_once(self, rows):
        calls.append(len(rows))
        if len(calls) == 1:
            raise OperationalError("deadlock detected") from ConnectionError("simulated")
        return real(self, rows)

    monkeypatch.setattr(WebhookAttemptQuerySet, "log", deadlock_once)
    make_worker().run_until_idle()
    assert calls == [1, 1]
    assert OutboxItem.objects.get().status == "done"
    assert WebhookAttempt.objects.count() == 1


def test_settle_many_only_touches_rows_that_still_carry_the_token(
    make_destination, emit_event, clock
):
    make_destination("https://a.example.com/")
    for _ in range(3):
        emit_event()
    token, rows = claim_due(OutboxItem, now=clock.now)
    other = OutboxItem.objects.get(pk=rows[2].pk)
    OutboxItem.objects.filter(pk=other.pk).update(claim_token="someone-else")
    assert settle_many(OutboxItem, [r.pk for r in rows], token) == 2
    statuses = dict(OutboxItem.objects.values_list("pk", "status"))
    assert [statuses[r.pk] for r in rows] == ["done", "done", "inflight"]


def test_attempt_log_rows_keep_every_column_in_batches_larger_than_one_statement(
    make_destination, emit_event, clock
):
    destination, _secret = make_destination("https://a.example.com/")
    emit_event()
    item = OutboxItem.objects.get()
    started = timezone.now().replace(microsecond=123456)
    count = WebhookAttemptQuerySet.LOG_CHUNK * 2 + 5
    rows = [
        (
            item.pk,
            destination.pk,
            n,
            started,
            n * 3,
            None if n % 2 else 503,
            "retryable_status",
            f"HTTP 503 «{n}»",
            "maintenance ☂",
        )
        for n in range(1, count + 1)
    ]
    with transaction.atomic():
        assert WebhookAttempt.objects.log(rows) == count
    stored = list(WebhookAttempt.objects.order_by("attempt").values_list(*ATTEMPT_LOG_COLUMNS))
    assert stored == rows


# ---------------------------------------------------------------------------------------------
# Several workers
# ---------------------------------------------------------------------------------------------


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("webhook_settings", "dns")
def test_two_workers_never_deliver_one_row_twice(receiver, make_bot, make_destination):
    bot = make_bot()
    make_destination(receiver.url())
    with transaction.atomic():
        for i in range(200):
            emit("interaction.resolved", stable_event_id("pair", i), {"i": i}, bot=bot)
    receiver.default = Reply(200, delay=0.002)
    claimed = {"a": 0, "b": 0}
    errors = []

    def run(name):
        worker = OutboxWorker(concurrency=8, idle_wait=0.05)
        original = worker.claim_and_start

        def counting(**kwargs):
            n = original(**kwargs)
            claimed[name] += n
            return n

        worker.claim_and_start = counting
        try:
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                worker.tick()
                if not worker.in_flight and not OutboxItem.objects.exclude(status="done").exists():
                    break
        except Exception as exc:  # noqa: BLE001 - reported by the test thread
            errors.append(exc)
        finally:
            worker.close()
            connection.close()

    threads = [threading.Thread(target=run, args=(n,)) for n in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(150)
    assert errors == []
    counts = receiver.by_webhook_id()
    assert len(counts) == 200
    assert set(counts.values()) == {1}
    assert set(OutboxItem.objects.values_list("status", "attempts")) == {("done", 1)}
    assert claimed["a"] > 0 and claimed["b"] > 0
    assert claimed["a"] + claimed["b"] == 200


# ---------------------------------------------------------------------------------------------
# Real worker processes
# ---------------------------------------------------------------------------------------------


def _database_url() -> str:
    db = connection.settings_dict
    if connection.vendor == "postgresql":
        host = db.get("HOST") or "127.0.0.1"
        port = db.get("PORT") or 5432
        return f"postgres://{db['USER']}@{host}:{port}/{db['NAME']}"
    return f"sqlite:///{db['NAME']}"


def _start_worker(webhook_ca, *args) -> subprocess.Popen:
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "cardloop.settings_test",
        "DATABASE_URL": _database_url(),
        "CARDLOOP_SECRET_DIR": str(settings.CARDLOOP_SECRET_DIR),
        "CARDLOOP_WEBHOOK_ALLOW_PRIVATE": "true",
        "CARDLOOP_WEBHOOK_CA_FILE": webhook_ca.ca_file,
        "CARDLOOP_LOG_LEVEL": "WARNING",
    }
    return subprocess.Popen(
        [sys.executable, str(ROOT / "manage.py"), "outbox_worker", "--idle-sleep", "0.1", *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )


def _stop(proc: subprocess.Popen) -> str:
    if proc.poll() is None:
        proc.kill()
    out, _ = proc.communicate(timeout=30)
    return out.decode(errors="replace")


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("webhook_settings")
def test_a_worker_killed_mid_attempt_loses_nothing(
    receiver, webhook_ca, make_destination, emit_event, make_worker, clock
):
    _destination, secret = make_destination(receiver.url(host="127.0.0.1"))
    event = emit_event()
    receiver.reply(Reply(200, delay=60))  # the first attempt hangs until the kill
    proc = _start_worker(webhook_ca)
    try:
        assert receiver.wait_for(1, timeout=60), _stop(proc)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        _stop(proc)
    item = OutboxItem.objects.get(event=event)
    assert (item.status, item.attempts) == ("inflight", 1)

    # The subprocess claimed on the real clock; move the fake one past its claim + 60 s.
    clock.now = item.claimed_at + timedelta(seconds=61)
    worker = make_worker()
    assert worker.recover_stale() == 1
    worker.run_until_idle()

    item.refresh_from_db()
    assert (item.status, item.attempts) == ("done", 2)
    assert receiver.count == 2
    first, second = receiver.requests
    assert first.headers["webhook-id"] == second.headers["webhook-id"] == event.event_id
    assert first.body == second.body == event.body.encode()
    Webhook(secret).verify(second.body, second.headers)


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("webhook_settings")
def test_sigterm_lets_the_in_flight_attempt_finish(
    receiver, webhook_ca, make_destination, emit_event
):
    make_destination(receiver.url(host="127.0.0.1"))
    event = emit_event()
    receiver.reply(Reply(200, delay=1.0))
    proc = _start_worker(webhook_ca, "--shutdown-budget", "30")
    try:
        assert receiver.wait_for(1, timeout=60), _stop(proc)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
    finally:
        output = _stop(proc)
    item = OutboxItem.objects.get(event=event)
    assert (item.status, item.attempts) == ("done", 1), output
    assert receiver.count == 1


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("webhook_settings", "dns")
def test_sigterm_after_the_budget_puts_the_attempt_back_to_pending(
    receiver, webhook_ca, make_destination, emit_event, make_worker, clock
):
    make_destination(receiver.url(host="127.0.0.1"))
    event = emit_event()
    receiver.reply(Reply(200, delay=60))
    proc = _start_worker(webhook_ca, "--shutdown-budget", "0.5")
    try:
        assert receiver.wait_for(1, timeout=60), _stop(proc)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
    finally:
        output = _stop(proc)
    item = OutboxItem.objects.get(event=event)
    assert (item.status, item.attempts) == ("pending", 1), output
    assert "interrupted" in item.last_error
    assert WebhookAttempt.objects.get(outbox_item=item).outcome == "interrupted"

    # The subprocess rescheduled on the real clock: the fake one must have reached that time.
    clock.now = max(clock.now, item.next_attempt_at)
    make_worker().run_until_idle()
    item.refresh_from_db()
    assert (item.status, item.attempts) == ("done", 2)


@pytest.mark.usefixtures("webhook_settings", "dns")
def test_the_command_recovers_stale_claims_at_start_and_delivers(
    receiver, make_destination, emit_event
):
    make_destination(receiver.url())
    stale = emit_event()
    fresh = emit_event()
    OutboxItem.objects.filter(event=stale).update(
        status="inflight",
        attempts=1,
        claim_token="dead-worker",
        claimed_at=timezone.now() - timedelta(minutes=10),
    )
    call_command("outbox_worker", "--once")
    assert OutboxItem.objects.get(event=stale).status == "done"
    assert OutboxItem.objects.get(event=fresh).status == "done"
    assert receiver.by_webhook_id() == {stale.event_id: 1, fresh.event_id: 1}


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_skipping_the_flush_wait_never_leaks_into_a_callers_transaction():
    from plumbing.workqueue import skip_flush_wait

    def current():
        with connection.cursor() as cursor:
            cursor.execute("SHOW synchronous_commit")
            return cursor.fetchone()[0]

    with transaction.atomic():
        with transaction.atomic():  # nested: the caller's transaction must keep its setting
            skip_flush_wait()
        assert current() == "on"
    with transaction.atomic():
        skip_flush_wait()
        assert current() == "off"
    assert current() == "on"  # SET LOCAL ended with the transaction
