"""Card-update claims are leases: a live worker renews them, a dead worker's expire within
`STALE_AFTER` and go back to the queue, and a tick that raises releases what it claimed —
unit tests on `claimed_at`, and a real `card_worker` process SIGKILLed while holding claims."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from datetime import timedelta

import pytest
from django.utils import timezone

from interactions.cardqueue import service as cards
from interactions.cardqueue import worker as cardworker
from interactions.models import CardUpdate
from interactions.tests.test_cardjson import feedback_card
from plumbing.workqueue import ClaimLease, WorkStatus, claim_due, renew_claims
from tests.processes import child_env, wait_for_child_sessions_to_end


def md(text: str) -> dict:
    return {"tag": "markdown", "content": text}


def _cards(bot, n):
    return [cards.send_card(bot, feedback_card(), receive_id="oc_group_chat") for _ in range(n)]


def test_renewing_a_claim_moves_claimed_at_of_its_rows_only(db, lark_stub, lark_bot):
    first, second = _cards(lark_bot, 2)
    cards.enqueue_elements(first, {"fb_prompt": md("a")})
    past = timezone.now() - timedelta(minutes=1)
    token, (mine,) = claim_due(CardUpdate)
    cards.enqueue_elements(second, {"fb_prompt": md("b")})
    _other_token, (other,) = claim_due(CardUpdate)
    CardUpdate.objects.filter(pk=mine.pk).update(claimed_at=past)
    CardUpdate.objects.filter(pk=other.pk).update(claimed_at=past + timedelta(seconds=1))
    later = past + timedelta(seconds=30)
    assert renew_claims(CardUpdate, [token], now=later) == 1
    mine.refresh_from_db()
    other.refresh_from_db()
    assert mine.claimed_at == later and other.claimed_at == past + timedelta(seconds=1)


def test_recovery_leaves_a_renewed_claim_and_takes_one_not_renewed_for_the_lease(
    db, lark_stub, lark_bot
):
    alive, dead = _cards(lark_bot, 2)
    cards.enqueue_elements(alive, {"fb_prompt": md("alive")})
    cards.enqueue_elements(dead, {"fb_prompt": md("dead")})
    start = timezone.now()
    token, rows = claim_due(CardUpdate, now=start + timedelta(seconds=1))
    CardUpdate.objects.update(claimed_at=start)
    assert len(rows) == 2
    (alive_row,) = [r for r in rows if r.card_id == alive.pk]
    # the live worker renewed its row's lease a second ago; the other row's claim is older
    CardUpdate.objects.filter(pk=alive_row.pk).update(
        claimed_at=start + cardworker.STALE_AFTER + timedelta(seconds=1)
    )
    just_before = start + cardworker.STALE_AFTER - timedelta(milliseconds=1)
    assert cardworker.recover_stale_updates(now=just_before) == 0
    at_expiry = start + cardworker.STALE_AFTER + timedelta(seconds=2)
    assert cardworker.recover_stale_updates(now=at_expiry) == 1
    statuses = dict(CardUpdate.objects.values_list("card_id", "status"))
    assert statuses == {alive.pk: WorkStatus.INFLIGHT, dead.pk: WorkStatus.PENDING}


def test_the_lease_of_a_card_update_is_seconds_not_a_minute():
    assert cardworker.STALE_AFTER <= timedelta(seconds=10)


def test_claim_lease_renews_held_tokens_until_dropped(db, lark_stub, lark_bot):
    (entity,) = _cards(lark_bot, 1)
    cards.enqueue_elements(entity, {"fb_prompt": md("held")})
    past = timezone.now() - timedelta(minutes=5)
    token, (row,) = claim_due(CardUpdate)
    CardUpdate.objects.update(claimed_at=past)
    lease = ClaimLease()
    lease.hold(CardUpdate, token)
    assert lease.renew_now() == 1
    row.refresh_from_db()
    assert row.claimed_at > past + timedelta(minutes=4)
    CardUpdate.objects.filter(pk=row.pk).update(claimed_at=past)
    lease.drop(token)
    assert lease.renew_now() == 0
    row.refresh_from_db()
    assert row.claimed_at == past


def test_a_tick_that_raises_puts_its_claims_back_with_their_attempts(
    db, lark_stub, lark_bot, monkeypatch
):
    entities = _cards(lark_bot, 3)
    for entity in entities:
        cards.enqueue_elements(entity, {"fb_prompt": md("x")})
    real_apply = cardworker.apply_update
    applied = []

    def apply_then_fail(row, token):
        if applied:
            raise RuntimeError("database went away")
        applied.append(row.pk)
        return real_apply(row, token)

    monkeypatch.setattr(cardworker, "apply_update", apply_then_fail)
    with pytest.raises(RuntimeError):
        cardworker.run_due(10)
    rows = {r.pk: r for r in CardUpdate.objects.all()}
    assert rows.pop(applied[0]).status == WorkStatus.DONE
    assert [(r.status, r.attempts, r.claim_token) for r in rows.values()] == [
        (WorkStatus.PENDING, 1, ""),
        (WorkStatus.PENDING, 1, ""),
    ]
    assert all(r.next_attempt_at <= timezone.now() for r in rows.values())


def _start_worker(log_path, stub_url):
    log = log_path.open("ab")
    return subprocess.Popen(
        [sys.executable, "manage.py", "card_worker", "--idle-sleep", "0.1"],
        env=child_env(CARDLOOP_LARK_DOMAIN=stub_url),
        stdout=log,
        stderr=subprocess.STDOUT,
    )


def _wait(condition, what, log_path, timeout=60.0):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"{what}\n" + log_path.read_text()[-3000:]
        time.sleep(0.2)


@pytest.mark.django_db(transaction=True)
def test_updates_claimed_by_a_killed_card_worker_are_applied_by_another_within_seconds(
    lark_stub, lark_bot, tmp_path
):
    """A worker SIGKILLed while Feishu is slow to answer holds claims nobody renews any more:
    a second worker applies them (and a newer update of the same card) soon after."""
    entities = _cards(lark_bot, 3)
    for entity in entities:
        cards.enqueue_elements(entity, {"fb_prompt": md("before the kill")})
    lark_stub.slow("/open-apis/cardkit", 30)
    log_path = tmp_path / "workers.log"
    doomed = _start_worker(log_path, lark_stub.url)
    survivor = None
    try:
        _wait(
            lambda: lark_stub.calls_to("PUT", "/open-apis/cardkit"),
            "the first worker never called Feishu",
            log_path,
            timeout=90,
        )
        assert CardUpdate.objects.filter(status=WorkStatus.INFLIGHT).count() == 3
        doomed.send_signal(signal.SIGKILL)
        doomed.wait(10)
        cards.enqueue_elements(entities[0], {"fb_form": md("after the kill")})
        lark_stub.slow("/open-apis/cardkit", 0)
        survivor = _start_worker(log_path, lark_stub.url)
        _wait(
            lambda: log_path.read_text().count("card_worker: started") == 2,
            "the second worker did not start",
            log_path,
            timeout=90,
        )
        # lease (5 s) + recovery period (1 s): seconds; 20 s is slack for a loaded machine
        # (a claim that waited for a minute-long timeout would fail here)
        _wait(
            lambda: CardUpdate.objects.exclude(status=WorkStatus.DONE).count() == 0,
            "the killed worker's claims were not applied",
            log_path,
            timeout=20,
        )
    finally:
        for process in (doomed, survivor):
            if process is not None and process.poll() is None:
                process.kill()
                process.wait(10)
        wait_for_child_sessions_to_end()
    for entity in entities:
        elements = lark_stub.cards[entity.card_id].card["body"]["elements"]
        assert elements[0]["content"] == "before the kill"
    assert lark_stub.cards[entities[0].card_id].card["body"]["elements"][2]["content"] == (
        "after the kill"
    )
    assert "recovered" in log_path.read_text()


@pytest.mark.django_db(transaction=True)
def test_a_live_worker_slower_than_the_lease_keeps_its_claims_from_a_second_worker(
    lark_stub, lark_bot, tmp_path
):
    """Feishu takes longer than `STALE_AFTER` to answer: the busy worker's heartbeat renews
    its claim, so the idle second worker never recovers it and the update is sent once."""
    (entity,) = _cards(lark_bot, 1)
    slow = cardworker.STALE_AFTER.total_seconds() + 4
    lark_stub.slow("/open-apis/cardkit", slow)
    log_path = tmp_path / "workers.log"
    workers = [_start_worker(log_path, lark_stub.url) for _ in range(2)]
    try:
        _wait(
            lambda: log_path.read_text().count("card_worker: started") == 2,
            "the workers did not start",
            log_path,
            timeout=90,
        )
        cards.enqueue_elements(entity, {"fb_prompt": md("slow but alive")})
        _wait(
            lambda: CardUpdate.objects.filter(status=WorkStatus.DONE).exists(),
            "the update was not applied",
            log_path,
            timeout=slow + 60,
        )
    finally:
        for process in workers:
            process.send_signal(signal.SIGTERM)
        for process in workers:
            try:
                process.wait(20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(10)
        wait_for_child_sessions_to_end()
    calls = [c for c in lark_stub.calls_to("PUT", "/open-apis/cardkit") if entity.card_id in c.path]
    assert len(calls) == 1, [c.body for c in calls]
    assert "recovered" not in log_path.read_text()
