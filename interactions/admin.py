"""Admin of the interactions app.

Interactions (issue 6) are read-only here (filter by status, kind, bot); "always" approval
rules can be listed and revoked — the action calls `interactions.approvals.revoke_rule`.
Nothing secret is shown: interactions and rules hold ids, the question and the resolution.
"""

from __future__ import annotations

import json

from django.contrib import admin, messages
from django.utils.html import format_html
from django.utils.translation import gettext_lazy as _
from django.utils.translation import ngettext

from interactions import approvals
from interactions.models import ApprovalRule, Interaction


class ReadOnlyAdmin(admin.ModelAdmin):
    """Listing and detail pages only: no add, change or delete."""

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(Interaction)
class InteractionAdmin(ReadOnlyAdmin):
    list_display = (
        "public_id",
        "kind",
        "status",
        "channel",
        "bot",
        "chat_id",
        "tool",
        "via",
        "created_at",
        "expires_at",
    )
    list_filter = ("status", "kind", "bot", "channel")
    search_fields = ("public_id", "chat_id", "session_id", "request_id", "tool")
    date_hierarchy = "created_at"
    list_select_related = ("bot",)
    fields = (
        "public_id",
        "bot",
        "kind",
        "status",
        "channel",
        "chat_id",
        "session_id",
        "request_id",
        "title",
        "body",
        "tool",
        "always_scope",
        "actions_pretty",
        "fields_pretty",
        "created_at",
        "expires_at",
        "resolved_at",
        "resolution_pretty",
        "open_message_id",
    )
    readonly_fields = fields

    @admin.display(description=_("via"))
    def via(self, obj: Interaction) -> str:
        return (obj.resolution or {}).get("via") or "—"

    @admin.display(description=_("actions"))
    def actions_pretty(self, obj: Interaction):
        return _pre(obj.actions)

    @admin.display(description=_("form fields"))
    def fields_pretty(self, obj: Interaction):
        return _pre(obj.fields)

    @admin.display(description=_("resolution"))
    def resolution_pretty(self, obj: Interaction):
        return _pre(obj.resolution) if obj.resolution else "—"


def _pre(value):
    return format_html("<pre>{}</pre>", json.dumps(value, ensure_ascii=False, indent=2))


class RuleStateFilter(admin.SimpleListFilter):
    title = _("state")
    parameter_name = "state"

    def lookups(self, request, model_admin):
        return (("active", _("active")), ("revoked", _("revoked")))

    def queryset(self, request, queryset):
        if self.value() == "active":
            return queryset.active()
        if self.value() == "revoked":
            return queryset.filter(revoked_at__isnull=False)
        return queryset


@admin.register(ApprovalRule)
class ApprovalRuleAdmin(ReadOnlyAdmin):
    list_display = (
        "tool",
        "scope",
        "session_id",
        "chat_id",
        "bot",
        "interaction_link",
        "created_at",
        "revoked_at",
    )
    list_filter = (RuleStateFilter, "scope", "bot")
    search_fields = ("tool", "session_id", "chat_id")
    list_select_related = ("bot", "interaction")
    actions = ["revoke"]
    readonly_fields = (
        "bot",
        "tool",
        "scope",
        "session_id",
        "chat_id",
        "interaction",
        "granted_by",
        "created_at",
        "revoked_at",
    )

    @admin.display(description=_("granted by"))
    def interaction_link(self, obj: ApprovalRule) -> str:
        return obj.interaction.public_id if obj.interaction_id else "—"

    @admin.action(description=_("Revoke the selected rules (the backend will ask again)"))
    def revoke(self, request, queryset):
        revoked = sum(1 for rule in queryset if approvals.revoke_rule(rule))
        self.message_user(
            request,
            ngettext("%(n)d rule revoked.", "%(n)d rules revoked.", revoked) % {"n": revoked},
            messages.SUCCESS,
        )


# Desktop tokens and panel connections (question panels, issue 7).
from interactions import panel_admin  # noqa: E402,F401
