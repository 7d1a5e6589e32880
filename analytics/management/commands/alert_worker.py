"""`python manage.py alert_worker`: evaluate alert rules and fill review queues, every
`--interval` seconds (default CARDLOOP_ALERT_INTERVAL, 30). Started by `manage.py serve`.

Safe to run in several copies: each rule is evaluated under its row lock and a rule has at
most one open alert (`analytics.alerts.service`), so each breach fires once; queue fills
ignore ratings that are already in the queue (`analytics.review.service.fill_queue`).
SIGTERM / SIGINT stop the loop after the current pass.
"""

from __future__ import annotations

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from analytics.alerts import service as alerts
from analytics.review import service as review
from plumbing.workqueue import WorkerLoop


def one_pass() -> int:
    """Fill every review queue, then evaluate every rule. Returns 0 (the loop always waits a
    full interval before the next pass)."""
    review.fill_all()
    alerts.evaluate_all()
    return 0


class Command(BaseCommand):
    help = "Evaluate alert rules and fill review queues periodically (safe in several copies)."

    def add_arguments(self, parser):
        parser.add_argument(
            "--interval",
            type=float,
            default=None,
            help="seconds between passes (default CARDLOOP_ALERT_INTERVAL, 30)",
        )
        parser.add_argument("--once", action="store_true", help="one pass, then exit")

    def handle(self, *args, interval, once, **options):
        interval = settings.CARDLOOP_ALERT_INTERVAL if interval is None else interval
        if interval < 1:
            raise CommandError("--interval must be at least 1 second.")
        if once:
            one_pass()
            self.stdout.write("alert_worker: one pass done")
            return
        loop = WorkerLoop(one_pass, name="alert_worker", idle_sleep=interval)
        loop.install_signal_handlers()
        self.stdout.write(f"alert_worker: started (every {interval:g} s)")
        self.stdout.flush()
        loop.run()
        self.stdout.write("alert_worker: stopped")
