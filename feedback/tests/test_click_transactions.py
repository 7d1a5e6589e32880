"""A verdict click costs two write transactions: its durable claim, and one holding the rule
checks, the revision, the latest feedback, the event, the outbox rows, the card update and the
claim's answer (real ingress, real database, every thread counted)."""

from __future__ import annotations

import pytest

from feedback.models import Delivery, Revision
from interactions.models import InboundEvent
from tests.transactions import counted_transactions

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def delivery(feedback_api):
    response = feedback_api.deliver()
    assert response.status_code == 201, response.json()
    return Delivery.objects.get(delivery_id=response.json()["delivery_id"])


def test_a_verdict_click_is_two_write_transactions_and_its_answer_commits_with_the_revision(
    delivery, click, monkeypatch
):
    with counted_transactions(monkeypatch) as seen:
        status, answer = click(delivery, "conclusive_usable")
    assert status == 200 and answer["toast"]["type"] == "success"
    assert Revision.objects.count() == 1
    claim = InboundEvent.objects.get(event_type="card.action.trigger")
    assert claim.status == InboundEvent.Status.ANSWERED
    print(seen.statements)
    assert seen.total == 2, seen.statements
