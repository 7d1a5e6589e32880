"""Sign in with Feishu end to end in real headless Chromium (/usr/bin/chromium via Playwright)
against a real Daphne child whose lark-oapi client talks to the loopback OAuth stand-in:
the login page → Feishu's authorization page → back to the dashboard (403 until ops add the
person to a team, then the dashboard) → the web panel, connected without any desktop token,
where a question the bot asks appears and is answered."""

from __future__ import annotations

import httpx
import pytest

from botadmin.models import FeishuIdentity, Team, TeamMembership
from interactions.models import Ask
from interactions.tests.ask_helpers import QUESTIONS
from interactions.tests.panel_helpers import *  # noqa: F403
from interactions.tests.signin_helpers import *  # noqa: F403
from interactions.tests.signin_helpers import ACCOUNT, TENANT
from interactions.tests.test_panel_browser import ARTIFACTS, CHROMIUM_ARGS, in_thread

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def server(feishu_oauth, lark_bot, make_api_key, daphnes):
    """Daphne serving Cardloop with sign-in through `lark_bot`'s app at the stand-in (other
    Feishu calls dry-run)."""
    key = make_api_key(lark_bot)[0]
    url = daphnes.start(
        "web",
        CARDLOOP_LARK_DOMAIN=feishu_oauth.url,
        CARDLOOP_FEISHU_SIGNIN_APP=lark_bot.app_id,
        CARDLOOP_FEISHU_SIGNIN_TENANT=TENANT,
        CARDLOOP_LARK_DRY_RUN="true",
    )
    return {"url": url, "key": key}


@pytest.fixture
def browser(server):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
        try:
            yield chromium
        finally:
            chromium.close()


def add_to_team(open_id: str) -> None:
    user = FeishuIdentity.objects.get(open_id=open_id).user
    TeamMembership.objects.create(team=Team.objects.create(name="Support"), user=user)


def test_sign_in_with_feishu_reaches_the_dashboard_and_the_panel(server, browser, feishu_oauth):
    url = server["url"]
    context = browser.new_context(locale="en-US")
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))

    # The dashboard sends an anonymous visitor to the sign-in page, which offers Feishu.
    page.goto(f"{url}/dashboard/")
    assert "/accounts/login/" in page.url
    page.click("#feishu-sign-in")
    page.wait_for_selector("#approve")  # Feishu's authorization page (the stand-in)
    assert page.url.startswith(f"{feishu_oauth.url}/open-apis/authen/v1/authorize")
    assert page.inner_text("#who") == ACCOUNT.name
    page.click("#approve")

    # Back on Cardloop, signed in — but a new account reads nothing until ops grant a team.
    page.wait_for_url(f"{url}/dashboard/")
    response = page.reload()
    assert response.status == 403
    in_thread(add_to_team, ACCOUNT.open_id)
    assert page.reload().status == 200

    # The web panel is signed in too: no desktop token was handed out or typed.
    page.goto(f"{url}/panel/")
    page.wait_for_selector("body[data-state=connected]", timeout=20_000)
    assert page.locator("#id_token").count() == 0
    asked = httpx.post(
        f"{url}/api/v1/sessions/sess_signin/asks",
        json={"questions": QUESTIONS, "requester_open_id": ACCOUNT.open_id},
        headers={"Authorization": f"Bearer {server['key']}"},
        timeout=20,
    )
    assert asked.status_code == 201, asked.text
    request_id = asked.json()["requestId"]
    ask = page.locator(f'section.ask[data-request-id="{request_id}"]')
    ask.wait_for(timeout=20_000)
    ask.locator('input[type=radio][value="PostgreSQL"]').check()
    ask.locator('input[type=checkbox][value="Lint"]').check()
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "signin-panel.png"), full_page=True)
    ask.locator("button.submit").click()
    ask.wait_for(state="detached", timeout=20_000)
    state = httpx.get(
        f"{url}/api/v1/asks/{request_id}",
        headers={"Authorization": f"Bearer {server['key']}"},
        timeout=20,
    ).json()
    assert state["status"] == "answered" and state["answered_via"] == "panel"
    answer = in_thread(lambda: Ask.objects.get(public_id=request_id).resolution["operator"])
    assert answer == ACCOUNT.open_id  # answered as the person who signed in
    assert errors == []
    context.close()
