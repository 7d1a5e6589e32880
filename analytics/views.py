"""The managers' dashboard page. It renders controls and reads everything from the API."""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.shortcuts import render
from django.views.decorators.http import require_GET

from analytics.access import scope_for
from botadmin.models import Team


@require_GET
@login_required
def dashboard(request):
    """`/dashboard/`: 200 with the page for a superuser or manager, 403 page for anyone else
    logged in; anonymous visitors are redirected to the admin login (settings.LOGIN_URL)."""
    scope = scope_for(request.user)
    if scope is None:
        return render(request, "analytics/forbidden.html", status=403)
    teams = Team.objects.all() if scope.is_everything else Team.objects.filter(id__in=scope.team_ids)
    return render(
        request,
        "analytics/dashboard.html",
        {
            "teams": list(teams.values("id", "name")),
            "report_tz": settings.CARDLOOP_REPORT_TZ,
        },
    )
