"""Fixtures of the feedback tests: a trusted test CA and HTTPS receiver, the webhook test
settings, a patchable resolver, a fake scheduling clock, destinations and deliveries."""

from __future__ import annotations

import itertools
import random
import socket
from datetime import timedelta
from types import SimpleNamespace

import pytest
import trustme
from django.utils import timezone

from feedback import webhooks
from feedback.tests.receiver import HttpsReceiver

HOOK_HOST = "hooks.cardloop.test"


@pytest.fixture(scope="session")
def webhook_ca(tmp_path_factory):
    """A trustme CA, a leaf for `hooks.cardloop.test` / localhost / 127.0.0.1 / ::1, and the
    CA's PEM file (what CARDLOOP_WEBHOOK_CA_FILE points at in tests)."""
    ca = trustme.CA()
    cert = ca.issue_cert(HOOK_HOST, "localhost", "127.0.0.1", "::1")
    path = tmp_path_factory.mktemp("webhook-ca") / "ca.pem"
    ca.cert_pem.write_to_path(str(path))
    return SimpleNamespace(ca=ca, cert=cert, ca_file=str(path))


@pytest.fixture
def receiver(webhook_ca):
    with HttpsReceiver(webhook_ca.cert) as r:
        yield r


@pytest.fixture
def webhook_settings(settings, webhook_ca):
    """CARDLOOP_WEBHOOK_ALLOW_PRIVATE on and the test CA trusted."""
    settings.CARDLOOP_WEBHOOK_ALLOW_PRIVATE = True
    settings.CARDLOOP_WEBHOOK_CA_FILE = webhook_ca.ca_file
    return settings


@pytest.fixture
def strict_settings(settings, webhook_ca):
    """CARDLOOP_WEBHOOK_ALLOW_PRIVATE off (production behaviour), the test CA trusted."""
    settings.CARDLOOP_WEBHOOK_ALLOW_PRIVATE = False
    settings.CARDLOOP_WEBHOOK_CA_FILE = webhook_ca.ca_file
    return settings


@pytest.fixture
def dns(monkeypatch):
    """Replace the adapter's resolver: `dns.answers[host] = [addresses]` (a list of lists gives
    one answer per lookup, the last one repeating); every lookup is logged in `dns.calls`."""
    state = SimpleNamespace(answers={HOOK_HOST: ["127.0.0.1"]}, calls=[])

    def fake_resolve(host, port):
        state.calls.append(host)
        answer = state.answers.get(host)
        if answer is None:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        if answer and isinstance(answer[0], list):
            return list(answer.pop(0) if len(answer) > 1 else answer[0])
        return list(answer)

    monkeypatch.setattr(webhooks, "resolve", fake_resolve)
    return state


class FakeClock:
    """The worker's scheduling clock: starts 5 s after the real now (so rows written during
    the test are already due) and moves only when told."""

    def __init__(self):
        self.now = timezone.now() + timedelta(seconds=5)

    def __call__(self):
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


@pytest.fixture
def clock():
    return FakeClock()


@pytest.fixture
def make_worker(clock):
    """Factory of OutboxWorkers on the fake clock with a seeded jitter; closed after the test."""
    from feedback.outbox import OutboxWorker

    workers = []

    def make(**kwargs):
        kwargs.setdefault("now", clock)
        kwargs.setdefault("rng", random.Random(7))
        kwargs.setdefault("idle_wait", 0.05)
        worker = OutboxWorker(**kwargs)
        workers.append(worker)
        return worker

    yield make
    for worker in workers:
        worker.close()


_names = itertools.count(1)


@pytest.fixture
def make_destination(db):
    """Factory: `make_destination(url, event_types=…, include_comment=…, timeout_ms=…,
    teams=…, bots=…, enabled=…, secret=…)` → (destination, secret) through the service."""
    from botadmin.models import WebhookDestination
    from feedback import destinations

    def make(
        url,
        *,
        name=None,
        event_types=("turn.completed", "feedback.revised", "interaction.resolved"),
        secret=None,
        include_comment=False,
        timeout_ms=10_000,
        teams=(),
        bots=(),
        enabled=True,
    ):
        secret = secret or webhooks.generate_secret()
        destination = WebhookDestination(
            name=name or f"dest-{next(_names)}",
            url=url,
            enabled=enabled,
            event_types=list(event_types),
            include_comment=include_comment,
            timeout_ms=timeout_ms,
        )
        destinations.save_destination(
            destination,
            actor=None,
            teams=list(teams),
            bots=list(bots),
            secret=destinations.SecretChange("set", secret),
        )
        return destination, secret

    return make


_deliveries = itertools.count(1)


@pytest.fixture
def make_delivery(db):
    """Factory: `make_delivery(bot, **fields)` → a sent Delivery created with the ORM (until
    the deliveries API exists). Defaults: a session/turn of its own, status `sent`."""
    from feedback.models import Delivery

    def make(bot, **fields):
        n = next(_deliveries)
        fields.setdefault("delivery_id", f"del_test_{n:06d}")
        fields.setdefault("session_id", f"sess-{n}")
        fields.setdefault("turn_id", "turn-1")
        fields.setdefault("status", Delivery.Status.SENT)
        fields.setdefault("response_kind", Delivery.ResponseKind.FINAL)
        fields.setdefault("platform_message_id", f"om_test_{n}")
        fields.setdefault("content_hash", "sha256:" + "ab" * 32)
        return Delivery.objects.create(bot=bot, **fields)

    return make


@pytest.fixture
def emit_event(db):
    """Factory: `emit_event(type, data, **emit_kwargs)` → Event, emitted in a transaction."""
    import uuid

    from django.db import transaction

    from feedback.events import emit, stable_event_id

    def make(type_="interaction.resolved", data=None, **kwargs):
        with transaction.atomic():
            event, _created = emit(
                type_, stable_event_id(type_, uuid.uuid4().hex), data or {"n": 1}, **kwargs
            )
        return event

    return make
