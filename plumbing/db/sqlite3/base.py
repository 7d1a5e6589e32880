"""Django's SQLite backend with a fair, process-wide queue for write transactions.

SQLite has one writer at a time. With `transaction_mode=IMMEDIATE` every `atomic()` takes the
write lock at BEGIN, and a connection that finds it taken sleeps in SQLite's busy handler,
polling with growing sleeps (up to 100 ms): it is not a queue, so under load a writer can
lose the race again and again for seconds while later ones get through (measured: p99 2.7 s
and answers past the callback budget at 32 concurrent clicks, bench/README.md).

Here every thread of the process first waits in a FIFO queue (`FairLock`) before it sends
BEGIN IMMEDIATE (or a write statement outside a transaction), and is woken the moment the
previous transaction commits or rolls back (the statement finished), in arrival order. Other processes (workers) still meet it in SQLite's busy handler as before.
A thread that waits longer than the connection's busy `timeout` proceeds without the queue
and lets SQLite decide, so a transaction left open elsewhere in the process (a test's
`atomic()` block) delays others but never deadlocks them.

A thread of a fixed pool (the callback handler threads, `interactions.callbacks.dispatcher.POOL`)
can call `keep_connections_in_this_thread()` once: its connections then outlive a request
(`CONN_MAX_AGE` None for them alone), because opening one costs the connect, the four
`init_command` PRAGMAs and, at the end, a close that may checkpoint the WAL (about 2–3 ms of
a click's 10). Django's own request threads are one per request under ASGI, so they keep
`CONN_MAX_AGE=0`: a persistent connection per thread would pile up.

A write lock that cannot be had within the busy timeout (`DATABASE_LOCK_WAIT` seconds, 5:
another process holds it, e.g. a `BEGIN IMMEDIATE` left open) makes the database *known
locked* for this process (`plumbing.db.outage`): from then on a write (a transaction's BEGIN,
a write statement outside one) raises `outage.DatabaseUnavailable` at once instead of waiting
the busy timeout again, the threads queued for the write lock are failed as they reach the
front of the queue, and a probe tries to take the lock (and lets it go) every
`DATABASE_PROBE_INTERVAL` seconds (0.5) until it gets it. Reads need no write lock (WAL) and
are not affected.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections import deque

from django.db import DEFAULT_DB_ALIAS
from django.db.backends.sqlite3 import base, creation

from plumbing.db import outage

#: A queued writer waiting longer than this (seconds) is handed the lock directly when it is
#: released; before that, a running thread may take a free lock ahead of it (`FairLock`).
HANDOVER_AFTER = 0.05


class _Turn:
    __slots__ = ("event", "granted", "since")

    def __init__(self) -> None:
        self.event = threading.Event()
        self.granted = False
        self.since = time.monotonic()


class FairLock:
    """A write lock whose waiters are served in arrival order, with bounded barging.

    `acquire(timeout)` returns False when the wait timed out (the caller does not hold the lock
    then). On `release()` the first waiter is woken; until it has waited `HANDOVER_AFTER`
    (50 ms) a thread that is running may take the free lock first (the woken one keeps its
    place at the head of the queue), after that the lock is handed to it directly.

    Why not plain handover: handing the lock to a sleeping thread makes every transaction wait
    for the OS to schedule that one thread. When the machine is busy with other work, that
    wake-up takes a scheduler slice each time and the whole process's writes crawl in a lock
    convoy (measured: clicks fell to a fifth of `/healthz`'s rate under outside load,
    bench/README.md), while threads that were already running could have written. Why not
    plain barging (SQLite's busy handler): an unlucky writer can then lose for seconds.
    """

    def __init__(self) -> None:
        self._mutex = threading.Lock()
        self._held = False
        self._waiters: deque[_Turn] = deque()

    def acquire(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        with self._mutex:
            if not self._held:
                self._held = True
                return True
            turn = _Turn()
            self._waiters.append(turn)
        while True:
            woken = turn.event.wait(max(0.0, deadline - time.monotonic()))
            with self._mutex:
                if turn.granted:
                    return True
                if not self._held and self._waiters and self._waiters[0] is turn:
                    self._waiters.popleft()
                    self._held = True
                    return True
                if not woken:
                    self._waiters.remove(turn)
                    if not self._held and self._waiters:
                        self._waiters[0].event.set()  # it may take the lock now
                    return False
                turn.event.clear()  # a running thread took it first: wait for the next release

    def release(self) -> None:
        with self._mutex:
            if not self._waiters:
                self._held = False
                return
            head = self._waiters[0]
            if time.monotonic() - head.since >= HANDOVER_AFTER:
                self._waiters.popleft()
                head.granted = True  # handed over: stays held
            else:
                self._held = False  # free: the head or a running thread takes it
            head.event.set()

    @property
    def waiting(self) -> int:
        """How many threads are queued (for tests and diagnostics)."""
        with self._mutex:
            return len(self._waiters)


#: One queue per process and database file.
_LOCKS: dict[str, FairLock] = {}
_LOCKS_MUTEX = threading.Lock()


def write_lock(name: str) -> FairLock:
    """The process's write queue for database file `name`."""
    with _LOCKS_MUTEX:
        return _LOCKS.setdefault(name, FairLock())


#: SQL texts whose `?` form `QueuedCursor.convert_query` keeps (per process).
QMARK_TEXTS = 2048
_QMARK: dict[str, str] = {}

#: Statements that neither write nor need the queue (reads, transaction control).
_NOT_QUEUED = ("SELECT", "BEGIN", "COMMIT", "ROLLBACK", "SAVEPOINT", "RELEASE", "PRAGMA", "WITH")


class QueuedCursor(base.SQLiteCursorWrapper):
    """A cursor whose writes outside a transaction (autocommit statements, e.g. the callback
    dedupe claim) wait in the same queue as write transactions."""

    queue: FairLock
    timeout: float
    alias: str

    def convert_query(self, query, *, param_names=None):
        """Django's `%s` → `?` conversion (a regex over the whole text on every call),
        remembered per SQL text for the `%s` style: the click path runs the same dozen texts
        again and again. At most `QMARK_TEXTS` texts are kept, then it starts over."""
        if param_names is not None:
            return super().convert_query(query, param_names=param_names)
        converted = _QMARK.get(query)
        if converted is None:
            if len(_QMARK) >= QMARK_TEXTS:
                _QMARK.clear()
            converted = _QMARK[query] = super().convert_query(query)
        return converted

    def _queued(self, query: str) -> bool:
        return not self.connection.in_transaction and not query.lstrip()[:9].upper().startswith(
            _NOT_QUEUED
        )

    def execute(self, query, params=None):
        if not self._queued(query):
            return super().execute(query, params)
        return self._write(super().execute, query, params)

    def executemany(self, query, param_list):
        if not self._queued(query):
            return super().executemany(query, param_list)
        return self._write(super().executemany, query, param_list)

    def _write(self, run, query, params):
        held = self.queue.acquire(self.timeout)
        try:
            outage.raise_if_down(self.alias)
            try:
                return run(query, params)
            except sqlite3.OperationalError as exc:
                if is_lock_timeout(exc):
                    outage.connect_failed(self.alias, exc)
                raise
        finally:
            if held:
                self.queue.release()


def is_lock_timeout(exc: BaseException) -> bool:
    """True when `exc` (or a cause of it) is SQLite's "database is locked": the write lock was
    not obtainable within the busy timeout (SQLITE_BUSY, https://www.sqlite.org/rescode.html#busy)."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, sqlite3.OperationalError) and "database is locked" in str(exc).lower():
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def probe_write_lock(name: str, wait: float = 0.1) -> None:
    """Take SQLite's write lock of database file `name` on a fresh connection (waiting at most
    `wait` seconds) and let it go at once; raises `sqlite3.OperationalError` when it is taken."""
    raw = sqlite3.connect(name, timeout=wait, isolation_level=None)
    try:
        raw.execute("BEGIN IMMEDIATE")
        raw.execute("ROLLBACK")
    finally:
        raw.close()


_WATCHED: set[str] = set()


class DatabaseCreation(creation.DatabaseCreation):
    """Test databases: the WAL and shared-memory files go with the database file. A test run
    killed with connections open leaves `-wal`/`-shm` behind, and a new test database next
    to them is corrupt ("disk I/O error")."""

    @staticmethod
    def _remove_sidecars(name: str) -> None:
        for suffix in ("-wal", "-shm"):
            try:
                os.remove(f"{name}{suffix}")
            except FileNotFoundError:
                pass

    def _create_test_db(self, verbosity, autoclobber, keepdb=False):
        name = self._get_test_db_name()
        if not keepdb and not self.is_in_memory_db(name):
            self._remove_sidecars(name)
        return super()._create_test_db(verbosity, autoclobber, keepdb)

    def _destroy_test_db(self, test_database_name, verbosity):
        super()._destroy_test_db(test_database_name, verbosity)
        if test_database_name and not self.is_in_memory_db(test_database_name):
            self._remove_sidecars(test_database_name)


_THREAD = threading.local()


def keep_connections_in_this_thread() -> None:
    """From now on, SQLite connections this thread opens stay open between requests (until
    unusable: Django's `close_if_unusable_or_obsolete` still closes one left in a transaction
    or broken by an error). Only for threads of a fixed-size pool; a no-op for other
    database backends, which never read the flag."""
    _THREAD.keep = True


class DatabaseWrapper(base.DatabaseWrapper):
    """`django.db.backends.sqlite3` whose writes queue fairly for the write lock, and whose
    connections persist in threads that asked for it (`keep_connections_in_this_thread`)."""

    creation_class = DatabaseCreation
    _holds_write_queue = False

    def __init__(self, settings_dict, alias=DEFAULT_DB_ALIAS):
        super().__init__(settings_dict, alias)
        if alias not in _WATCHED:
            _WATCHED.add(alias)
            settings = self.settings_dict  # its NAME changes when a test database is made
            outage.watch(alias, probe=lambda: probe_write_lock(str(settings["NAME"])))

    def connect(self):
        super().connect()
        if getattr(_THREAD, "keep", False):
            self.close_at = None

    def close_if_unusable_or_obsolete(self):
        """Django's rule, plus: a kept connection (`keep_connections_in_this_thread`) that saw
        a database error since its last commit is closed. SQLite's `is_usable()` always says
        yes, so Django would clear the error and keep a connection that may be broken for
        good (`SQLITE_IOERR_*`) for every later callback of its thread."""
        if self.connection is not None and self.close_at is None and self.errors_occurred:
            self.close()
            return
        super().close_if_unusable_or_obsolete()

    def create_cursor(self, name=None):
        cursor = self.connection.cursor(factory=QueuedCursor)
        cursor.queue = write_lock(str(self.settings_dict["NAME"]))
        cursor.timeout = float(self.settings_dict["OPTIONS"].get("timeout", 5))
        cursor.alias = self.alias
        return cursor

    def _start_transaction_under_autocommit(self):
        timeout = float(self.settings_dict["OPTIONS"].get("timeout", 5))
        lock = write_lock(str(self.settings_dict["NAME"]))
        self._holds_write_queue = lock.acquire(timeout)
        self._queue_lock = lock
        try:
            outage.raise_if_down(self.alias)
            super()._start_transaction_under_autocommit()
        except BaseException as exc:
            self._leave_write_queue()
            if is_lock_timeout(exc):
                outage.connect_failed(self.alias, exc)
            raise

    def _leave_write_queue(self) -> None:
        if self._holds_write_queue:
            self._holds_write_queue = False
            self._queue_lock.release()

    def _commit(self):
        try:
            return super()._commit()
        finally:
            self._leave_write_queue()

    def _rollback(self):
        try:
            return super()._rollback()
        finally:
            self._leave_write_queue()

    def _close(self):
        try:
            return super()._close()
        finally:
            self._leave_write_queue()


__all__ = [
    "DatabaseCreation",
    "DatabaseWrapper",
    "FairLock",
    "QueuedCursor",
    "is_lock_timeout",
    "keep_connections_in_this_thread",
    "probe_write_lock",
    "write_lock",
]
