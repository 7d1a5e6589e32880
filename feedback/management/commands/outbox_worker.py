"""`python manage.py outbox_worker`: deliver the webhook outbox. Safe to run in N copies.

Claims due rows (SKIP LOCKED on PostgreSQL), keeps up to `--concurrency` attempts in flight,
returns stale claims to pending at start and every `--period` seconds, and on SIGTERM/SIGINT
claims nothing new, finishes in-flight attempts within `--shutdown-budget` seconds and puts the
rest back to pending. See `feedback.outbox` for the rules. Its periodic jobs also mark
deliveries whose send was interrupted as `send_failed` (`feedback.deliveries.fail_interrupted_sends`).
"""

from __future__ import annotations

from datetime import timedelta

from django.core.management.base import BaseCommand, CommandError

from feedback import deliveries
from feedback.outbox import OutboxWorker
from plumbing.workqueue import WorkerLoop


class Command(BaseCommand):
    help = "Deliver webhook events from the outbox (safe to run in several copies)."

    def add_arguments(self, parser):
        parser.add_argument(
            "--concurrency", type=int, default=32, help="attempts in flight (1–100, default 32)"
        )
        parser.add_argument(
            "--idle-sleep", type=float, default=0.5, help="seconds to sleep when nothing is due"
        )
        parser.add_argument(
            "--stale-after",
            type=float,
            default=60.0,
            help="seconds after which a claim counts as abandoned (must exceed 30 s, the "
            "longest attempt)",
        )
        parser.add_argument(
            "--shutdown-budget",
            type=float,
            default=8.0,
            help="seconds in-flight attempts may take after SIGTERM (default 8: `manage.py "
            "serve` kills children 10 s after SIGTERM)",
        )
        parser.add_argument(
            "--period", type=float, default=5.0, help="seconds between stale-claim recoveries"
        )
        parser.add_argument("--once", action="store_true", help="one pass, then drain and exit")

    def handle(
        self, *args, concurrency, idle_sleep, stale_after, shutdown_budget, period, once, **o
    ):
        if not 1 <= concurrency <= 100:
            raise CommandError("--concurrency must be 1–100")
        worker = OutboxWorker(
            concurrency=concurrency,
            stale_after=timedelta(seconds=stale_after),
            idle_wait=idle_sleep,
        )
        loop = WorkerLoop(
            worker.tick,
            name="outbox_worker",
            idle_sleep=idle_sleep,
            periodic=[
                worker.recover_stale,
                worker.purge_expired_secrets,
                deliveries.fail_interrupted_sends,
            ],
            period=period,
        )
        worker.stop_event = loop.stop_event
        loop.install_signal_handlers()
        self.stdout.write(f"outbox_worker: started (concurrency {concurrency})")
        self.stdout.flush()
        try:
            if once:
                loop.run_periodic()
                worker.run_until_idle()
            else:
                loop.run()
        finally:
            worker.drain(shutdown_budget if not once else 60.0)
            worker.close()
        self.stdout.write("outbox_worker: stopped")
