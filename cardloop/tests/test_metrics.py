"""`GET /metrics`: access rules, the database gauges read at scrape time, and the callback
counters the Feishu routes count (in this process; across processes:
`test_metrics_processes.py`)."""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta

import pytest
from django.db import transaction
from django.utils import timezone

from cardloop.tests.metrics_scrape import value
from feedback.events import emit
from feedback.models import OutboxItem, WebhookDestination
from interactions.models import CardEntity, CardUpdate, Interaction
from plumbing.workqueue import WorkStatus
from tests import feishu

TOKEN = "cmx_test_metrics_token"  # noqa: S105 - test value


def scrape(client) -> str:
    response = client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
    assert response.status_code == 200, response.content
    assert response["Content-Type"].startswith("text/plain")
    return response.content.decode()


@pytest.fixture
def metrics_token(settings):
    settings.CARDLOOP_METRICS_TOKEN = TOKEN
    settings.CARDLOOP_METRICS_ALLOW = []
    return TOKEN


@pytest.mark.django_db
def test_metrics_without_a_token_or_allow_list_setting_are_refused_with_json(client, settings):
    settings.CARDLOOP_METRICS_TOKEN = ""
    settings.CARDLOOP_METRICS_ALLOW = []
    response = client.get("/metrics", HTTP_AUTHORIZATION="Bearer anything")
    assert response.status_code == 403
    assert response.json()["error"] == "metrics_not_configured"
    assert "CARDLOOP_METRICS_TOKEN" in response.json()["detail"]


@pytest.mark.django_db
def test_a_wrong_or_missing_bearer_token_gets_401_and_the_right_one_the_text_format(
    client, metrics_token
):
    wrong = client.get("/metrics", HTTP_AUTHORIZATION="Bearer cmx_wrong")
    assert wrong.status_code == 401
    assert wrong.json()["error"] == "invalid_token"
    assert wrong["WWW-Authenticate"].startswith("Bearer")
    basic = client.get("/metrics", HTTP_AUTHORIZATION=f"Basic {TOKEN}")
    assert basic.status_code == 401
    missing = client.get("/metrics")
    assert missing.status_code == 401
    assert missing.json()["error"] == "missing_token"
    text = scrape(client)
    assert 'cardloop_callback_over_budget_total{route="long_connection"}' in text
    assert "# TYPE cardloop_card_update_queue_depth gauge" in text


@pytest.mark.django_db
def test_the_allow_list_admits_its_addresses_without_a_token_and_refuses_others(client, settings):
    settings.CARDLOOP_METRICS_TOKEN = ""
    settings.CARDLOOP_METRICS_ALLOW = ["10.1.0.0/16", "192.0.2.7"]
    assert client.get("/metrics", REMOTE_ADDR="10.1.200.3").status_code == 200
    assert client.get("/metrics", REMOTE_ADDR="192.0.2.7").status_code == 200
    refused = client.get("/metrics", REMOTE_ADDR="192.0.2.8")
    assert refused.status_code == 403
    assert refused.json()["error"] == "address_not_allowed"
    # a token when none is configured is not a way in either
    assert (
        client.get("/metrics", REMOTE_ADDR="192.0.2.8", HTTP_AUTHORIZATION="Bearer x").status_code
        == 401
    )


def test_a_malformed_allow_list_entry_is_a_system_check_error(settings):
    from cardloop.checks import check_metrics_allow

    settings.CARDLOOP_METRICS_ALLOW = ["10.0.0.0/8", "not-an-address"]
    assert [e.id for e in check_metrics_allow()] == ["cardloop.E010"]


@pytest.mark.django_db
def test_database_gauges_are_read_at_scrape_time_by_destination_and_kind(
    client, metrics_token, make_bot
):
    bot = make_bot()
    hook = WebhookDestination.objects.create(
        name="ops-hook",
        url="https://hooks.example.com/secret-path?k=s3cr3t",
        event_types=["turn.completed"],
    )
    before = scrape(client)
    assert value(before, "cardloop_outbox_pending", destination=str(hook.pk)) == 0
    with transaction.atomic():
        for n in range(3):
            emit("turn.completed", f"evt_metrics_{n}", {}, bot=bot, destination_ids=[hook.pk])
    OutboxItem.objects.filter(pk=OutboxItem.objects.order_by("pk").first().pk).update(
        status=WorkStatus.DEAD
    )
    OutboxItem.objects.filter(status=WorkStatus.PENDING).update(
        created_at=timezone.now() - timedelta(minutes=10)
    )
    card = CardEntity.objects.create(bot=bot, card_id="card_m", open_message_id="om_m")
    CardUpdate.objects.create(card=card, card_json={}, status=WorkStatus.DEAD)
    CardUpdate.objects.create(card=card, card_json={}, status=WorkStatus.FAILED)
    CardUpdate.objects.create(
        card=card, card_json={}, created_at=timezone.now() - timedelta(seconds=90)
    )
    Interaction.objects.create(
        public_id="int_metrics_1",
        bot=bot,
        kind="approval",
        channel="feishu",
        chat_id="oc_metrics",
        title="Run it?",
        expires_at=timezone.now() + timedelta(hours=1),
    )

    text = scrape(client)
    dest = str(hook.pk)
    assert value(text, "cardloop_outbox_pending", destination=dest) == 2
    assert value(text, "cardloop_outbox_dead", destination=dest) == 1
    assert 590 < value(text, "cardloop_outbox_oldest_pending_seconds", destination=dest) < 700
    assert (
        value(
            text,
            "cardloop_webhook_destination_info",
            destination=dest,
            name="ops-hook",
            enabled="true",
        )
        == 1
    )
    assert value(text, "cardloop_card_update_queue_depth") == 1
    assert value(text, "cardloop_card_updates_dead") == 1
    assert value(text, "cardloop_card_updates_failed") == 1
    assert 85 < value(text, "cardloop_card_update_oldest_seconds") < 200
    assert value(text, "cardloop_interactions_pending", kind="approval") == 1
    assert value(text, "cardloop_interactions_pending", kind="ask") == 0
    assert value(text, "cardloop_panels_connected") == 0
    assert "cardloop_alerts_firing" in text and "cardloop_review_items" in text
    # no URL, secret or chat id ends up in a label
    for secret_part in ("hooks.example.com", "s3cr3t", "oc_metrics", bot.app_id):
        assert secret_part not in text


def _count(text: str, kind: str, route: str = "http") -> float:
    return value(text, "cardloop_callback_answer_seconds_count", route=route, kind=kind)


def test_a_click_is_counted_by_kind_and_a_bad_signature_by_reason(
    client, metrics_token, lark_callback
):
    before = scrape(client)
    click = feishu.payload(
        "card_action_feedback_click", {"event.action.value.delivery": "del_metrics_missing"}
    )
    assert lark_callback(click).status_code == 200
    unknown = feishu.payload(
        "card_action_feedback_click", {"event.action.value.kind": "no_such_kind_ou_x"}
    )
    assert lark_callback(unknown).status_code == 200
    forged = lark_callback(
        feishu.payload("card_action_feedback_click"), headers={"X-Lark-Signature": "0" * 64}
    )
    assert forged.status_code == 401
    after = scrape(client)
    assert _count(after, "feedback") == _count(before, "feedback") + 1
    assert _count(after, "unknown") == _count(before, "unknown") + 1
    refused = "cardloop_callback_refused_total"
    assert value(after, refused, reason="invalid_signature") == (
        value(before, refused, reason="invalid_signature") + 1
    )
    # the callback's ids and the unregistered kind never become label values
    for id_part in ("del_metrics_missing", "no_such_kind", "ou_", "om_"):
        assert id_part not in after


def test_a_click_past_the_budget_counts_as_over_budget_on_both_http_paths(
    client, metrics_token, lark_callback, register_card_handler, settings
):
    settings.CARDLOOP_CALLBACK_BUDGET = 0.3

    def slow(action):
        time.sleep(0.8)

    register_card_handler("metrics_slow", slow)
    over = "cardloop_callback_over_budget_total"
    before = scrape(client)
    body = feishu.payload("card_action_feedback_click", {"event.action.value.kind": "metrics_slow"})
    assert "toast" in lark_callback(body).json()  # Django's view (WSGI, test client)
    status, _headers, answer = asyncio.run(
        feishu.apost_callback(
            feishu.APP_ID,
            feishu.payload(
                "card_action_feedback_click", {"event.action.value.kind": "metrics_slow"}
            ),
        )
    )  # the ASGI route Daphne serves
    assert status == 200 and answer["toast"]["type"] == "info"
    time.sleep(1.0)  # the ASGI route records the answer once the handler's thread finished
    after = scrape(client)
    assert value(after, over, route="http") == value(before, over, route="http") + 2
    assert _count(after, "metrics_slow") == _count(before, "metrics_slow") + 2
    # both answered at the budget, not when the handler finished
    answered = value(
        after,
        "cardloop_callback_answer_seconds_bucket",
        route="http",
        kind="metrics_slow",
        le="0.5",
    ) - value(
        before,
        "cardloop_callback_answer_seconds_bucket",
        route="http",
        kind="metrics_slow",
        le="0.5",
    )
    assert answered == 2


def test_a_child_process_leaves_its_parents_private_metrics_directory_alone():
    """A `serve` started by a process without `PROMETHEUS_MULTIPROC_DIR` inherits that
    process's private directory; clearing it would delete the parent's live files."""
    import os
    import subprocess
    import sys

    from plumbing import metrics

    if metrics.OWNER_ENV not in os.environ:
        pytest.skip("PROMETHEUS_MULTIPROC_DIR was set from outside: no private directory")
    metrics.count_refused("invalid_signature")
    files = sorted(metrics.ensure_directory().glob("*.db"))
    assert files
    child = subprocess.run(
        [sys.executable, "-c", "from plumbing import metrics; print(metrics.clear_directory())"],
        env=os.environ.copy(),
        capture_output=True,
        text=True,
        check=True,
    )
    assert child.stdout.strip() == "0"
    assert all(file.exists() for file in files)
