"""Admin of webhook destinations, the outbox, attempt logs, events, worker terminals, and
(read-only) deliveries with their feedback revisions.

Views here only parse, authorize, call a service function and render: destination changes go
through `feedback.destinations` (validation, write-only secrets, rotation, audit), re-queueing
and test events through `feedback.outbox`. Secrets are never rendered back: a generated secret
is shown once, on the page that answers the save, and stored only in the secret store.
Comment text never appears: outbox bodies (which may carry it for opted-in destinations) are
not displayed.
"""

from __future__ import annotations

import json
from datetime import timedelta
from decimal import Decimal

from django import forms
from django.contrib import admin, messages
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from feedback import destinations, outbox, webhooks
from feedback.envelopes import FEED_TYPES
from feedback.models import (
    Delivery,
    Event,
    OutboxItem,
    Revision,
    WebhookAttempt,
    WebhookDestination,
    WorkerTerminal,
)
from plumbing.admin import ReadOnlyAdmin
from plumbing.workqueue import WorkStatus

# ---------------------------------------------------------------------------------------------
# Destinations
# ---------------------------------------------------------------------------------------------

# Choices of the write-only secret field (destinations.SecretChange.action).
KEEP = "keep"
GENERATE = "generate"
PASTE = "set"


class WebhookDestinationForm(forms.ModelForm):
    """Destination settings. The timeout is edited in seconds (stored as `timeout_ms`); the
    secret is write-only: keep it, generate a new one (shown once) or paste one; a replaced
    secret keeps signing for the grace period."""

    url = forms.CharField(
        label=_("URL"),
        max_length=2000,
        help_text=_(
            "https only; no user name, no #fragment, no private or loopback address, a fully "
            "qualified host name (not a single-label name such as receiver). Checked again, "
            "after DNS, before every attempt."
        ),
    )
    event_types = forms.MultipleChoiceField(
        label=_("event types"),
        choices=[(t, t) for t in FEED_TYPES],
        widget=forms.CheckboxSelectMultiple,
    )
    timeout_s = forms.DecimalField(
        label=_("timeout (seconds)"),
        min_value=Decimal("0.1"),
        max_value=Decimal("30"),
        decimal_places=3,
        initial=Decimal("10"),
        help_text=_("0.1–30 seconds per attempt (DNS, connection and answer together)."),
    )
    secret_action = forms.ChoiceField(label=_("signing secret"), widget=forms.RadioSelect)
    secret_value = forms.CharField(
        label=_("pasted secret"),
        required=False,
        strip=True,
        widget=forms.PasswordInput(render_value=False, attrs={"autocomplete": "off"}),
        help_text=_("A Standard Webhooks secret: whsec_ followed by base64 of 24–64 bytes."),
    )
    grace_hours = forms.IntegerField(
        label=_("grace period (hours)"),
        min_value=0,
        max_value=168,
        initial=24,
        required=False,
        help_text=_(
            "When the secret is replaced, the old one keeps signing (a second signature) for "
            "this long, so the receiver can switch without losing a request. 0 = replace now."
        ),
    )

    class Meta:
        model = WebhookDestination
        fields = ["name", "url", "enabled", "event_types", "include_comment", "teams", "bots"]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.instance.pk:
            self.fields["secret_action"].choices = [
                (KEEP, _("keep the current secret")),
                (GENERATE, _("generate a new secret (rotate)")),
                (PASTE, _("paste a new secret (rotate)")),
            ]
            self.fields["secret_action"].initial = KEEP
            self.fields["timeout_s"].initial = Decimal(self.instance.timeout_ms) / 1000
            self.initial.setdefault("event_types", list(self.instance.event_types or []))
        else:
            self.fields["secret_action"].choices = [
                (GENERATE, _("generate a secret (shown once)")),
                (PASTE, _("paste a secret")),
            ]
            self.fields["secret_action"].initial = GENERATE
            self.initial.setdefault("event_types", list(FEED_TYPES[:2]))

    def clean_url(self):
        # Checked by destinations.validate_destination in _post_clean: the same rule and
        # message as save_destination (webhooks.check_registration_url).
        return self.cleaned_data["url"].strip()

    def _get_validation_exclusions(self):
        # The model field's URLValidator is not the registration rule (it refuses single-label
        # hosts on its own terms while save_destination decides otherwise): skip it.
        exclude = super()._get_validation_exclusions()
        exclude.add("url")
        return exclude

    def clean(self):
        cleaned = super().clean()
        if cleaned.get("secret_action") == PASTE:
            value = cleaned.get("secret_value") or ""
            if not value:
                self.add_error("secret_value", gettext("Paste the secret."))
            else:
                try:
                    webhooks.normalize_secret(value)
                except ValueError as exc:
                    self.add_error("secret_value", str(exc))
        return cleaned

    def _post_clean(self):
        super()._post_clean()
        if "timeout_s" in self.cleaned_data:
            self.instance.timeout_ms = int(self.cleaned_data["timeout_s"] * 1000)
        try:
            destinations.validate_destination(self.instance)
        except destinations.InvalidDestination as exc:
            field = {"timeout_ms": "timeout_s"}.get(exc.field, exc.field)
            if field in self.fields and field not in self.errors:
                self.add_error(field, exc.message)

    def secret_change(self) -> destinations.SecretChange:
        """The SecretChange the form asks for."""
        data = self.cleaned_data
        return destinations.SecretChange(
            action=data["secret_action"],
            value=data.get("secret_value") or "",
            grace=timedelta(hours=data.get("grace_hours") or 0),
        )


@admin.register(WebhookDestination)
class WebhookDestinationAdmin(admin.ModelAdmin):
    form = WebhookDestinationForm
    list_display = (
        "name",
        "url",
        "enabled",
        "event_types_display",
        "include_comment",
        "timeout_display",
        "secret_display",
        "pending_display",
        "attempt_log_link",
    )
    list_filter = ("enabled", "include_comment")
    search_fields = ("name", "url")
    filter_horizontal = ("teams", "bots")
    readonly_fields = ("secret_display", "disabled_reason", "attempt_log_link", "outbox_link")
    actions = ["send_test_event"]

    def get_fieldsets(self, request, obj=None):
        main = ["name", "url", "enabled"]
        if obj is not None:
            main.append("disabled_reason")
        fieldsets = [
            (None, {"fields": main}),
            (_("What is sent"), {"fields": ["event_types", "include_comment", "timeout_s"]}),
            (
                _("Signing secret"),
                {
                    "fields": (["secret_display"] if obj else [])
                    + ["secret_action", "secret_value"]
                    + (["grace_hours"] if obj else [])
                },
            ),
            (
                _("Assignment"),
                {
                    "fields": ["teams", "bots"],
                    "description": _(
                        "No teams and no bots: events of every bot. Otherwise events of the "
                        "chosen bots and of deliveries in the chosen teams' chats. The set is "
                        "frozen on each delivery when it is sent."
                    ),
                },
            ),
        ]
        if obj is not None:
            fieldsets.append((_("Activity"), {"fields": ["attempt_log_link", "outbox_link"]}))
        return fieldsets

    @admin.display(description=_("event types"))
    def event_types_display(self, obj):
        return ", ".join(obj.event_types or [])

    @admin.display(description=_("timeout"))
    def timeout_display(self, obj):
        return f"{obj.timeout_ms / 1000:g} s"

    @admin.display(description=_("secret"))
    def secret_display(self, obj):
        if not obj.secret_ref:
            return gettext("not set")
        expires = obj.previous_secret_expires_at
        if obj.previous_secret_ref and expires and expires > timezone.now():
            return gettext("set; the previous secret also signs until %(time)s") % {
                "time": timezone.localtime(expires).strftime("%Y-%m-%d %H:%M %Z")
            }
        return gettext("set")

    @admin.display(description=_("pending"))
    def pending_display(self, obj):
        return obj.outbox_items.filter(status__in=[WorkStatus.PENDING, WorkStatus.INFLIGHT]).count()

    @admin.display(description=_("attempt log"))
    def attempt_log_link(self, obj):
        if not obj.pk:
            return "—"
        url = (
            reverse("admin:feedback_webhookattempt_changelist")
            + f"?destination__id__exact={obj.pk}"
        )
        return format_html('<a href="{}">{}</a>', url, gettext("attempts"))

    @admin.display(description=_("outbox"))
    def outbox_link(self, obj):
        if not obj.pk:
            return "—"
        url = reverse("admin:feedback_outboxitem_changelist") + f"?destination__id__exact={obj.pk}"
        return format_html('<a href="{}">{}</a>', url, gettext("outbox rows"))

    def save_model(self, request, obj, form, change):
        request._cardloop_generated_secret = destinations.save_destination(
            obj,
            actor=request.user,
            teams=list(form.cleaned_data.get("teams") or []),
            bots=list(form.cleaned_data.get("bots") or []),
            secret=form.secret_change(),
        )

    def save_related(self, request, form, formsets, change):
        # Teams and bots were saved by destinations.save_destination (with the audit entry).
        for formset in formsets:
            self.save_formset(request, form, formset, change=change)

    def _secret_once(self, request, obj, default_response):
        secret = getattr(request, "_cardloop_generated_secret", None)
        if not secret:
            return default_response
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": gettext("Copy the signing secret now"),
            "destination": obj,
            "secret": secret,
            "continue_url": reverse("admin:feedback_webhookdestination_change", args=[obj.pk]),
        }
        response = TemplateResponse(request, "admin/feedback/secret_once.html", context)
        response["Cache-Control"] = "no-store"
        return response

    def response_add(self, request, obj, post_url_continue=None):
        return self._secret_once(
            request, obj, super().response_add(request, obj, post_url_continue)
        )

    def response_change(self, request, obj):
        return self._secret_once(request, obj, super().response_change(request, obj))

    def delete_model(self, request, obj):
        destinations.delete_destination(obj, actor=request.user)

    def delete_queryset(self, request, queryset):
        for obj in queryset:
            destinations.delete_destination(obj, actor=request.user)

    @admin.action(description=_("Send a test event now"), permissions=["change"])
    def send_test_event(self, request, queryset):
        for destination in queryset[:10]:
            item, result = outbox.send_test_event(destination, actor=request.user)
            if result.outcome is webhooks.Outcome.DELIVERED:
                self.message_user(
                    request,
                    gettext("%(name)s: test event %(event)s delivered (HTTP %(code)s, %(ms)d ms).")
                    % {
                        "name": destination.name,
                        "event": item.event.event_id,
                        "code": result.status_code,
                        "ms": result.duration_ms,
                    },
                    messages.SUCCESS,
                )
            else:
                self.message_user(
                    request,
                    gettext("%(name)s: test event %(event)s failed: %(error)s")
                    % {
                        "name": destination.name,
                        "event": item.event.event_id,
                        "error": (result.refusal.message() if result.refusal else result.error)
                        or result.outcome,
                    },
                    messages.ERROR,
                )


# ---------------------------------------------------------------------------------------------
# Read-only views: outbox, attempts, events, terminals
# ---------------------------------------------------------------------------------------------


@admin.register(OutboxItem)
class OutboxItemAdmin(ReadOnlyAdmin):
    list_display = (
        "id",
        "event_id_display",
        "event_type",
        "destination",
        "status",
        "attempts",
        "next_attempt_at",
        "last_status_code",
        "last_error",
        "delivered_at",
        "created_at",
    )
    list_filter = ("status", "destination", "event__type")
    list_select_related = ("event", "destination")
    search_fields = ("event__event_id",)
    date_hierarchy = "created_at"
    actions = ["requeue"]
    # `body` is deliberately not shown: for opted-in destinations it carries comment text.
    fields = (
        "event_id_display",
        "event_type",
        "destination",
        "status",
        "attempts",
        "next_attempt_at",
        "claimed_at",
        "last_status_code",
        "last_error",
        "delivered_at",
        "created_at",
        "body_size",
        "attempt_log_link",
    )
    readonly_fields = fields

    @admin.display(description=_("event id"), ordering="event__event_id")
    def event_id_display(self, obj):
        return obj.event.event_id

    @admin.display(description=_("type"), ordering="event__type")
    def event_type(self, obj):
        return obj.event.type

    @admin.display(description=_("body size (bytes)"))
    def body_size(self, obj):
        return len(obj.body.encode("utf-8"))

    @admin.display(description=_("attempt log"))
    def attempt_log_link(self, obj):
        url = (
            reverse("admin:feedback_webhookattempt_changelist")
            + f"?outbox_item__id__exact={obj.pk}"
        )
        return format_html('<a href="{}">{}</a>', url, gettext("attempts"))

    def has_requeue_permission(self, request):
        return request.user.has_perm("feedback.change_outboxitem")

    @admin.action(description=_("Re-queue selected dead or failed rows"), permissions=["requeue"])
    def requeue(self, request, queryset):
        count = outbox.requeue(queryset, actor=request.user)
        self.message_user(
            request,
            gettext("%(count)d row(s) re-queued; rows that were not dead or failed were left.")
            % {"count": count},
            messages.SUCCESS,
        )


@admin.register(WebhookAttempt)
class WebhookAttemptAdmin(ReadOnlyAdmin):
    list_display = (
        "started_at",
        "destination",
        "event_id_display",
        "attempt",
        "status_code",
        "outcome",
        "duration_ms",
        "error",
    )
    list_filter = ("destination", "outcome", "status_code", "started_at")
    list_select_related = ("destination", "outbox_item__event")
    search_fields = ("outbox_item__event__event_id",)
    date_hierarchy = "started_at"
    fields = (
        "started_at",
        "destination",
        "outbox_item",
        "event_id_display",
        "attempt",
        "status_code",
        "outcome",
        "duration_ms",
        "error",
        "response_display",
    )
    readonly_fields = fields

    @admin.display(description=_("event id"))
    def event_id_display(self, obj):
        return obj.outbox_item.event.event_id

    @admin.display(description=_("response (first 16 KiB)"))
    def response_display(self, obj):
        return format_html("<pre style='white-space: pre-wrap'>{}</pre>", obj.response_excerpt)


@admin.register(Event)
class EventAdmin(ReadOnlyAdmin):
    list_display = ("event_id", "type", "bot", "delivery", "created_at")
    list_filter = ("type", "bot")
    list_select_related = ("bot", "delivery")
    search_fields = ("event_id", "delivery__delivery_id")
    date_hierarchy = "created_at"
    fields = (
        "event_id",
        "type",
        "version",
        "bot",
        "team",
        "delivery",
        "created_at",
        "body_display",
    )
    readonly_fields = fields

    @admin.display(description=_("envelope"))
    def body_display(self, obj):
        return format_html("<pre style='white-space: pre-wrap'>{}</pre>", obj.body)


@admin.register(WorkerTerminal)
class WorkerTerminalAdmin(ReadOnlyAdmin):
    list_display = (
        "session_id",
        "turn_id",
        "attempt",
        "bot",
        "status",
        "completed_at",
        "duration_ms",
    )
    list_filter = ("status", "bot")
    search_fields = ("session_id", "turn_id")
    date_hierarchy = "completed_at"


# ---------------------------------------------------------------------------------------------
# Deliveries and revisions (read-only; the answer body is never stored, comments never shown)
# ---------------------------------------------------------------------------------------------


class RevisionInline(admin.TabularInline):
    model = Revision
    fk_name = "delivery"
    extra = 0
    can_delete = False
    ordering = ("operator_open_id", "revision")
    fields = (
        "revision_id",
        "revision",
        "verdict_key",
        "semantic",
        "reason_key",
        "has_comment",
        "source",
        "created_at",
    )
    readonly_fields = fields

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    @admin.display(boolean=True, description=_("comment"))
    def has_comment(self, obj):
        return bool(obj.comment)


@admin.register(Delivery)
class DeliveryAdmin(ReadOnlyAdmin):
    """Final answers Cardloop sent (or registered): whether feedback was shown and why not,
    the frozen policy snapshot, the card ids and the revision chain. The answer's text is not
    stored, so it cannot be shown; feedback comments are not shown either."""

    list_display = (
        "delivery_id",
        "bot",
        "chat",
        "channel",
        "response_kind",
        "status",
        "feedback_shown",
        "feedback_reason",
        "error_code",
        "created_at",
    )
    list_filter = (
        "channel",
        "status",
        "feedback_shown",
        "feedback_reason",
        "response_kind",
        "bot",
    )
    list_select_related = ("bot", "chat")
    search_fields = ("delivery_id", "session_id", "turn_id", "platform_message_id", "card_id")
    date_hierarchy = "created_at"
    inlines = [RevisionInline]
    fieldsets = (
        (
            None,
            {"fields": ("delivery_id", "bot", "channel", "chat", "team", "status", "error_code")},
        ),
        (
            _("Correlation"),
            {
                "fields": (
                    "session_id",
                    "turn_id",
                    "native_session_id",
                    "dispatch_attempt",
                    "discriminator",
                    "topic_id",
                    "response_kind",
                )
            },
        ),
        (_("Card"), {"fields": ("platform_message_id", "card_id", "content_hash")}),
        (
            _("Feedback"),
            {
                "description": _(
                    "The effective policy frozen when the card was sent: clicks are checked "
                    "against it, later policy edits do not change it."
                ),
                "fields": (
                    "feedback_shown",
                    "feedback_reason",
                    "current_revision",
                    "snapshot_display",
                    "webhook_destination_ids",
                ),
            },
        ),
        (
            _("Runtime"),
            {
                "fields": (
                    "model",
                    "cli_id",
                    "cli_version",
                    "skill_name",
                    "skill_version",
                    "workflow_id",
                    "task_id",
                    "parent_task_id",
                    "reasoning_effort",
                    "duration_ms",
                    "usage",
                    "completed_at",
                    "created_at",
                )
            },
        ),
    )
    readonly_fields = [f for _name, opts in fieldsets for f in opts["fields"]]

    @admin.display(description=_("policy snapshot"))
    def snapshot_display(self, obj):
        return format_html(
            "<pre style='white-space: pre-wrap'>{}</pre>",
            json.dumps(obj.policy_snapshot, ensure_ascii=False, indent=2),
        )
