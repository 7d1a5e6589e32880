"""Liveness and readiness probes (JSON, no authentication)."""

from __future__ import annotations

import asyncio
import math
import sqlite3
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.conf import settings
from django.db import connection
from django.http import JsonResponse
from django.views.decorators.http import require_GET

from plumbing.db import outage


@require_GET
def healthz(request):
    """`200 {"status": "ok"}` while the process serves requests."""
    return JsonResponse({"status": "ok"})


#: Threads for readiness probes of the database: a probe that hangs (a host that stopped
#: answering) keeps its thread until the driver's own timeout, never the request.
_PROBES = ThreadPoolExecutor(max_workers=4, thread_name_prefix="readyz")


def _probe_postgresql(budget: float) -> None:
    """Connect afresh (never through the pool, whose line waits `DATABASE_POOL_TIMEOUT`) and
    run `SELECT 1`; raises on any failure."""
    import psycopg

    params = connection.get_connection_params()
    params.pop("pool", None)
    params.pop("cursor_factory", None)
    params.pop("context", None)
    params["connect_timeout"] = max(2, math.ceil(budget))  # libpq's floor; the wait is ours
    params["options"] = f"-c statement_timeout={int(budget * 1000)}"
    with psycopg.connect(**params, autocommit=True) as raw:
        raw.execute("SELECT 1").fetchone()


def _probe_sqlite(budget: float) -> None:
    """Take SQLite's write lock (`BEGIN IMMEDIATE`) on a connection of its own, waiting at most
    `budget` seconds for it, then roll back: a database another process holds write-locked is
    not ready, since every click writes. Waits three quarters of `budget`. Raises `sqlite3.OperationalError` ("database is
    locked") when the lock could not be taken."""
    # most of the budget: the rest is for opening the file and answering
    raw = sqlite3.connect(
        connection.settings_dict["NAME"], timeout=budget * 0.75, isolation_level=None
    )
    try:
        raw.execute("BEGIN IMMEDIATE")
        raw.execute("ROLLBACK")
    finally:
        raw.close()


def _check_database() -> dict:
    """`{"ok": True, "ms": …, "outage_known": …}` when a fresh connection answers (SQLite: the
    write lock is free) within `DATABASE_CONNECT_TIMEOUT` seconds (0.8), else `{"ok": False,
    "error": …, "outage_known": …}` — "timeout" when it did not answer in time, else the error's
    class name. `outage_known`: whether this process currently fails its requests at once
    because an outage is known (`plumbing.db.outage`; cleared by its reconnect probe, not by
    this check)."""
    budget = float(settings.DATABASE_CONNECT_TIMEOUT)
    probe = _probe_sqlite if connection.vendor == "sqlite" else _probe_postgresql
    started = time.monotonic()
    try:
        _PROBES.submit(probe, budget).result(timeout=budget)
    except FutureTimeout:
        result = {"ok": False, "error": "timeout"}
    except Exception as exc:  # noqa: BLE001 - any failure means "not ready"
        if isinstance(exc, sqlite3.OperationalError) and "locked" in str(exc):
            result = {"ok": False, "error": "write_locked"}
        else:
            result = {"ok": False, "error": type(exc).__name__}
    else:
        result = {"ok": True, "ms": round((time.monotonic() - started) * 1000, 1)}
    result["outage_known"] = outage.is_down(connection.alias)
    return result


async def _channel_roundtrip(layer) -> None:
    name = await layer.new_channel("readyz.")
    token = uuid.uuid4().hex
    await layer.send(name, {"type": "readyz.ping", "token": token})
    message = await asyncio.wait_for(layer.receive(name), timeout=2)
    if message.get("token") != token:
        raise RuntimeError("channel layer returned another message")


def _check_channel_layer() -> dict:
    started = time.monotonic()
    layer = get_channel_layer()
    if layer is None:
        return {"ok": False, "error": "no channel layer configured"}
    try:
        async_to_sync(_channel_roundtrip)(layer)
    except Exception as exc:  # noqa: BLE001
        return {"ok": False, "backend": type(layer).__name__, "error": type(exc).__name__}
    return {
        "ok": True,
        "backend": type(layer).__name__,
        "ms": round((time.monotonic() - started) * 1000, 1),
    }


@require_GET
def readyz(request):
    """`200` when the database and the channel layer answer, `503` otherwise, with details:
    `{"status": "ok"|"unavailable", "checks": {"database": {...}, "channel_layer": {...}}}`.
    The database check answers within `DATABASE_CONNECT_TIMEOUT` (0.8 s) on a fresh
    connection (`_check_database`), so a probe sees an outage in about a second."""
    checks = {"database": _check_database(), "channel_layer": _check_channel_layer()}
    ok = all(c["ok"] for c in checks.values())
    return JsonResponse(
        {"status": "ok" if ok else "unavailable", "checks": checks}, status=200 if ok else 503
    )
