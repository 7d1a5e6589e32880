"""Admin for who may read analytics: team memberships (managers) as an inline of the team.

If another app already registers `Team` (botadmin's admin), the inline is attached to that
admin; otherwise a minimal team admin with the inline is registered here. API tokens for
scripts are issued under "Auth Token" (rest_framework.authtoken's own admin).
"""

from __future__ import annotations

from django.contrib import admin
from django.utils.translation import gettext_lazy as _

from botadmin.models import Team, TeamMembership


class TeamMembershipInline(admin.TabularInline):
    """Managers of a team: they see this team's deliveries in /dashboard/ and the analytics
    API. To log in to the dashboard through the admin login page a manager needs "staff
    status" (no admin permissions are needed); API tokens work without it."""

    model = TeamMembership
    extra = 0
    raw_id_fields = ("user",)
    verbose_name = _("manager")
    verbose_name_plural = _("Managers (may read this team's analytics)")


def attach_membership_inline(site: admin.AdminSite = admin.site) -> None:
    """Add `TeamMembershipInline` to the registered Team admin, or register one (idempotent)."""
    team_admin = site._registry.get(Team)
    if team_admin is None:

        @admin.register(Team, site=site)
        class TeamAdmin(admin.ModelAdmin):
            list_display = ("name", "created_at")
            search_fields = ("name",)
            inlines = [TeamMembershipInline]

        return
    if not any(getattr(inline, "model", None) is TeamMembership for inline in team_admin.inlines):
        team_admin.inlines = [*team_admin.inlines, TeamMembershipInline]


attach_membership_inline()
