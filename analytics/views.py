"""The managers' dashboard page. It renders controls and reads every number from the API
(`/api/v1/analytics/…`), so the page and scripts always agree."""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.shortcuts import render
from django.urls import reverse
from django.utils import timezone
from django.utils.translation import gettext as _
from django.views.decorators.http import require_GET

from analytics import periods
from analytics.access import scope_for
from botadmin.models import Team
from feedback.models import Delivery, Semantic


def _js_strings() -> dict[str, str]:
    """Texts the page's script shows, translated for the request's language."""
    return {
        "positive": _("positive"),
        "progress": _("progress"),
        "negative": _("negative"),
        "delivered": _("delivered"),
        "ratings": _("ratings"),
        "count": _("count"),
        "vs_previous": _("vs previous period"),
        "no_previous": _("no previous data"),
        "rated_of_delivered": _("%(n)s rated of %(d)s delivered"),
        "positive_of_ratings": _("%(n)s positive of %(d)s ratings"),
        "ratings_on_deliveries": _("on %(n)s deliveries"),
        "negative_share": _("%(n)s of %(d)s ratings"),
        "feedback_shown": _("%(n)s with feedback buttons"),
        "failed_of_delivered": _("%(n)s of %(d)s delivered"),
        "outbox_parts": _("%(f)s failed, %(d)s dead"),
        "send_failed": _("send failed"),
        "failed": _("failed"),
        "error": _("Could not load the figures:"),
        "unrated": _("unrated"),
        "without_reason": _("without reason"),
        "loading": _("Loading…"),
    }


@require_GET
@login_required
def dashboard(request):
    """`/dashboard/`: 200 with the page for a superuser or manager, 403 page for anyone else
    logged in; anonymous visitors are redirected to the admin login (settings.LOGIN_URL).

    The filter controls are a GET form, so every view is a bookmarkable URL; without `from`
    and `to` the page shows the last 30 local days (today included) in the report zone.
    """
    scope = scope_for(request.user)
    if scope is None:
        return render(request, "analytics/forbidden.html", status=403)
    teams = (
        Team.objects.all() if scope.is_everything else Team.objects.filter(id__in=scope.team_ids)
    )
    zone = periods.resolve_zone(settings.CARDLOOP_REPORT_TZ)
    today = timezone.now().astimezone(zone).date()
    config = {
        "api": {
            name: reverse(f"analytics-{name}")
            for name in ("summary", "trend", "reasons", "failures", "deliveries", "deliveries-csv")
        },
        "defaults": {
            "from": (today - timedelta(days=29)).isoformat(),
            "to": (today + timedelta(days=1)).isoformat(),
            "tz": settings.CARDLOOP_REPORT_TZ,
            "granularity": "day",
        },
        "language": request.LANGUAGE_CODE,
        "strings": _js_strings(),
        "statuses": {value: str(label) for value, label in Delivery.Status.choices},
        "channels": {value: str(label) for value, label in Delivery.Channel.choices},
    }
    return render(
        request,
        "analytics/dashboard.html",
        {
            "teams": list(teams.values("id", "name")),
            "statuses": Delivery.Status.choices,
            "channels": Delivery.Channel.choices,
            "semantics": Semantic.choices,
            "config": config,
        },
    )
