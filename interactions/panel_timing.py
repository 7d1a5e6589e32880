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
