"""Liveness and readiness probes (JSON, no authentication)."""

from __future__ import annotations

import asyncio
import time
import uuid

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import connection
from django.http import JsonResponse
from django.views.decorators.http import require_GET


@require_GET
def healthz(request):
    """`200 {"status": "ok"}` while the process serves requests."""
    return JsonResponse({"status": "ok"})


def _check_database() -> dict:
    started = time.monotonic()
    try:
        with connection.cursor() as cur:
            cur.execute("SELECT 1")
            cur.fetchone()
    except Exception as exc:  # noqa: BLE001 - any failure means "not ready"
        return {"ok": False, "error": type(exc).__name__}
    return {"ok": True, "ms": round((time.monotonic() - started) * 1000, 1)}


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
    `{"status": "ok"|"unavailable", "checks": {"database": {...}, "channel_layer": {...}}}`."""
    checks = {"database": _check_database(), "channel_layer": _check_channel_layer()}
    ok = all(c["ok"] for c in checks.values())
    return JsonResponse(
        {"status": "ok" if ok else "unavailable", "checks": checks}, status=200 if ok else 503
    )
