"""Admin of MCP tokens: list, search, filter and revoke (imported by `interactions.admin`).

Tokens are issued only by the bot backend (`POST /api/v1/sessions/<id>/mcp-tokens`); here they
are read-only and revoked through `interactions.mcp.tokens.revoke_token` (audited). Rows are
never deleted, so the audit trail keeps them.
"""

from __future__ import annotations

from django.contrib import admin, messages
from django.utils import timezone
from django.utils.translation import gettext, ngettext
from django.utils.translation import gettext_lazy as _

from interactions.mcp import tokens
from interactions.models import McpToken


class McpTokenStatusFilter(admin.SimpleListFilter):
    title = _("status")
    parameter_name = "state"

    def lookups(self, request, model_admin):
        return [("usable", _("usable")), ("expired", _("expired")), ("revoked", _("revoked"))]

    def queryset(self, request, queryset):
        now = timezone.now()
        if self.value() == "usable":
            return queryset.usable(now)
        if self.value() == "expired":
            return queryset.filter(revoked_at__isnull=True, expires_at__lte=now)
        if self.value() == "revoked":
            return queryset.filter(revoked_at__isnull=False)
        return queryset


@admin.register(McpToken)
class McpTokenAdmin(admin.ModelAdmin):
    list_display = [
        "prefix",
        "bot",
        "session_id",
        "subagent",
        "status",
        "expires_at",
        "created_at",
        "last_used_at",
    ]
    list_filter = [McpTokenStatusFilter, "subagent", "bot", "created_at"]
    list_select_related = ["bot"]
    search_fields = ["lookup", "session_id", "label", "bot__app_id", "bot__name"]
    fields = [
        "prefix",
        "bot",
        "session_id",
        "chat_id",
        "subagent",
        "project_key",
        "workspace",
        "label",
        "status",
        "expires_at",
        "created_at",
        "last_used_at",
        "revoked_at",
    ]
    readonly_fields = fields
    actions = ["revoke_selected"]

    def has_add_permission(self, request):
        return False  # issued by the bot backend through the API only

    def has_delete_permission(self, request, obj=None):
        return False  # revoke instead: the row stays for the audit trail

    @admin.display(description=_("token"), ordering="lookup")
    def prefix(self, obj):
        return tokens.token_prefix(obj)

    @admin.display(description=_("status"))
    def status(self, obj):
        if obj.revoked_at is not None:
            return gettext("revoked")
        return gettext("usable") if obj.is_usable else gettext("expired")

    @admin.action(description=_("Revoke selected MCP tokens"), permissions=["change"])
    def revoke_selected(self, request, queryset):
        count = 0
        for token in queryset.filter(revoked_at__isnull=True):
            tokens.revoke_token(request.user, token)
            count += 1
        self.message_user(
            request,
            ngettext("%(n)d MCP token revoked.", "%(n)d MCP tokens revoked.", count) % {"n": count},
            messages.SUCCESS,
        )
