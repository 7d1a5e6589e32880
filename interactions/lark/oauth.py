"""Sign in with Feishu: the OAuth 2 web login of a bot's Feishu/Lark app, over lark-oapi.

    url = authorize_url(bot, redirect_uri="https://…/auth/feishu/callback", state=state)
    account = fetch_account(bot, code)        # FeishuAccount(open_id, union_id, tenant_key, name)

The browser is sent to Feishu's authorization page (`authorize_url`, a plain redirect, no API
call), which redirects back with `code` and `state`
(https://open.feishu.cn/document/common-capabilities/sso/api/obtain-oauth-code). `fetch_account`
then makes the two Open API calls with lark-oapi's client for the bot (the same cached client
and domain as card calls, `client._client` / `client.domain_for`):

- `authen.v1.oidc_access_token.create` — the code (single use, valid 5 minutes) for a
  user_access_token, authorized by the app's app_access_token, which lark-oapi obtains itself
  (https://open.feishu.cn/document/uAjLw4CM/ukTMukTMukTM/reference/authen-v1/oidc-access_token/create);
- `authen.v1.user_info.get` with that user_access_token — the account's `open_id`, `union_id`,
  `tenant_key` and name
  (https://open.feishu.cn/document/uAjLw4CM/ukTMukTMukTM/reference/authen-v1/user_info/get).

The user_access_token is used for that one call and dropped: never returned, stored or logged
(the refresh token is ignored). Failures raise `client.LarkApiError` (Feishu `code`/`msg`,
`log_id`; code -1 for network errors or a bot without an app secret). Nothing here touches the
database. `CARDLOOP_LARK_DOMAIN` (tests) moves the authorization page to that base URL too.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlencode

import lark_oapi as lark
from django.conf import settings
from lark_oapi.api.authen.v1 import (
    CreateOidcAccessTokenRequest,
    CreateOidcAccessTokenRequestBody,
    GetUserInfoRequest,
)
from lark_oapi.core.const import FEISHU_OAUTH_DOMAIN, LARK_OAUTH_DOMAIN

from interactions.lark.client import TIMEOUT, LarkApiError, LarkGateway, _client, domain_for

#: Path of the authorization page on the accounts domain.
AUTHORIZE_PATH = "/open-apis/authen/v1/authorize"
#: Longest `code` / `state` accepted back from the browser (Feishu's are far shorter).
MAX_PARAM_LENGTH = 512


@dataclass(frozen=True)
class FeishuAccount:
    """The signed-in Feishu account as `user_info` states it. `repr()` shows no ids."""

    open_id: str
    union_id: str
    tenant_key: str
    name: str

    def __repr__(self) -> str:
        return "FeishuAccount(…)"


def accounts_domain_for(bot) -> str:
    """Base URL of the authorization page: `CARDLOOP_LARK_DOMAIN` if set (tests), else
    accounts.feishu.cn or accounts.larksuite.com by the bot's domain."""
    if settings.CARDLOOP_LARK_DOMAIN:
        return settings.CARDLOOP_LARK_DOMAIN.rstrip("/")
    return LARK_OAUTH_DOMAIN if bot.domain == "lark" else FEISHU_OAUTH_DOMAIN


def authorize_url(bot, *, redirect_uri: str, state: str) -> str:
    """Where to send the browser: Feishu's authorization page for `bot`'s app
    (`client_id` = app_id, `response_type=code`, `redirect_uri`, `state`). `redirect_uri`
    must be registered in the app's security settings in the developer console."""
    query = urlencode(
        {
            "client_id": bot.app_id,
            "response_type": "code",
            "redirect_uri": redirect_uri,
            "state": state,
        }
    )
    return f"{accounts_domain_for(bot)}{AUTHORIZE_PATH}?{query}"


def fetch_account(bot, code: str) -> FeishuAccount:
    """Exchange the authorization `code` for a user_access_token and read the account it
    belongs to. Raises `LarkApiError` (the code was refused, expired or reused; Feishu or the
    network failed; the bot has no app secret — `retryable=False`)."""
    secret = bot.secret("app_secret")
    if not secret:
        raise LarkApiError("authen", -1, "bot has no app secret", retryable=False)
    client = _client(bot.app_id, secret, domain_for(bot))
    gateway = LarkGateway(bot.app_id, client)
    body = CreateOidcAccessTokenRequestBody.builder().grant_type("authorization_code").code(code)
    token = gateway._call(  # the adapter's one error mapping (same package)
        "authen.oidc_access_token.create",
        client.authen.v1.oidc_access_token.create,
        CreateOidcAccessTokenRequest.builder().request_body(body.build()).build(),
    )
    access_token = (token.data.access_token if token.data else None) or ""
    if not access_token:
        raise LarkApiError("authen.oidc_access_token.create", -1, "no access_token")
    # lark-oapi sends a user_access_token only from a client built with enable_set_token
    # (which then takes every token from the request option): one for this call.
    user_client = (
        lark.Client.builder()
        .app_id(bot.app_id)
        .app_secret(secret)
        .domain(domain_for(bot))
        .enable_set_token(True)
        .timeout(TIMEOUT)
        .log_level(lark.LogLevel.WARNING)
        .build()
    )
    option = lark.RequestOption.builder().user_access_token(access_token).build()
    info = (
        LarkGateway(bot.app_id, user_client)
        ._call(
            "authen.user_info.get",
            lambda request: user_client.authen.v1.user_info.get(request, option),
            GetUserInfoRequest.builder().build(),
        )
        .data
    )
    if info is None or not info.open_id or not info.tenant_key:
        raise LarkApiError("authen.user_info.get", -1, "no open_id or tenant_key")
    return FeishuAccount(
        open_id=info.open_id,
        union_id=info.union_id or "",
        tenant_key=info.tenant_key,
        name=info.name or info.en_name or "",
    )
