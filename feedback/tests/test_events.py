"""Durable events: emit inside the fact's transaction, stable ids, one serialization, private
comment text only for opted-in destinations, fan-out rules, and the events feed."""

from __future__ import annotations

import json
import threading

import pytest
from django.db import connection, transaction

from botadmin.models import Team
from feedback import events
from feedback.envelopes import stable_event_id
from feedback.events import NotInTransaction, emit, emit_feedback_revised
from feedback.models import Event, OutboxItem, Revision
from feedback.outbox import effective_destinations

FEED = "/api/v1/events"


@pytest.mark.django_db(transaction=True)
def test_emit_outside_a_transaction_is_refused_and_writes_nothing():
    with pytest.raises(NotInTransaction):
        emit("interaction.resolved", "evt_x", {"a": 1})
    assert not Event.objects.exists()


def test_emit_is_idempotent_on_the_event_id(make_destination, db):
    make_destination("https://a.example.com/")
    with transaction.atomic():
        first, created = emit("interaction.resolved", "evt_same", {"n": 1})
        again, created_again = emit("interaction.resolved", "evt_same", {"n": 2})
    assert (created, created_again) == (True, False)
    assert again.pk == first.pk
    assert json.loads(again.body)["data"] == {"n": 1}
    assert OutboxItem.objects.count() == 1


def test_stable_event_ids_depend_only_on_what_the_event_describes():
    assert stable_event_id("del_1", "completed") == stable_event_id("del_1", "completed")
    assert stable_event_id("del_1", "completed") != stable_event_id("del_1", "failed")
    assert stable_event_id("del_1", "completed").startswith("evt_")


def test_envelope_is_serialized_once_and_rows_carry_the_same_bytes(make_destination, emit_event):
    make_destination("https://a.example.com/")
    make_destination("https://b.example.com/")
    event = emit_event("interaction.resolved", {"text": "中文", "n": 1})
    envelope = json.loads(event.body)
    assert list(envelope) == ["id", "type", "version", "time", "data"]
    assert envelope["time"].endswith("Z")
    assert "中文" in event.body  # UTF-8, not \\u escapes
    assert {row.body for row in OutboxItem.objects.filter(event=event)} == {event.body}


def _revision(bot, make_delivery, destination_ids, comment="the answer was wrong"):
    delivery = make_delivery(bot, webhook_destination_ids=destination_ids)
    return Revision.objects.create(
        revision_id="rev_1",
        delivery=delivery,
        operator_open_id="ou_operator",
        revision=1,
        verdict_key="wrong",
        semantic="negative",
        reason_key="inaccurate",
        comment=comment,
        callback_key="cb_1",
    )


def test_comment_text_reaches_only_opted_in_destinations(make_bot, make_delivery, make_destination):
    opted, _ = make_destination("https://opted.example.com/", include_comment=True)
    plain, _ = make_destination("https://plain.example.com/")
    revision = _revision(make_bot(), make_delivery, [opted.pk, plain.pk])
    with transaction.atomic():
        event, created = emit_feedback_revised(revision)
    assert created
    assert "the answer was wrong" not in event.body
    data = json.loads(event.body)["data"]
    assert data["has_comment"] is True
    assert "comment" not in data
    assert data["operator_open_id"] == "ou_operator"
    assert (data["verdict_key"], data["semantic"], data["reason_key"]) == (
        "wrong",
        "negative",
        "inaccurate",
    )
    opted_body = OutboxItem.objects.get(destination=opted).body
    plain_body = OutboxItem.objects.get(destination=plain).body
    assert plain_body == event.body
    assert json.loads(opted_body)["data"] == {**data, "comment": "the answer was wrong"}
    assert json.loads(opted_body)["id"] == event.event_id


def test_comment_never_reaches_the_feed(bot_client, make_delivery, make_destination):
    opted, _ = make_destination("https://opted.example.com/", include_comment=True)
    revision = _revision(bot_client.bot, make_delivery, [opted.pk])
    with transaction.atomic():
        emit_feedback_revised(revision)
    response = bot_client.get(FEED)
    assert response.status_code == 200
    assert b"the answer was wrong" not in response.content
    assert response.json()["events"][0]["type"] == "feedback.revised"


def test_unknown_private_fields_are_a_programming_error(db):
    with transaction.atomic(), pytest.raises(ValueError):
        emit("feedback.revised", "evt_p", {"a": 1}, private={"operator_email": "x"})


def test_fan_out_skips_unsubscribed_and_disabled_destinations(make_destination, emit_event):
    subscribed, _ = make_destination("https://a.example.com/", event_types=["interaction.resolved"])
    make_destination("https://b.example.com/", event_types=["turn.completed"])
    make_destination("https://c.example.com/", enabled=False)
    event = emit_event("interaction.resolved")
    assert list(OutboxItem.objects.values_list("destination_id", flat=True)) == [subscribed.pk]
    assert OutboxItem.objects.get().event_id == event.pk


def test_effective_destinations_follow_team_and_bot_assignment(make_bot, make_destination):
    bot, other_bot = make_bot(app_id="cli_a"), make_bot(app_id="cli_b")
    team, other_team = Team.objects.create(name="T1"), Team.objects.create(name="T2")
    everyone, _ = make_destination("https://all.example.com/")
    for_bot, _ = make_destination("https://bot.example.com/", bots=[bot])
    for_team, _ = make_destination("https://team.example.com/", teams=[team])
    make_destination("https://off.example.com/", enabled=False)
    make_destination("https://other.example.com/", bots=[other_bot], teams=[other_team])
    assert effective_destinations(bot, team) == sorted([everyone.pk, for_bot.pk, for_team.pk])
    assert effective_destinations(bot, None) == sorted([everyone.pk, for_bot.pk])
    assert effective_destinations(make_bot(app_id="cli_c"), None) == [everyone.pk]


def test_interaction_resolved_through_the_sink_uses_the_current_effective_set(
    make_bot, make_destination
):
    from interactions import events as interaction_events

    bot = make_bot()
    mine, _ = make_destination("https://mine.example.com/", bots=[bot])
    make_destination("https://theirs.example.com/", bots=[make_bot(app_id="cli_z")])
    with transaction.atomic():
        event, created = interaction_events.emit(
            "interaction.resolved", "evt_int_1", {"interaction_id": "int_1"}, bot=bot
        )
    assert created
    assert list(OutboxItem.objects.values_list("destination_id", flat=True)) == [mine.pk]


# ---------------------------------------------------------------------------------------------
# Feed
# ---------------------------------------------------------------------------------------------


def _emit_many(bot, n, type_="interaction.resolved"):
    ids = []
    with transaction.atomic():
        for i in range(n):
            event, _ = emit(type_, stable_event_id(type_, bot.pk, i), {"i": i}, bot=bot)
            ids.append(event.event_id)
    return ids


def test_feed_pages_through_events_in_order(bot_client):
    ids = _emit_many(bot_client.bot, 7)
    seen, cursor, pages = [], None, 0
    while True:
        params = {"limit": 3} | ({"after": cursor} if cursor else {})
        body = bot_client.get(FEED, params).json()
        seen += [e["id"] for e in body["events"]]
        cursor = body["next"]
        pages += 1
        if not body["has_more"]:
            break
    assert seen == ids
    assert pages == 3
    empty = bot_client.get(FEED, {"after": cursor}).json()
    assert empty == {"events": [], "next": cursor, "has_more": False}
    more = _emit_many(bot_client.bot, 1, "turn.completed")
    assert [e["id"] for e in bot_client.get(FEED, {"after": cursor}).json()["events"]] == more


def test_feed_items_are_the_stored_envelopes(bot_client):
    _emit_many(bot_client.bot, 1)
    event = Event.objects.get()
    response = bot_client.get(FEED)
    assert response["Content-Type"] == "application/json"
    assert event.body.encode() in response.content
    assert response.json()["events"] == [json.loads(event.body)]


def test_feed_filters_by_type(bot_client):
    _emit_many(bot_client.bot, 2, "interaction.resolved")
    turn = _emit_many(bot_client.bot, 2, "turn.completed")
    body = bot_client.get(FEED, {"types": "turn.completed"}).json()
    assert [e["id"] for e in body["events"]] == turn
    body = bot_client.get(FEED, {"types": "turn.completed,interaction.resolved"}).json()
    assert len(body["events"]) == 4


def test_a_bot_key_sees_only_its_bots_events_and_staff_see_all(bot_client, admin_client, make_bot):
    mine = _emit_many(bot_client.bot, 2)
    theirs = _emit_many(make_bot(app_id="cli_other"), 2)
    assert [e["id"] for e in bot_client.get(FEED).json()["events"]] == mine
    assert [e["id"] for e in admin_client.get(FEED).json()["events"]] == mine + theirs


def test_test_events_are_not_in_the_feed(admin_client, make_destination, settings, db):
    from feedback import outbox

    destination, _ = make_destination("https://unreachable.cardloop.test/")
    settings.CARDLOOP_WEBHOOK_ALLOW_PRIVATE = False
    outbox.send_test_event(destination, actor=None)
    assert Event.objects.filter(type="webhook.test").exists()
    assert admin_client.get(FEED).json()["events"] == []


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"after": "garbage"}, "after"),
        ({"after": "ZTE6MTox"[:-1] + "!"}, "after"),
        ({"after": events.encode_cursor(12345)[:-2]}, "after"),
        ({"types": "turn.completed,webhook.test"}, "types"),
        ({"types": "bogus"}, "types"),
        ({"limit": "0"}, "limit"),
        ({"limit": "1001"}, "limit"),
        ({"limit": "many"}, "limit"),
    ],
)
def test_bad_feed_parameters_are_a_400_naming_the_field(bot_client, params, field):
    response = bot_client.get(FEED, params)
    assert response.status_code == 400
    assert response.json()["error"] == "invalid"
    assert field in response.json()["detail"]


def test_a_well_formed_cursor_past_the_feeds_end_is_a_400_not_a_silent_stall(bot_client):
    mine = _emit_many(bot_client.bot, 2)
    last = bot_client.get(FEED).json()["next"]
    assert events.decode_cursor(last) == 2
    for wait in ("0", "1"):
        response = bot_client.get(FEED, {"after": events.encode_cursor(3), "wait": wait})
        assert response.status_code == 400
        assert response.json()["error"] == "invalid" and "after" in response.json()["detail"]
    # the last cursor the feed issued is still good, and so is one into the middle
    assert bot_client.get(FEED, {"after": last}).json()["events"] == []
    middle = bot_client.get(FEED, {"after": events.encode_cursor(1)}).json()["events"]
    assert [e["id"] for e in middle] == mine[1:]


def test_feed_authentication(client, django_user_model, db):
    assert client.get(FEED).status_code == 401
    user = django_user_model.objects.create_user("manager", password="pw", is_staff=False)
    client.force_login(user)
    assert client.get(FEED).status_code == 403


def test_cursor_round_trip_and_tampering():
    import base64

    cursor = events.encode_cursor(123)
    assert events.decode_cursor(cursor) == 123
    forged = [base64.urlsafe_b64encode(raw).decode() for raw in (b"e2:-1", b"e1:5", b"e2:1:2")]
    for bad in ["", "x", cursor + "x", *forged]:
        with pytest.raises(events.InvalidCursor):
            events.decode_cursor(bad)


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_an_event_committed_late_is_not_skipped_by_a_reader_that_moved_on(bot_client):
    """Transaction A writes an event (the lower id) and stays open; B writes one and commits.
    A reader sees B's event and moves its cursor past it; when A commits, A's event still
    comes after that cursor: feed positions follow commit order, not id order."""
    bot = bot_client.bot
    a_written, a_release, errors = threading.Event(), threading.Event(), []

    def slow_writer():
        try:
            with transaction.atomic():
                emit("interaction.resolved", "evt_slow", {"who": "A"}, bot=bot)
                a_written.set()
                a_release.wait(20)
        except Exception as exc:  # noqa: BLE001 - reported by the test thread
            errors.append(exc)
        finally:
            connection.close()

    thread = threading.Thread(target=slow_writer)
    thread.start()
    try:
        assert a_written.wait(20)
        with transaction.atomic():
            emit("interaction.resolved", "evt_fast", {"who": "B"}, bot=bot)
        first = bot_client.get(FEED).json()
        assert [e["id"] for e in first["events"]] == ["evt_fast"]
    finally:
        a_release.set()
        thread.join(20)
    assert errors == []
    assert Event.objects.get(event_id="evt_slow").pk < Event.objects.get(event_id="evt_fast").pk
    second = bot_client.get(FEED, {"after": first["next"]}).json()
    assert [e["id"] for e in second["events"]] == ["evt_slow"]


def test_sequencing_gives_positions_once_in_order(bot_client):
    _emit_many(bot_client.bot, 5)
    assert events.sequence_events(batch=2) == 5
    assert events.sequence_events() == 0
    assert list(Event.objects.order_by("pk").values_list("seq", flat=True)) == [1, 2, 3, 4, 5]


def test_the_openapi_schema_documents_the_feed_and_terminal_endpoints(admin_client):
    response = admin_client.get("/api/schema/", {"format": "json"})
    assert response.status_code == 200
    schema = response.json()
    assert {"/api/v1/events", "/api/v1/turns/terminal"} <= set(schema["paths"])
    assert schema["components"]["securitySchemes"]["botApiKey"]["scheme"] == "bearer"
