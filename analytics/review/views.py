"""The reviewer's pages: `/review/` (queues of my teams with progress) and
`/review/<queue_id>/[?assigned=me]` (work through a queue, or only the items assigned to me). Thin: the work page reads and writes through the
review API (`/api/v1/review/…`), so the page and scripts behave the same, and the comment is
shown (and audited) only through it."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.shortcuts import render
from django.urls import reverse
from django.utils import timezone
from django.utils.translation import gettext as _
from django.views.decorators.http import require_GET

from analytics.review import service
from analytics.review.access import reviewer_team_ids


def _strings() -> dict[str, str]:
    """Texts the work page's script shows, translated for the request's language."""
    return {
        "loading": _("Loading…"),
        "empty": _("Nothing left to review in this queue for you."),
        "no_comment": _("(no comment)"),
        "no_reason": _("(no reason)"),
        "error": _("Could not do that:"),
        "claimed_until": _("Claimed until %(time)s"),
        "done": _("Recorded: %(outcome)s"),
        "assigned": _("Assigned to %(user)s"),
        "progress": _("%(open)s open · %(in_review)s in review · %(done)s done"),
    }


def _forbidden(request):
    return render(request, "analytics/review_forbidden.html", status=403)


@require_GET
@login_required
def home(request):
    """`/review/`: the queues of the reviewer's teams with open / in review / done counts;
    403 page for anyone who reviews no team."""
    teams = reviewer_team_ids(request.user)
    if not teams:
        return _forbidden(request)
    now = timezone.now()
    rows = []
    for queue in service.visible_queues(request.user):
        service.fill_queue(queue, now=now)
        covered = frozenset(queue.teams.values_list("id", flat=True)) & teams
        rows.append({"queue": queue, "progress": service.progress(queue, covered, now)})
    return render(request, "analytics/review_home.html", {"rows": rows})


@require_GET
@login_required
def work(request, queue_id: int):
    """`/review/<queue_id>/`: claim, read (with the comment), record an outcome or skip, next.
    404 page for a queue of no team of theirs, 403 for a non-reviewer."""
    if not reviewer_team_ids(request.user):
        return _forbidden(request)
    try:
        queue, _teams = service.queue_for(request.user, queue_id)
    except service.ReviewError:
        return render(request, "analytics/review_forbidden.html", {"not_found": True}, status=404)
    config = {
        "queue": queue.pk,
        "api": {
            "claim": reverse("review-claim", args=[queue.pk]),
            "queue": reverse("review-queue", args=[queue.pk]),
            "complete": reverse("review-complete", args=[0]).replace("/0/", "/{id}/"),
            "skip": reverse("review-skip", args=[0]).replace("/0/", "/{id}/"),
        },
        "language": request.LANGUAGE_CODE,
        "strings": _strings(),
    }
    assigned_only = request.GET.get("assigned") == "me"
    return render(
        request,
        "analytics/review_work.html",
        {"queue": queue, "config": config, "assigned_only": assigned_only},
    )
