"""Managers are added in the team admin; tokens for scripts are issued in the admin."""

from __future__ import annotations

from datetime import UTC, datetime


def test_team_admin_edits_managers_and_membership_opens_the_team_analytics(
    client, superuser, world, django_user_model, make_delivery, api
):
    make_delivery(at=datetime(2025, 3, 10, 1, tzinfo=UTC), team="a")
    manager = django_user_model.objects.create_user("lead", password="pw-tests-only")
    client.force_login(superuser)
    url = f"/admin/botadmin/team/{world.team_a.id}/change/"
    page = client.get(url)
    assert page.status_code == 200
    assert "memberships-TOTAL_FORMS" in page.content.decode()
    form = {
        "name": world.team_a.name,
        "description": "",
        "policy": "{}",
        "chat_bindings-TOTAL_FORMS": "0",
        "chat_bindings-INITIAL_FORMS": "0",
        "chat_bindings-MIN_NUM_FORMS": "0",
        "chat_bindings-MAX_NUM_FORMS": "1000",
        "memberships-TOTAL_FORMS": "1",
        "memberships-INITIAL_FORMS": "0",
        "memberships-MIN_NUM_FORMS": "0",
        "memberships-MAX_NUM_FORMS": "1000",
        "memberships-0-user": str(manager.id),
        "memberships-0-team": str(world.team_a.id),
        "_save": "Save",
    }
    assert (
        api(manager)
        .get("/api/v1/analytics/summary", {"from": "2025-03-10", "to": "2025-03-11"})
        .status_code
        == 403
    )
    response = client.post(url, form)
    assert response.status_code == 302, response.content.decode()[:2000]
    body = api(manager).get(
        "/api/v1/analytics/summary", {"from": "2025-03-10", "to": "2025-03-11", "tz": "UTC"}
    )
    assert body.status_code == 200 and body.json()["current"]["delivered"] == 1


def test_manager_token_admin_replaces_the_plain_key_admin(client, superuser):
    client.force_login(superuser)
    assert client.get("/admin/botadmin/managertoken/add/").status_code == 200
    assert client.get("/admin/authtoken/tokenproxy/").status_code == 404
