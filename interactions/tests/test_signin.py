"""Sign in with Feishu against a loopback stand-in of Feishu's OAuth endpoints, with the real
lark-oapi client: state checks, tenant check, account → user mapping (no permission granted
by signing in), the web panel without a hand-issued token, sign-out, and nothing secret in
the log."""

from __future__ import annotations

import logging
from urllib.parse import parse_qs, urlsplit

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from botadmin.models import AuditEntry, DesktopToken, FeishuIdentity, Team, TeamMembership
from interactions.signin import service
from interactions.tests.signin_helpers import *  # noqa: F403
from interactions.tests.signin_helpers import ACCOUNT, TENANT, authorize, sign_in
from tests.feishu_oauth_stub import Account

pytestmark = pytest.mark.django_db

User = get_user_model()


def english() -> Client:
    return Client(HTTP_ACCEPT_LANGUAGE="en")


def test_first_sign_in_makes_a_user_with_no_rights_and_opens_the_web_panel(feishu_oauth, lark_bot):
    client = english()
    start = client.get("/auth/feishu/login", {"next": "/panel/"})
    target = urlsplit(start["Location"])
    query = {k: v[0] for k, v in parse_qs(target.query).items()}
    assert f"{target.scheme}://{target.netloc}{target.path}" == (
        f"{feishu_oauth.url}/open-apis/authen/v1/authorize"
    )
    assert query["client_id"] == lark_bot.app_id and query["response_type"] == "code"
    assert query["redirect_uri"] == "http://testserver/auth/feishu/callback"
    assert len(query["state"]) >= 40

    response = sign_in(client, "/panel/")
    assert response.status_code == 302 and response["Location"] == "/panel/"

    identity = FeishuIdentity.objects.select_related("user").get()
    user = identity.user
    assert (identity.bot, identity.open_id, identity.union_id, identity.tenant_key) == (
        lark_bot,
        ACCOUNT.open_id,
        ACCOUNT.union_id,
        TENANT,
    )
    assert user.first_name == ACCOUNT.name and not user.has_usable_password()
    assert not (user.is_staff or user.is_superuser)
    assert not TeamMembership.objects.filter(user=user).exists()  # no auto-granting
    assert not user.user_permissions.exists() and not user.groups.exists()
    assert ACCOUNT.open_id not in user.username

    panel = client.get("/panel/")
    assert panel.status_code == 200 and b'id="id_token"' not in panel.content
    token = DesktopToken.objects.get(bot=lark_bot, open_id=ACCOUNT.open_id)
    assert token.label == service.SIGNIN_TOKEN_LABEL and token.is_active
    assert client.session["cardloop_panel_token"] == token.pk
    dashboard = client.get("/dashboard/")
    assert dashboard.status_code == 403  # signed in, but no team: nothing to read yet

    # The real lark-oapi client made the calls: app token, then the code, then the user.
    oidc = feishu_oauth.calls_to("/open-apis/authen/v1/oidc/access_token")
    assert len(oidc) == 1 and oidc[0].headers["Authorization"] == f"Bearer a-stub-{lark_bot.app_id}"
    assert oidc[0].body == {"grant_type": "authorization_code", "code": feishu_oauth.last_code}
    info = feishu_oauth.calls_to("/open-apis/authen/v1/user_info")
    assert len(info) == 1 and info[0].headers["Authorization"].startswith("Bearer u-")
    entry = AuditEntry.objects.get(action="feishuidentity.linked")
    assert entry.after == {"bot": lark_bot.app_id, "user": user.username, "new_user": True}
    assert ACCOUNT.open_id not in str(entry.after) + entry.target_repr


def test_a_manager_keeps_their_teams_and_sees_the_dashboard(feishu_oauth, lark_bot, make_bot):
    client = english()
    sign_in(client)
    user = FeishuIdentity.objects.get().user
    TeamMembership.objects.create(team=Team.objects.create(name="Ops"), user=user)

    again = english()
    assert sign_in(again).status_code == 302
    assert User.objects.count() == 1 and FeishuIdentity.objects.count() == 1
    assert list(TeamMembership.objects.filter(user=user).values_list("team__name", flat=True)) == [
        "Ops"
    ]
    assert again.get("/dashboard/").status_code == 200

    # The same person through a second sign-in bot of the same tenant: same user (union_id).
    other = make_bot(app_id="cli_second_app", app_secret="second-secret")
    from django.conf import settings

    feishu_oauth.app_secrets[other.app_id] = "second-secret"
    feishu_oauth.account = Account(
        open_id="ou_li_lei_in_app_two", union_id=ACCOUNT.union_id, tenant_key=TENANT
    )
    settings.CARDLOOP_FEISHU_SIGNIN_APP = other.app_id
    assert sign_in(english()).status_code == 302
    assert User.objects.count() == 1
    assert set(FeishuIdentity.objects.values_list("bot__app_id", "user")) == {
        (lark_bot.app_id, user.pk),
        (other.app_id, user.pk),
    }


def test_state_is_single_use_bound_to_the_session_and_expires(feishu_oauth):
    client = english()
    params = authorize(client)
    assert client.get("/auth/feishu/callback", {**params, "state": "x" * 43}).status_code == 400
    # the mismatch used up the sign-in: the right state no longer works either
    assert client.get("/auth/feishu/callback", params).status_code == 400

    params = authorize(client)
    stranger = english()  # another browser holding a valid code and state
    refused = stranger.get("/auth/feishu/callback", params)
    assert refused.status_code == 400 and b'data-reason="bad_state"' in refused.content
    assert b"was not started in this browser" in refused.content

    params = authorize(client)
    session = client.session
    session[service.SESSION_STATE]["at"] -= service.STATE_TTL + 1
    session.save()
    assert client.get("/auth/feishu/callback", params).status_code == 400

    params = authorize(client)
    assert client.get("/auth/feishu/callback", params).status_code == 302
    assert client.get("/auth/feishu/callback", params).status_code == 400  # replayed
    assert User.objects.count() == 1


def test_an_account_of_another_tenant_is_refused_with_a_clear_page(feishu_oauth):
    feishu_oauth.account = Account(open_id="ou_outsider", union_id="on_x", tenant_key="other_co")
    client = english()
    response = sign_in(client)
    assert response.status_code == 403
    assert b'data-reason="other_tenant"' in response.content
    assert b"belongs to another organisation" in response.content
    assert not User.objects.exists() and not FeishuIdentity.objects.exists()
    assert client.get("/dashboard/").status_code == 302  # not signed in: to the login page


def test_refused_consent_and_refused_codes_sign_nobody_in(feishu_oauth):
    client = english()
    params = authorize(client)
    denied = client.get(
        "/auth/feishu/callback", {"error": "access_denied", "state": params["state"]}
    )
    assert denied.status_code == 403 and b'data-reason="denied"' in denied.content

    params = authorize(client)
    feishu_oauth.codes.clear()  # Feishu no longer knows the code (expired, used elsewhere)
    failed = client.get("/auth/feishu/callback", params)
    assert failed.status_code == 502 and b'data-reason="feishu_error"' in failed.content
    assert not User.objects.exists()


def test_staff_sign_in_with_their_password_not_with_feishu(feishu_oauth, lark_bot):
    staff = User.objects.create_user("ops", password="pw-ops-1", is_staff=True)
    FeishuIdentity.objects.create(
        user=staff, bot=lark_bot, tenant_key=TENANT, open_id=ACCOUNT.open_id
    )
    client = english()
    response = sign_in(client)
    assert response.status_code == 403 and b'data-reason="staff"' in response.content
    assert "_auth_user_id" not in client.session
    assert not DesktopToken.objects.exists()

    login = client.post("/accounts/login/", {"username": "ops", "password": "pw-ops-1"})
    assert login.status_code == 302 and client.session["_auth_user_id"] == str(staff.pk)


def test_sign_out_revokes_the_panel_of_that_sign_in(feishu_oauth):
    client = english()
    sign_in(client, "/panel/")
    token = DesktopToken.objects.get()
    client.post("/accounts/logout/")
    token.refresh_from_db()
    assert not token.is_active
    assert AuditEntry.objects.filter(action="desktoptoken.revoked").count() == 1
    assert b'id="id_token"' in client.get("/panel/").content  # the sign-in form again


def test_sign_in_pages_offer_feishu_only_when_it_is_set_up(feishu_oauth, settings):
    client = english()
    assert b'id="feishu-sign-in"' in client.get("/accounts/login/").content
    assert b'href="/auth/feishu/login?next=%2Fpanel%2F"' in client.get("/panel/").content
    settings.CARDLOOP_FEISHU_SIGNIN_TENANT = ""
    assert b"feishu-sign-in" not in client.get("/accounts/login/").content
    off = client.get("/auth/feishu/login")
    assert off.status_code == 404 and b'data-reason="not_configured"' in off.content


def test_a_callback_on_a_cardloop_without_sign_in_says_it_is_not_set_up_not_expired(settings):
    settings.CARDLOOP_FEISHU_SIGNIN_TENANT = ""
    off = english().get("/auth/feishu/callback", {"state": "s", "code": "c"})
    assert off.status_code == 404 and b'data-reason="not_configured"' in off.content


def test_next_must_stay_on_this_site(feishu_oauth):
    client = english()
    params = authorize(client, "https://evil.example/steal")
    assert client.get("/auth/feishu/callback", params)["Location"] == "/dashboard/"


def test_no_code_token_state_or_open_id_reaches_the_log(feishu_oauth, caplog):
    caplog.set_level(logging.DEBUG)
    client = english()
    params = authorize(client)
    client.get("/auth/feishu/callback", params)
    feishu_oauth.account = Account(open_id="ou_outsider", union_id="on_x", tenant_key="other_co")
    sign_in(english())
    user_tokens = list(feishu_oauth.tokens)
    assert user_tokens
    for secret in [params["code"], params["state"], ACCOUNT.open_id, "ou_outsider", *user_tokens]:
        assert secret not in caplog.text
    assert "feishu sign-in refused: other_tenant" in caplog.text


def test_staff_see_linked_accounts_in_the_admin_and_cannot_edit_them(feishu_oauth, admin_client):
    sign_in(english())
    identity = FeishuIdentity.objects.get()
    listing = admin_client.get("/admin/botadmin/feishuidentity/")
    assert listing.status_code == 200 and identity.user.username.encode() in listing.content
    assert admin_client.get("/admin/botadmin/feishuidentity/add/").status_code == 403


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_two_first_sign_ins_of_one_account_at_once_make_one_user(lark_bot):
    import threading

    from django.db import connection

    barrier = threading.Barrier(2)
    users, errors = [], []

    def run():
        try:
            barrier.wait(5)
            users.append(service._user_for(lark_bot, service_account()))
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=run) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert errors == []
    assert len({u.pk for u in users}) == 1
    assert User.objects.count() == 1 and FeishuIdentity.objects.count() == 1


def service_account():
    from interactions.lark.oauth import FeishuAccount

    return FeishuAccount(
        open_id=ACCOUNT.open_id, union_id=ACCOUNT.union_id, tenant_key=TENANT, name="Li Lei"
    )
