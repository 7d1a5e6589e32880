"""`python manage.py analytics_rebuild [--check]`: recompute the per-delivery rating counts
from the latest ratings (idempotent), or only report whether they are exact."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from analytics import rollups


class Command(BaseCommand):
    help = "Rebuild (or --check) the analytics rating counts from the latest ratings."

    def add_arguments(self, parser):
        parser.add_argument("--check", action="store_true", help="only compare, change nothing")

    def handle(self, *args, check, **options):
        if check:
            wrong = rollups.mismatches()
            if wrong:
                raise CommandError(f"Rating counts differ from the latest ratings: {wrong}")
            self.stdout.write(self.style.SUCCESS("Rating counts are exact."))
            return
        rows = rollups.rebuild()
        self.stdout.write(self.style.SUCCESS(f"Rebuilt rating counts for {rows} deliveries."))
