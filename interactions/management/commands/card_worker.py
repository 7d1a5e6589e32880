"""`python manage.py card_worker`: apply queued card updates to Feishu (CardKit / PATCH).

Safe to run in N copies (claims are exclusive, see `plumbing.workqueue`). SIGTERM / SIGINT
stop it after the update in progress; claimed updates not started yet go back to the queue.
Claims are leased: renewed every second while this process lives; claims of dead workers
(not renewed for `worker.STALE_AFTER`) are recovered at start and every `--recovery-period`
seconds. Old dedupe rows and finished updates are swept every `--period` seconds, when
acknowledged clicks whose handler never finished (lease run out) are also run again
(`interactions.callbacks.recovery`). `manage.py serve` starts it beside Daphne.
"""

from __future__ import annotations

from django.core.management.base import BaseCommand

from interactions.callbacks import inbound, recovery
from interactions.cardqueue import worker as cardworker
from interactions.lifecycle import resolve as lifecycle
from plumbing.workqueue import WorkerLoop


class Command(BaseCommand):
    help = "Apply queued Feishu card updates (run beside the web server; safe in N copies)."

    def add_arguments(self, parser):
        parser.add_argument("--once", action="store_true", help="One batch, then exit.")
        parser.add_argument("--batch", type=int, default=10, help="Updates claimed per batch.")
        parser.add_argument(
            "--idle-sleep", type=float, default=0.25, help="Seconds to wait when nothing is due."
        )
        parser.add_argument(
            "--period", type=float, default=10.0, help="Seconds between sweep runs."
        )
        parser.add_argument(
            "--recovery-period",
            type=float,
            default=1.0,
            help="Seconds between recoveries of dead workers' expired claims.",
        )

    def handle(self, *args, once, batch, idle_sleep, period, recovery_period, **options):
        loop = WorkerLoop(
            lambda: cardworker.run_due(batch, should_stop=loop.stop_event.is_set),
            name="card_worker",
            idle_sleep=idle_sleep,
            recovery=[cardworker.recover_stale_updates],
            recovery_period=recovery_period,
            periodic=[
                recovery.recover_expired_claims,
                inbound.prune_events,
                cardworker.prune_finished,
                lifecycle.expire_due,
            ],
            period=period,
        )
        if not once:
            loop.install_signal_handlers()
        self.stdout.write(f"card_worker: started (batch {batch})")
        self.stdout.flush()
        loop.run(once=once)
        self.stdout.write("card_worker: stopped")
