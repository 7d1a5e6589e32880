from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class CardloopConfig(AppConfig):
    """The project package as an app: it holds no models, only the `serve` command and the
    deployment system checks (`cardloop.E001` …), registered here."""

    name = "cardloop"
    verbose_name = _("Cardloop service")

    def ready(self) -> None:
        from cardloop import checks  # noqa: F401  (registers the system checks)
