"""Concurrency of Slack clicks on PostgreSQL, each request in its own thread and connection
through the real view: 20 identical clicks resolve once, and an API answer racing a Slack
form submit (200 rounds) leaves exactly one winner each time, the loser told."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.db import connections
from django.test import Client
from django.utils import translation

from interactions.approvals import service as approvals
from interactions.lifecycle import resolve as lifecycle
from interactions.models import CardEntity, InboundEvent, Interaction
from interactions.tests.ia_helpers import (
    FORM_FIELDS,
    make_interaction,  # noqa: F401 - fixture
)
from interactions.tests.slack_helpers import *  # noqa: F403
from interactions.tests.slack_helpers import APP_ID, CHAT, REQUESTER, click_payload, form_body, sign

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

PATH = f"/slack/{APP_ID}/interactivity"


def _post(body: bytes, gate: threading.Barrier | None = None) -> int:
    try:
        client = Client()
        headers = {k.replace("-", "_").upper(): v for k, v in sign(body).items()}
        if gate is not None:
            gate.wait(30)
        response = client.post(
            PATH,
            data=body,
            content_type="application/x-www-form-urlencoded",
            **{f"HTTP_{k}": v for k, v in headers.items()},
        )
        response.close()
        return response.status_code
    finally:
        connections.close_all()


def _shown(slack_app, ia, ts: str) -> Interaction:
    card = CardEntity.objects.create(
        bot=slack_app.bot,
        channel="slack",
        send_uuid=f"u_{ia.pk}",
        address={"channel": CHAT, "ts": ts},
    )
    return approvals.attach_card(ia, card)


def test_twenty_identical_clicks_resolve_once(slack_app, slack_stub, make_interaction):  # noqa: F811
    ia = _shown(
        slack_app,
        make_interaction(slack_app.bot, channel="slack", chat_id=CHAT, requester_open_id=REQUESTER),
        "1700000000.000001",
    )
    ia = Interaction.objects.select_related("card").get(pk=ia.pk)
    body = form_body(
        click_payload(ia, ia.card, "approve", response_url=slack_stub.response_url("c"))
    )
    gate = threading.Barrier(20)
    with ThreadPoolExecutor(20) as pool:
        statuses = list(pool.map(lambda _i: _post(body, gate), range(20)))
    assert statuses == [200] * 20
    assert InboundEvent.objects.count() == 1
    ia.refresh_from_db()
    assert ia.status == Interaction.Status.RESOLVED and ia.resolution["operator"] == REQUESTER


ROUNDS = 200


def test_an_api_answer_racing_a_slack_submit_has_one_winner_and_the_loser_is_told(
    slack_app,
    slack_stub,
    make_interaction,  # noqa: F811
):
    with translation.override("zh-hans"):
        lost_text = str(lifecycle.REFUSALS["already_final"])
    wins = {"slack": 0, "api": 0}
    for n in range(ROUNDS):
        ia = make_interaction(
            slack_app.bot,
            kind="form",
            channel="slack",
            chat_id=CHAT,
            requester_open_id=REQUESTER,
            fields=FORM_FIELDS,
        )
        ia = _shown(slack_app, ia, f"1700000001.{n:06d}")
        ia = Interaction.objects.select_related("card").get(pk=ia.pk)
        key = f"r{n}"
        state = {
            "f_env": {"f_env_v": {"type": "static_select", "selected_option": {"value": "prod"}}}
        }
        body = form_body(
            click_payload(
                ia,
                ia.card,
                "submit",
                response_url=slack_stub.response_url(key),
                state=state,
                action_ts=f"1700000002.{n:06d}",
            )
        )
        gate = threading.Barrier(2)

        def api():
            try:
                gate.wait(30)
                try:
                    return approvals.answer(
                        Interaction.objects.get(pk=ia.pk),
                        form={"env": "staging"},
                        via="api",
                        check_operator=False,
                    ).won
                except lifecycle.Refused as refused:
                    assert refused.code == "already_final"
                    return False
            finally:
                connections.close_all()

        with ThreadPoolExecutor(2) as pool:
            slack_future = pool.submit(_post, body, gate)
            api_won = pool.submit(api).result()
            assert slack_future.result() == 200
        final = Interaction.objects.get(pk=ia.pk)
        assert final.status == Interaction.Status.RESOLVED
        told = [b["text"] for k, b in slack_stub.responses if k == key]
        assert len(told) == 1
        if api_won:
            wins["api"] += 1
            assert final.resolution["via"] == "api"
            assert final.resolution["value"]["env"] == "staging"
            assert told == [lost_text]  # the Slack submitter is told it was already answered
        else:
            wins["slack"] += 1
            assert final.resolution["via"] == "card" and final.resolution["value"]["env"] == "prod"
            assert told != [lost_text]
    assert wins["slack"] + wins["api"] == ROUNDS
