"""Admin of progress sessions and asks: read-only lists with filters, zh-hans strings, no
answer text shown."""

from __future__ import annotations

import pytest
from django.urls import reverse

from interactions.asks import service as asks
from interactions.models import ProgressSession
from interactions.tests.ask_helpers import *  # noqa: F403
from interactions.tests.ask_helpers import QUESTIONS, REQUESTER


@pytest.fixture
def world(make_bot, panel):
    bot = make_bot(app_id="cli_admin_asks")
    running = ProgressSession.objects.create(
        bot=bot, session_id="sess_run", receive_id="oc_x", requester_open_id=REQUESTER
    )
    ProgressSession.objects.create(
        bot=bot, session_id="sess_done", receive_id="oc_x", status="completed"
    )
    panel.connected.add(REQUESTER)
    pending = asks.register_ask(bot, "sess_run", questions=QUESTIONS).ask
    answered = asks.register_ask(bot, "sess_run", questions=QUESTIONS[:1]).ask
    asks.submit_answers(
        bot,
        answered.public_id,
        [{"selectedLabels": [], "customInput": "secret plan"}],
        via="panel",
        operator_open_id=REQUESTER,
    )
    return bot, running, pending, answered


def test_progress_sessions_are_listed_read_only_and_filtered_by_status(admin_client, world):
    _bot, running, pending, _answered = world
    url = reverse("admin:interactions_progresssession_changelist")
    page = admin_client.get(url).content.decode()
    assert "sess_run" in page and "sess_done" in page
    assert "进度会话" in page  # zh-hans by default
    only_running = admin_client.get(url, {"status__exact": "running"}).content.decode()
    assert "sess_run" in only_running and "sess_done" not in only_running
    detail = admin_client.get(
        reverse("admin:interactions_progresssession_change", args=[running.pk])
    ).content.decode()
    assert pending.public_id in detail and 'name="title"' not in detail
    assert admin_client.get(reverse("admin:interactions_progresssession_add")).status_code == 403


def test_asks_are_listed_filtered_and_answers_are_not_shown(admin_client, world):
    _bot, _running, pending, answered = world
    url = reverse("admin:interactions_ask_changelist")
    page = admin_client.get(url).content.decode()
    assert pending.public_id in page and answered.public_id in page
    only_pending = admin_client.get(url, {"status__exact": "pending"}).content.decode()
    assert pending.public_id in only_pending and answered.public_id not in only_pending
    panel_only = admin_client.get(url, {"surface": "panel_only"}).content.decode()
    assert pending.public_id in panel_only
    assert pending.public_id not in admin_client.get(url, {"surface": "card"}).content.decode()
    detail = admin_client.get(
        reverse("admin:interactions_ask_change", args=[answered.pk])
    ).content.decode()
    assert "secret plan" not in detail and "panel" in detail
    generic = admin_client.get(
        reverse("admin:interactions_interaction_change", args=[answered.pk])
    ).content.decode()
    assert "secret plan" not in generic
    assert (
        admin_client.post(reverse("admin:interactions_ask_delete", args=[pending.pk])).status_code
        == 403
    )
