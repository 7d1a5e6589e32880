from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class AnalyticsConfig(AppConfig):
    """Read-only analytics for managers: query layer, DRF API, dashboard, CSV."""

    name = "analytics"
    verbose_name = _("Analytics")
