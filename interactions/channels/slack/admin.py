"""Admin of Slack apps: app id, the two write-only secrets, and a "check connection" action.

Thin: secrets go through `botadmin.services.set_slack_secret` / `clear_slack_secret` (0600 files,
audited "set"/"not set", never rendered back); the action calls `webapi.check_connection`
(`auth.test`, https://api.slack.com/methods/auth.test) and reports the outcome as a message.
"""

from __future__ import annotations

from django import forms
from django.conf import settings
from django.contrib import admin, messages
from django.db import transaction
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from botadmin import services
from botadmin.admin_forms import refuse_set_and_clear
from botadmin.models import SlackApp
from interactions.channels.slack import webapi


def _secret_input(label) -> forms.CharField:
    return forms.CharField(
        label=label,
        required=False,
        strip=True,
        widget=forms.PasswordInput(render_value=False, attrs={"autocomplete": "new-password"}),
    )


class SlackAppForm(forms.ModelForm):
    """App id and bot, plus write-only `bot_token` / `signing_secret` (blank = keep) and a
    clear box for each."""

    bot_token = _secret_input(_("Bot token"))
    clear_bot_token = forms.BooleanField(label=_("Clear bot token"), required=False)
    signing_secret = _secret_input(_("Signing secret"))
    clear_signing_secret = forms.BooleanField(label=_("Clear signing secret"), required=False)

    class Meta:
        model = SlackApp
        fields = ["bot", "app_id"]
        # Django's own "<model> with this <field> already exists" puts the verbose names of
        # a mixed Chinese/English model between spaces under zh-hans; one sentence of ours
        error_messages = {
            "app_id": {"unique": _("A Slack app with this app id is already registered.")}
        }

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        for name in SlackApp.SECRET_FIELDS:
            is_set = bool(self.instance.pk) and self.instance.has_secret(name)
            self.fields[name].help_text = (
                gettext("Set. Leave blank to keep it.") if is_set else gettext("Not set.")
            )

    def clean(self):
        cleaned = super().clean()
        refuse_set_and_clear(self, cleaned, SlackApp.SECRET_FIELDS)
        return cleaned


@admin.register(SlackApp)
class SlackAppAdmin(admin.ModelAdmin):
    form = SlackAppForm
    list_display = ["app_id", "bot", "credentials"]
    search_fields = ["app_id", "bot__name"]
    actions = ["check_connection"]

    @admin.display(description=_("credentials"))
    def credentials(self, obj):
        return ", ".join(
            f"{name}: " + (gettext("set") if obj.has_secret(name) else gettext("not set"))
            for name in SlackApp.SECRET_FIELDS
        )

    def save_model(self, request, obj, form, change):
        with transaction.atomic():
            super().save_model(request, obj, form, change)
            for name in SlackApp.SECRET_FIELDS:
                if form.cleaned_data.get(f"clear_{name}"):
                    services.clear_slack_secret(request.user, obj, name)
                elif form.cleaned_data.get(name):
                    services.set_slack_secret(request.user, obj, name, form.cleaned_data[name])

    @admin.action(description=_("Check connection (auth.test)"))
    def check_connection(self, request, queryset):
        for app in queryset:
            result = webapi.check_connection(
                app.secret("bot_token"), settings.CARDLOOP_SLACK_API_BASE_URL
            )
            if result.dry_run:
                self.message_user(
                    request,
                    gettext("%(app)s: no bot token set, dry run (nothing was called).")
                    % {"app": app.app_id},
                    messages.WARNING,
                )
            elif result.ok:
                self.message_user(
                    request,
                    gettext("%(app)s: connected to workspace %(team)s as %(user)s.")
                    % {"app": app.app_id, "team": result.team_id, "user": result.user_id},
                    messages.SUCCESS,
                )
            elif result.error == "transport":
                self.message_user(
                    request,
                    gettext(
                        "%(app)s: Slack could not be reached (network or TLS failure); "
                        "the token was not checked."
                    )
                    % {"app": app.app_id},
                    messages.ERROR,
                )
            else:
                self.message_user(
                    request,
                    gettext("%(app)s: Slack refused the token (%(error)s).")
                    % {"app": app.app_id, "error": result.error},
                    messages.ERROR,
                )
