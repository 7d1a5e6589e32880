"""Process-side Prometheus metrics (counters and histograms) in prometheus-client's
multiprocess mode, so `GET /metrics` of any web process reports every process of the
installation: each Daphne process and each worker writes its values to its own file in one
shared directory, and the scrape sums them (https://prometheus.github.io/client_python/multiprocess/).

The directory is `PROMETHEUS_MULTIPROC_DIR`. prometheus-client decides at import whether it
runs in multiprocess mode, so this module makes sure the variable is set before it imports the
library: an operator's value is used as it is (the directory is created if missing); without
one, the process makes a private temporary directory, exports it to the processes it starts
(so `manage.py serve`'s web processes and workers share it) and removes it when it exits.
`manage.py serve` empties the directory when it starts and when it stops
(`clear_directory`): the library requires a fresh directory per run, or counters of an
earlier run would be added in.

Labels are closed sets chosen by the code (routes, handler kinds that are registered, refusal
codes, webhook outcomes, destination primary keys); never ids of people, chats or messages,
tokens or URLs. Database state (queue depths, pending interactions, panels, alerts) is not
kept here: it is read at scrape time (`cardloop.metrics`).
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path

#: The environment variable prometheus-client reads.
DIRECTORY_ENV = "PROMETHEUS_MULTIPROC_DIR"
#: Set beside a private directory: "<pid>:<path>" of the process that made it (and removes it).
OWNER_ENV = "CARDLOOP_METRICS_DIR_OWNER"


def _remove_private_directory(path: str, owner_pid: int) -> None:
    if os.getpid() == owner_pid:  # not in a forked child that inherited the atexit hook
        shutil.rmtree(path, ignore_errors=True)


def ensure_directory() -> Path:
    """The multiprocess directory of this process, created when missing; without
    `PROMETHEUS_MULTIPROC_DIR` a private temporary one, exported to child processes and
    removed at exit."""
    path = os.environ.get(DIRECTORY_ENV)
    if path:
        Path(path).mkdir(parents=True, exist_ok=True)
        return Path(path)
    path = tempfile.mkdtemp(prefix="cardloop-metrics-")
    os.environ[DIRECTORY_ENV] = path
    os.environ[OWNER_ENV] = f"{os.getpid()}:{path}"
    atexit.register(_remove_private_directory, path, os.getpid())
    return Path(path)


def clear_directory() -> int:
    """Remove the metric files (`*.db`) of the multiprocess directory; returns how many. For a
    supervisor (`manage.py serve`) before it starts its processes and after they stopped;
    never while processes of the installation write there. A private directory inherited from
    another process (a `serve` started by a test or a script without `PROMETHEUS_MULTIPROC_DIR`)
    is left alone: that process's own live files are in it, and deleting them would hide its
    counts from every later scrape."""
    directory = ensure_directory()
    owner_pid, _, private_path = os.environ.get(OWNER_ENV, "").partition(":")
    if private_path == str(directory) and owner_pid != str(os.getpid()):
        return 0
    removed = 0
    for file in directory.glob("*.db"):
        file.unlink(missing_ok=True)
        removed += 1
    return removed


ensure_directory()  # before prometheus_client reads the environment

from prometheus_client import (  # noqa: E402 - needs the directory set first
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
    multiprocess,
)

#: Feishu waits 3 s for a callback answer; the budget (2.0 s by default) answers before that.
CALLBACK_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 5.0)
WEBHOOK_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)

#: Transports a callback arrives by (the `route` label).
ROUTES = ("http", "long_connection")

CALLBACK_ANSWER_SECONDS = Histogram(
    "cardloop_callback_answer_seconds",
    "Seconds from receiving a Feishu callback to answering it, by transport (http, "
    "long_connection) and handler kind (a registered card-action kind, 'unknown', or 'event').",
    ["route", "kind"],
    buckets=CALLBACK_BUCKETS,
)
CALLBACKS_OVER_BUDGET = Counter(
    "cardloop_callback_over_budget",
    "Card callbacks answered with the 'still working' toast because the handler ran past "
    "CARDLOOP_CALLBACK_BUDGET.",
    ["route"],
)
for _route in ROUTES:  # present at 0 from the start, so rate() and alerts see the series
    CALLBACKS_OVER_BUDGET.labels(route=_route)
CALLBACKS_REFUSED = Counter(
    "cardloop_callback_refused",
    "Feishu callbacks refused, by reason (the error code of the answer, e.g. invalid_signature).",
    ["reason"],
)
CARD_UPDATE_ATTEMPTS = Counter(
    "cardloop_card_update_attempts",
    "Card updates the card worker attempted, by result (done, retry, failed).",
    ["result"],
)
WEBHOOK_ATTEMPT_SECONDS = Histogram(
    "cardloop_webhook_attempt_seconds",
    "Seconds one webhook attempt took, by destination (primary key) and outcome (delivered, "
    "retryable_status, timeout, network_error, rejected, …).",
    ["destination", "outcome"],
    buckets=WEBHOOK_BUCKETS,
)


def observe_callback_answer(route: str, kind: str, seconds: float) -> None:
    """One callback answered after `seconds` (float) over `route` (one of `ROUTES`) by a
    handler of `kind` (a bounded label: see `interactions.callbacks.dispatcher`)."""
    CALLBACK_ANSWER_SECONDS.labels(route=route, kind=kind).observe(max(0.0, seconds))


def count_over_budget(route: str) -> None:
    """One card callback over `route` answered with the budget's info toast."""
    CALLBACKS_OVER_BUDGET.labels(route=route).inc()


def count_refused(reason: str) -> None:
    """One callback refused; `reason` is a code from Cardloop's own answers (a closed set)."""
    CALLBACKS_REFUSED.labels(reason=reason).inc()


def count_card_update(result: str) -> None:
    """One card update attempted by the card worker: `result` "done", "retry" or "failed"."""
    CARD_UPDATE_ATTEMPTS.labels(result=result).inc()


def observe_webhook_attempt(destination: int | str, outcome: str, seconds: float) -> None:
    """One webhook attempt to the destination with primary key `destination` ended with
    `outcome` (a `feedback.webhooks.Outcome` value) after `seconds`."""
    WEBHOOK_ATTEMPT_SECONDS.labels(destination=str(destination), outcome=outcome).observe(
        max(0.0, seconds)
    )


def render(*collectors) -> tuple[bytes, str]:
    """The Prometheus text exposition of every process's counters and histograms (summed over
    the multiprocess directory) plus `collectors` (objects with `collect()`, read now).
    Returns `(body, content_type)`."""
    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry, path=str(ensure_directory()))
    for collector in collectors:
        registry.register(collector)
    return generate_latest(registry), CONTENT_TYPE_LATEST
