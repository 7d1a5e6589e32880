from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class BotadminConfig(AppConfig):
    name = "botadmin"
    verbose_name = _("Bots, teams and policy")

    def ready(self) -> None:
        from botadmin import checks  # noqa: F401  (registers system checks)
