"""Count the write transactions a piece of work makes, in every thread and on every connection.

    with counted_transactions() as seen:
        ...                                    # e.g. a click through the ingress
    assert seen.total == 2, seen.statements

A write transaction is either an outermost `atomic()` block that commits (on SQLite every one
of them is a writer: Cardloop's transactions begin `BEGIN IMMEDIATE`, which takes the single
write lock) or an INSERT / UPDATE / DELETE run outside any transaction (autocommit: a
transaction of its own). `seen.statements` lists, per transaction, the first words of its
write statements, for the assertion message.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from dataclasses import dataclass, field

from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.utils import CursorWrapper

WRITES = ("INSERT", "UPDATE", "DELETE")


def _is_write(sql: str) -> bool:
    head = sql.lstrip()[:6].upper()
    if head in WRITES:
        return True
    return head == "WITH" or head.startswith("WITH ") and any(w in sql.upper() for w in WRITES)


@dataclass
class Seen:
    """What `counted_transactions` saw: `statements[i]` holds transaction i's writes."""

    statements: list[list[str]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    open: dict[int, list[str]] = field(default_factory=dict, repr=False)

    @property
    def total(self) -> int:
        return len(self.statements)


@contextmanager
def counted_transactions(monkeypatch):
    seen = Seen()
    real_execute, real_many = CursorWrapper.execute, CursorWrapper.executemany
    real_commit, real_rollback = BaseDatabaseWrapper.commit, BaseDatabaseWrapper.rollback

    def note(cursor, sql):
        if not isinstance(sql, str) or not _is_write(sql):
            return
        words = " ".join(sql.split()[:3])[:60]
        with seen.lock:
            if cursor.db.in_atomic_block:
                seen.open.setdefault(id(cursor.db), []).append(words)
            else:
                seen.statements.append([words])

    def execute(self, sql, params=None):
        note(self, sql)
        return real_execute(self, sql, params)

    def executemany(self, sql, param_list):
        note(self, sql)
        return real_many(self, sql, param_list)

    def commit(self):
        result = real_commit(self)
        with seen.lock:
            seen.statements.append(seen.open.pop(id(self), []))
        return result

    def rollback(self):
        with seen.lock:
            seen.open.pop(id(self), None)
        return real_rollback(self)

    with monkeypatch.context() as patch:
        patch.setattr(CursorWrapper, "execute", execute)
        patch.setattr(CursorWrapper, "executemany", executemany)
        patch.setattr(BaseDatabaseWrapper, "commit", commit)
        patch.setattr(BaseDatabaseWrapper, "rollback", rollback)
        yield seen
