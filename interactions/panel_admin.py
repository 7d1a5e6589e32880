"""Admin of question panels: desktop tokens (issue, list, search, filter, revoke) and live
panel connections (read-only). Imported by `interactions.admin`.

Tokens are issued and revoked only through `botadmin.services.issue_desktop_token` /
`revoke_desktop_token` (audited); the raw token is shown once, on the page after "Save".
"""

from __future__ import annotations

from django import forms
from django.contrib import admin, messages
from django.db.models import Count, Q
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils import timezone
from django.utils.translation import gettext, ngettext
from django.utils.translation import gettext_lazy as _

from botadmin import services
from botadmin.models import DesktopToken
from interactions import panels
from interactions.models import PanelPresence


class DesktopTokenIssueForm(forms.ModelForm):
    """Issuing a token: the bot, the person's open_id, a label; the token is generated."""

    class Meta:
        model = DesktopToken
        fields = ["bot", "open_id", "label"]
        help_texts = {
            "open_id": _("The Feishu user (ou_…) whose questions the panel shows."),
            "label": _("Where it is used, e.g. “Li Lei's laptop”."),
        }

    def clean_open_id(self):
        value = (self.cleaned_data.get("open_id") or "").strip()
        if not value:
            raise forms.ValidationError(_("This field is required."))
        return value


class TokenStatusFilter(admin.SimpleListFilter):
    title = _("status")
    parameter_name = "status"

    def lookups(self, request, model_admin):
        return [("active", _("active")), ("revoked", _("revoked"))]

    def queryset(self, request, queryset):
        if self.value() == "active":
            return queryset.filter(revoked_at__isnull=True)
        if self.value() == "revoked":
            return queryset.filter(revoked_at__isnull=False)
        return queryset


@admin.register(DesktopToken)
class DesktopTokenAdmin(admin.ModelAdmin):
    list_display = [
        "prefix",
        "bot",
        "open_id",
        "label",
        "status",
        "connected",
        "created_at",
        "last_used_at",
        "created_by",
    ]
    list_filter = [TokenStatusFilter, "bot", "created_at"]
    search_fields = ["label", "lookup", "open_id", "bot__name", "bot__app_id"]
    list_select_related = ["bot", "created_by"]
    autocomplete_fields = ["bot"]
    actions = ["revoke_selected"]
    change_form_template = "admin/botadmin/desktoptoken/change_form.html"

    def get_form(self, request, obj=None, **kwargs):
        if obj is None:
            kwargs["form"] = DesktopTokenIssueForm
        return super().get_form(request, obj, **kwargs)

    def get_fields(self, request, obj=None):
        if obj is None:
            return ["bot", "open_id", "label"]
        return [
            "prefix",
            "bot",
            "open_id",
            "label",
            "status",
            "connected",
            "created_at",
            "created_by",
            "last_used_at",
            "revoked_at",
        ]

    def get_readonly_fields(self, request, obj=None):
        return [] if obj is None else self.get_fields(request, obj)

    def has_delete_permission(self, request, obj=None):
        return False  # revoke instead: the row stays for the audit trail

    @admin.display(description=_("token"), ordering="lookup")
    def prefix(self, obj):
        return services.desktop_token_prefix(obj) if obj.lookup else "—"

    @admin.display(description=_("status"), ordering="revoked_at")
    def status(self, obj):
        return gettext("active") if obj.revoked_at is None else gettext("revoked")

    def get_queryset(self, request):
        since = timezone.now() - panels.presence_ttl()
        return (
            super()
            .get_queryset(request)
            .annotate(live_panels=Count("presences", filter=Q(presences__last_seen_at__gte=since)))
        )

    @admin.display(description=_("live panels"), ordering="live_panels")
    def connected(self, obj):
        return obj.live_panels

    def save_model(self, request, obj, form, change):
        if change:
            return  # every field is read-only after issue; revoking is its own action
        raw, token = services.issue_desktop_token(request.user, obj.bot, obj.open_id, obj.label)
        for name in ("pk", "lookup", "token_hash", "created_at", "created_by_id", "open_id"):
            setattr(obj, name, getattr(token, name))
        obj._state.adding = False
        request._cardloop_issued_token = (raw, token)

    def response_add(self, request, obj, post_url_continue=None):
        issued = getattr(request, "_cardloop_issued_token", None)
        if not issued:
            return super().response_add(request, obj, post_url_continue)
        raw, token = issued
        context = {
            **self.admin_site.each_context(request),
            "opts": self.model._meta,
            "title": gettext("Desktop token issued"),
            "raw": raw,
            "token": token,
            "prefix": services.desktop_token_prefix(token),
            "panel_url": request.build_absolute_uri(reverse("panel")),
            "changelist_url": reverse("admin:botadmin_desktoptoken_changelist"),
        }
        response = TemplateResponse(request, "admin/botadmin/desktoptoken/issued.html", context)
        response["Cache-Control"] = "no-store"
        return response

    def response_change(self, request, obj):
        if "_revoke" in request.POST:
            services.revoke_desktop_token(request.user, obj)
            self.message_user(
                request,
                gettext("Token %(token)s revoked; it no longer connects.")
                % {"token": services.desktop_token_prefix(obj)},
                messages.SUCCESS,
            )
            return super().response_post_save_change(request, obj)
        return super().response_change(request, obj)

    @admin.action(description=_("Revoke selected tokens"))
    def revoke_selected(self, request, queryset):
        count = 0
        for token in queryset.filter(revoked_at__isnull=True):
            services.revoke_desktop_token(request.user, token)
            count += 1
        self.message_user(
            request,
            ngettext("%(n)d token revoked.", "%(n)d tokens revoked.", count) % {"n": count},
            messages.SUCCESS,
        )


class LiveFilter(admin.SimpleListFilter):
    title = _("state")
    parameter_name = "state"

    def lookups(self, request, model_admin):
        return [("live", _("live")), ("expired", _("expired (process gone)"))]

    def queryset(self, request, queryset):
        if self.value() == "live":
            return queryset.live()
        if self.value() == "expired":
            return queryset.expired()
        return queryset


@admin.register(PanelPresence)
class PanelPresenceAdmin(admin.ModelAdmin):
    """Which users have a question panel open, on which process (read-only)."""

    list_display = ["id", "bot", "open_id", "via", "server", "connected_at", "last_seen_at", "live"]
    list_filter = [LiveFilter, "via", "bot", "server"]
    search_fields = ["open_id", "server"]
    list_select_related = ["bot"]
    readonly_fields = [f.name for f in PanelPresence._meta.fields]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False

    @admin.display(description=_("live"), boolean=True)
    def live(self, obj):
        return obj.last_seen_at >= timezone.now() - panels.presence_ttl()
