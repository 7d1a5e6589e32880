"""A destination created in the admin receives signed turn.completed and feedback.revised
events (the delivery and revision are written with the ORM the way the deliveries code does)."""

from __future__ import annotations

import re

import pytest
from django.db import transaction
from standardwebhooks.webhooks import Webhook

from feedback.events import emit_feedback_revised
from feedback.models import Revision, WebhookAttempt, WebhookDestination
from feedback.outbox import effective_destinations


@pytest.mark.usefixtures("webhook_settings", "dns")
def test_a_destination_created_in_the_admin_receives_signed_turn_and_feedback_events(
    admin_client, bot_client, receiver, make_delivery, make_worker
):
    page = admin_client.post(
        "/admin/feedback/webhookdestination/add/",
        {
            "name": "Team receiver",
            "url": receiver.url("/cardloop"),
            "enabled": "on",
            "event_types": ["turn.completed", "feedback.revised"],
            "include_comment": "on",
            "timeout_s": "5",
            "secret_action": "generate",
            "bots": [bot_client.bot.pk],
        },
    ).content.decode()
    secret = re.search(r'id="webhook-secret"[^>]*>(whsec_[^<]+)<', page).group(1)
    destination = WebhookDestination.objects.get()

    delivery = make_delivery(
        bot_client.bot,
        session_id="sess-e2e",
        turn_id="turn-1",
        webhook_destination_ids=effective_destinations(bot_client.bot, None),
    )
    assert delivery.webhook_destination_ids == [destination.pk]
    response = bot_client.post(
        "/api/v1/turns/terminal",
        {"session_id": "sess-e2e", "turn_id": "turn-1", "status": "completed"},
        format="json",
    )
    assert response.status_code == 201
    with transaction.atomic():
        revision = Revision.objects.create(
            revision_id="rev_e2e",
            delivery=delivery,
            operator_open_id="ou_reviewer",
            revision=1,
            verdict_key="wrong",
            semantic="negative",
            reason_key="inaccurate",
            comment="missed the second question",
            callback_key="cb_e2e",
        )
        emit_feedback_revised(revision)

    make_worker().run_until_idle()

    assert receiver.wait_for(2)
    received = {}
    for request in receiver.requests:
        payload = Webhook(secret).verify(request.body, request.headers)
        received[payload["type"]] = payload
    assert set(received) == {"turn.completed", "feedback.revised"}
    assert received["turn.completed"]["data"]["delivery_id"] == delivery.delivery_id
    assert received["feedback.revised"]["data"]["comment"] == "missed the second question"
    log = admin_client.get(
        "/admin/feedback/webhookattempt/", {"destination__id__exact": destination.pk}
    )
    assert log.context["cl"].result_count == 2
    assert set(WebhookAttempt.objects.values_list("outcome", flat=True)) == {"delivered"}


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("webhook_settings", "dns")
def test_the_readme_demo_flow_reaches_an_admin_created_destination(
    admin_client, feedback_api, click, receiver, make_worker
):
    """Issue 3 + 4 "done when": a delivery created through POST /api/v1/deliveries, its
    terminal through POST /api/v1/turns/terminal and real clicks through the ingress produce
    signed turn.completed and feedback.revised events at a destination made in the admin,
    visible in its attempt log."""
    from feedback.models import Delivery
    from feedback.tests.conftest import drain_card_updates

    page = admin_client.post(
        "/admin/feedback/webhookdestination/add/",
        {
            "name": "Demo receiver",
            "url": receiver.url("/cardloop"),
            "enabled": "on",
            "event_types": ["turn.completed", "feedback.revised"],
            "timeout_s": "5",
            "secret_action": "generate",
            "bots": [feedback_api.bot.pk],
        },
    ).content.decode()
    secret = re.search(r'id="webhook-secret"[^>]*>(whsec_[^<]+)<', page).group(1)
    destination = WebhookDestination.objects.get()

    sent = feedback_api.deliver(session_id="sess-demo", turn_id="turn-1")
    assert sent.status_code == 201, sent.json()
    delivery = Delivery.objects.get(delivery_id=sent.json()["delivery_id"])
    assert delivery.webhook_destination_ids == [destination.pk]
    terminal = feedback_api.post(
        "/api/v1/turns/terminal",
        {"session_id": "sess-demo", "turn_id": "turn-1", "status": "completed"},
        format="json",
    )
    assert terminal.status_code == 201
    assert click(delivery, "incorrect")[1]["toast"]["type"] == "success"
    delivery.refresh_from_db()
    status, answer = click.detail(
        delivery,
        delivery.current_revision.revision_id,
        {"fb_reason": "wrong_facts", "fb_comment": "private words"},
    )
    assert answer["toast"]["type"] == "success"
    assert drain_card_updates() >= 1

    make_worker().run_until_idle()

    assert receiver.wait_for(3)
    received = [Webhook(secret).verify(r.body, r.headers) for r in receiver.requests]
    by_type = sorted(p["type"] for p in received)
    assert by_type == ["feedback.revised", "feedback.revised", "turn.completed"]
    revised = [p["data"] for p in received if p["type"] == "feedback.revised"]
    assert {d["delivery_id"] for d in revised} == {delivery.delivery_id}
    assert sorted(d["revision"] for d in revised) == [1, 2]
    assert all("comment" not in d for d in revised)  # the destination did not opt in
    log = admin_client.get(
        "/admin/feedback/webhookattempt/", {"destination__id__exact": destination.pk}
    )
    assert log.status_code == 200
    assert log.context["cl"].result_count == 3
    assert set(WebhookAttempt.objects.values_list("outcome", flat=True)) == {"delivered"}
