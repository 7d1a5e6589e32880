"""Worker terminals and turn.completed: either arrival order, duplicates, conflicts, several
deliveries per turn, proactive sends, COALESCE of usage/duration, the API."""

from __future__ import annotations

import json
import threading

import pytest
from django.db import connection, transaction

from feedback import terminals
from feedback.envelopes import stable_event_id
from feedback.events import NotInTransaction
from feedback.models import Delivery, Event, OutboxItem, WorkerTerminal

URL = "/api/v1/turns/terminal"


def _post(client, **body):
    body.setdefault("session_id", "sess-1")
    body.setdefault("turn_id", "turn-1")
    body.setdefault("status", "completed")
    return client.post(URL, body, format="json")


def _send(delivery):
    """What the deliveries code does: record the delivery as sent, then reconcile."""
    with transaction.atomic():
        Delivery.objects.filter(pk=delivery.pk).update(status=Delivery.Status.SENT)
        delivery.refresh_from_db()
        return terminals.reconcile_delivery(delivery)


def _completed(delivery):
    return list(Event.objects.filter(type="turn.completed", delivery=delivery))


def test_terminal_after_the_delivery_emits_one_turn_completed(bot_client, make_delivery):
    delivery = make_delivery(bot_client.bot, session_id="sess-1", turn_id="turn-1")
    response = _post(bot_client, duration_ms=1234, usage={"input_tokens": 10})
    assert response.status_code == 201, response.json()
    body = response.json()
    event = Event.objects.get(type="turn.completed")
    assert body == {
        "status": "completed",
        "created": True,
        "turn_completed": [{"delivery_id": delivery.delivery_id, "event_id": event.event_id}],
    }
    assert event.event_id == stable_event_id(delivery.delivery_id, "completed")
    delivery.refresh_from_db()
    assert delivery.status == "completed"
    assert delivery.completed_at is not None
    assert (delivery.duration_ms, delivery.usage) == (1234, {"input_tokens": 10})


def test_delivery_after_the_terminal_emits_one_turn_completed(bot_client, make_delivery):
    assert _post(bot_client).status_code == 201
    assert not Event.objects.exists()
    delivery = make_delivery(
        bot_client.bot, session_id="sess-1", turn_id="turn-1", status=Delivery.Status.PENDING
    )
    event = _send(delivery)
    assert event is not None
    assert event.event_id == stable_event_id(delivery.delivery_id, "completed")
    assert _completed(delivery) == [event]
    assert delivery.status == "completed"  # the caller's instance is refreshed too
    assert _send(delivery) == event  # reconciling again changes nothing
    assert Event.objects.count() == 1


def test_a_delivery_not_yet_sent_waits_for_its_reconcile(bot_client, make_delivery):
    delivery = make_delivery(
        bot_client.bot, session_id="sess-1", turn_id="turn-1", status=Delivery.Status.PENDING
    )
    assert _post(bot_client).json()["turn_completed"] == []
    delivery.refresh_from_db()
    assert delivery.status == "pending"
    assert _send(delivery) is not None
    assert len(_completed(delivery)) == 1


def test_a_repeated_terminal_is_idempotent(bot_client, make_delivery):
    make_delivery(bot_client.bot, session_id="sess-1", turn_id="turn-1")
    first = _post(bot_client, duration_ms=5)
    second = _post(bot_client, duration_ms=999)
    assert (first.status_code, second.status_code) == (201, 200)
    assert second.json()["created"] is False
    assert second.json()["turn_completed"] == first.json()["turn_completed"]
    assert Event.objects.count() == 1
    assert WorkerTerminal.objects.get().duration_ms == 5


def test_a_conflicting_status_is_409_and_changes_nothing(bot_client, make_delivery):
    delivery = make_delivery(bot_client.bot, session_id="sess-1", turn_id="turn-1")
    assert _post(bot_client, status="completed").status_code == 201
    before = Delivery.objects.values().get(pk=delivery.pk)
    response = _post(bot_client, status="failed", duration_ms=1)
    assert response.status_code == 409
    assert response.json()["error"] == "terminal_status_conflict"
    assert "completed" in json.dumps(response.json()["detail"]["status"])
    assert WorkerTerminal.objects.get().status == "completed"
    assert Delivery.objects.values().get(pk=delivery.pk) == before
    assert Event.objects.count() == 1


def test_a_conflicting_status_before_any_delivery_is_409_too(bot_client):
    assert _post(bot_client, status="cancelled").status_code == 201
    assert _post(bot_client, status="ambiguous").status_code == 409


def test_several_deliveries_of_one_turn_each_get_their_own_event(bot_client, make_delivery):
    bot = bot_client.bot
    a = make_delivery(bot, session_id="sess-1", turn_id="turn-1", discriminator="part-1")
    b = make_delivery(bot, session_id="sess-1", turn_id="turn-1", discriminator="part-2")
    c = make_delivery(
        bot, session_id="sess-1", turn_id="turn-1", native_session_id="n2", status="pending"
    )
    other_turn = make_delivery(bot, session_id="sess-1", turn_id="turn-2")
    other_attempt = make_delivery(bot, session_id="sess-1", turn_id="turn-1", dispatch_attempt=1)
    response = _post(bot_client, status="failed")
    assert {e["delivery_id"] for e in response.json()["turn_completed"]} == {
        a.delivery_id,
        b.delivery_id,
    }
    _send(c)
    assert [len(_completed(d)) for d in (a, b, c, other_turn, other_attempt)] == [1, 1, 1, 0, 0]
    ids = set(Event.objects.values_list("event_id", flat=True))
    assert len(ids) == 3
    assert _post(bot_client, status="failed").json()["turn_completed"].__len__() == 3


def test_terminals_of_another_bot_do_not_touch_this_bots_deliveries(
    bot_client, make_bot, make_delivery
):
    other = make_bot(app_id="cli_other")
    delivery = make_delivery(other, session_id="sess-1", turn_id="turn-1")
    assert _post(bot_client).json()["turn_completed"] == []
    delivery.refresh_from_db()
    assert delivery.status == "sent"


def test_proactive_sends_never_get_turn_completed(bot_client, make_delivery):
    proactive = make_delivery(bot_client.bot, session_id="", turn_id="")
    assert _send(proactive) is None
    _post(bot_client, session_id="sess-1", turn_id="turn-1")
    assert not Event.objects.exists()
    proactive.refresh_from_db()
    assert proactive.status == "sent"


def test_terminal_without_usage_keeps_the_values_recorded_at_send_time(bot_client, make_delivery):
    delivery = make_delivery(
        bot_client.bot, session_id="sess-1", turn_id="turn-1", duration_ms=700, usage={"in": 3}
    )
    _post(bot_client)
    delivery.refresh_from_db()
    assert (delivery.duration_ms, delivery.usage) == (700, {"in": 3})
    data = json.loads(Event.objects.get().body)["data"]
    assert (data["duration_ms"], data["usage"]) == (700, {"in": 3})


def test_terminal_usage_replaces_send_time_values_when_present(bot_client, make_delivery):
    delivery = make_delivery(
        bot_client.bot, session_id="sess-1", turn_id="turn-1", duration_ms=700, usage={"in": 3}
    )
    _post(bot_client, duration_ms=900, usage={"in": 3, "out": 8})
    delivery.refresh_from_db()
    assert (delivery.duration_ms, delivery.usage) == (900, {"in": 3, "out": 8})


def test_turn_completed_payload_carries_ids_and_metadata_never_the_answer(
    bot_client, make_delivery
):
    from botadmin.models import Chat

    chat = Chat.objects.create(chat_id="oc_chat")
    delivery = make_delivery(
        bot_client.bot,
        session_id="sess-1",
        turn_id="turn-1",
        chat=chat,
        topic_id="omt_topic",
        model="gpt-x",
        cli_id="codex",
        cli_version="1.2",
        skill_name="triage",
        skill_version="3",
        workflow_id="wf",
        task_id="task",
        reasoning_effort="high",
        card_id="card_1",
    )
    _post(bot_client, completed_at="2025-03-01T15:59:59.5Z", duration_ms=42)
    envelope = json.loads(Event.objects.get().body)
    assert list(envelope) == ["id", "type", "version", "time", "data"]
    assert (envelope["type"], envelope["version"]) == ("turn.completed", 1)
    data = envelope["data"]
    assert data == {
        "delivery_id": delivery.delivery_id,
        "bot_app_id": "cli_test_app",
        "session_id": "sess-1",
        "turn_id": "turn-1",
        "attempt": 0,
        "status": "completed",
        "sent_at": data["sent_at"],
        "completed_at": "2025-03-01T15:59:59.500Z",
        "content_hash": delivery.content_hash,
        "platform_message_id": delivery.platform_message_id,
        "card_id": "card_1",
        "chat_id": "oc_chat",
        "topic_id": "omt_topic",
        "duration_ms": 42,
        "cli_id": "codex",
        "cli_version": "1.2",
        "model": "gpt-x",
        "reasoning_effort": "high",
        "skill_name": "triage",
        "skill_version": "3",
        "workflow_id": "wf",
        "task_id": "task",
    }


def test_turn_completed_fans_out_to_the_destinations_frozen_on_the_delivery(
    bot_client, make_delivery, make_destination
):
    frozen, _ = make_destination("https://a.example.com/hook")
    make_destination("https://b.example.com/hook")  # created after the send: not frozen
    unsubscribed, _ = make_destination("https://c.example.com/", event_types=["feedback.revised"])
    delivery = make_delivery(
        bot_client.bot,
        session_id="sess-1",
        turn_id="turn-1",
        webhook_destination_ids=[frozen.pk, unsubscribed.pk],
    )
    _post(bot_client)
    rows = OutboxItem.objects.filter(event__delivery=delivery)
    assert list(rows.values_list("destination_id", flat=True)) == [frozen.pk]
    assert rows.get().body == Event.objects.get().body


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"session_id": ""}, "session_id"),
        ({"turn_id": "x" * 129}, "turn_id"),
        ({"status": "done"}, "status"),
        ({"attempt": -1}, "attempt"),
        ({"duration_ms": -5}, "duration_ms"),
        ({"duration_ms": "soon"}, "duration_ms"),
        ({"usage": [1, 2]}, "usage"),
        ({"usage": {"k": "v" * 9000}}, "usage"),
        ({"completed_at": "yesterday"}, "completed_at"),
    ],
)
def test_bad_terminal_input_is_a_400_naming_the_field(bot_client, body, field):
    response = _post(bot_client, **body)
    assert response.status_code == 400
    assert response.json()["error"] == "invalid"
    assert field in response.json()["detail"]
    assert not WorkerTerminal.objects.exists()


def test_terminal_endpoint_needs_a_bot_key(client, admin_client, db):
    assert client.post(URL, {}, content_type="application/json").status_code == 401
    response = admin_client.post(URL, {}, content_type="application/json")
    assert response.status_code == 403
    assert response.json()["error"] == "forbidden"


@pytest.mark.django_db(transaction=True)
def test_reconcile_outside_a_transaction_is_refused(make_bot, make_delivery):
    delivery = make_delivery(make_bot(), session_id="s", turn_id="t")
    with pytest.raises(NotInTransaction):
        terminals.reconcile_delivery(delivery)


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_terminal_and_delivery_racing_still_yield_exactly_one_event(make_bot, make_delivery):
    """The terminal and the 'sent' transition commit concurrently, 25 times: both sides take
    the per-turn lock, so neither can miss the other."""
    bot = make_bot()
    for round_ in range(25):
        delivery = make_delivery(
            bot, session_id=f"race-{round_}", turn_id="t", status=Delivery.Status.PENDING
        )
        barrier = threading.Barrier(2)
        errors = []

        def terminal_side(session=f"race-{round_}"):
            try:
                barrier.wait()
                terminals.record_terminal(bot, session_id=session, turn_id="t", status="completed")
            except Exception as exc:  # noqa: BLE001 - reported by the test thread
                errors.append(exc)
            finally:
                connection.close()

        def delivery_side(delivery=delivery):
            try:
                barrier.wait()
                with transaction.atomic():
                    Delivery.objects.filter(pk=delivery.pk).update(status="sent")
                    delivery.refresh_from_db()
                    terminals.reconcile_delivery(delivery)
            except Exception as exc:  # noqa: BLE001 - reported by the test thread
                errors.append(exc)
            finally:
                connection.close()

        threads = [threading.Thread(target=terminal_side), threading.Thread(target=delivery_side)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert errors == []
        assert len(_completed(delivery)) == 1, f"round {round_}"
    assert connection.vendor == "postgresql"


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_concurrent_terminals_with_different_statuses_one_wins_one_conflicts(
    make_bot, make_delivery
):
    bot = make_bot()
    make_delivery(bot, session_id="s", turn_id="t")
    barrier = threading.Barrier(4)
    outcomes = []

    def post(status):
        try:
            barrier.wait()
            terminals.record_terminal(bot, session_id="s", turn_id="t", status=status)
            outcomes.append(("ok", status))
        except terminals.TerminalConflict:
            outcomes.append(("conflict", status))
        finally:
            connection.close()

    threads = [
        threading.Thread(target=post, args=(s,))
        for s in ("completed", "failed", "completed", "failed")
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    winner = WorkerTerminal.objects.get().status
    assert sorted(outcomes) == sorted(
        [("ok", winner), ("ok", winner)]
        + [("conflict", s) for s in ("completed", "failed") if s != winner] * 2
    )
    assert Event.objects.filter(type="turn.completed").count() == 1
