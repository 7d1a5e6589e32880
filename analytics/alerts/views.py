"""`/alerts/`: the alert history for managers, newest first, with filters in the URL
(`rule`, `state=open|resolved`). A superuser sees every rule's alerts; a manager sees those
of rules watching one of their teams (rules of a bot or of everything are for superusers)."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.shortcuts import render
from django.views.decorators.http import require_GET

from analytics.access import scope_for
from analytics.alerts.service import alert_facts
from analytics.models import Alert, AlertRule


@require_GET
@login_required
def history(request):
    """200 with the history page (50 per page, `page=`), 403 page for non-managers."""
    scope = scope_for(request.user)
    if scope is None:
        return render(request, "analytics/forbidden.html", status=403)
    rules = AlertRule.objects.select_related("team", "bot")
    if not scope.is_everything:
        rules = rules.filter(team_id__in=scope.team_ids)
    alerts = Alert.objects.filter(rule__in=rules).select_related("rule__team", "rule__bot")
    rule_id = request.GET.get("rule") or ""
    if rule_id.isdigit():
        alerts = alerts.filter(rule_id=int(rule_id))
    state = request.GET.get("state") or ""
    if state == "open":
        alerts = alerts.filter(resolved_at__isnull=True)
    elif state == "resolved":
        alerts = alerts.filter(resolved_at__isnull=False)
    page = Paginator(alerts.order_by("-fired_at", "-id"), 50).get_page(request.GET.get("page"))
    rows = [{"alert": a, "facts": alert_facts(a, base_url="")} for a in page.object_list]
    return render(
        request,
        "analytics/alerts.html",
        {
            "rows": rows,
            "page": page,
            "rules": rules.order_by("name"),
            "rule_id": rule_id,
            "state": state,
        },
    )
