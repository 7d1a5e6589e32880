"""Admin of the interactions app.

Interactions are read-only here (filter by status, kind, bot); "always" approval
rules can be listed and revoked — the action calls `interactions.approvals.service.revoke_rule`.
Nothing secret is shown: interactions and rules hold ids, the question and the resolution.
Progress sessions and asks are read-only lists with filters; the text people typed
as answers is not shown (only who answered, how and when). Desktop tokens and panel
connections are registered by `interactions.panels.admin` (imported here for Django's admin
autodiscovery).
"""

from __future__ import annotations

import json

from django.contrib import admin, messages
from django.utils.html import format_html
from django.utils.translation import gettext_lazy as _
from django.utils.translation import ngettext

from interactions.approvals import service as approvals
from interactions.asks.service import cancel_reason
from interactions.models import ApprovalRule, Ask, Interaction, ProgressSession
from interactions.panels import admin as panel_admin  # noqa: F401 - registers its admins
from plumbing.admin import ReadOnlyAdmin, two_way_filter


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
        return _pre(_without_answers(obj)) if obj.resolution else "—"


def _without_answers(obj: Interaction):
    """An ask's resolution without the answers people typed (admins see who, how, when)."""
    resolution = dict(obj.resolution or {})
    if obj.kind == Interaction.Kind.ASK and resolution.get("value") is not None:
        resolution["value"] = str(_("(answers not shown)"))
    return resolution


def _pre(value):
    return format_html("<pre>{}</pre>", json.dumps(value, ensure_ascii=False, indent=2))


RuleStateFilter = two_way_filter(
    _("state"),
    "state",
    ("active", _("active"), lambda qs: qs.active()),
    ("revoked", _("revoked"), lambda qs: qs.filter(revoked_at__isnull=False)),
)


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

    def has_revoke_permission(self, request):
        """Revoking is a change: staff who may only view rules do not get the action (the
        page itself stays read-only for everyone)."""
        return request.user.has_perm("interactions.change_approvalrule")

    @admin.action(
        description=_("Revoke the selected rules (the backend will ask again)"),
        permissions=["revoke"],
    )
    def revoke(self, request, queryset):
        revoked = sum(1 for rule in queryset if approvals.revoke_rule(rule))
        self.message_user(
            request,
            ngettext("%(n)d rule revoked.", "%(n)d rules revoked.", revoked) % {"n": revoked},
            messages.SUCCESS,
        )


AskStateFilter = two_way_filter(
    _("shown on"),
    "surface",
    ("card", _("progress card"), lambda qs: qs.filter(card__isnull=False)),
    ("panel_only", _("panel only"), lambda qs: qs.filter(card__isnull=True)),
)


@admin.register(Ask)
class AskAdmin(ReadOnlyAdmin):
    """ask_user_questions requests: who was asked what, where, and how it ended."""

    list_display = (
        "public_id",
        "status",
        "session_id",
        "bot",
        "question_count",
        "surface",
        "via",
        "reason",
        "created_at",
        "expires_at",
    )
    list_filter = ("status", AskStateFilter, "bot")
    search_fields = ("public_id", "session_id", "chat_id", "request_id")
    date_hierarchy = "created_at"
    list_select_related = ("bot", "card")
    fields = (
        "public_id",
        "bot",
        "status",
        "session_id",
        "chat_id",
        "request_id",
        "form_index",
        "questions_pretty",
        "created_at",
        "expires_at",
        "resolved_at",
        "resolution_pretty",
        "open_message_id",
    )
    readonly_fields = fields

    @admin.display(description=_("questions"))
    def question_count(self, obj: Ask) -> int:
        return len(obj.questions or [])

    @admin.display(description=_("shown on"))
    def surface(self, obj: Ask) -> str:
        return str(_("progress card")) if obj.card_id else str(_("panel only"))

    @admin.display(description=_("via"))
    def via(self, obj: Ask) -> str:
        return (obj.resolution or {}).get("via") or "—"

    @admin.display(description=_("reason"))
    def reason(self, obj: Ask) -> str:
        return "—" if obj.status == Interaction.Status.PENDING else cancel_reason(obj)

    @admin.display(description=_("questions"))
    def questions_pretty(self, obj: Ask):
        return _pre(obj.questions)

    @admin.display(description=_("resolution"))
    def resolution_pretty(self, obj: Ask):
        return _pre(_without_answers(obj)) if obj.resolution else "—"


CancelRequestedFilter = two_way_filter(
    _("cancel requested"),
    "cancel",
    ("yes", _("yes"), lambda qs: qs.filter(cancel_requested_at__isnull=False)),
    ("no", _("no"), lambda qs: qs.filter(cancel_requested_at__isnull=True)),
)


@admin.register(ProgressSession)
class ProgressSessionAdmin(ReadOnlyAdmin):
    """Progress cards: the state the agent reported, the card, pending questions."""

    list_display = (
        "session_id",
        "status",
        "title",
        "bot",
        "receive_id_type",
        "open_asks",
        "cancel_requested_at",
        "updated_at",
    )
    list_filter = ("status", CancelRequestedFilter, "receive_id_type", "bot")
    search_fields = ("session_id", "title", "receive_id")
    date_hierarchy = "updated_at"
    list_select_related = ("bot", "card")
    fields = (
        "session_id",
        "bot",
        "status",
        "title",
        "summary",
        "tool_lines_pretty",
        "receive_id_type",
        "receive_id",
        "details_url",
        "card",
        "state_version",
        "open_asks",
        "cancel_requested_at",
        "created_at",
        "updated_at",
    )
    readonly_fields = fields

    @admin.display(description=_("open questions"))
    def open_asks(self, obj: ProgressSession) -> str:
        ids = list(
            Ask.objects.of_session(obj.bot_id, obj.session_id)
            .pending()
            .values_list("public_id", flat=True)
        )
        return ", ".join(ids) or "—"

    @admin.display(description=_("tool lines"))
    def tool_lines_pretty(self, obj: ProgressSession):
        return _pre(obj.tool_lines)


# MCP tokens of the /mcp tool server (read-only; revoke action).
from interactions.channels.slack import admin as slack_admin  # noqa: E402,F401
from interactions.channels.telegram import admin as telegram_admin  # noqa: E402,F401
from interactions.mcp import admin as mcp_admin  # noqa: E402,F401
