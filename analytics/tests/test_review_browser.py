"""The review page, the dashboard's default time zone and the demo data in real headless
Chromium (Playwright) against a live server."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from django.core.management import call_command

from analytics.models import Alert, ReviewItem
from analytics.tests.test_dashboard_browser import ARTIFACTS
from botadmin.models import TeamMembership

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

COMMENT = "citation is outdated / 引用过期"


def _login(page, live_server, path, username, password):
    page.goto(f"{live_server.url}{path}")
    assert "/accounts/login/" in page.url
    page.fill("#id_username", username)
    page.fill("#id_password", password)
    page.click("button[type=submit]")


@pytest.fixture
def review_world(world, make_delivery, rate, make_queue, reviewer_of):
    """Three negative ratings with comments in team A's queue and a reviewer `ann`."""
    for i in range(3):
        d = make_delivery(team="a", at=datetime(2025, 3, 10, 4, i, tzinfo=UTC), skill_name="search")
        rate(d, f"ou_{i}", "wrong", reason="inaccurate", comment=f"{COMMENT} #{i}")
    queue = make_queue(world.team_a, name="Negatives A")
    user = reviewer_of(world.team_a, username="ann")
    user.set_password("pw-for-browser-test")
    user.save()
    return queue


@pytest.mark.parametrize(
    ("locale", "empty_text", "outcome_label"),
    [("en-US", "Nothing left to review", "Model error"), ("zh-CN", "没有需要你审阅的", "模型错误")],
)
def test_a_reviewer_claims_records_outcomes_by_click_and_key_and_reaches_the_end(
    live_server,
    review_world,
    browser,
    locale,
    empty_text,
    outcome_label,
):
    queue = review_world
    context = browser.new_context(locale=locale, viewport={"width": 1300, "height": 1000})
    page = context.new_page()
    errors = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    _login(page, live_server, f"/review/{queue.pk}/", "ann", "pw-for-browser-test")
    page.wait_for_selector("body[data-state=item]", timeout=20_000)
    first = page.get_attribute("#item", "data-item")
    assert COMMENT in page.inner_text("#i-comment")
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"review-item-{locale}.png"), full_page=True)
    assert page.inner_text("#i-skill") == "search"
    labels = page.eval_on_selector_all("#outcomes button", "bs => bs.map(b => b.textContent)")
    assert any(outcome_label in label for label in labels)
    # a click records the outcome, then "next" (the n key) claims another item
    page.click("#outcomes button[data-outcome=model_error]")
    page.wait_for_selector("body[data-state=done]", timeout=20_000)
    page.keyboard.press("n")
    page.wait_for_function(
        f"document.querySelector('#item').dataset.item !== '{first}' && document.body.dataset.state === 'item'"
    )
    second = page.get_attribute("#item", "data-item")
    # a digit records that outcome (1 = the first one), s skips
    page.keyboard.press("1")
    page.wait_for_selector("body[data-state=done]", timeout=20_000)
    page.keyboard.press("n")
    page.wait_for_function(
        f"document.querySelector('#item').dataset.item !== '{second}' && document.body.dataset.state === 'item'"
    )
    page.keyboard.press("s")
    page.wait_for_function(
        "document.body.dataset.state === 'item'"
    )  # the skipped one again: it is the last
    page.fill("#note", "checked against the runbook")
    page.click("#outcomes button[data-outcome=not_actionable]")
    page.wait_for_selector("body[data-state=done]", timeout=20_000)
    page.keyboard.press("n")
    page.wait_for_selector("body[data-state=empty]", timeout=20_000)
    assert empty_text in page.inner_text("#empty")
    assert page.get_attribute("#progress", "data-done") == "3"
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"review-{locale}.png"), full_page=True)
    progress = page.evaluate(
        f"fetch('/api/v1/review/queues/{queue.pk}').then(r => r.json()).then(q => q.progress)"
    )
    assert progress["done"] == 3 and progress["open"] == 0
    assert progress["reviewers"] == [{"username": "ann", "done": 3, "in_review": 0}]
    assert errors == []
    context.close()


@pytest.fixture
def zoned_manager(world, django_user_model):
    user = django_user_model.objects.create_user("zoned", password="pw-for-browser-test")
    TeamMembership.objects.create(team=world.team_a, user=user)
    return user


def test_the_dashboard_reports_in_the_browsers_zone_without_tz_in_the_url(
    live_server,
    zoned_manager,
    browser,
):
    context = browser.new_context(locale="en-US", timezone_id="America/New_York")
    page = context.new_page()
    _login(page, live_server, "/dashboard/", "zoned", "pw-for-browser-test")
    page.wait_for_selector("body[data-state=ready]", timeout=20_000)
    assert page.get_attribute("body", "data-tz") == "America/New_York"
    assert page.input_value("#f-tz") == "America/New_York"
    # a zone in the URL wins over the browser's
    page.goto(f"{live_server.url}/dashboard/?tz=Asia/Tokyo")
    page.wait_for_selector("body[data-state=ready]", timeout=20_000)
    assert page.input_value("#f-tz") == "Asia/Tokyo"
    context.close()


@pytest.fixture
def demo(settings):
    """`manage.py seed_demo` as `make run` runs it (DEBUG on)."""
    settings.DEBUG = True
    call_command("seed_demo", verbosity=0)
    assert Alert.objects.exists() and ReviewItem.objects.exists()


def test_the_demo_shows_figures_a_review_queue_and_an_alert_after_seeding(
    live_server,
    demo,
    browser,
):
    context = browser.new_context(locale="en-US", viewport={"width": 1400, "height": 1600})
    page = context.new_page()
    _login(page, live_server, "/dashboard/", "admin", "cardloop-demo")
    page.wait_for_selector("body[data-state=ready]", timeout=30_000)
    assert int(page.get_attribute("#kpi-delivered", "data-value")) > 1000
    assert float(page.get_attribute("#kpi-positive_rate", "data-value")) > 0
    assert page.locator("#deliveries tbody tr").count() > 0
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "demo-dashboard.png"), full_page=True)
    page.click("#nav-review")
    page.wait_for_selector("#queues tbody tr[data-queue]")
    assert "Negative feedback (demo)" in page.inner_text("#queues")
    assert int(page.inner_text("#queues tr[data-queue] td.open")) > 0
    page.click("#queues tr[data-queue] a")
    page.wait_for_selector("body[data-state=item]", timeout=20_000)
    page.goto(f"{live_server.url}/alerts/")
    assert page.locator("#alerts tbody tr[data-alert]").count() >= 1
    assert "Positive rate below 40% (demo)" in page.inner_text("#alerts")
    context.close()
