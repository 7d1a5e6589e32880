"""Who may review: a user with a `Reviewer` row for a team reviews that team's items.

Reviewing is its own permission, separate from reading analytics: a manager
(`TeamMembership`) without it sees no review item and no comment, and being a superuser does
not make someone a reviewer either (comments are shown only to the reviewers of the item's
team, and each view is audited). The scope comes from the database on every request.
"""

from __future__ import annotations

from django.utils.translation import gettext_lazy as _
from rest_framework import permissions

from analytics.models import Reviewer


def reviewer_team_ids(user) -> frozenset[int]:
    """The ids of the teams `user` reviews (empty for anonymous users and bot principals).
    One query."""
    if not getattr(user, "is_authenticated", False) or not getattr(user, "is_active", False):
        return frozenset()
    if getattr(user, "pk", None) is None:  # a bot principal, not a user row
        return frozenset()
    return frozenset(Reviewer.objects.filter(user_id=user.pk).values_list("team_id", flat=True))


class IsReviewer(permissions.BasePermission):
    """DRF permission: a reviewer of at least one team. Stores the team ids on
    `request.review_team_ids` for the view."""

    message = _("Review is for reviewers; you are not a reviewer of any team.")

    def has_permission(self, request, view) -> bool:
        teams = reviewer_team_ids(request.user)
        request.review_team_ids = teams
        return bool(teams)
