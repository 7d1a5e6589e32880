from django.apps import AppConfig
from django.db.models.signals import post_delete
from django.utils.translation import gettext_lazy as _


class AnalyticsConfig(AppConfig):
    """Analytics for managers (query layer, DRF API, dashboard, CSV), review queues and alerts."""

    name = "analytics"
    verbose_name = _("Analytics")

    def ready(self):
        # Here, not at the top: `rollups` imports models, which Django allows only once the
        # app registry is ready.

        from analytics import demo, rollups
        from botadmin.demo import register_seeder

        post_delete.connect(
            rollups.forget_team, sender="botadmin.Team", dispatch_uid="analytics.forget_team"
        )
        register_seeder("analytics", demo.seed_demo)
