"""The dashboard in real headless Chromium (Debian's /usr/bin/chromium, driven by Playwright)
against a live server: the page loads, filters change the numbers and stay in the URL, more
rows load, the CSV downloads. A screenshot goes to test-artifacts/ (git-ignored)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
RANGE = "from=2025-03-01&to=2025-03-11&tz=Asia/Shanghai"


@pytest.fixture
def browser():
    """Chromium via Playwright; request it after the fixtures that write to the database
    (Playwright's sync API runs an event loop, and Django refuses ORM calls under one)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture
def history(world, make_delivery, rate, django_user_model):
    """30 deliveries in team A (10 rated: 6 positive, 4 negative), 5 in team B (all unrated),
    and a staff manager of both teams (managers log in through the admin login page)."""
    from botadmin.models import TeamMembership

    start = datetime(2025, 3, 2, 2, tzinfo=UTC)
    for i in range(30):
        d = make_delivery(at=start + timedelta(hours=5 * i), team="a", model="gpt-x")
        if i < 6:
            rate(d, f"ou_{i}", "conclusive_usable")
        elif i < 10:
            rate(d, f"ou_{i}", "wrong", reason="inaccurate")
    for i in range(5):
        make_delivery(at=start + timedelta(hours=7 * i), team="b", model="claude-y")
    user = django_user_model.objects.create_user("manager", password="pw-for-browser-test")
    TeamMembership.objects.create(team=world.team_a, user=user)
    TeamMembership.objects.create(team=world.team_b, user=user)
    return world


def _login(page, live_server, next_path):
    page.goto(f"{live_server.url}{next_path}")
    assert "/accounts/login/" in page.url  # login required: the sign-in page
    page.fill("#id_username", "manager")
    page.fill("#id_password", "pw-for-browser-test")
    page.click("button[type=submit]")
    page.wait_for_selector("body[data-state=ready]", timeout=20_000)


def test_dashboard_loads_filters_change_numbers_and_csv_downloads(live_server, history, browser):
    context = browser.new_context(
        locale="en-US", accept_downloads=True, viewport={"width": 1400, "height": 1600}
    )
    page = context.new_page()
    errors = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    _login(page, live_server, f"/dashboard/?{RANGE}")

    assert page.get_attribute("#kpi-delivered", "data-value") == "35"
    assert page.inner_text("#kpi-coverage .parts") == "10 rated of 35 delivered"
    assert page.get_attribute("#kpi-positive_rate", "data-value") == "0.6"
    assert page.get_attribute("#trend-chart", "data-buckets") == "10"
    assert page.get_attribute("#reasons-chart", "data-keys") == "inaccurate"
    assert page.locator("#deliveries tbody tr").count() == 25
    page.click("#load-more")
    page.wait_for_function("document.querySelectorAll('#deliveries tbody tr').length === 35")
    assert page.is_hidden("#load-more")

    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "dashboard.png"), full_page=True)

    # A filter changes the numbers and lands in the URL (bookmarkable).
    page.select_option("#f-team", str(history.team_b.id))
    page.click("#apply")
    page.wait_for_url(lambda u: "team=" in u)
    page.wait_for_selector("body[data-state=ready]", timeout=20_000)
    assert parse_qs(urlparse(page.url).query)["team"] == [str(history.team_b.id)]
    assert page.get_attribute("#kpi-delivered", "data-value") == "5"
    assert page.get_attribute("#kpi-coverage", "data-value") == "0"
    assert page.input_value("#f-team") == str(history.team_b.id)

    page.fill("#f-model", "' OR 1=1 --")
    page.click("#apply")
    page.wait_for_url(lambda u: "model=" in u)
    page.wait_for_selector("body[data-state=ready]", timeout=20_000)
    assert page.get_attribute("#kpi-delivered", "data-value") == "0"

    # Back to team A, negative only: the CSV button carries the same filter.
    page.goto(f"{live_server.url}/dashboard/?{RANGE}&team={history.team_a.id}&semantic=negative")
    page.wait_for_selector("body[data-state=ready]", timeout=20_000)
    assert page.is_visible("#rating-filter-note")
    with page.expect_download() as info:
        page.click("#csv")
    path = info.value.path()
    raw = Path(path).read_bytes()
    assert raw.startswith("\ufeff".encode())
    lines = raw.decode("utf-8-sig").splitlines()
    assert lines[0].startswith("delivery_id,sent_at,status")
    assert len(lines) == 1 + 4 and all(",negative,wrong," in line for line in lines[1:])
    assert info.value.suggested_filename == "cardloop-deliveries-20250301-20250311.csv"
    assert errors == []
    context.close()


def test_dashboard_shows_an_api_error_instead_of_numbers(live_server, history, browser):
    context = browser.new_context(locale="en-US")
    page = context.new_page()
    page.goto(f"{live_server.url}/dashboard/?from=2025-03-11&to=2025-03-01")
    page.fill("#id_username", "manager")
    page.fill("#id_password", "pw-for-browser-test")
    page.click("button[type=submit]")
    page.wait_for_selector("body[data-state=error]", timeout=20_000)
    text = page.inner_text("#error")
    assert "invalid_range" in text
    assert "to: " in text and "{" not in text and "[" not in text  # read as text, not raw JSON
    context.close()


def test_dashboard_speaks_chinese_by_default(live_server, history, browser):
    context = browser.new_context(locale="zh-CN")
    page = context.new_page()
    _login(page, live_server, f"/dashboard/?{RANGE}")
    assert page.inner_text("h1") == "反馈分析"
    assert "已评价" in page.inner_text("#kpi-coverage .parts")
    page.wait_for_selector("#deliveries tbody tr", timeout=20_000)
    statuses = page.eval_on_selector_all(
        "#deliveries tbody tr td:nth-child(6)", "cells => cells.map(c => c.textContent)"
    )
    assert statuses and not set(statuses) & {"sent", "completed", "failed", "pending"}
    context.close()
