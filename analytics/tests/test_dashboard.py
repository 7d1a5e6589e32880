"""The dashboard page without a browser: login redirect, 403 page, server-rendered controls."""

from __future__ import annotations

import json

import pytest

from feedback.models import Delivery


def test_anonymous_visitor_is_redirected_to_the_sign_in_page(client, db):
    response = client.get("/dashboard/?team=1")
    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/login/?next=/dashboard/")


def test_logged_in_user_without_a_team_gets_a_403_page(client, django_user_model):
    user = django_user_model.objects.create_user("plain", password="pw-tests-only", is_staff=True)
    client.force_login(user)
    response = client.get("/dashboard/", HTTP_ACCEPT_LANGUAGE="en")
    assert response.status_code == 403
    assert "not a member of any team" in response.content.decode()


@pytest.mark.parametrize("has_team", [True, False], ids=["dashboard", "forbidden-page"])
def test_both_pages_offer_a_sign_out_that_works(
    client, world, manager_of, django_user_model, has_team
):
    user = (
        manager_of(world.team_a)
        if has_team
        else django_user_model.objects.create_user("plain", password="x")
    )
    client.force_login(user)
    html = client.get("/dashboard/", HTTP_ACCEPT_LANGUAGE="zh-hans").content.decode()
    assert 'action="/accounts/logout/" method="post"' in html and "注销" in html
    assert client.post("/accounts/logout/").status_code == 302
    assert client.get("/dashboard/").status_code == 302  # signed out: back to the sign-in page


def test_delivery_statuses_reach_the_page_script_translated(client, world, manager_of):
    client.force_login(manager_of(world.team_a))
    html = client.get("/dashboard/", HTTP_ACCEPT_LANGUAGE="zh-hans").content.decode()
    config = json.loads(
        html.split('id="dashboard-config" type="application/json">')[1].split("</script>")[0]
    )
    assert set(config["statuses"]) == {value for value, _label in Delivery.Status.choices}
    assert config["statuses"]["sent"] != "sent"


def test_manager_sees_only_their_teams_as_options_and_the_page_reads_the_api(
    client, world, manager_of
):
    client.force_login(manager_of(world.team_a))
    response = client.get("/dashboard/", HTTP_ACCEPT_LANGUAGE="en")
    assert response.status_code == 200
    html = response.content.decode()
    assert "Team A" in html and "Team B" not in html
    config = json.loads(
        html.split('id="dashboard-config" type="application/json">')[1].split("</script>")[0]
    )
    assert config["api"]["summary"] == "/api/v1/analytics/summary"
    assert config["api"]["deliveries-csv"] == "/api/v1/analytics/deliveries.csv"
    assert "/static/vendor/chartjs/chart.umd.min.js" in html
    for cdn in ("cdn.jsdelivr", "unpkg.com", "cdnjs", "googleapis"):
        assert cdn not in html


def test_manager_without_staff_status_signs_in_and_reads_the_dashboard(
    client, world, django_user_model
):
    from botadmin.models import TeamMembership

    user = django_user_model.objects.create_user("lead-no-staff", password="pw-tests-only")
    TeamMembership.objects.create(team=world.team_a, user=user)
    page = client.get("/accounts/login/?next=/dashboard/")
    assert page.status_code == 200
    response = client.post(
        "/accounts/login/",
        {"username": "lead-no-staff", "password": "pw-tests-only", "next": "/dashboard/"},
    )
    assert response.status_code == 302 and response["Location"] == "/dashboard/"
    assert client.get("/dashboard/", HTTP_ACCEPT_LANGUAGE="en").status_code == 200
    assert client.get("/admin/").status_code == 302  # still no admin access


def test_wrong_password_stays_on_the_sign_in_page(client, db, django_user_model):
    django_user_model.objects.create_user("someone", password="pw-tests-only")
    response = client.post("/accounts/login/", {"username": "someone", "password": "nope"})
    assert response.status_code == 200
    assert "用户名或密码不正确" in response.content.decode()


def test_page_is_translated_to_simplified_chinese(client, world, manager_of):
    client.force_login(manager_of(world.team_a))
    html = client.get("/dashboard/", HTTP_ACCEPT_LANGUAGE="zh-hans").content.decode()
    assert "反馈分析" in html and "覆盖率" in html
    english = client.get("/dashboard/", HTTP_ACCEPT_LANGUAGE="en").content.decode()
    assert "Feedback analytics" in english and "Coverage" in english


def test_vendored_chart_library_is_served(client, db):
    response = client.get("/static/vendor/chartjs/chart.umd.min.js")
    assert response.status_code == 200
    body = b"".join(response.streaming_content) if response.streaming else response.content
    assert b"Chart.js v4.6.1" in body[:200]
