"""200 concurrent resolutions of one interaction on PostgreSQL, mixing every path (card
click, typed text, API, timeout, cancel), each in a thread with its own connection: exactly
one winner, one `interaction.resolved` event, one final card update, and every other attempt
is told what won."""

from __future__ import annotations

import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.apps import apps
from django.db import connections

from interactions.approvals import handlers as approval_handlers
from interactions.approvals import service as approvals
from interactions.approvals import textcommands
from interactions.callbacks import registry
from interactions.lifecycle import resolve as lifecycle
from interactions.models import CardUpdate, Interaction
from interactions.tests.ia_helpers import *  # noqa: F403
from interactions.tests.ia_helpers import CHAT, REQUESTER
from plumbing.workqueue import WorkStatus
from tests import feishu

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

ATTEMPTS = 200
#: Threads at once (each holds a PostgreSQL connection; the server allows 100 in all).
THREADS = 32
PATHS = ("card", "text", "api", "timeout", "cancel")
VALUES = ("approve", "deny", "always")


def attempt(index: int, pk: int, bot, gate: threading.Event) -> tuple[str, bool, str]:
    """One resolution attempt on `path`; returns (path, won, via the caller was shown)."""
    path = PATHS[index % len(PATHS)]
    value = VALUES[index % len(VALUES)]
    try:
        ia = Interaction.objects.select_related("bot", "card").get(pk=pk)
        gate.wait(30)
        if path == "card":
            payload = feishu.payload(
                "card_action_approval",
                {
                    "event.action.value.interaction_id": ia.public_id,
                    "event.action.value.action_id": value,
                    "event.action.value.action_value": value,
                },
            )
            answer = approval_handlers.on_card_action(
                registry.CardAction.from_payload(bot, payload)
            )
            won = answer.toast.type == "success"
            shown = Interaction.objects.get(pk=pk).resolution["via"]
            return path, won, shown
        if path == "text":
            reply = textcommands.handle(
                bot, f"/_interaction {ia.public_id} {value}", open_id=REQUESTER, chat_id=CHAT
            )
            return path, reply.ok, reply.interaction.resolution["via"]
        if path == "api":
            try:
                outcome = approvals.answer(ia, choice=value, via="api", check_operator=False)
            except lifecycle.Refused as refused:
                return path, False, refused.interaction.resolution["via"]
        elif path == "timeout":
            outcome = lifecycle.expire(ia)
        else:
            outcome = lifecycle.cancel(ia)
        return path, outcome.won, outcome.interaction.resolution["via"]
    finally:
        connections.close_all()


def test_two_hundred_concurrent_resolutions_have_exactly_one_winner(
    lark_stub, lark_bot, make_interaction
):
    ia = approvals.send_to_chat(make_interaction(lark_bot))
    gate = threading.Event()
    with ThreadPoolExecutor(max_workers=THREADS) as pool:
        futures = [pool.submit(attempt, i, ia.pk, lark_bot, gate) for i in range(ATTEMPTS)]
        gate.set()
        results = [f.result(timeout=120) for f in futures]
    winners = [r for r in results if r[1]]
    assert len(winners) == 1, Counter(r[0] for r in winners)
    final = Interaction.objects.get(pk=ia.pk)
    winner_via = {
        "card": "card",
        "text": "text",
        "api": "api",
        "timeout": "timeout",
        "cancel": "cancel",
    }[winners[0][0]]
    assert final.resolution["via"] == winner_via
    assert all(shown == winner_via for _path, _won, shown in results)
    Event = apps.get_model("feedback", "Event")
    assert Event.objects.filter(event_id=lifecycle.stable_event_id(ia.public_id)).count() == 1
    assert Event.objects.filter(type="interaction.resolved").count() == 1
    assert CardUpdate.objects.filter(card=final.card, status=WorkStatus.PENDING).count() == 1
    assert Counter(r[0] for r in results) == {p: ATTEMPTS // len(PATHS) for p in PATHS}


def test_concurrent_creations_with_one_request_id_send_one_card(lark_stub, lark_bot, make_api_key):
    """Only the request that created the interaction sends it; before, every retry racing the
    first send sent again, and with Feishu's uuid dedupe the retry failed with a 500 (the
    deduplicated message was registered to another card entity)."""
    from rest_framework.test import APIClient

    raw, _key = make_api_key(lark_bot)
    barrier = threading.Barrier(8)
    statuses = []

    def create():
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
        barrier.wait(30)
        try:
            response = client.post(
                "/api/v1/interactions",
                {
                    "kind": "approval",
                    "channel": "feishu",
                    "chat_id": CHAT,
                    "requester_open_id": REQUESTER,
                    "title": "Run the migration?",
                    "tool": "migrate",
                    "request_id": "req-race",
                },
                format="json",
            )
            statuses.append(response.status_code)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=create) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert sorted(statuses) == [200] * 7 + [201]
    assert len(lark_stub.calls_to("POST", "/open-apis/im/v1/messages")) == 1
    assert len(lark_stub.calls_to("POST", "/open-apis/cardkit/v1/cards")) == 1
    (ia,) = Interaction.objects.all()
    assert ia.card_id and ia.status == "pending"
