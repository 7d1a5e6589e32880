"""System checks for Cardloop's configuration (ids are stable; tested in
`botadmin/tests/test_probes_and_checks.py`).

- `cardloop.E001`: DEBUG is off and DJANGO_SECRET_KEY is missing, the development key, or weak.
- `cardloop.E002`: CARDLOOP_REPORT_TZ is not a known IANA time zone.
- `cardloop.W001`: CARDLOOP_WEBHOOK_ALLOW_PRIVATE is on outside DEBUG (tests only).
- `cardloop.E010`: an entry of CARDLOOP_METRICS_ALLOW is not an IP address or network.
"""

from __future__ import annotations

import ipaddress
import zoneinfo

from django.conf import settings
from django.core.checks import Error, Tags, Warning, register


@register(Tags.security)
def check_secret_key(app_configs=None, **kwargs):
    if settings.DEBUG:
        return []
    key = settings.SECRET_KEY or ""
    weak = (
        not key
        or key in (settings.DEV_SECRET_KEY, settings.MISSING_SECRET_KEY)
        or key.startswith("django-insecure")
        or len(key) < 50
        or len(set(key)) < 5
    )
    if weak:
        return [
            Error(
                "DJANGO_SECRET_KEY is missing or not a real secret while DEBUG is off.",
                hint="In production, set DJANGO_SECRET_KEY to 50+ random characters, e.g. "
                "python -c 'import secrets; print(secrets.token_urlsafe(50))'. On a "
                "development machine (as `make run` does), set DJANGO_DEBUG=true instead, "
                "in the shell or in a .env file in the project root.",
                id="cardloop.E001",
            )
        ]
    return []


@register()
def check_report_tz(app_configs=None, **kwargs):
    try:
        zoneinfo.ZoneInfo(settings.CARDLOOP_REPORT_TZ)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        return [
            Error(
                f"CARDLOOP_REPORT_TZ={settings.CARDLOOP_REPORT_TZ!r} is not a known time zone.",
                hint="Use an IANA name such as Asia/Shanghai or UTC.",
                id="cardloop.E002",
            )
        ]
    return []


@register(Tags.security)
def check_webhook_private(app_configs=None, **kwargs):
    if settings.CARDLOOP_WEBHOOK_ALLOW_PRIVATE and not settings.DEBUG:
        return [
            Warning(
                "CARDLOOP_WEBHOOK_ALLOW_PRIVATE is on: webhooks may reach internal addresses.",
                hint="This flag exists for tests only; unset it in production.",
                id="cardloop.W001",
            )
        ]
    return []


@register(Tags.security)
def check_metrics_allow(app_configs=None, **kwargs):
    """`cardloop.E010` for an entry of CARDLOOP_METRICS_ALLOW that is not an IP address or
    network (CIDR), which `/metrics` could not apply."""
    errors = []
    for entry in settings.CARDLOOP_METRICS_ALLOW:
        try:
            ipaddress.ip_network(entry, strict=False)
        except ValueError:
            errors.append(
                Error(
                    f"CARDLOOP_METRICS_ALLOW entry {entry[:64]!r} is not an IP address or network.",
                    hint="Use addresses or CIDR networks, e.g. 10.0.0.5,10.1.0.0/16.",
                    id="cardloop.E010",
                )
            )
    return errors
