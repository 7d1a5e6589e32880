from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class AnalyticsConfig(AppConfig):
    """Read-only analytics for managers: query layer, DRF API, dashboard, CSV."""

    name = "analytics"
    verbose_name = _("Analytics")

    def ready(self):
        from django.db.models.signals import post_delete

        from analytics import rollups

        post_delete.connect(
            rollups.forget_team, sender="botadmin.Team", dispatch_uid="analytics.forget_team"
        )
