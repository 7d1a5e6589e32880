"""Timing settings of question panels (a leaf: settings only), shared by the presence rows'
queries in `interactions.models` and the panel processes."""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings


def heartbeat_interval() -> float:
    """Seconds between presence refreshes (`CARDLOOP_PANEL_HEARTBEAT`, default 20)."""
    return float(getattr(settings, "CARDLOOP_PANEL_HEARTBEAT", 20.0))


def presence_ttl() -> timedelta:
    """How long an unrefreshed presence still counts (`CARDLOOP_PANEL_PRESENCE_TTL`, 60 s)."""
    return timedelta(seconds=float(getattr(settings, "CARDLOOP_PANEL_PRESENCE_TTL", 60.0)))


def resync_interval() -> float:
    """Seconds between a panel's resyncs with the database (`CARDLOOP_PANEL_RESYNC`, 60)."""
    return float(getattr(settings, "CARDLOOP_PANEL_RESYNC", 60.0))


def resync_grace() -> float:
    """Seconds an open ask a panel connection was not sent is left to its push before the
    periodic resync sends it itself (`CARDLOOP_PANEL_RESYNC_GRACE`; default half the resync
    interval, at most 10): a push to many panels can still be on its way when the resync
    runs, and sending the ask then would be a repair of nothing."""
    default = min(10.0, resync_interval() / 2)
    return float(getattr(settings, "CARDLOOP_PANEL_RESYNC_GRACE", None) or default)
