"""A verdict click costs two write transactions: its durable claim, and one holding the rule
checks, the revision, the latest feedback, the event, the outbox rows, the card update and the
claim's answer (real ingress, real database, every thread counted)."""

from __future__ import annotations

import pytest

from feedback.models import Revision
from interactions.models import InboundEvent
from tests.transactions import counted_transactions

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_verdict_click_is_two_write_transactions_and_its_answer_commits_with_the_revision(
    delivery, click, monkeypatch
):
    with counted_transactions(monkeypatch) as seen:
        status, answer = click(delivery, "conclusive_usable")
    assert status == 200 and answer["toast"]["type"] == "success"
    assert Revision.objects.count() == 1
    claim = InboundEvent.objects.get(event_type="card.action.trigger")
    assert claim.status == InboundEvent.Status.ANSWERED
    assert seen.total == 2, seen.statements
