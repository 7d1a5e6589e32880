"""Read a `/metrics` body in tests: samples by name and labels."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """`{(sample name, sorted label pairs): value}` of a Prometheus text exposition."""
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


def value(text: str, sample: str, **labels: str) -> float:
    """The value of `sample` (a sample name) with exactly `labels` (0 when absent)."""
    return samples(text).get((sample, tuple(sorted(labels.items()))), 0.0)
