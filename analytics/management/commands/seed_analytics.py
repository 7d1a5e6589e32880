"""`python manage.py seed_analytics --deliveries 1000000 [--days 400] [--reset] [--seed 7]`:
a realistic analytics history for benchmarks and demos (see `analytics.seed`)."""

from __future__ import annotations

import time

from django.core.management.base import BaseCommand, CommandError
from tqdm import tqdm

from analytics import seed


class Command(BaseCommand):
    help = "Build a realistic, deterministic analytics history (seed bots cli_seed_*)."

    def add_arguments(self, parser):
        parser.add_argument("--deliveries", type=int, default=10_000)
        parser.add_argument("--days", type=int, default=400)
        parser.add_argument(
            "--seed",
            dest="random_seed",
            type=int,
            default=7,
            help="random seed (same seed, same data)",
        )
        parser.add_argument("--reset", action="store_true", help="delete earlier seed data first")
        parser.add_argument("--chunk", type=int, default=20_000, help="deliveries per transaction")

    def handle(self, *args, deliveries, days, random_seed, reset, chunk, **options):
        if deliveries < 1 or days < 1:
            raise CommandError("--deliveries and --days must be positive.")
        existing = seed.seed_delivery_count()
        if reset and existing:
            deleted = seed.reset()
            self.stdout.write(f"Removed earlier seed data: {deleted}")
            existing = 0
        if existing == deliveries:
            self.stdout.write(
                f"{existing} seed deliveries already present; nothing to do (--reset rebuilds)."
            )
            return
        if existing:
            raise CommandError(
                f"{existing} seed deliveries exist (asked for {deliveries}); run with --reset."
            )
        started = time.monotonic()
        with tqdm(total=deliveries, unit="delivery", disable=options["verbosity"] == 0) as bar:
            counts = seed.build(
                deliveries, days=days, seed=random_seed, chunk=chunk, progress=bar.update
            )
        self.stdout.write(
            self.style.SUCCESS(f"Seeded in {time.monotonic() - started:.1f}s: {counts}")
        )
