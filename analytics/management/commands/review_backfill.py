"""`python manage.py review_backfill [--queue ID]`: add every existing matching rating to the
review queues (new ratings enter on their own: the alert worker and every queue read fill
queues). Idempotent: ratings already in a queue are skipped. Shows a progress bar."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError
from tqdm import tqdm

from analytics.models import ReviewQueue
from analytics.review import service


class Command(BaseCommand):
    help = "Add the existing matching ratings to review queues (idempotent, with progress)."

    def add_arguments(self, parser):
        parser.add_argument(
            "--queue", type=int, help="only this queue id (default: every enabled queue)"
        )

    def handle(self, *args, queue=None, **options):
        queues = ReviewQueue.objects.filter(enabled=True)
        if queue is not None:
            queues = ReviewQueue.objects.filter(pk=queue)
            if not queues.exists():
                raise CommandError(f"No review queue with id {queue}.")
        for q in queues:
            todo = service.missing_ratings(q).count()
            with tqdm(
                total=todo, unit="rating", desc=q.name, disable=options["verbosity"] == 0
            ) as bar:
                added = service.fill_queue(q, since=None, progress=bar.update)
            self.stdout.write(f"{q.name}: {added} item(s) added")
