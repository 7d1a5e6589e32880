"""Admin of Slack apps: app id, the two write-only secrets, and a "check connection" action.

Thin: secrets go through `botadmin.admin.WriteOnlySecretsAdmin` (`botadmin.services.set_secret` /
`clear_secret`: 0600 files, audited "set"/"not set", never rendered back); the action calls
`webapi.check_connection` (`auth.test`, https://api.slack.com/methods/auth.test) and reports the
outcome as a message.
"""

from __future__ import annotations

from django import forms
from django.conf import settings
from django.contrib import admin
from django.utils.translation import gettext_lazy as _

from botadmin.admin import WriteOnlySecretsAdmin
from botadmin.admin_forms import WriteOnlySecretsFormMixin, secret_fields
from botadmin.models import SlackApp
from interactions.channels.slack import webapi


class SlackAppForm(WriteOnlySecretsFormMixin, forms.ModelForm):
    """App id and bot, plus write-only `bot_token` / `signing_secret` (blank = keep) and a
    clear box for each."""

    bot_token, clear_bot_token = secret_fields(_("Bot token"), _("Clear bot token"))
    signing_secret, clear_signing_secret = secret_fields(
        _("Signing secret"), _("Clear signing secret")
    )

    class Meta:
        model = SlackApp
        fields = ["bot", "app_id"]
        # Django's own "<model> with this <field> already exists" puts the verbose names of
        # a mixed Chinese/English model between spaces under zh-hans; one sentence of ours
        error_messages = {
            "app_id": {"unique": _("A Slack app with this app id is already registered.")}
        }


@admin.register(SlackApp)
class SlackAppAdmin(WriteOnlySecretsAdmin, admin.ModelAdmin):
    form = SlackAppForm
    list_display = ["app_id", "bot", "credentials"]
    search_fields = ["app_id", "bot__name"]
    actions = ["check_connection"]
    connection_texts = {
        "dry_run": _("%(app)s: no bot token set, dry run (nothing was called)."),
        "ok": _("%(app)s: connected to workspace %(team)s as %(user)s."),
        "unreachable": _(
            "%(app)s: Slack could not be reached (network or TLS failure); "
            "the token was not checked."
        ),
        "refused": _("%(app)s: Slack refused the token (%(error)s)."),
    }

    @admin.action(description=_("Check connection (auth.test)"))
    def check_connection(self, request, queryset):
        for app in queryset:
            result = webapi.check_connection(
                app.secret("bot_token"), settings.CARDLOOP_SLACK_API_BASE_URL
            )
            values = {"app": app.app_id, "team": result.team_id, "user": result.user_id}
            self.report_connection(request, result, values)
