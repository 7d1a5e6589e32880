"""The SQLite backend's fair write queue (`plumbing.db.sqlite3`): write transactions of one
process get the write lock in arrival order, woken when the previous one ends, and a wait
longer than the busy timeout falls back to SQLite's own busy handler instead of hanging."""

from __future__ import annotations

import threading
import time

import pytest
from django.db import connection, connections, transaction

from plumbing.db.sqlite3 import base as sqlite_base
from plumbing.db.sqlite3.base import FairLock, write_lock


def _queue_up(lock: FairLock, n: int, order: list[int]) -> list[threading.Thread]:
    def take(i):
        assert lock.acquire(5)
        order.append(i)
        time.sleep(0.002)
        lock.release()

    threads = []
    for i in range(n):
        thread = threading.Thread(target=take, args=(i,))
        thread.start()
        threads.append(thread)
        deadline = time.monotonic() + 5
        while lock.waiting < i + 1:  # thread i is queued before thread i+1 starts
            assert time.monotonic() < deadline
            time.sleep(0.001)
    return threads


def test_waiters_get_the_lock_in_arrival_order():
    lock = FairLock()
    assert lock.acquire(1)
    order: list[int] = []
    threads = _queue_up(lock, 12, order)
    lock.release()
    for thread in threads:
        thread.join(5)
    assert order == list(range(12))
    assert lock.acquire(0.1)  # free again
    lock.release()


def test_a_timed_out_waiter_leaves_the_queue_and_the_lock_keeps_working():
    lock = FairLock()
    assert lock.acquire(1)
    started = time.monotonic()
    assert lock.acquire(0.05) is False
    assert time.monotonic() - started >= 0.05
    assert lock.waiting == 0
    lock.release()
    assert lock.acquire(0.1)
    lock.release()


def _queued_waiter(lock: FairLock) -> tuple[threading.Thread, threading.Event]:
    got = threading.Event()

    def take():
        assert lock.acquire(5)
        got.set()
        lock.release()

    thread = threading.Thread(target=take)
    thread.start()
    deadline = time.monotonic() + 5
    while lock.waiting < 1:
        assert time.monotonic() < deadline
        time.sleep(0.001)
    return thread, got


def test_a_running_thread_takes_a_free_lock_before_a_waiter_that_has_not_run_yet(monkeypatch):
    """No lock convoy: a release does not make the process wait until the OS schedules the
    one woken waiter; the waiter keeps its place and gets the next release."""
    import sys

    monkeypatch.setattr(sqlite_base, "HANDOVER_AFTER", 60.0)
    lock = FairLock()
    assert lock.acquire(1)
    waiter, got = _queued_waiter(lock)
    interval = sys.getswitchinterval()
    sys.setswitchinterval(30)  # the woken waiter cannot run before the next two lines
    try:
        lock.release()
        taken = lock.acquire(0)
    finally:
        sys.setswitchinterval(interval)
    assert taken and not got.is_set() and lock.waiting == 1
    lock.release()
    waiter.join(5)
    assert got.is_set() and lock.waiting == 0


def test_a_waiter_past_the_handover_time_is_handed_the_lock_no_thread_can_take_it_first(
    monkeypatch,
):
    monkeypatch.setattr(sqlite_base, "HANDOVER_AFTER", 0.02)
    lock = FairLock()
    assert lock.acquire(1)
    waiter, got = _queued_waiter(lock)
    time.sleep(0.05)
    lock.release()
    assert lock.acquire(0) is False  # held for the waiter even before it runs
    waiter.join(5)
    assert got.is_set()
    assert lock.acquire(0.1)
    lock.release()


@pytest.mark.django_db(transaction=True)
def test_concurrent_write_transactions_queue_one_at_a_time_and_all_commit():
    if connection.vendor != "sqlite":
        pytest.skip("the write queue is SQLite's")
    from botadmin.models import Team

    assert connection.settings_dict["ENGINE"] == "plumbing.db.sqlite3"
    lock = write_lock(str(connection.settings_dict["NAME"]))
    inside = 0
    peak = 0
    errors: list[BaseException] = []
    guard = threading.Lock()

    def write(i):
        nonlocal inside, peak
        try:
            with transaction.atomic():
                with guard:
                    inside += 1
                    peak = max(peak, inside)
                Team.objects.create(name=f"queue-{i}")
                time.sleep(0.005)
                with guard:
                    inside -= 1
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=write, args=(i,)) for i in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert errors == []
    assert peak == 1
    assert Team.objects.filter(name__startswith="queue-").count() == 16
    assert lock.acquire(0.1)  # every transaction left the queue
    lock.release()


@pytest.mark.django_db(transaction=True)
def test_a_rolled_back_transaction_leaves_the_queue():
    if connection.vendor != "sqlite":
        pytest.skip("the write queue is SQLite's")
    lock = write_lock(str(connection.settings_dict["NAME"]))
    with pytest.raises(ZeroDivisionError), transaction.atomic():
        1 / 0  # noqa: B018
    assert lock.acquire(0.1)
    lock.release()


@pytest.mark.django_db
def test_the_qmark_form_of_a_statement_is_worked_out_once_and_equals_djangos(monkeypatch):
    if connection.vendor != "sqlite":
        pytest.skip("SQLite only")
    from django.db.backends.sqlite3.base import SQLiteCursorWrapper

    monkeypatch.setattr(sqlite_base, "_QMARK", {})
    calls = []
    real = SQLiteCursorWrapper.convert_query

    def counting(self, query, *, param_names=None):
        calls.append(query)
        return real(self, query, param_names=param_names)

    monkeypatch.setattr(SQLiteCursorWrapper, "convert_query", counting)
    sql = "SELECT %s AS a, '100%%' AS b, %s AS c"
    with connection.cursor() as cursor:
        for n in range(3):
            cursor.execute(sql, [n, "x"])
            assert cursor.fetchone() == (n, "100%", "x")
        cursor.execute("SELECT %(v)s AS v", {"v": 7})  # the named style is never kept
        assert cursor.fetchone() == (7,)
    assert calls.count(sql) == 1
    assert sqlite_base._QMARK[sql] == "SELECT ? AS a, '100%' AS b, ? AS c"
    assert "SELECT %(v)s AS v" not in sqlite_base._QMARK


def test_the_qmark_texts_kept_are_bounded(monkeypatch):
    monkeypatch.setattr(sqlite_base, "_QMARK", {})
    monkeypatch.setattr(sqlite_base, "QMARK_TEXTS", 3)
    cursor = sqlite_base.QueuedCursor.__new__(sqlite_base.QueuedCursor)
    for n in range(7):
        assert cursor.convert_query(f"SELECT {n}, %s") == f"SELECT {n}, ?"
        assert len(sqlite_base._QMARK) <= 3
