"""Admin for ops staff: teams, bots, chats, chat policies, bot API keys and the audit log.

Every save, delete and action goes through `botadmin.services` (one transaction, one audit
entry per change). Policy layers are edited with `admin_forms.PolicyLayerModelForm` (structured
fields + JSON); bot and chat-policy pages show the effective-policy preview. Webhook
destinations and desktop tokens are registered by the apps that use them.
"""

from __future__ import annotations

import json

from django.contrib import admin, messages
from django.db import transaction
from django.db.models import Count, Q
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import mark_safe
from django.utils.translation import gettext, ngettext_lazy
from django.utils.translation import gettext_lazy as _

from botadmin import services
from botadmin.admin_forms import (
    ApiKeyIssueForm,
    BotForm,
    ChatPolicyForm,
    ManagerTokenIssueForm,
    TeamForm,
    layer_summary,
    policy_fieldsets,
    reason_label,
    render_preview,
)
from botadmin.models import (
    AuditEntry,
    Bot,
    BotApiKey,
    Chat,
    ChatPolicy,
    FeishuIdentity,
    ManagerToken,
    Team,
    TeamChat,
    TeamMembership,
)
from botadmin.policy import resolve
from plumbing.admin import ReadOnlyAdmin, two_way_filter


class WriteOnlySecretsAdmin:
    """ModelAdmin mixin for a model with write-only secrets (`SECRET_FIELDS`, `has_secret`,
    `secret`) edited with a `WriteOnlySecretsFormMixin` form (bots, Slack apps, Telegram bots).

    - `save_model` saves the row, then each secret through `services.set_secret` /
      `services.clear_secret` (0600 files, audited "set"/"not set" only), in one transaction;
    - the `credentials` column says per secret only "set" / "not set";
    - `report_connection` turns a connection check's result (`ok`, `dry_run`, `error`;
      `error == "transport"`: the platform was not reached) into one admin message from
      `connection_texts` (keys `dry_run`, `ok`, `unreachable`, `refused`; %-formatted with
      the given values and `error`), so a "check connection" action is a loop of two calls.
    """

    connection_texts: dict[str, str] = {}

    @admin.display(description=_("credentials"))
    def credentials(self, obj):
        return ", ".join(
            f"{name}: " + (gettext("set") if obj.has_secret(name) else gettext("not set"))
            for name in obj.SECRET_FIELDS
        )

    def save_secrets(self, request, obj, form) -> None:
        """Store or clear each secret the form was given (blank and unticked: kept)."""
        for name in obj.SECRET_FIELDS:
            if form.cleaned_data.get(f"clear_{name}"):
                services.clear_secret(request.user, obj, name)
            elif form.cleaned_data.get(name):
                services.set_secret(request.user, obj, name, form.cleaned_data[name])

    def save_model(self, request, obj, form, change):
        with transaction.atomic():
            super().save_model(request, obj, form, change)
            self.save_secrets(request, obj, form)

    def report_connection(self, request, result, values: dict) -> None:
        """One message for `result` of a connection check (never the token)."""
        values = {**values, "error": result.error}
        if result.dry_run:
            text, level = self.connection_texts["dry_run"], messages.WARNING
        elif result.ok:
            text, level = self.connection_texts["ok"], messages.SUCCESS
        elif result.error == "transport":
            text, level = self.connection_texts["unreachable"], messages.ERROR
        else:
            text, level = self.connection_texts["refused"], messages.ERROR
        self.message_user(request, str(text) % values, level)


class ServiceSavedInlinesMixin:
    """Routes team↔chat bindings and team memberships edited inline through the services."""

    def save_formset(self, request, form, formset, change):
        model = formset.model
        if model not in (TeamChat, TeamMembership):
            return super().save_formset(request, form, formset, change)
        formset.save(commit=False)
        for obj in formset.deleted_objects:
            self._remove(request.user, obj)
        for obj, _fields in formset.changed_objects:
            self._remove(request.user, type(obj).objects.get(pk=obj.pk))
            self._add(request.user, obj)
        for obj in formset.new_objects:
            self._add(request.user, obj)

    @staticmethod
    def _add(actor, obj):
        if isinstance(obj, TeamChat):
            services.bind_team_chat(actor, obj.team, obj.chat)
        else:
            services.add_team_member(actor, obj.team, obj.user)

    @staticmethod
    def _remove(actor, obj):
        if isinstance(obj, TeamChat):
            services.unbind_team_chat(actor, obj.team, obj.chat)
        else:
            services.remove_team_member(actor, obj.team, obj.user)


class TeamChatInline(admin.TabularInline):
    model = TeamChat
    extra = 0
    verbose_name = _("bound chat")
    verbose_name_plural = _("bound chats (a chat bound to two teams gets no feedback)")
    autocomplete_fields = ["chat"]


class ChatTeamInline(admin.TabularInline):
    model = TeamChat
    extra = 0
    verbose_name = _("team binding")
    verbose_name_plural = _("teams (bind one; two or more teams turn feedback off here)")
    autocomplete_fields = ["team"]


class TeamMembershipInline(admin.TabularInline):
    model = TeamMembership
    extra = 0
    verbose_name = _("member")
    verbose_name_plural = _("members (managers who read this team's analytics)")
    autocomplete_fields = ["user"]


# ---------------------------------------------------------------------------------------------
# Team
# ---------------------------------------------------------------------------------------------


@admin.register(Team)
class TeamAdmin(ServiceSavedInlinesMixin, admin.ModelAdmin):
    form = TeamForm
    list_display = ["name", "chat_count", "member_count", "policy_summary", "updated_at"]
    search_fields = ["name", "description", "chats__chat_id", "chats__name"]
    list_filter = ["updated_at"]
    inlines = [TeamChatInline, TeamMembershipInline]
    fieldsets = [(None, {"fields": ["name", "description"]}), *policy_fieldsets()]

    def get_queryset(self, request):
        return (
            super()
            .get_queryset(request)
            .annotate(
                _chats=Count("chat_bindings", distinct=True),
                _members=Count("memberships", distinct=True),
            )
        )

    @admin.display(description=_("chats"), ordering="_chats")
    def chat_count(self, obj):
        return obj._chats

    @admin.display(description=_("members"), ordering="_members")
    def member_count(self, obj):
        return obj._members

    @admin.display(description=_("policy layer"))
    def policy_summary(self, obj):
        return layer_summary(obj.policy)

    def save_model(self, request, obj, form, change):
        services.save_team(request.user, obj)
        services.set_policy_layer(request.user, obj, form.policy_layer)

    def delete_model(self, request, obj):
        services.delete_team(request.user, obj)

    def delete_queryset(self, request, queryset):
        for obj in queryset:
            services.delete_team(request.user, obj)


# ---------------------------------------------------------------------------------------------
# Bot
# ---------------------------------------------------------------------------------------------


CredentialsFilter = two_way_filter(
    _("credentials"),
    "credentials",
    ("yes", _("app secret set"), lambda qs: qs.with_credentials()),
    ("no", _("no app secret (dry run)"), lambda qs: qs.filter(app_secret_ref="")),
)


@admin.register(Bot)
class BotAdmin(WriteOnlySecretsAdmin, admin.ModelAdmin):
    form = BotForm
    list_display = [
        "name",
        "app_id",
        "domain",
        "api_only",
        "credentials",
        "policy_summary",
        "default_feedback",
        "active_keys",
    ]
    list_filter = ["domain", "api_only", CredentialsFilter]
    search_fields = ["name", "app_id"]
    readonly_fields = ["effective_policy_preview", "api_keys_panel"]

    def get_fieldsets(self, request, obj=None):
        secrets = [
            ("app_secret", "clear_app_secret"),
            ("encrypt_key", "clear_encrypt_key"),
            ("verification_token", "clear_verification_token"),
        ]
        fieldsets = [
            (None, {"fields": ["name", "app_id", "domain", "api_only", "card_language"]}),
            (
                _("Credentials (write-only)"),
                {
                    "fields": secrets,
                    "description": _(
                        "Stored in files readable only by Cardloop, never shown again. Without "
                        "an app secret the bot runs in dry run (Feishu calls are logged, not made)."
                    ),
                },
            ),
        ]
        if obj is not None:
            fieldsets.append(
                (
                    _("Effective policy preview"),
                    {
                        "fields": ["effective_policy_preview"],
                        "description": _(
                            "What a chat of this bot gets when it has no team and no chat policy "
                            "(saved values; save to refresh)."
                        ),
                    },
                )
            )
            fieldsets.append((_("API keys"), {"fields": ["api_keys_panel"]}))
        return [*fieldsets, *policy_fieldsets()]

    def get_queryset(self, request):
        return (
            super()
            .get_queryset(request)
            .annotate(_active_keys=Count("api_keys", filter=Q(api_keys__revoked_at__isnull=True)))
        )

    @admin.display(description=_("credentials"))
    def credentials(self, obj):
        states = [
            (gettext("set") if obj.has_secret(name) else gettext("not set"))
            for name in Bot.SECRET_FIELDS
        ]
        return " / ".join(states)

    @admin.display(description=_("policy layer"))
    def policy_summary(self, obj):
        return layer_summary(obj.policy)

    @admin.display(description=_("feedback (no team, no chat policy)"))
    def default_feedback(self, obj):
        return reason_label(resolve(None, obj.policy, None, api_only=obj.api_only).reason)

    @admin.display(description=_("active keys"), ordering="_active_keys")
    def active_keys(self, obj):
        return obj._active_keys

    @admin.display(description=_("effective policy"))
    def effective_policy_preview(self, obj):
        if obj is None or obj.pk is None:
            return "—"
        return render_preview(services.effective_policy_for(obj, None))

    @admin.display(description=_("API keys"))
    def api_keys_panel(self, obj):
        if obj is None or obj.pk is None:
            return "—"
        keys = obj.api_keys.active()
        rows = format_html_join(
            "",
            '<li><a href="{}"><code>{}</code></a> {}</li>',
            (
                (
                    reverse("admin:botadmin_botapikey_change", args=[k.pk]),
                    services.key_prefix(k),
                    k.label,
                )
                for k in keys
            ),
        )
        add_url = reverse("admin:botadmin_botapikey_add") + f"?bot={obj.pk}"
        return format_html(
            '<ul>{}</ul><a class="addlink" href="{}">{}</a>',
            rows or format_html("<li>{}</li>", gettext("No active key.")),
            add_url,
            gettext("Issue a new API key"),
        )

    def save_model(self, request, obj, form, change):
        services.save_bot(request.user, obj)
        self.save_secrets(request, obj, form)
        services.set_policy_layer(request.user, obj, form.policy_layer)

    def delete_model(self, request, obj):
        services.delete_bot(request.user, obj)

    def delete_queryset(self, request, queryset):
        for obj in queryset:
            services.delete_bot(request.user, obj)


# ---------------------------------------------------------------------------------------------
# Chat
# ---------------------------------------------------------------------------------------------


class TeamCountFilter(admin.SimpleListFilter):
    title = _("team binding")
    parameter_name = "bound"

    def lookups(self, request, model_admin):
        return [
            ("none", _("no team")),
            ("one", _("one team")),
            ("many", _("several teams (ambiguous, feedback off)")),
        ]

    def queryset(self, request, queryset):
        value = self.value()
        if value is None:
            return queryset
        queryset = queryset.annotate(_n=Count("team_bindings", distinct=True))
        return {
            "none": queryset.filter(_n=0),
            "one": queryset.filter(_n=1),
            "many": queryset.filter(_n__gt=1),
        }.get(value, queryset)


@admin.register(Chat)
class ChatAdmin(ServiceSavedInlinesMixin, admin.ModelAdmin):
    list_display = ["chat_id", "name", "chat_type", "team_names", "chat_policy_count"]
    list_filter = ["chat_type", TeamCountFilter, "teams"]
    search_fields = ["chat_id", "name"]
    fields = ["chat_id", "name", "chat_type"]
    inlines = [ChatTeamInline]

    def get_queryset(self, request):
        return (
            super()
            .get_queryset(request)
            .prefetch_related("teams")
            .annotate(_policies=Count("chat_policies", distinct=True))
        )

    @admin.display(description=_("teams"))
    def team_names(self, obj):
        names = [t.name for t in obj.teams.all()]
        return ", ".join(names) or "—"

    @admin.display(description=_("chat policies"), ordering="_policies")
    def chat_policy_count(self, obj):
        return obj._policies

    def save_model(self, request, obj, form, change):
        services.save_chat(request.user, obj)

    def delete_model(self, request, obj):
        services.delete_chat(request.user, obj)

    def delete_queryset(self, request, queryset):
        for obj in queryset:
            services.delete_chat(request.user, obj)


# ---------------------------------------------------------------------------------------------
# Chat policy
# ---------------------------------------------------------------------------------------------


@admin.register(ChatPolicy)
class ChatPolicyAdmin(admin.ModelAdmin):
    form = ChatPolicyForm
    list_display = ["__str__", "bot", "chat", "policy_summary", "effective_feedback", "updated_at"]
    list_filter = ["bot", "chat__chat_type", "updated_at"]
    search_fields = ["bot__name", "bot__app_id", "chat__chat_id", "chat__name"]
    list_select_related = ["bot", "chat"]
    autocomplete_fields = ["bot", "chat"]

    def get_queryset(self, request):
        return super().get_queryset(request).prefetch_related("chat__teams")

    def get_readonly_fields(self, request, obj=None):
        if obj is None:
            return []
        return ["bot", "chat", "effective_policy_preview"]

    def get_fieldsets(self, request, obj=None):
        fieldsets = [
            (
                None,
                {
                    "fields": ["bot", "chat"],
                    "description": _(
                        "The most specific layer: applies to this bot in this chat only."
                    ),
                },
            )
        ]
        if obj is not None:
            fieldsets.append(
                (
                    _("Effective policy preview"),
                    {
                        "fields": ["effective_policy_preview"],
                        "description": _("Saved values; save to refresh."),
                    },
                )
            )
        return [*fieldsets, *policy_fieldsets()]

    @admin.display(description=_("policy layer"))
    def policy_summary(self, obj):
        return layer_summary(obj.policy)

    @admin.display(description=_("feedback"))
    def effective_feedback(self, obj):
        teams = list(obj.chat.teams.all())
        team = teams[0] if len(teams) == 1 else None
        resolution = resolve(
            team.policy if team else None,
            obj.bot.policy,
            obj.policy,
            api_only=obj.bot.api_only,
            ambiguous_team=len(teams) > 1,
        )
        return reason_label(resolution.reason)

    @admin.display(description=_("effective policy"))
    def effective_policy_preview(self, obj):
        if obj is None or obj.pk is None:
            return "—"
        return render_preview(services.effective_policy_for(obj.bot, obj.chat))

    def save_model(self, request, obj, form, change):
        saved = services.set_chat_policy(request.user, obj.bot, obj.chat, form.policy_layer)
        obj.pk = saved.pk
        obj.policy = saved.policy
        obj.created_at = saved.created_at
        obj.updated_at = saved.updated_at
        obj._state.adding = False

    def delete_model(self, request, obj):
        services.delete_chat_policy(request.user, obj)

    def delete_queryset(self, request, queryset):
        for obj in queryset:
            services.delete_chat_policy(request.user, obj)


# ---------------------------------------------------------------------------------------------
# Bot API keys
# ---------------------------------------------------------------------------------------------


#: Active / revoked, for every kind of `HashedToken`.
TokenStatusFilter = two_way_filter(
    _("status"),
    "status",
    ("active", _("active"), lambda qs: qs.filter(revoked_at__isnull=True)),
    ("revoked", _("revoked"), lambda qs: qs.filter(revoked_at__isnull=False)),
)


class HashedTokenAdmin(admin.ModelAdmin):
    """Admin of one kind of `HashedToken` (bot API keys here, desktop tokens in interactions).

    A token is issued and revoked only through its audited service function; the raw value is
    shown once, on an uncached page after "Save" (`issued_template`, one for every kind), and
    never again (only its hash is stored). Every field is read-only after issue, and rows are revoked, never deleted,
    so the audit trail keeps them.

    Subclasses set `issue_form`, `issue_fields`, `detail_fields`, `issued_title`,
    `issued_texts` (the issued page's wording for this kind, see below), `revoked_message`
    (`%(token)s`), `revoked_count_message` (`ngettext_lazy(…, "n")`) and implement
    `issue(request, obj) -> (raw, token)`, `revoke(request, token)`,
    `token_prefix(token) -> str` and `issued_usage(request, token) -> str` (safe HTML: how the
    token is used).
    """

    list_filter = [TokenStatusFilter, "bot", "created_at"]
    list_select_related = ["bot", "created_by"]
    autocomplete_fields = ["bot"]
    actions = ["revoke_selected"]
    issue_form = None
    issue_fields: list[str] = []
    detail_fields: list[str] = []
    issued_template = "admin/botadmin/issued_token.html"
    issued_title = ""
    #: The issued page's wording: `copy_now` (the warning that it is shown once), `raw_label`
    #: (the label of the raw value), `token_link` (the link to the token's page, with
    #: `%(prefix)s`) and `back` (the link back to the list); lazy translations.
    issued_texts: dict[str, str] = {}
    revoked_message = ""
    revoked_count_message = ""
    #: Fields the service fills in that the admin's unsaved `obj` must take over.
    issued_copy_fields = ("pk", "lookup", "token_hash", "created_at", "created_by_id")

    def issue(self, request, obj):
        raise NotImplementedError

    def revoke(self, request, token) -> None:
        raise NotImplementedError

    def token_prefix(self, token) -> str:
        raise NotImplementedError

    def issued_usage(self, request, token) -> str:
        raise NotImplementedError

    def get_form(self, request, obj=None, **kwargs):
        if obj is None:
            kwargs["form"] = self.issue_form
        return super().get_form(request, obj, **kwargs)

    def get_fields(self, request, obj=None):
        return list(self.issue_fields if obj is None else self.detail_fields)

    def get_readonly_fields(self, request, obj=None):
        return [] if obj is None else self.get_fields(request, obj)

    def has_delete_permission(self, request, obj=None):
        return False  # revoke instead: the row stays for the audit trail

    @admin.display(description=_("status"), ordering="revoked_at")
    def status(self, obj):
        return gettext("active") if obj.revoked_at is None else gettext("revoked")

    def save_model(self, request, obj, form, change):
        if change:
            return  # every field is read-only after issue; revoking is its own action
        raw, token = self.issue(request, obj)
        for name in self.issued_copy_fields:
            setattr(obj, name, getattr(token, name))
        obj._state.adding = False
        request._cardloop_issued = (raw, token)

    def response_add(self, request, obj, post_url_continue=None):
        issued = getattr(request, "_cardloop_issued", None)
        if not issued:
            return super().response_add(request, obj, post_url_continue)
        raw, token = issued
        context = {
            **self.admin_site.each_context(request),
            "opts": self.model._meta,
            "title": self.issued_title,
            "changelist_url": reverse(
                f"admin:{self.opts.app_label}_{self.opts.model_name}_changelist"
            ),
            "raw": raw,
            "token": token,
            "token_url": reverse(
                f"admin:{self.opts.app_label}_{self.opts.model_name}_change", args=[token.pk]
            ),
            "token_link": self.issued_texts["token_link"] % {"prefix": self.token_prefix(token)},
            "texts": self.issued_texts,
            "usage": self.issued_usage(request, token),
        }
        # The only page that ever shows a raw token: never cached by the browser.
        response = TemplateResponse(request, self.issued_template, context)
        response["Cache-Control"] = "no-store"
        return response

    def response_change(self, request, obj):
        if "_revoke" in request.POST:
            self.revoke(request, obj)
            self.message_user(
                request,
                self.revoked_message % {"token": self.token_prefix(obj)},
                messages.SUCCESS,
            )
            return super().response_post_save_change(request, obj)
        return super().response_change(request, obj)

    @admin.action(description=_("Revoke selected %(verbose_name_plural)s"), permissions=["change"])
    def revoke_selected(self, request, queryset):
        count = 0
        for token in queryset.filter(revoked_at__isnull=True):
            self.revoke(request, token)
            count += 1
        self.message_user(request, self.revoked_count_message % {"n": count}, messages.SUCCESS)


@admin.register(BotApiKey)
class BotApiKeyAdmin(HashedTokenAdmin):
    list_display = ["prefix", "bot", "label", "status", "created_at", "last_used_at", "created_by"]
    search_fields = ["label", "lookup", "bot__name", "bot__app_id"]
    change_form_template = "admin/botadmin/botapikey/change_form.html"
    issue_form = ApiKeyIssueForm
    issue_fields = ["bot", "label"]
    detail_fields = ["prefix", "bot", "label", "status", "created_at", "created_by", "last_used_at"]
    issued_title = _("API key issued")
    issued_texts = {
        "copy_now": _(
            "Copy the key now. It is shown only this once: Cardloop keeps only its hash and "
            "cannot show it again."
        ),
        "raw_label": _("API key"),
        "token_link": _("Key %(prefix)s (revoke it there)"),
        "back": _("Back to API keys"),
    }
    revoked_message = _("Key %(token)s revoked; it no longer authenticates.")
    revoked_count_message = ngettext_lazy("%(n)d key revoked.", "%(n)d keys revoked.", "n")

    @admin.display(description=_("key"), ordering="lookup")
    def prefix(self, obj):
        return services.key_prefix(obj) if obj.lookup else "—"

    def token_prefix(self, token) -> str:
        return services.key_prefix(token)

    def issue(self, request, obj):
        return services.issue_api_key(request.user, obj.bot, obj.label)

    def revoke(self, request, token) -> None:
        services.revoke_api_key(request.user, token)

    def issued_usage(self, request, token) -> str:
        return mark_safe(  # noqa: S308 - our own translated text, no values in it
            gettext("The bot backend sends it as <code>Authorization: Bearer &lt;key&gt;</code>.")
        )


# ---------------------------------------------------------------------------------------------
# Manager API tokens (they replace DRF's authtoken admin, which showed full keys)
# ---------------------------------------------------------------------------------------------

try:  # DRF's authtoken admin lists and shows whole keys; its rows were migrated and deleted
    from rest_framework.authtoken.models import TokenProxy

    admin.site.unregister(TokenProxy)
except admin.sites.NotRegistered:  # pragma: no cover - authtoken's admin not loaded
    pass


@admin.register(ManagerToken)
class ManagerTokenAdmin(HashedTokenAdmin):
    list_display = ["prefix", "user", "label", "status", "created_at", "last_used_at", "created_by"]
    list_filter = [TokenStatusFilter, "created_at"]
    list_select_related = ["user", "created_by"]
    search_fields = ["label", "lookup", "user__username"]
    autocomplete_fields = ["user"]
    change_form_template = "admin/botadmin/managertoken/change_form.html"
    issue_form = ManagerTokenIssueForm
    issue_fields = ["user", "label"]
    detail_fields = [
        "prefix",
        "user",
        "label",
        "status",
        "created_at",
        "created_by",
        "last_used_at",
        "revoked_at",
    ]
    issued_title = _("Manager API token issued")
    issued_texts = {
        "copy_now": _(
            "Copy the token now. It is shown only this once: Cardloop keeps only its hash and "
            "cannot show it again."
        ),
        "raw_label": _("API token"),
        "token_link": _("Token %(prefix)s (revoke it there)"),
        "back": _("Back to manager API tokens"),
    }
    revoked_message = _("Token %(token)s revoked; it no longer authenticates.")
    revoked_count_message = ngettext_lazy("%(n)d token revoked.", "%(n)d tokens revoked.", "n")

    @admin.display(description=_("token"), ordering="lookup")
    def prefix(self, obj):
        return services.manager_token_prefix(obj) if obj.lookup else "—"

    def token_prefix(self, token) -> str:
        return services.manager_token_prefix(token)

    def issue(self, request, obj):
        return services.issue_manager_token(request.user, obj.user, obj.label)

    def revoke(self, request, token) -> None:
        services.revoke_manager_token(request.user, token)

    def issued_usage(self, request, token) -> str:
        return mark_safe(  # noqa: S308 - our own translated text, no values in it
            gettext(
                "Scripts send it as <code>Authorization: Token &lt;token&gt;</code> to "
                "<code>/api/v1/analytics/…</code> and <code>/api/v1/review/…</code>; it "
                "reads what its user may read."
            )
        )


# ---------------------------------------------------------------------------------------------
# Feishu accounts (read-only: written by sign-in with Feishu)
# ---------------------------------------------------------------------------------------------


@admin.register(FeishuIdentity)
class FeishuIdentityAdmin(ReadOnlyAdmin):
    """Which Feishu account signs in as which user. Teams and the reviewer permission are
    granted on the user's teams and under *Reviewers*, never here."""

    list_display = ["user", "name", "bot", "tenant_key", "created_at", "last_login_at"]
    list_filter = ["bot", "tenant_key"]
    list_select_related = ["user", "bot"]
    search_fields = ["user__username", "name", "open_id", "union_id"]
    fields = [
        "user",
        "name",
        "bot",
        "tenant_key",
        "open_id",
        "union_id",
        "created_at",
        "last_login_at",
    ]


# ---------------------------------------------------------------------------------------------
# Audit log (read-only)
# ---------------------------------------------------------------------------------------------


@admin.register(AuditEntry)
class AuditEntryAdmin(admin.ModelAdmin):
    list_display = ["created_at", "actor_repr", "action", "target_type", "target_repr"]
    list_filter = ["action", "target_type", "created_at"]
    search_fields = ["actor_repr", "action", "target_repr", "target_id"]
    date_hierarchy = "created_at"
    fields = [
        "created_at",
        "actor_repr",
        "action",
        "target_type",
        "target_id",
        "target_repr",
        "before_json",
        "after_json",
    ]
    readonly_fields = fields

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False

    @admin.display(description=_("before"))
    def before_json(self, obj):
        return format_html("<pre>{}</pre>", json.dumps(obj.before, ensure_ascii=False, indent=2))

    @admin.display(description=_("after"))
    def after_json(self, obj):
        return format_html("<pre>{}</pre>", json.dumps(obj.after, ensure_ascii=False, indent=2))
