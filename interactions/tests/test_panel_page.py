"""The web panel's pages (`/panel/`): sign-in with a desktop token, the panel, sign-out, both
languages. The panel in a real browser is in test_panel_browser."""

from __future__ import annotations

import pytest

from botadmin import services
from interactions.panels import service as panels

pytestmark = pytest.mark.django_db


@pytest.fixture
def token(make_bot):
    return services.issue_desktop_token(
        "test", make_bot(app_id="cli_page", name="Helper"), "ou_a", "desk"
    )


def test_without_a_session_the_panel_is_the_sign_in_form(client):
    response = client.get("/panel/", HTTP_ACCEPT_LANGUAGE="en")
    assert response.status_code == 200
    html = response.content.decode()
    assert 'name="token"' in html and "Sign in" in html and "no-store" in response["Cache-Control"]


def test_wrong_token_shows_the_form_again_with_an_error_and_signs_nothing_in(client, token):
    response = client.post("/panel/login", {"token": token[0] + "x"}, HTTP_ACCEPT_LANGUAGE="en")
    assert response.status_code == 400
    assert "This token is not valid" in response.content.decode()
    assert panels.SESSION_KEY not in client.session


def test_valid_token_signs_in_shows_the_panel_and_sign_out_forgets_it(client, token):
    raw, row = token
    response = client.post("/panel/login", {"token": raw})
    assert response.status_code == 302 and response["Location"] == "/panel/"
    assert client.session[panels.SESSION_KEY] == row.pk
    page = client.get("/panel/", HTTP_ACCEPT_LANGUAGE="en").content.decode()
    assert 'id="asks"' in page and "interactions/panel.js" in page and "Helper · desk" in page
    assert raw not in page and "ou_a" not in page
    client.post("/panel/logout")
    assert panels.SESSION_KEY not in client.session
    assert 'name="token"' in client.get("/panel/").content.decode()


def test_a_revoked_token_ends_the_web_session(client, token):
    raw, row = token
    client.post("/panel/login", {"token": raw})
    services.revoke_desktop_token("test", row)
    assert 'name="token"' in client.get("/panel/").content.decode()


def test_panel_speaks_chinese_by_default_and_english_on_request(client, token):
    client.post("/panel/login", {"token": token[0]})
    zh = client.get("/panel/", HTTP_ACCEPT_LANGUAGE="zh-hans").content.decode()
    assert "问题面板" in zh and "其他（可选）".encode("unicode_escape").decode() in zh
    en = client.get("/panel/", HTTP_ACCEPT_LANGUAGE="en").content.decode()
    assert "Question panel" in en and "Other (optional)" in en
