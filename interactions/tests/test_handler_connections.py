"""Database connections of the callback handler threads (`interactions.callbacks.dispatcher.POOL`):
on SQLite each thread keeps its connection from one click to the next; on PostgreSQL a click
gives its connection back to the process's pool, unless the next click is already queued for
the thread (`dispatcher.more_callbacks_waiting`), which then keeps it."""

from __future__ import annotations

import threading

import pytest
from asgiref.sync import sync_to_async
from django.conf import settings
from django.core.signals import request_finished, request_started
from django.db import connection, connections
from django.db.backends.signals import connection_created

from interactions.callbacks import dispatcher, registry
from interactions.lark.signing import seal
from interactions.tests.test_callback_asgi import _scope
from plumbing.db.sqlite3.base import keep_connections_in_this_thread
from tests import feishu


def _in_thread(fn):
    """Run `fn()` in a new thread (its own database connections) and return its result."""
    result = {}

    def run():
        try:
            result["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller
            result["error"] = exc
        finally:
            connections.close_all()

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(10)
    if "error" in result:
        raise result["error"]
    return result["value"]


def _query_twice_with_finish_between(keep: bool):
    """In this thread: a query, `finish_connections()`, another query; how many connections
    were opened and whether one was still open after the finish."""
    if keep:
        keep_connections_in_this_thread()
    opened = []

    def created(sender, connection, **kwargs):
        if threading.current_thread() is me:
            opened.append(connection.alias)

    me = threading.current_thread()
    connection_created.connect(created)
    try:
        with connection.cursor() as cur:
            cur.execute("SELECT 1")
        dispatcher.finish_connections()
        open_after_finish = connection.connection is not None
        with connection.cursor() as cur:
            cur.execute("SELECT 1")
    finally:
        connection_created.disconnect(created)
    return len(opened), open_after_finish


async def _click(app_id: str, event_id: str) -> bytes:
    """One feedback click (fixture payload, `event_id`) through `cardloop.asgi.application`
    as Daphne calls it; returns the answer's body."""
    from cardloop.asgi import application

    payload = feishu.payload("card_action_feedback_click")
    payload["header"]["event_id"] = event_id
    raw, headers = seal(payload, encrypt_key=feishu.ENCRYPT_KEY)
    messages = [{"type": "http.request", "body": raw, "more_body": False}]
    bodies = []

    async def receive():
        return messages.pop(0) if messages else {"type": "http.disconnect"}

    async def send(message):
        if message["type"] == "http.response.body":
            bodies.append(message["body"])

    await application(_scope(app_id, headers), receive, send)
    return b"".join(bodies)


@pytest.mark.django_db(transaction=True)
def test_a_handler_thread_keeps_its_sqlite_connection_and_gives_a_postgresql_one_back():
    opened, open_after_finish = _in_thread(lambda: _query_twice_with_finish_between(True))
    if connection.vendor == "sqlite":
        assert (opened, open_after_finish) == (1, True)
    else:  # back to the pool after every callback: threads never hold what the pool has
        assert (opened, open_after_finish) == (2, False)


@pytest.mark.django_db(transaction=True)
def test_a_thread_that_did_not_ask_to_keep_connections_closes_them_after_each_callback():
    assert _in_thread(lambda: _query_twice_with_finish_between(False)) == (2, False)


@pytest.mark.django_db(transaction=True)
def test_a_kept_connection_left_in_a_transaction_or_broken_is_closed_not_reused():
    def left_in_transaction():
        keep_connections_in_this_thread()
        connection.set_autocommit(False)  # what an interrupted handler could leave behind
        connection.cursor().execute("SELECT 1")
        dispatcher.finish_connections()
        return connection.connection is None

    def broken():
        keep_connections_in_this_thread()
        connection.cursor().execute("SELECT 1")
        connection.connection.close()  # the database went away under it
        connection.errors_occurred = True
        dispatcher.finish_connections()
        return connection.connection is None

    assert _in_thread(left_in_transaction)
    assert _in_thread(broken)


@pytest.mark.asyncio
@pytest.mark.django_db(transaction=True)
async def test_clicks_one_after_another_open_at_most_one_sqlite_connection_per_handler_thread(
    lark_bot, register_card_handler
):
    """The connect, the four PRAGMAs and the close (which can checkpoint the WAL) are a fifth
    of a click's CPU on SQLite (bench/README.md); a handler thread pays them once."""
    if connection.vendor != "sqlite":
        pytest.skip("PostgreSQL gives connections back to its pool (kept only for a queued click)")
    handler_threads = []
    opened = []

    def handler(action):
        handler_threads.append(threading.get_ident())
        return registry.Answer.success("Recorded")

    def created(sender, connection, **kwargs):
        if threading.current_thread().name.startswith("lark-handler"):
            opened.append(threading.get_ident())

    register_card_handler("feedback", handler)
    answers = []
    connection_created.connect(created)
    try:
        for n in range(6):
            answers.append(await _click(lark_bot.app_id, f"ev_keep_{n}"))
    finally:
        connection_created.disconnect(created)
    assert len(answers) == 6 and all(b'"success"' in body for body in answers)
    assert len(handler_threads) == 6
    assert len(opened) == len(set(opened))  # no thread opened a second one
    assert set(opened) <= set(handler_threads)
    assert len(opened) <= len(set(handler_threads)) < 6
    await sync_to_async(connections.close_all)()


@pytest.mark.asyncio
@pytest.mark.django_db(transaction=True)
async def test_a_handler_thread_whose_connection_saw_a_database_error_opens_a_new_one(
    lark_bot, register_card_handler
):
    """Through the ASGI route `request_finished` runs Django's `close_old_connections()`
    first, which on SQLite would clear the error flag and keep the connection."""
    if connection.vendor != "sqlite":
        pytest.skip("PostgreSQL gives connections back to its pool (kept only for a queued click)")
    from django.db import DatabaseError

    seen = []  # (thread, sqlite3.Connection): the objects are kept, so no id is reused
    failing = {"on": True}

    def handler(action):
        seen.append((threading.get_ident(), connection.connection))
        if failing["on"]:
            failing["on"] = False
            try:
                with connection.cursor() as cursor:
                    cursor.execute("SELECT * FROM no_such_table_at_all")
            except DatabaseError:
                pass
        return registry.Answer.success("Recorded")

    register_card_handler("feedback", handler)
    for n in range(24):
        await _click(lark_bot.app_id, f"ev_error_{n}")
        later = [conn for thread, conn in seen[1:] if thread == seen[0][0]]
        if later:
            break
    else:
        pytest.fail("no later click ran on the thread that saw the error")
    failed_thread, failed_connection = seen[0]
    assert failed_connection is not None and later[0] is not failed_connection
    # and a thread that saw no error keeps its connection (the rule above is not "always")
    for thread in {thread for thread, _ in seen} - {failed_thread}:
        assert len({id(conn) for t, conn in seen if t == thread}) == 1
    await sync_to_async(connections.close_all)()


def _held_for_waiting_work(broken: bool = False):
    """In this thread, as a handler thread ends one click and begins the next one already
    waiting: a query, `hold_pooled_connections(True)`, Django's request signals,
    `finish_connections(hold=True)`, a query; then the idle end. Returns (connections opened,
    the same connection across the two clicks, none left after the idle end)."""
    opened = []
    me = threading.current_thread()

    def created(sender, connection, **kwargs):
        if threading.current_thread() is me:
            opened.append(connection.alias)

    connection_created.connect(created)
    try:
        with connection.cursor() as cur:
            cur.execute("SELECT 1")
        first = connection.connection
        if broken:
            first.close()  # the database went away under it
            connection.errors_occurred = True
        dispatcher.hold_pooled_connections(True)
        request_finished.send(sender=None)
        dispatcher.finish_connections(hold=True)
        request_started.send(sender=None)
        with connection.cursor() as cur:
            cur.execute("SELECT 1")
        same = connection.connection is first
        dispatcher.hold_pooled_connections(False)
        request_finished.send(sender=None)
        dispatcher.finish_connections()
        released = connection.connection is None
    finally:
        connection_created.disconnect(created)
    return len(opened), same, released


@pytest.mark.django_db(transaction=True)
def test_a_postgresql_connection_is_kept_for_a_waiting_click_and_given_back_when_idle():
    if connection.vendor != "postgresql":
        pytest.skip("only pooled (PostgreSQL) connections are given back after a click")
    assert _in_thread(_held_for_waiting_work) == (1, True, True)


@pytest.mark.django_db(transaction=True)
def test_a_held_postgresql_connection_that_broke_is_given_back_not_reused():
    if connection.vendor != "postgresql":
        pytest.skip("only pooled (PostgreSQL) connections are given back after a click")
    assert _in_thread(lambda: _held_for_waiting_work(broken=True)) == (2, False, True)


@pytest.mark.django_db(transaction=True)
def test_a_connection_held_past_the_cap_goes_back_to_the_pool_even_under_load(monkeypatch):
    """Under constant load the next click is always waiting: without the cap a thread would
    keep one connection for ever, out of reach of the pool's `max_lifetime`."""
    if connection.vendor != "postgresql":
        pytest.skip("only pooled (PostgreSQL) connections are given back after a click")
    from plumbing.db import threads

    monkeypatch.setattr(threads, "MAX_HOLD_SECONDS", 0.0)
    opened, _same, released = _in_thread(_held_for_waiting_work)
    assert opened == 2 and released


def test_more_callbacks_waiting_is_true_only_while_a_callback_is_queued_for_the_pool():
    gate = threading.Event()
    jobs = [
        dispatcher.POOL.submit(gate.wait, 10) for _ in range(settings.CARDLOOP_CALLBACK_THREADS + 1)
    ]
    try:
        assert dispatcher.more_callbacks_waiting()  # one more job than threads
    finally:
        gate.set()
        for job in jobs:
            job.result(10)
    assert not dispatcher.more_callbacks_waiting()
