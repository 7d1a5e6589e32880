"""Held card updates made due once their callbacks' answers were sent — in batches, off the
request's thread.

Feishu applies no card update sent before (or in parallel with) the callback's answer: the
update fails or the card reverts (Feishu Open Platform, "Handle card callbacks": reply first,
then update). So the updates a click enqueues are *held* (`service.holding`) and the transport
releases them after its answer left. Releasing is a write (`CardUpdate.objects.release_holds`),
and writing it in the click's own thread, after the answer, cost every click a third write
transaction and kept its handler thread busy with it.

`release_after_answer(hold)` only notes the hold's token (no database work; a click that
enqueued nothing notes nothing). One thread per process, `RELEASES`, makes every token noted
so far due in **one** UPDATE, then takes the tokens noted meanwhile: under load the clicks
answered while one batch is written share the next one, so the release costs a click a
fraction of a statement; when idle a release is written within a few milliseconds of the
answer. If the batch cannot be written (the database is gone) or the process dies first, the
held updates become due by themselves after `service.HOLD_FALLBACK` (3 s): late, never lost.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable

from interactions.models import CardUpdate
from plumbing.db import threads
from plumbing.db.sqlite3.base import keep_connections_in_this_thread

log = logging.getLogger(__name__)


def release_tokens(tokens: list[str]) -> int:
    """Make the pending updates held by any of `tokens` (hold tokens, 32 hex characters each)
    due now, in one statement. Returns how many rows changed."""
    return CardUpdate.objects.release_holds(tokens)


class Releases:
    """The process's queue of hold tokens whose answers were sent, written by one thread.

    `add(token)` never blocks on the database; `flush(timeout)` waits until every token
    added before it is written (tests, shutdown)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._tokens: list[str] = []
        self._writing = False
        self._thread: threading.Thread | None = None

    def add(self, token: str) -> None:
        """Queue `token` for the next batch (starts the thread on first use, so a process that
        forks its workers before any click starts none in the parent)."""
        with self._cond:
            self._tokens.append(token)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._run, name="card-hold-release", daemon=True
                )
                self._thread.start()
            self._cond.notify_all()

    def flush(self, timeout: float = 5.0) -> bool:
        """Wait up to `timeout` seconds until nothing is queued or being written; True when
        every token added before the call is written (or failed and was logged)."""
        with self._cond:
            return self._cond.wait_for(lambda: not self._tokens and not self._writing, timeout)

    def _run(self) -> None:
        keep_connections_in_this_thread()  # SQLite: no reconnect (PRAGMAs, WAL) per batch
        while True:
            with self._cond:
                self._cond.wait_for(lambda: bool(self._tokens))
                batch, self._tokens = self._tokens, []
                self._writing = True
            try:
                written = self._write(batch)
                with self._cond:
                    idle = not self._tokens
                # the connection is kept while the next batch is already waiting (under load:
                # on PostgreSQL, giving it back to the pool and taking it again cost about
                # 0.1 ms of CPU per batch); done, or after a failure, it is finished
                if idle or not written:
                    threads.finish_connections()  # SQLite: kept unless broken; PG: to the pool
            finally:
                with self._cond:
                    self._writing = False
                    self._cond.notify_all()

    @staticmethod
    def _write(batch: Iterable[str]) -> bool:
        """Release `batch`; False (logged) when the database refused."""
        tokens = list(dict.fromkeys(batch))
        try:
            release_tokens(tokens)
        except Exception as exc:  # noqa: BLE001 - logged; the hold's fallback makes them due
            log.warning(
                "%d held card update batch(es) not released (%s); due after the hold fallback",
                len(tokens),
                type(exc).__name__,
            )
            return False
        return True


#: The process's releases.
RELEASES = Releases()
