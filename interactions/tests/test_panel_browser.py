"""The web panel `/panel/` in real headless Chromium (Debian's /usr/bin/chromium through
Playwright) against a real Daphne child process: sign in with a desktop token, questions
appear live as the bot registers them, one is answered on the page (single select + multi
select + "other"), another is answered on the Feishu card (`manage.py lark_replay`, encrypted
and signed as Feishu does) and disappears from the page. A screenshot goes to
test-artifacts/ (git-ignored)."""

from __future__ import annotations

import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from django.db import connection

from botadmin import services
from interactions.models import Ask
from interactions.render import progress_cards
from interactions.tests.ask_helpers import *  # noqa: F403
from interactions.tests.ask_helpers import QUESTIONS, REQUESTER, SESSION
from interactions.tests.panel_helpers import *  # noqa: F403
from tests import feishu
from tests.processes import child_env

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def in_thread(fn, *args):
    """Run ORM code outside Playwright's event loop (Django refuses ORM calls under one)."""

    def run():
        try:
            return fn(*args)
        finally:
            connection.close()  # this thread's connection (PostgreSQL drops the test DB)

    with ThreadPoolExecutor(1) as pool:
        return pool.submit(run).result()


@pytest.fixture
def world(lark_bot, lark_stub, progress, make_api_key, daphnes):
    """A running progress card of `lark_bot`, a desktop token of its requester, a bot API key
    and Daphne serving it all; request `browser` after this."""
    raw, _token = services.issue_desktop_token("test", lark_bot, REQUESTER, "browser")
    key = make_api_key(lark_bot)[0]
    url = daphnes.start("web")
    return {"bot": lark_bot, "raw": raw, "key": key, "url": url, "progress": progress}


@pytest.fixture
def browser(world):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
        try:
            yield chromium
        finally:
            chromium.close()


def register(world, session=SESSION, questions=QUESTIONS) -> str:
    response = httpx.post(
        f"{world['url']}/api/v1/sessions/{session}/asks",
        json={"questions": questions, "requester_open_id": REQUESTER},
        headers={"Authorization": f"Bearer {world['key']}"},
        timeout=20,
    )
    assert response.status_code == 201, response.text
    return response.json()["requestId"]


def card_submit(world, request_id: str) -> dict:
    """Submit the ask's form on the Feishu card: `manage.py lark_replay` in a child process."""
    form_index = in_thread(lambda: Ask.objects.get(public_id=request_id).form_index)
    (q0, c0), (q1, c1) = (progress_cards.field_names(form_index, i) for i in (0, 1))
    form = {q0: "0", c0: "", q1: ["0", "1"], c1: "卡片上填写"}
    done = subprocess.run(
        [
            sys.executable,
            "manage.py",
            "lark_replay",
            str(feishu.FIXTURES / "card_action_ask_submit.json"),
            "--app",
            world["bot"].app_id,
            "--url",
            world["url"],
            "--timeout",
            "30",
            "--set",
            f"event.action.value.requestId={request_id}",
            "--set",
            f"event.action.value.sessionId={SESSION}",
            "--set",
            f"event.context.open_message_id={world['progress'].card.open_message_id}",
            "--set",
            "event.action.form_value=" + json.dumps(form),
        ],
        cwd=ROOT,
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout[done.stdout.index("{") :])


def ask_state(world, request_id: str) -> dict:
    return httpx.get(
        f"{world['url']}/api/v1/asks/{request_id}",
        headers={"Authorization": f"Bearer {world['key']}"},
        timeout=20,
    ).json()


def test_panel_page_answers_on_the_page_and_drops_what_the_card_answered(world, browser):
    context = browser.new_context(locale="zh-CN", viewport={"width": 1000, "height": 1200})
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))

    # Sign in: a wrong token is refused, the right one opens the panel.
    page.goto(f"{world['url']}/panel/")
    page.fill("#id_token", world["raw"] + "x")
    page.click("#sign-in")
    assert page.is_visible("#login-error")
    page.fill("#id_token", world["raw"])
    page.click("#sign-in")
    page.wait_for_selector("body[data-state=connected]", timeout=20_000)
    assert "问题面板" in page.title() and page.is_visible("#empty")

    # Two asks registered by the bot appear live (pushed, no reload).
    first = register(world)
    second = register(world)
    page.wait_for_selector(f'section.ask[data-request-id="{second}"]', timeout=20_000)
    one = page.locator(f'section.ask[data-request-id="{first}"]')
    assert one.locator("input[type=radio]").count() == 2  # single select
    assert one.locator("input[type=checkbox]").count() == 3  # multi select
    assert one.locator("input.custom").count() == 2  # "other" per question
    assert "Production grade" in one.inner_text() and "其他（可选）" in one.inner_text()

    # Submitting nothing is refused on the page; nothing is sent.
    one.locator("button.submit").click()
    assert "请至少选择一项或填写其他" in one.locator(".form-error").inner_text()

    # Answer the first one on the page: a label, two labels and an "other" text.
    one.locator('input[type=radio][value="PostgreSQL"]').check()
    one.locator('input[type=checkbox][value="Unit tests"]').check()
    one.locator('input[type=checkbox][value="Lint"]').check()
    one.locator("fieldset[data-index='1'] input.custom").fill("staging too")
    assert one.locator(".form-error").inner_text() == ""  # the hint goes once something is chosen
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "panel.png"), full_page=True)
    one.locator("button.submit").click()
    page.wait_for_selector(f'section.ask[data-request-id="{first}"]', state="detached")
    state = ask_state(world, first)
    assert state["status"] == "answered" and state["answered_via"] == "panel"
    assert state["answers"] == [
        {"question": QUESTIONS[0]["question"], "selectedLabels": ["PostgreSQL"], "customInput": ""},
        {
            "question": QUESTIONS[1]["question"],
            "selectedLabels": ["Unit tests", "Lint"],
            "customInput": "staging too",
        },
    ]

    # The second is answered on the Feishu card: it disappears from the page, with a notice.
    answer = card_submit(world, second)
    assert answer["toast"]["i18n"]["zh_cn"] == "已提交"
    page.wait_for_selector(f'section.ask[data-request-id="{second}"]', state="detached")
    assert "已在别处作答" in page.inner_text("#notices")
    assert page.is_visible("#empty")
    assert ask_state(world, second)["answered_via"] == "card"

    # After a reload (a fresh snapshot) neither comes back; signing out ends the session.
    page.reload()
    page.wait_for_selector("body[data-state=connected]", timeout=20_000)
    assert page.locator("section.ask").count() == 0
    page.click("#logout")
    page.wait_for_selector("#id_token")
    assert errors == []
    context.close()
