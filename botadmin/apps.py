from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class BotadminConfig(AppConfig):
    name = "botadmin"
    verbose_name = _("Bots, teams and policy")

    def ready(self) -> None:
        # Imported for its side effect: the OpenAPI description of the bot API key scheme.
        from botadmin import schema  # noqa: F401
