from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class BotadminConfig(AppConfig):
    name = "botadmin"
    verbose_name = _("Bots, teams and policy")

    def ready(self) -> None:
        # Imported for their side effects: system checks and the OpenAPI auth scheme.
        from botadmin import checks, schema  # noqa: F401
