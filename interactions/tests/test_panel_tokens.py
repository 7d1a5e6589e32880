"""Desktop tokens: issued once and audited (service, admin, bot API), stored hashed, revoked;
the OpenAPI schema documents the API."""

from __future__ import annotations

import hashlib
import re

import pytest
from django.urls import reverse

from botadmin import services
from botadmin.models import AuditEntry, DesktopToken

pytestmark = pytest.mark.django_db


@pytest.fixture
def staff(admin_client):
    admin_client.defaults["HTTP_ACCEPT_LANGUAGE"] = "en"
    return admin_client


def test_issued_token_is_stored_hashed_authenticates_and_stops_when_revoked(make_bot):
    bot = make_bot(app_id="cli_tok")
    raw, token = services.issue_desktop_token("ops", bot, " ou_alice ", "laptop")
    assert raw.startswith(f"cdt_{token.lookup}_") and token.open_id == "ou_alice"
    assert token.token_hash == hashlib.sha256(raw.encode()).hexdigest() != raw
    assert DesktopToken.find_active(raw).pk == token.pk
    entry = AuditEntry.objects.get(action="desktoptoken.issued")
    assert entry.after == {"bot": "cli_tok", "token": f"cdt_{token.lookup}_…", "label": "laptop"}
    assert "ou_alice" not in str(entry.after) + entry.target_repr and raw not in entry.target_repr

    services.revoke_desktop_token("ops", token)
    services.revoke_desktop_token("ops", token)  # idempotent: one audit entry
    assert DesktopToken.find_active(raw) is None
    assert AuditEntry.objects.filter(action="desktoptoken.revoked").count() == 1


def test_token_needs_an_open_id(make_bot):
    bot = make_bot(app_id="cli_tok")
    with pytest.raises(ValueError):
        services.issue_desktop_token("ops", bot, "  ")
    with pytest.raises(ValueError):
        services.issue_desktop_token("ops", bot, "x" * 65)
    assert not DesktopToken.objects.exists()


def test_bot_api_issues_a_token_once_lists_it_without_the_secret_and_revokes_it(bot_client):
    response = bot_client.post(
        "/api/v1/desktop-tokens", {"open_id": "ou_bob", "label": "desk"}, format="json"
    )
    assert response.status_code == 201
    body = response.json()
    raw = body["token"]
    assert body["open_id"] == "ou_bob" and body["active"] is True
    assert DesktopToken.find_active(raw).bot == bot_client.bot
    assert body["prefix"] == f"cdt_{raw.split('_')[1]}_…"

    listed = bot_client.get("/api/v1/desktop-tokens", {"open_id": "ou_bob"}).json()["results"]
    assert [t["id"] for t in listed] == [body["id"]] and raw not in str(listed)
    assert bot_client.get("/api/v1/desktop-tokens", {"open_id": "ou_x"}).json()["results"] == []

    revoked = bot_client.post(f"/api/v1/desktop-tokens/{body['id']}/revoke")
    assert revoked.status_code == 200 and revoked.json()["active"] is False
    assert DesktopToken.find_active(raw) is None
    only_active = bot_client.get("/api/v1/desktop-tokens", {"active": "true"}).json()["results"]
    assert only_active == []
    audit = AuditEntry.objects.filter(action__startswith="desktoptoken.").values_list(
        "action", "actor_repr"
    )
    assert sorted(audit) == [
        ("desktoptoken.issued", "bot:cli_test_app"),
        ("desktoptoken.revoked", "bot:cli_test_app"),
    ]


def test_bot_api_refuses_bad_bodies_other_bots_tokens_and_missing_keys(
    bot_client, make_bot, client
):
    missing = bot_client.post("/api/v1/desktop-tokens", {"label": "x"}, format="json")
    assert missing.status_code == 400
    assert missing.json()["error"] == "invalid" and "open_id" in missing.json()["detail"]
    blank = bot_client.post("/api/v1/desktop-tokens", {"open_id": "   "}, format="json")
    assert blank.status_code == 400 and "open_id" in blank.json()["detail"]
    bad_filter = bot_client.get("/api/v1/desktop-tokens", {"active": "maybe"})
    assert bad_filter.status_code == 400 and "active" in bad_filter.json()["detail"]

    _raw, foreign = services.issue_desktop_token("ops", make_bot(app_id="cli_other"), "ou_c")
    response = bot_client.post(f"/api/v1/desktop-tokens/{foreign.pk}/revoke")
    assert response.status_code == 404 and response.json()["error"] == "not_found"
    foreign.refresh_from_db()
    assert foreign.is_active

    anonymous = client.post(
        "/api/v1/desktop-tokens", {"open_id": "ou_bob"}, content_type="application/json"
    )
    assert anonymous.status_code in (401, 403) and "error" in anonymous.json()
    assert not DesktopToken.objects.filter(open_id="ou_bob").exists()


def test_admin_issues_a_token_shown_once_then_lists_searches_and_revokes(staff, make_bot):
    bot = make_bot(app_id="cli_adm")
    add = reverse("admin:botadmin_desktoptoken_add")
    response = staff.post(add, {"bot": bot.pk, "open_id": "ou_carol", "label": "mac"})
    assert response.status_code == 200 and "no-store" in response["Cache-Control"]
    html = response.content.decode()
    raw = re.search(r'value="(cdt_[^"]+)"', html).group(1)
    token = DesktopToken.find_active(raw)
    assert token.open_id == "ou_carol" and token.created_by.username == "admin"
    assert "/panel/" in html

    changelist = reverse("admin:botadmin_desktoptoken_changelist")
    page = staff.get(changelist, {"q": "ou_carol"}).content.decode()
    assert services.desktop_token_prefix(token) in page and raw not in page
    detail = staff.get(reverse("admin:botadmin_desktoptoken_change", args=[token.pk]))
    assert raw not in detail.content.decode() and "Revoke this token" in detail.content.decode()

    staff.post(changelist, {"action": "revoke_selected", "_selected_action": [token.pk]})
    assert DesktopToken.find_active(raw) is None
    revoked = staff.get(changelist, {"status": "revoked"}).content.decode()
    assert services.desktop_token_prefix(token) in revoked
    assert staff.get(changelist, {"status": "active"}).content.decode().count("cdt_") == 0
    assert AuditEntry.objects.filter(action="desktoptoken.revoked", actor_repr="admin").exists()


def test_admin_revoke_button_on_the_token_page(staff, make_bot):
    _raw, token = services.issue_desktop_token("ops", make_bot(app_id="cli_adm"), "ou_d")
    url = reverse("admin:botadmin_desktoptoken_change", args=[token.pk])
    response = staff.post(url, {"_revoke": "1"}, follow=True)
    assert "revoked; it no longer connects" in response.content.decode()
    token.refresh_from_db()
    assert token.revoked_at is not None


def test_schema_documents_the_desktop_token_api(client):
    schema = client.get("/api/schema/", HTTP_ACCEPT="application/json").content.decode()
    assert "/api/v1/desktop-tokens/{token_id}/revoke" in schema
    assert "desktop_tokens_issue" in schema


def test_admin_lists_live_panels_per_token(staff, make_bot):
    from interactions import presence as panel_presence
    from interactions.models import PanelPresence

    bot = make_bot(app_id="cli_adm")
    _raw, token = services.issue_desktop_token("ops", bot, "ou_e", "laptop")
    user = panel_presence.PanelUser(token_id=token.pk, bot=bot, open_id="ou_e", via="desktop")
    panel_presence.register(user, "specific.one")
    panel_presence.register(user, "specific.two")
    assert panel_presence.is_connected(bot, "ou_e")
    changelist = reverse("admin:botadmin_desktoptoken_changelist")
    page = staff.get(changelist).content.decode()
    assert 'class="field-connected">2</td>' in page
    listing = staff.get(reverse("admin:interactions_panelpresence_changelist")).content.decode()
    assert "ou_e" in listing and panel_presence.SERVER_ID in listing
    assert PanelPresence.objects.live().count() == 2
