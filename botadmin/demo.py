"""Demo data contributed by apps above botadmin: `manage.py seed_demo` creates botadmin's own
demo rows, then runs every seeder registered here (apps register theirs in
`AppConfig.ready()`, so botadmin never imports them).

A seeder is `fn(say)`: `say(text)` prints one progress line. It must be idempotent (create
what is missing, leave what exists) and fast (a few seconds).
"""

from __future__ import annotations

from collections.abc import Callable

Seeder = Callable[[Callable[[str], None]], None]

_seeders: dict[str, Seeder] = {}


def register_seeder(name: str, fn: Seeder) -> None:
    """Register `fn` under `name` (a second registration of the name replaces the first)."""
    _seeders[name] = fn


def seeders() -> list[tuple[str, Seeder]]:
    """The registered seeders in registration order."""
    return list(_seeders.items())
