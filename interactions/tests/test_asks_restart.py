"""Restarts. Cardloop restarting loses nothing: a pending ask lives in the database and a
fresh `card_worker` process (which never saw it) renders its form from there. The agent
runtime restarting (`recovering`) invalidates the session's asks; a fresh worker renders the
recovery text without forms, and an old form's submit answers 问题已失效."""

from __future__ import annotations

import subprocess
import sys

import pytest

from interactions.asks import handlers as ask_handlers
from interactions.asks import progress as progress_sessions
from interactions.asks import service as asks
from interactions.callbacks import registry
from interactions.models import Ask, CardEntity, ProgressSession
from interactions.tests.ask_helpers import *  # noqa: F403
from interactions.tests.ask_helpers import QUESTIONS, REQUESTER, SESSION, forms_of
from tests import feishu

pytestmark = pytest.mark.django_db(transaction=True)


def worker_once(stub):
    from tests.processes import child_env

    CardEntity.objects.update(next_send_at="2000-01-01T00:00:00Z")
    result = subprocess.run(
        [sys.executable, "manage.py", "card_worker", "--once"],
        env=child_env(CARDLOOP_LARK_DOMAIN=stub.url),
        capture_output=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]


def test_pending_ask_survives_a_restart_and_recovering_invalidates_it(
    lark_stub, lark_bot, progress, panel
):
    ask = asks.register_ask(lark_bot, SESSION, questions=QUESTIONS).ask
    worker_once(lark_stub)
    card_id = ProgressSession.objects.select_related("card").get(pk=progress.pk).card.card_id
    assert [f["name"] for f in forms_of(lark_stub.cards[card_id].card)] == ["ask_0"]
    assert [a.public_id for a in asks.open_asks_for(lark_bot, REQUESTER)] == [ask.public_id]

    progress_sessions.update_progress(lark_bot, SESSION, status="recovering")
    worker_once(lark_stub)
    card = lark_stub.cards[card_id].card
    assert forms_of(card) == []
    assert "progress_recovery" in [e.get("element_id") for e in card["body"]["elements"]]
    assert lark_stub.cards[card_id].sequences == [1, 2]

    payload = feishu.payload(
        "card_action_ask_submit",
        {
            "event.action.value.requestId": ask.public_id,
            "event.context.open_message_id": progress.card.open_message_id,
        },
    )
    answer = ask_handlers.on_ask_action(registry.CardAction.from_payload(lark_bot, payload))
    assert answer.toast.zh_cn == "问题已失效"
    assert Ask.objects.get(pk=ask.pk).status == "cancelled"
