"""Fixtures of the sign-in with Feishu tests: the OAuth stand-in (`tests/feishu_oauth_stub.py`)
with the real lark-oapi client pointed at it, and `sign_in(client)` driving the whole
redirect dance with Django's test client."""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

import httpx
import pytest

from tests.feishu_oauth_stub import Account, FeishuOAuthStub

TENANT = "tenant_cardloop_co"
ACCOUNT = Account(open_id="ou_signin_li_lei", union_id="on_li_lei", tenant_key=TENANT)

__all__ = ["ACCOUNT", "TENANT", "feishu_oauth", "sign_in"]


@pytest.fixture
def feishu_oauth(settings, monkeypatch, lark_bot):
    """The stand-in, serving `ACCOUNT`; `lark_bot` is the sign-in bot of tenant `TENANT`."""
    from interactions.lark.client import reset_clients
    from tests import feishu

    stub = FeishuOAuthStub(ACCOUNT, app_secrets={feishu.APP_ID: feishu.APP_SECRET}).start()
    settings.CARDLOOP_LARK_DOMAIN = stub.url
    settings.CARDLOOP_FEISHU_SIGNIN_APP = lark_bot.app_id
    settings.CARDLOOP_FEISHU_SIGNIN_TENANT = TENANT
    for name in ("NO_PROXY", "no_proxy"):
        monkeypatch.setenv(name, "127.0.0.1,localhost")
    reset_clients()
    yield stub
    stub.stop()
    reset_clients()


def authorize(client, next_url: str = "/dashboard/") -> dict[str, str]:
    """Start a sign-in with `client` and follow Feishu's page to its "Authorize" link:
    returns the callback's query (`code`, `state`)."""
    start = client.get("/auth/feishu/login", {"next": next_url})
    assert start.status_code == 302, start.content[:500]
    page = httpx.get(start["Location"], timeout=10).text
    href = page.split("id='approve' href='", 1)[1].split("'", 1)[0].replace("&amp;", "&")
    return {k: v[0] for k, v in parse_qs(urlsplit(href).query).items()}


def sign_in(client, next_url: str = "/dashboard/"):
    """The whole sign-in with `client`; returns the callback's response."""
    return client.get("/auth/feishu/callback", authorize(client, next_url))
