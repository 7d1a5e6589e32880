"""Ops staff define review queues, reviewers and alert rules in the admin: the forms explain
themselves and refuse what would not work, naming the field; alert rules are muted from the
action menu (audited); no admin page shows a rater's comment."""

from __future__ import annotations

import json

import pytest
from django.utils import timezone

from analytics.models import AlertRule, Reviewer, ReviewQueue
from analytics.review import service
from botadmin.models import AuditEntry


@pytest.fixture(autouse=True)
def english(client):
    """The admin in English (the default language is zh-hans)."""
    client.defaults["HTTP_ACCEPT_LANGUAGE"] = "en"


def _queue_form(world, **overrides):
    form = {
        "name": "Negatives",
        "description": "",
        "enabled": "on",
        "teams": [str(world.team_a.id)],
        "filters": json.dumps({"semantic": "negative"}),
        "outcomes": json.dumps([{"key": "model_error", "label": "Model error"}]),
        "claim_minutes": "15",
        "_save": "Save",
    }
    form.update(overrides)
    return form


def test_the_admin_pages_load_and_explain_their_fields(client, superuser):
    client.force_login(superuser)
    for path in (
        "/admin/analytics/reviewqueue/",
        "/admin/analytics/reviewer/",
        "/admin/analytics/reviewitem/",
        "/admin/analytics/alertrule/",
        "/admin/analytics/alert/",
    ):
        assert client.get(path).status_code == 200, path
    queue_page = client.get("/admin/analytics/reviewqueue/add/").content.decode()
    assert "claim_minutes" in queue_page and "returns to the queue" in queue_page
    rule_page = client.get("/admin/analytics/alertrule/add/").content.decode()
    assert "Hysteresis" in rule_page and "dry run" in rule_page


def test_a_queue_is_saved_with_a_valid_filter(client, superuser, world):
    client.force_login(superuser)
    response = client.post("/admin/analytics/reviewqueue/add/", _queue_form(world))
    assert response.status_code == 302, response.content.decode()[:3000]
    queue = ReviewQueue.objects.get(name="Negatives")
    assert list(queue.teams.all()) == [world.team_a]
    entry = AuditEntry.objects.get(action="review_queue.created", target_id=str(queue.pk))
    assert entry.actor == superuser and entry.after["teams"] == [world.team_a.id]
    form = _queue_form(world, filters=json.dumps({"semantic": "negative", "reason": "too_slow"}))
    client.post(f"/admin/analytics/reviewqueue/{queue.pk}/change/", form)
    change = AuditEntry.objects.get(action="review_queue.changed", target_id=str(queue.pk))
    assert change.before["filters"] == {"semantic": "negative"}
    assert change.after["filters"] == {"semantic": "negative", "reason": "too_slow"}


def test_granting_and_withdrawing_the_reviewer_permission_is_audited(
    client, superuser, world, django_user_model
):
    user = django_user_model.objects.create_user("ann", password="pw-tests-only")
    client.force_login(superuser)
    response = client.post(
        "/admin/analytics/reviewer/add/",
        {"team": str(world.team_a.id), "user": str(user.id), "_save": "Save"},
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    reviewer = Reviewer.objects.get(user=user)
    assert AuditEntry.objects.filter(action="reviewer.added", target_id=str(reviewer.pk)).exists()
    client.post(
        "/admin/analytics/reviewer/",
        {"action": "delete_selected", "_selected_action": [str(reviewer.pk)], "post": "yes"},
    )
    assert not Reviewer.objects.exists()
    assert AuditEntry.objects.filter(action="reviewer.removed", target_id=str(reviewer.pk)).exists()


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("filters", json.dumps({"semantic": "meh"}), "semantic"),
        ("filters", json.dumps({"team": "1"}), "Unknown filter key"),
        ("filters", json.dumps({"reason": "Not A Key"}), "reason"),
        ("filters", json.dumps(["semantic"]), "JSON object"),
        ("outcomes", json.dumps([{"key": "Bad Key", "label": "x"}]), "lowercase"),
        ("outcomes", json.dumps([{"key": f"k{i}", "label": "x"} for i in range(10)]), "1 to 9"),
        ("claim_minutes", "0", "1 to 1440"),
    ],
)
def test_a_queue_with_a_bad_value_is_refused_naming_it(
    client, superuser, world, field, value, message
):
    client.force_login(superuser)
    response = client.post(
        "/admin/analytics/reviewqueue/add/", _queue_form(world, **{field: value})
    )
    assert response.status_code == 200
    errors = response.context["adminform"].form.errors
    assert field in errors and message in " ".join(errors[field])
    assert not ReviewQueue.objects.exists()


def test_an_alert_rule_with_a_bot_but_no_chat_is_refused(client, superuser, world):
    client.force_login(superuser)
    response = client.post(
        "/admin/analytics/alertrule/add/",
        {
            "name": "r",
            "enabled": "on",
            "kind": "positive_rate_below",
            "threshold": "150",
            "window_minutes": "60",
            "min_ratings": "20",
            "clear_margin": "5",
            "notify_bot": str(world.bot.id),
            "_save": "Save",
        },
    )
    errors = response.context["adminform"].form.errors
    assert "notify_chat" in errors and "threshold" in errors
    assert not AlertRule.objects.exists()


def test_an_alert_rule_saved_in_the_admin_is_audited(client, superuser, world):
    client.force_login(superuser)
    response = client.post(
        "/admin/analytics/alertrule/add/",
        {
            "name": "r",
            "enabled": "on",
            "team": str(world.team_a.id),
            "kind": "positive_rate_below",
            "threshold": "60",
            "window_minutes": "60",
            "min_ratings": "20",
            "clear_margin": "5",
            "_save": "Save",
        },
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    rule = AlertRule.objects.get(name="r")
    entry = AuditEntry.objects.get(action="alert_rule.created", target_id=str(rule.pk))
    assert entry.after["threshold"] == 60 and entry.after["team"] == world.team_a.id


def test_muting_and_unmuting_from_the_action_menu_is_audited(client, superuser):
    rule = AlertRule.objects.create(name="r", kind="negatives_above", threshold=3)
    client.force_login(superuser)
    client.post(
        "/admin/analytics/alertrule/", {"action": "mute_day", "_selected_action": [str(rule.pk)]}
    )
    rule.refresh_from_db()
    assert rule.muted_until > timezone.now() + timezone.timedelta(hours=23)
    client.post(
        "/admin/analytics/alertrule/", {"action": "unmute", "_selected_action": [str(rule.pk)]}
    )
    rule.refresh_from_db()
    assert rule.muted_until is None
    actions = list(
        AuditEntry.objects.filter(target_id=str(rule.pk))
        .order_by("id")
        .values_list("action", flat=True)
    )
    assert actions == ["alert_rule.muted", "alert_rule.unmuted"]


def test_no_admin_page_shows_a_raters_comment(
    client, superuser, world, make_delivery, rate, make_queue
):
    comment = "SENTINEL-admin-comment-51c"
    rate(make_delivery(team="a"), "ou_1", "wrong", comment=comment)
    queue = make_queue(world.team_a)
    service.fill_queue(queue)
    item = queue.items.get()
    client.force_login(superuser)
    for path in (
        "/admin/analytics/reviewitem/",
        f"/admin/analytics/reviewitem/{item.pk}/change/",
        f"/admin/analytics/reviewqueue/{queue.pk}/change/",
    ):
        page = client.get(path)
        assert page.status_code == 200 and comment not in page.content.decode()


def test_the_backfill_action_adds_existing_ratings(
    client, superuser, world, make_delivery, rate, make_queue
):
    rate(make_delivery(team="a"), "ou_1", "wrong")
    queue = make_queue(world.team_a)
    client.force_login(superuser)
    client.post(
        "/admin/analytics/reviewqueue/", {"action": "backfill", "_selected_action": [str(queue.pk)]}
    )
    assert queue.items.count() == 1
