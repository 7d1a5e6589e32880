"""Admin pages of analytics: review queues and reviewers, alert rules and the alert history.

Who may *read analytics* is edited on the team page (botadmin's `TeamMembershipInline`); API
tokens for scripts are issued under "Manager API tokens". Review items and alerts are read-only
here: reviewers work at `/review/`, alerts are written by the alert worker. No admin page shows a
rater's comment (only the review page does, to the item's team's reviewers, audited).
"""

from __future__ import annotations

import json
from datetime import timedelta

from django import forms
from django.contrib import admin, messages
from django.core.validators import RegexValidator
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from analytics.alerts import service as alerts
from analytics.models import Alert, AlertRule, Reviewer, ReviewItem, ReviewQueue
from analytics.review import service as review
from analytics.review.matching import filter_errors
from plumbing.admin import ReadOnlyAdmin

OUTCOME_KEY = RegexValidator(r"^[a-z0-9_-]{1,64}$")
MAX_OUTCOMES = 9


class ReviewQueueForm(forms.ModelForm):
    """Checks the filter with the analytics FilterSet's rules and the outcome list's shape."""

    class Meta:
        model = ReviewQueue
        fields = ["name", "description", "enabled", "teams", "filters", "outcomes", "claim_minutes"]

    def clean_filters(self):
        value = self.cleaned_data.get("filters") or {}
        errors = filter_errors(value)
        if errors:
            raise forms.ValidationError(
                "; ".join(f"{key}: {' '.join(msgs)}" for key, msgs in errors.items())
            )
        return value

    def clean_outcomes(self):
        value = self.cleaned_data.get("outcomes")
        if not isinstance(value, list) or not 1 <= len(value) <= MAX_OUTCOMES:
            raise forms.ValidationError(_("Give 1 to 9 outcomes."))
        keys = set()
        for outcome in value:
            if not isinstance(outcome, dict) or not isinstance(outcome.get("label"), str):
                raise forms.ValidationError(_('Each outcome is {"key": "…", "label": "…"}.'))
            key = outcome.get("key")
            try:
                OUTCOME_KEY(key if isinstance(key, str) else "")
            except forms.ValidationError:
                raise forms.ValidationError(
                    _("Outcome keys use lowercase letters, digits, _ and -: %(key)s")
                    % {"key": json.dumps(key)[:40]}
                ) from None
            if key in keys:
                raise forms.ValidationError(_("Outcome key %(key)s appears twice.") % {"key": key})
            keys.add(key)
        return value

    def clean_claim_minutes(self):
        value = self.cleaned_data.get("claim_minutes")
        if value is None or not 1 <= value <= 1440:
            raise forms.ValidationError(_("Use 1 to 1440 minutes."))
        return value


@admin.register(ReviewQueue)
class ReviewQueueAdmin(admin.ModelAdmin):
    form = ReviewQueueForm
    list_display = ["name", "enabled", "team_names", "filter_text", "open_items", "done_items"]
    filter_horizontal = ["teams"]
    actions = ["backfill"]

    def save_model(self, request, obj, form, change):
        """Saved with its teams in `save_related` (one audited service call)."""

    def save_related(self, request, form, formsets, change):
        review.save_queue(request.user, form.instance, form.cleaned_data["teams"])

    @admin.display(description=_("teams"))
    def team_names(self, obj):
        return ", ".join(obj.teams.values_list("name", flat=True))

    @admin.display(description=_("filter"))
    def filter_text(self, obj):
        return json.dumps(obj.filters or {}, ensure_ascii=False)

    @admin.display(description=_("not done"))
    def open_items(self, obj):
        return obj.items.exclude(status=ReviewItem.Status.DONE).count()

    @admin.display(description=_("done"))
    def done_items(self, obj):
        return obj.items.filter(status=ReviewItem.Status.DONE).count()

    @admin.action(description=_("Add existing matching ratings (backfill)"))
    def backfill(self, request, queryset):
        added = sum(review.fill_queue(q, since=None) for q in queryset)
        self.message_user(request, _("%(n)d item(s) added.") % {"n": added}, messages.SUCCESS)


@admin.register(Reviewer)
class ReviewerAdmin(admin.ModelAdmin):
    """The reviewer permission: a user reviews one team's items (and reads their comments)."""

    list_display = ["user", "team", "created_at"]
    list_filter = ["team"]
    autocomplete_fields = ["user"]
    search_fields = ["user__username", "team__name"]

    def has_change_permission(self, request, obj=None):
        return False  # add or remove a permission; never move it to another user or team

    def save_model(self, request, obj, form, change):
        review.add_reviewer(request.user, obj)

    def delete_model(self, request, obj):
        review.remove_reviewer(request.user, obj)

    def delete_queryset(self, request, queryset):
        for reviewer in queryset:
            review.remove_reviewer(request.user, reviewer)


@admin.register(ReviewItem)
class ReviewItemAdmin(ReadOnlyAdmin):
    """Progress at a glance; reviewers work at /review/. The comment is not shown here."""

    list_display = [
        "id",
        "queue",
        "team",
        "status",
        "assigned_to",
        "claimed_by",
        "outcome",
        "completed_at",
    ]
    list_filter = ["queue", "status", "team"]
    fields = [
        "queue",
        "team",
        "status",
        "queued_at",
        "claimed_by",
        "claim_expires_at",
        "assigned_to",
        "outcome",
        "external_link",
        "skips",
        "completed_by",
        "completed_at",
    ]


class AlertRuleForm(forms.ModelForm):
    class Meta:
        model = AlertRule
        fields = [
            "name",
            "enabled",
            "team",
            "bot",
            "kind",
            "threshold",
            "window_minutes",
            "min_ratings",
            "clear_margin",
            "notify_bot",
            "notify_chat",
            "muted_until",
        ]


@admin.register(AlertRule)
class AlertRuleAdmin(admin.ModelAdmin):
    form = AlertRuleForm
    list_display = [
        "name",
        "enabled",
        "kind",
        "threshold",
        "window_minutes",
        "team",
        "bot",
        "muted_until",
        "open_alert",
    ]
    list_filter = ["enabled", "kind", "team"]
    actions = ["mute_hour", "mute_day", "unmute"]
    fieldsets = [
        (None, {"fields": ["name", "enabled"]}),
        (
            _("What to watch"),
            {
                "fields": [
                    "team",
                    "bot",
                    "kind",
                    "threshold",
                    "window_minutes",
                    "min_ratings",
                    "clear_margin",
                ]
            },
        ),
        (
            _("Where to say it"),
            {
                "fields": ["notify_bot", "notify_chat", "muted_until"],
                "description": _(
                    "Alerts always go out as alert.fired / alert.resolved events; with a bot and a chat also as a Feishu card."
                ),
            },
        ),
    ]

    def save_model(self, request, obj, form, change):
        alerts.save_rule(request.user, obj)

    @admin.display(description=_("open alert"), boolean=True)
    def open_alert(self, obj):
        return obj.alerts.filter(resolved_at__isnull=True).exists()

    def _mute(self, request, queryset, until):
        for rule in queryset:
            alerts.mute_rule(rule, until=until, actor=request.user)
        self.message_user(request, _("%(n)d rule(s) changed.") % {"n": queryset.count()})

    @admin.action(description=_("Mute for 1 hour"))
    def mute_hour(self, request, queryset):
        self._mute(request, queryset, timezone.now() + timedelta(hours=1))

    @admin.action(description=_("Mute for 24 hours"))
    def mute_day(self, request, queryset):
        self._mute(request, queryset, timezone.now() + timedelta(hours=24))

    @admin.action(description=_("Unmute"))
    def unmute(self, request, queryset):
        self._mute(request, queryset, None)


@admin.register(Alert)
class AlertAdmin(ReadOnlyAdmin):
    """The alert history (also at /alerts/ for managers)."""

    list_display = [
        "rule",
        "fired_at",
        "value",
        "threshold",
        "resolved_at",
        "resolved_value",
        "notice",
    ]
    list_filter = ["rule", "notice"]
    date_hierarchy = "fired_at"
