from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class CardloopConfig(AppConfig):
    """The project package as an app: it holds no models, only the `serve` command, the
    deployment system checks (`cardloop.E001` …) and the demo's metrics-token line
    (`seed_demo`), registered here, and the database pool's reconnect delay
    (`plumbing.db.pool`)."""

    name = "cardloop"
    verbose_name = _("Cardloop service")

    def ready(self) -> None:
        from botadmin.demo import register_seeder
        from cardloop import checks  # noqa: F401  (registers the system checks)
        from cardloop.demo import print_metrics_token
        from plumbing.db.pool import keep_reconnects_frequent, skip_check_of_fresh_returns

        keep_reconnects_frequent()  # the first request after a database outage succeeds fast
        skip_check_of_fresh_returns()  # no health-check round trip for a connection just used
        register_seeder("metrics", print_metrics_token)
