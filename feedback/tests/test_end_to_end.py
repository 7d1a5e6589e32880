"""Issue 4 "done when", up to what exists today: a destination created in the admin receives
signed turn.completed and feedback.revised events (the deliveries API comes with issue 3, so
the delivery and revision are written with the ORM the way that code will)."""

from __future__ import annotations

import re

import pytest
from django.db import transaction
from standardwebhooks.webhooks import Webhook

from botadmin.models import WebhookDestination
from feedback.events import emit_feedback_revised
from feedback.models import Revision, WebhookAttempt
from feedback.outbox import effective_destinations


@pytest.mark.usefixtures("webhook_settings", "dns")
def test_a_destination_created_in_the_admin_receives_signed_turn_and_feedback_events(
    admin_client, bot_client, receiver, make_delivery, make_worker
):
    page = admin_client.post(
        "/admin/botadmin/webhookdestination/add/",
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
