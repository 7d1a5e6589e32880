"""Review queues: filling, claiming with expiry, outcomes, team scope, the reviewer
permission, the audited comment and where the comment must never appear."""

from __future__ import annotations

import json
import logging
import threading
from datetime import UTC, datetime, timedelta

import pytest
from django.core.management import call_command
from django.db import connections
from django.utils import timezone

from analytics.models import ReviewItem
from analytics.review import service
from botadmin.models import AuditEntry
from feedback.models import Event, OutboxItem, WebhookDestination

COMMENT = "SENTINEL-comment-9b1e 评论哨兵"
NOTE = "SENTINEL-note-44ad"
AT = datetime(2025, 3, 10, 4, 0, tzinfo=UTC)


@pytest.fixture
def negative(make_delivery, rate):
    """`negative(team="a", comment=COMMENT, **fields)` → a delivery with one negative rating
    (reason inaccurate) by ou_rater."""

    def make(team="a", comment=COMMENT, operator="ou_rater", **fields):
        delivery = make_delivery(team=team, **fields)
        rate(delivery, operator, "wrong", reason="inaccurate", comment=comment)
        return delivery

    return make


def _claim(client, queue):
    response = client.post(f"/api/v1/review/queues/{queue.pk}/claim")
    assert response.status_code == 200, response.content
    return response.json()["item"]


def test_matching_ratings_enter_the_queue_once_and_others_never(
    world, make_delivery, rate, negative, make_queue
):
    queue = make_queue(world.team_a)
    negative()
    positive = make_delivery(team="a")
    rate(positive, "ou_x", "conclusive_usable")
    negative(team="b")  # another team's rating
    assert service.fill_queue(queue) == 1
    assert service.fill_queue(queue) == 0  # a repeat adds nothing
    negative()  # a new rating arrives
    assert service.fill_queue(queue) == 1
    assert ReviewItem.objects.filter(queue=queue).count() == 2
    assert set(ReviewItem.objects.values_list("team_id", flat=True)) == {world.team_a.id}


def test_a_queue_filter_selects_by_reason_bot_and_model(
    world, negative, make_delivery, rate, make_queue
):
    queue = make_queue(
        world.team_a, filters={"semantic": "negative", "reason": "too_slow", "model": "m1"}
    )
    negative(model="m1")  # reason inaccurate: out
    slow = make_delivery(team="a", model="m1")
    rate(slow, "ou_1", "wrong", reason="too_slow")
    other_model = make_delivery(team="a", model="m2")
    rate(other_model, "ou_1", "wrong", reason="too_slow")
    service.fill_queue(queue)
    assert list(ReviewItem.objects.values_list("delivery_id", flat=True)) == [slow.pk]


def test_backfill_command_adds_the_existing_ratings(world, negative, make_queue, capsys):
    for _ in range(3):
        negative()
    queue = make_queue(world.team_a)
    call_command("review_backfill", verbosity=0)
    assert ReviewItem.objects.filter(queue=queue).count() == 3
    call_command("review_backfill", "--queue", str(queue.pk), verbosity=0)
    assert ReviewItem.objects.filter(queue=queue).count() == 3
    assert f"{queue.name}: 0 item(s) added" in capsys.readouterr().out


def test_a_claim_shows_the_comment_and_correlation_and_each_view_is_audited(
    world, negative, make_queue, reviewer_of, api
):
    delivery = negative(
        skill_name="search", workflow_id="wf_1", content_ref="https://backend.example/a/1"
    )
    queue = make_queue(world.team_a)
    reviewer = reviewer_of(world.team_a)
    client = api(reviewer)
    item = _claim(client, queue)
    assert item["rating"]["comment"] == COMMENT
    assert item["rating"]["reason_label"] == "不准确"
    assert item["delivery"]["delivery_id"] == delivery.delivery_id
    assert item["delivery"]["bot"]["app_id"] == world.bot.app_id
    assert item["delivery"]["skill_name"] == "search"
    assert item["delivery"]["content_ref"] == "https://backend.example/a/1"
    assert "operator_open_id" not in json.dumps(item) and "ou_rater" not in json.dumps(item)
    assert client.get(f"/api/v1/review/items/{item['id']}").json()["rating"]["comment"] == COMMENT
    views = AuditEntry.objects.filter(action="review.comment_viewed", target_id=str(item["id"]))
    assert views.count() == 2
    assert {v.actor_id for v in views} == {reviewer.pk}
    assert COMMENT not in json.dumps([v.after for v in views])


def test_a_live_claim_is_not_given_to_another_reviewer_and_an_expired_one_returns(
    world, negative, make_queue, reviewer_of
):
    negative()
    queue = make_queue(world.team_a, claim_minutes=10)
    first, second = reviewer_of(world.team_a), reviewer_of(world.team_a)
    now = timezone.now()
    item = service.claim_next(queue, first, now=now)
    assert item is not None
    assert service.claim_next(queue, second, now=now + timedelta(minutes=9)) is None
    assert service.claim_next(queue, first, now=now + timedelta(minutes=9)).pk == item.pk  # resume
    again = service.claim_next(queue, second, now=now + timedelta(minutes=11))
    assert again.pk == item.pk and again.claimed_by == second
    with pytest.raises(service.ReviewError) as refused:
        service.complete_item(item.pk, first, outcome="model_error")
    assert refused.value.status == 409 and refused.value.code == "not_claimed"


def test_a_reviewer_of_team_a_sees_nothing_of_team_b(world, negative, make_queue, reviewer_of, api):
    negative(team="b")
    queue_b = make_queue(world.team_b)
    service.fill_queue(queue_b)
    item_b = ReviewItem.objects.get()
    make_queue(world.team_a, name="Queue of A")
    client = api(reviewer_of(world.team_a))
    listed = client.get("/api/v1/review/queues").json()["queues"]
    assert [q["name"] for q in listed] == ["Queue of A"]
    for path in (
        f"/api/v1/review/queues/{queue_b.pk}",
        f"/api/v1/review/items/{item_b.pk}",
    ):
        response = client.get(path)
        assert response.status_code == 404 and response.json()["error"] == "not_found"
    assert client.post(f"/api/v1/review/queues/{queue_b.pk}/claim").status_code == 404
    for action in ("complete", "skip"):
        response = client.post(
            f"/api/v1/review/items/{item_b.pk}/{action}", {"outcome": "model_error"}, format="json"
        )
        assert response.status_code == 404
    page = client.get(f"/review/{queue_b.pk}/")
    assert page.status_code == 404
    assert COMMENT not in page.content.decode()
    assert "Queue of A" in client.get("/review/").content.decode()


def test_a_queue_of_two_teams_gives_each_reviewer_only_their_teams_items(
    world, negative, make_queue, reviewer_of
):
    a, b = negative(team="a"), negative(team="b")
    queue = make_queue(world.team_a, world.team_b)
    item = service.claim_next(queue, reviewer_of(world.team_b))
    assert item.delivery_id == b.pk
    assert service.claim_next(queue, reviewer_of(world.team_b)) is None
    assert service.claim_next(queue, reviewer_of(world.team_a)).delivery_id == a.pk


def test_a_manager_without_the_reviewer_permission_never_sees_a_comment(
    world, negative, make_queue, manager_of, superuser, api
):
    negative()
    queue = make_queue(world.team_a)
    service.fill_queue(queue)
    item = ReviewItem.objects.get()
    for user in (manager_of(world.team_a), superuser):
        client = api(user)
        for response in (
            client.get("/api/v1/review/queues"),
            client.post(f"/api/v1/review/queues/{queue.pk}/claim"),
            client.get(f"/api/v1/review/items/{item.pk}"),
        ):
            assert response.status_code == 403
            assert response.json()["error"] == "forbidden"
            assert COMMENT not in response.content.decode()
        page = client.get(f"/review/{queue.pk}/")
        assert page.status_code == 403 and COMMENT not in page.content.decode()
    assert api().get("/api/v1/review/queues").status_code == 401
    assert not AuditEntry.objects.filter(action="review.comment_viewed").exists()


def test_completing_records_the_outcome_and_emits_review_completed_without_the_comment(
    world, make_delivery, rate, make_queue, reviewer_of, api
):
    plain = WebhookDestination.objects.create(
        name="plain", url="https://hooks.example.com/a", event_types=["review.completed"]
    )
    opted = WebhookDestination.objects.create(
        name="opted",
        url="https://hooks.example.com/b",
        event_types=["review.completed"],
        include_comment=True,
    )
    delivery = make_delivery(team="a", webhook_destination_ids=[plain.pk, opted.pk])
    rate(delivery, "ou_rater", "wrong", reason="inaccurate", comment=COMMENT)
    queue = make_queue(world.team_a)
    reviewer = reviewer_of(world.team_a, username="reviewer1")
    client = api(reviewer)
    item = _claim(client, queue)
    response = client.post(
        f"/api/v1/review/items/{item['id']}/complete",
        {"outcome": "confirmed_defect", "note": NOTE, "external_link": "https://issues.example/1"},
        format="json",
    )
    assert response.status_code == 200, response.content
    assert response.json() == {"id": item["id"], "status": "done", "assigned_to": None}
    done = ReviewItem.objects.get(pk=item["id"])
    assert (done.outcome, done.note, done.completed_by) == ("confirmed_defect", NOTE, reviewer)
    event = Event.objects.get(type="review.completed")
    data = json.loads(event.body)["data"]
    assert data["outcome"] == "confirmed_defect" and data["outcome_label"] == "Confirmed defect"
    assert data["reviewer"] == "reviewer1" and data["has_comment"] and data["has_note"]
    assert data["external_link"] == "https://issues.example/1"
    assert COMMENT not in event.body and NOTE not in event.body
    bodies = {
        row.destination.name: row.body for row in OutboxItem.objects.select_related("destination")
    }
    assert COMMENT not in bodies["plain"] and NOTE not in bodies["plain"]
    opted_data = json.loads(bodies["opted"])["data"]
    assert (opted_data["comment"], opted_data["note"]) == (COMMENT, NOTE)
    again = client.post(
        f"/api/v1/review/items/{item['id']}/complete", {"outcome": "model_error"}, format="json"
    )
    assert again.status_code == 409 and again.json()["error"] == "already_done"


@pytest.mark.parametrize(
    ("body", "field", "code"),
    [
        ({"outcome": "no_such_outcome"}, "outcome", "invalid_outcome"),
        (
            {"outcome": "model_error", "external_link": "javascript:alert(1)"},
            "external_link",
            "invalid_link",
        ),
        ({"outcome": "model_error", "note": "x" * 2001}, "note", "invalid_request"),
        ({}, "outcome", "invalid_request"),
        ({"outcome": ["model_error"]}, "outcome", "invalid_request"),
    ],
)
def test_bad_completions_are_400_naming_the_field(
    world, negative, make_queue, reviewer_of, api, body, field, code
):
    negative()
    queue = make_queue(world.team_a)
    client = api(reviewer_of(world.team_a))
    item = _claim(client, queue)
    response = client.post(f"/api/v1/review/items/{item['id']}/complete", body, format="json")
    assert response.status_code == 400, response.content
    assert response.json()["error"] == code
    assert field in response.json()["detail"]
    assert ReviewItem.objects.get(pk=item["id"]).status == "claimed"


def test_skip_moves_the_item_to_the_end_of_the_line(world, negative, make_queue, reviewer_of):
    negative(), negative()
    queue = make_queue(world.team_a)
    user = reviewer_of(world.team_a)
    first = service.claim_next(queue, user)
    service.skip_item(first.pk, user)
    second = service.claim_next(queue, user)
    assert second.pk != first.pk
    service.complete_item(second.pk, user, outcome="not_actionable")
    assert service.claim_next(queue, user).pk == first.pk
    assert ReviewItem.objects.get(pk=first.pk).skips == 1


def test_an_assigned_item_goes_only_to_its_assignee_and_first(
    world, negative, make_queue, reviewer_of, api
):
    negative(), negative()
    queue = make_queue(world.team_a)
    service.fill_queue(queue)
    later = ReviewItem.objects.order_by("-queued_at", "-id").first()
    lead, assignee, other = (reviewer_of(world.team_a, username=n) for n in ("lead", "ann", "otto"))
    response = api(lead).post(
        f"/api/v1/review/items/{later.pk}/assign", {"assignee": "ann"}, format="json"
    )
    assert response.status_code == 200 and response.json()["assigned_to"] == "ann"
    assert AuditEntry.objects.filter(action="review.assigned", target_id=str(later.pk)).exists()
    assert service.claim_next(queue, assignee).pk == later.pk
    earlier = service.claim_next(queue, other)
    assert earlier.pk != later.pk
    outsider = reviewer_of(world.team_b, username="bea")
    refused = api(lead).post(
        f"/api/v1/review/items/{earlier.pk}/assign", {"assignee": outsider.username}, format="json"
    )
    assert refused.status_code == 400 and "assignee" in refused.json()["detail"]


def test_progress_counts_open_in_review_done_and_each_reviewer(
    world, negative, make_queue, reviewer_of, api
):
    for _ in range(4):
        negative()
    queue = make_queue(world.team_a)
    ann, bob = reviewer_of(world.team_a, username="ann"), reviewer_of(world.team_a, username="bob")
    for user in (ann, ann):
        item = service.claim_next(queue, user)
        service.complete_item(item.pk, user, outcome="model_error")
    service.claim_next(queue, bob)
    body = api(ann).get(f"/api/v1/review/queues/{queue.pk}").json()
    assert body["progress"] | {"reviewers": None} == {
        "open": 1,
        "in_review": 1,
        "done": 2,
        "total": 4,
        "reviewers": None,
    }
    assert body["progress"]["reviewers"] == [
        {"username": "ann", "done": 2, "in_review": 0},
        {"username": "bob", "done": 0, "in_review": 1},
    ]
    page = api(ann).get("/review/").content.decode()
    assert queue.name in page


def test_the_comment_never_appears_in_the_drill_down_csv_feed_audit_or_logs(
    world, make_delivery, rate, make_queue, reviewer_of, api, superuser, caplog, make_api_key
):
    caplog.set_level(logging.DEBUG)
    plain = WebhookDestination.objects.create(
        name="plain",
        url="https://hooks.example.com/a",
        event_types=["feedback.revised", "review.completed"],
    )
    delivery = make_delivery(team="a", at=AT, webhook_destination_ids=[plain.pk])
    rate(delivery, "ou_rater", "wrong", reason="inaccurate", comment=COMMENT)
    queue = make_queue(world.team_a)
    reviewer = reviewer_of(world.team_a)
    client = api(reviewer)
    item = _claim(client, queue)
    client.get(f"/api/v1/review/items/{item['id']}")
    client.post(
        f"/api/v1/review/items/{item['id']}/complete",
        {"outcome": "model_error", "note": NOTE},
        format="json",
    )
    admin = api(superuser)
    query = "from=2025-03-01&to=2025-03-20&tz=UTC"
    drill = admin.get(f"/api/v1/analytics/deliveries?{query}").content.decode()
    assert delivery.delivery_id in drill
    csv = b"".join(
        admin.get(f"/api/v1/analytics/deliveries.csv?{query}").streaming_content
    ).decode()
    assert delivery.delivery_id in csv
    raw_key, _key = make_api_key(world.bot)
    feed_client = api()
    feed_client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw_key}")
    feed = feed_client.get("/api/v1/events").content.decode()
    assert "review.completed" in feed
    events = (
        [feed] + [e.body for e in Event.objects.all()] + [o.body for o in OutboxItem.objects.all()]
    )
    assert any("review.completed" in body for body in events)
    audit = json.dumps([[a.before, a.after, a.target_repr] for a in AuditEntry.objects.all()])
    logs = caplog.text
    for haystack in (drill, csv, "\n".join(events), audit, logs):
        assert COMMENT not in haystack and NOTE not in haystack


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_two_reviewers_claiming_at_once_never_get_the_same_item_on_postgresql(
    world, make_delivery, rate, make_queue, reviewer_of
):
    from analytics.models import ReviewQueue

    rounds = 200
    for i in range(2 * rounds):
        rate(make_delivery(team="a"), f"ou_{i}", "wrong")
    queue = make_queue(world.team_a)
    service.fill_queue(queue)
    users = [reviewer_of(world.team_a), reviewer_of(world.team_a)]
    barrier = threading.Barrier(2)
    claimed: dict[int, list[int | None]] = {0: [], 1: []}

    def work(n):
        try:
            q = ReviewQueue.objects.get(pk=queue.pk)
            for _ in range(rounds):
                barrier.wait(timeout=30)
                item = service.claim_next(q, users[n])
                claimed[n].append(item.pk if item else None)
                if item is not None:
                    ReviewItem.objects.filter(pk=item.pk).update(status=ReviewItem.Status.DONE)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=work, args=(n,)) for n in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    every = claimed[0] + claimed[1]
    assert len(every) == 2 * rounds and None not in every
    assert len(set(every)) == 2 * rounds  # no item went to both reviewers
    for a, b in zip(claimed[0], claimed[1], strict=True):
        assert a != b


def test_assigned_me_claims_only_the_callers_assigned_items(
    world, negative, make_queue, reviewer_of, api
):
    negative(), negative()
    queue = make_queue(world.team_a)
    service.fill_queue(queue)
    ann = reviewer_of(world.team_a, username="ann")
    later = ReviewItem.objects.order_by("-queued_at", "-id").first()
    service.assign_item(later.pk, ann, "ann")
    client = api(ann)
    mine = client.post(f"/api/v1/review/queues/{queue.pk}/claim?assigned=me").json()["item"]
    assert mine["id"] == later.pk and mine["assigned_to"] == "ann"
    service.complete_item(later.pk, ann, outcome="model_error")
    assert client.post(f"/api/v1/review/queues/{queue.pk}/claim?assigned=me").json() == {
        "item": None
    }
    refused = client.post(f"/api/v1/review/queues/{queue.pk}/claim?assigned=everyone")
    assert refused.status_code == 400 and "assigned" in refused.json()["detail"]
    assert "?assigned=me" in client.get(f"/review/{queue.pk}/").content.decode()
