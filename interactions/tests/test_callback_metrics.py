"""Counters the interactions layer keeps for `/metrics`: answers over the long connection are
labelled `long_connection`, and the card worker counts its attempts by result."""

from __future__ import annotations

import json

import pytest
from django.utils import timezone

from cardloop.tests.metrics_scrape import value
from interactions.cardqueue import service as cards
from interactions.cardqueue import worker as cardworker
from interactions.models import CardEntity
from interactions.tests.test_cardjson import feedback_card
from interactions.tests.test_ws import _answer_of, _frame, _serve
from plumbing import metrics
from tests import feishu


def _text() -> str:
    body, _content_type = metrics.render()
    return body.decode()


@pytest.mark.django_db(transaction=True)
def test_a_click_over_the_long_connection_is_counted_under_its_own_route(lark_bot):
    def count(route):
        return value(
            _text(), "cardloop_callback_answer_seconds_count", route=route, kind="feedback"
        )

    before = {route: count(route) for route in metrics.ROUTES}
    click = feishu.payload(
        "card_action_feedback_click", {"event.action.value.delivery": "del_ws_metrics"}
    )
    (written,) = _serve(lark_bot, _frame(click))
    assert "toast" in _answer_of(written)
    assert count("long_connection") == before["long_connection"] + 1
    assert count("http") == before["http"]


@pytest.mark.django_db
def test_the_card_worker_counts_attempts_by_result(lark_stub, lark_bot):
    entity = cards.send_card(
        lark_bot, feedback_card(), receive_id="oc_group_chat", purpose="feedback"
    )

    def attempts(result):
        return value(_text(), "cardloop_card_update_attempts_total", result=result)

    done, failed = attempts("done"), attempts("failed")
    cards.enqueue_elements(entity, {"fb_prompt": {"tag": "markdown", "content": "ok"}})
    assert cardworker.run_due() == 1
    lark_stub.fail("PUT", "/open-apis/cardkit/v1/cards/", code=230099, msg="card content invalid")
    cards.enqueue_elements(entity, {"fb_prompt": {"tag": "markdown", "content": "refused"}})
    CardEntity.objects.update(next_send_at=timezone.now())  # as if the pacing wait elapsed
    assert cardworker.run_due() == 1
    assert attempts("done") == done + 1
    assert attempts("failed") == failed + 1
    assert json.dumps(entity.card_id) not in _text()
