"""Who may read which analytics: the scope is decided here, from the database, never from a
client-sent id, and applied inside every query of `analytics.queries`.

Rules:
- a superuser sees every delivery (also those with no team);
- a manager — a user with at least one `botadmin.TeamMembership` — sees only deliveries whose
  frozen `team` is one of their teams;
- any other caller (a logged-in user without a team, a bot API key) is refused with 403: there is
  nothing they may read, and an empty dashboard would look like "no feedback".
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db.models import Q
from django.utils.translation import gettext_lazy as _
from rest_framework import permissions

from botadmin.models import TeamMembership


@dataclass(frozen=True)
class Scope:
    """The deliveries a reader may see. `team_ids=None` means all (superuser)."""

    team_ids: frozenset[int] | None

    @property
    def is_everything(self) -> bool:
        return self.team_ids is None

    def q(self, prefix: str = "") -> Q:
        """A Q on `Delivery` reached through `prefix` (`""`, `"delivery__"`, …)."""
        if self.team_ids is None:
            return Q()
        return Q(**{f"{prefix}team_id__in": sorted(self.team_ids)})

    def outbox_q(self) -> Q:
        """A Q on `OutboxItem`: through the event's delivery, or the event's own team when it
        has no delivery."""
        if self.team_ids is None:
            return Q()
        ids = sorted(self.team_ids)
        return Q(event__delivery__team_id__in=ids) | Q(
            event__delivery__isnull=True, event__team_id__in=ids
        )


def scope_for(user) -> Scope | None:
    """The `Scope` of `user`, or None when `user` may not read analytics at all.

    `user` is a Django user (or DRF's AnonymousUser / `botadmin.auth.BotPrincipal`, which get
    None). The teams come from `TeamMembership.objects.team_ids_of` (cached per process for at
    most `CARDLOOP_ACCESS_CACHE_SECONDS`, 1 s; a membership change in this process takes effect
    at once): no query when the user asked within that second, else one.
    """
    if not getattr(user, "is_authenticated", False) or not getattr(user, "is_active", False):
        return None
    if getattr(user, "pk", None) is None:  # a bot principal, not a user row
        return None
    if user.is_superuser:
        return Scope(team_ids=None)
    ids = TeamMembership.objects.team_ids_of(user.pk)
    return Scope(team_ids=ids) if ids else None


class CanReadAnalytics(permissions.BasePermission):
    """DRF permission: a superuser or a team manager. Stores the scope on
    `request.analytics_scope` for the view."""

    message = _("Analytics are for superusers and team managers; you are not a member of any team.")

    def has_permission(self, request, view) -> bool:
        scope = scope_for(request.user)
        request.analytics_scope = scope
        return scope is not None
