"""Admin of question panels: desktop tokens (issue, list, search, filter, revoke) and live
panel connections (read-only). Imported by `interactions.admin`.

Tokens are issued and revoked only through `botadmin.services.issue_desktop_token` /
`revoke_desktop_token` (audited); the raw token is shown once, on the page after "Save".
"""

from __future__ import annotations

from django import forms
from django.contrib import admin
from django.db.models import Count, Q
from django.urls import reverse
from django.utils import timezone
from django.utils.html import conditional_escape
from django.utils.safestring import mark_safe
from django.utils.translation import gettext, ngettext_lazy
from django.utils.translation import gettext_lazy as _

from botadmin import services
from botadmin.admin import HashedTokenAdmin
from botadmin.models import DesktopToken
from interactions.models import PanelPresence
from interactions.panel_timing import presence_ttl
from interactions.panels import service as panels
from plumbing.admin import two_way_filter


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


@admin.register(DesktopToken)
class DesktopTokenAdmin(HashedTokenAdmin):
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
    search_fields = ["label", "lookup", "open_id", "bot__name", "bot__app_id"]
    change_form_template = "admin/botadmin/desktoptoken/change_form.html"
    issue_form = DesktopTokenIssueForm
    issue_fields = ["bot", "open_id", "label"]
    detail_fields = [
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
    issued_title = _("Desktop token issued")
    issued_texts = {
        "copy_now": _(
            "Copy the token now. It is shown only this once: Cardloop keeps only its hash and "
            "cannot show it again."
        ),
        "raw_label": _("Desktop token"),
        "token_link": _("Token %(prefix)s (revoke it there)"),
        "back": _("Back to desktop tokens"),
    }
    issued_copy_fields = (*HashedTokenAdmin.issued_copy_fields, "open_id")
    revoked_message = _("Token %(token)s revoked; it no longer connects.")
    revoked_count_message = ngettext_lazy("%(n)d token revoked.", "%(n)d tokens revoked.", "n")

    @admin.display(description=_("token"), ordering="lookup")
    def prefix(self, obj):
        return services.desktop_token_prefix(obj) if obj.lookup else "—"

    def token_prefix(self, token) -> str:
        return services.desktop_token_prefix(token)

    def issue(self, request, obj):
        return services.issue_desktop_token(request.user, obj.bot, obj.open_id, obj.label)

    def revoke(self, request, token) -> None:
        panels.revoke_token(request.user, token)

    def issued_usage(self, request, token) -> str:
        panel_url = conditional_escape(request.build_absolute_uri(reverse("panel")))
        return mark_safe(  # noqa: S308 - our own translated text; the one value is escaped
            gettext(
                "Give it to the person whose questions the panel shows. They sign in at "
                '<a href="%(panel_url)s">%(panel_url)s</a>, or a desktop client connects to '
                "<code>/ws/panel/</code> with <code>Authorization: Bearer &lt;token&gt;</code>."
            )
            % {"panel_url": panel_url}
        )

    def get_queryset(self, request):
        since = timezone.now() - presence_ttl()
        return (
            super()
            .get_queryset(request)
            .annotate(live_panels=Count("presences", filter=Q(presences__last_seen_at__gte=since)))
        )

    @admin.display(description=_("live panels"), ordering="live_panels")
    def connected(self, obj):
        return obj.live_panels


LiveFilter = two_way_filter(
    _("state"),
    "state",
    ("live", _("live"), lambda qs: qs.live()),
    ("expired", _("expired (process gone)"), lambda qs: qs.expired()),
)


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
        return obj.last_seen_at >= timezone.now() - presence_ttl()
