"""Fixtures of the feedback tests: a trusted test CA and HTTPS receiver, the webhook test
settings, a patchable resolver, a fake scheduling clock, destinations and deliveries."""

from __future__ import annotations

import itertools
import json
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
    from feedback import destinations
    from feedback.models import WebhookDestination

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

    from feedback.envelopes import stable_event_id
    from feedback.events import emit

    def make(type_="interaction.resolved", data=None, **kwargs):
        with transaction.atomic():
            event, _created = emit(
                type_, stable_event_id(type_, uuid.uuid4().hex), data or {"n": 1}, **kwargs
            )
        return event

    return make


# ---------------------------------------------------------------------------------------------
# Deliveries and clicks through the real parts: the API, the lark-oapi client against the
# loopback stub, and signed + encrypted callbacks through the ingress.
# ---------------------------------------------------------------------------------------------

#: A feedback policy with every step: reasons, comment (max 50), reselect allowed.
FULL_POLICY = {
    "enabled": True,
    "allow_reselect": True,
    "negative_followup": {
        "reasons": [
            {"key": "wrong_facts", "label": "事实错误"},
            {"key": "incomplete", "label": "不完整"},
        ],
        "comment": {"max_length": 50},
    },
}


def answer_card(text: str = "The answer") -> dict:
    """A caller's Card JSON 2.0 answer."""
    return {
        "schema": "2.0",
        "config": {"update_multi": True},
        "header": {"title": {"tag": "plain_text", "content": "Answer"}},
        "body": {"elements": [{"tag": "markdown", "content": text, "element_id": "answer"}]},
    }


@pytest.fixture
def feedback_api(lark_bot, lark_stub, make_api_key):
    """An APIClient with an API key of `lark_bot` (policy `FULL_POLICY`; change
    `feedback_api.bot.policy` and save for others), talking to the stub (`feedback_api.stub`).
    `feedback_api.deliver(**fields)` posts a final answer to `oc_group_chat` for requester
    `ou_requester` (the fixtures' ids) and returns the response."""
    from rest_framework.test import APIClient

    lark_bot.policy = FULL_POLICY
    lark_bot.save()
    raw, _key = make_api_key(lark_bot)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    client.bot = lark_bot
    client.stub = lark_stub
    turns = itertools.count(1)

    def deliver(**fields):
        body = {
            "chat_id": "oc_group_chat",
            "requester_open_id": "ou_requester",
            "response_kind": "final",
            "session_id": "sess-fb",
            "turn_id": f"turn-{next(turns)}",
            "card": answer_card(),
        }
        body.update(fields)
        return client.post(
            "/api/v1/deliveries", {k: v for k, v in body.items() if v is not None}, format="json"
        )

    client.deliver = deliver
    return client


@pytest.fixture
def delivery(feedback_api):
    """A final answer with feedback buttons sent through the deliveries API (a Delivery)."""
    from feedback.models import Delivery

    response = feedback_api.deliver()
    assert response.status_code == 201, response.json()
    return Delivery.objects.get(delivery_id=response.json()["delivery_id"])


@pytest.fixture
def click(lark_callback):
    """`click(delivery, key, rev="", operator="ou_requester", **paths)` → (status, answer):
    a signed, encrypted verdict click on `delivery` (a Delivery) through the ingress.
    `click.detail(delivery, rev, form_value, …)` submits the negative follow-up form;
    `click.payload(...)` / `click.detail_payload(...)` build the bodies without posting."""
    from tests import feishu

    def payload(delivery, key, rev="", operator="ou_requester", **paths):
        changes = {
            "event.action.value.delivery": delivery.delivery_id,
            "event.action.value.key": key,
            "event.action.value.rev": rev,
            "event.operator.open_id": operator,
            "event.context.open_message_id": delivery.platform_message_id,
        }
        changes.update({k.replace("__", "."): v for k, v in paths.items()})
        return feishu.payload("card_action_feedback_click", changes)

    def detail_payload(delivery, rev, form_value, operator="ou_requester", **paths):
        body = feishu.payload(
            "card_action_feedback_detail_submit",
            {
                "event.action.value.delivery": delivery.delivery_id,
                "event.action.value.rev": rev,
                "event.operator.open_id": operator,
                "event.context.open_message_id": delivery.platform_message_id,
                **{k.replace("__", "."): v for k, v in paths.items()},
            },
        )
        body["event"]["action"]["form_value"] = form_value
        return body

    def post(body):
        response = lark_callback(body)
        assert response["Content-Type"] == "application/json"
        return response.status_code, json.loads(response.content)

    def do(delivery, key, rev="", operator="ou_requester", **paths):
        return post(payload(delivery, key, rev, operator, **paths))

    def detail(delivery, rev, form_value, operator="ou_requester", **paths):
        return post(detail_payload(delivery, rev, form_value, operator, **paths))

    do.payload = payload
    do.detail_payload = detail_payload
    do.detail = detail
    do.post = post
    return do


def drain_card_updates() -> int:
    """Apply every queued card update now (pacing and answer-first holds skipped: the answer
    of each test callback has already been sent)."""
    from interactions.cardqueue import worker as cardworker
    from interactions.models import CardEntity, CardUpdate

    total = 0
    for _ in range(10):
        CardEntity.objects.update(next_send_at=timezone.now() - timedelta(seconds=1))
        CardUpdate.objects.filter(status="pending").update(
            next_attempt_at=timezone.now() - timedelta(seconds=1)
        )
        done = cardworker.run_due(50)
        total += done
        if not done:
            break
    return total
