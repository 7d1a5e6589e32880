"""Sign in with Feishu: `GET /auth/feishu/login?next=…` (off to Feishu's authorization page)
and `GET /auth/feishu/callback?code=…&state=…` (back: check state, fetch the account, check
the tenant, sign in). Parse, call, render; the rules live in `interactions.signin.service`
and `interactions.lark.oauth`. Every refusal is a page that says why, with a 4xx (502 when
Feishu failed), never a 500."""

from __future__ import annotations

import logging

from django.conf import settings
from django.http import HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.utils.translation import gettext_lazy as _
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from botadmin.services import SignInRefused
from interactions.signin import service

log = logging.getLogger(__name__)

#: reason → (HTTP status, message) of the refusal page.
REFUSALS = {
    "not_configured": (404, _("Sign-in with Feishu is not set up on this Cardloop.")),
    "bad_state": (
        400,
        _(
            "This sign-in expired or was not started in this browser. Start again from the "
            "sign-in page."
        ),
    ),
    "denied": (403, _("You did not allow Cardloop to use your Feishu account.")),
    "feishu_error": (502, _("Feishu did not confirm your sign-in. Try again in a moment.")),
    "other_tenant": (
        403,
        _(
            "This Feishu account belongs to another organisation. Only members of the "
            "organisation this Cardloop's Feishu app belongs to can sign in."
        ),
    ),
    "staff": (
        403,
        _("Staff accounts sign in with their username and password, not with Feishu."),
    ),
    "inactive": (403, _("This account is deactivated. Ask an administrator.")),
}


def refused(request, reason: str):
    """The page that says why a sign-in was refused (status by reason)."""
    status, message = REFUSALS[reason]
    log.warning("feishu sign-in refused: %s", reason)
    return render(
        request,
        "interactions/signin_refused.html",
        {"reason": reason, "message": message},
        status=status,
    )


def _next_url(request) -> str:
    candidate = request.GET.get("next", "")
    if candidate and url_has_allowed_host_and_scheme(
        candidate, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        return candidate
    return service.DEFAULT_NEXT


@never_cache
@require_GET
def start(request):
    """Leave for Feishu's authorization page with a fresh `state` bound to this session."""
    from interactions.lark import oauth  # lark-oapi takes seconds to import: on first use

    bot = service.signin_bot()
    if bot is None:
        return refused(request, "not_configured")
    state = service.begin(request.session, _next_url(request))
    redirect_uri = request.build_absolute_uri(reverse("feishu-signin-callback"))
    return HttpResponseRedirect(oauth.authorize_url(bot, redirect_uri=redirect_uri, state=state))


@never_cache
@require_GET
def callback(request):
    """Back from Feishu: the state must be this session's (single use, `STATE_TTL`), the
    code must yield an account of the sign-in bot's tenant; then sign in and go on."""
    from interactions.lark import oauth  # lark-oapi takes seconds to import: on first use
    from interactions.lark.client import LarkApiError

    # not set up is checked first: a state can only have been issued by a configured sign-in,
    # so "expired" would be the wrong reason for a Cardloop that has none
    bot = service.signin_bot()
    if bot is None:
        return refused(request, "not_configured")
    next_url = service.take_state(request.session, request.GET.get("state", ""))
    if next_url is None:
        return refused(request, "bad_state")
    if request.GET.get("error"):
        return refused(request, "denied")
    code = request.GET.get("code", "")
    if not code or len(code) > oauth.MAX_PARAM_LENGTH:
        return refused(request, "bad_state")
    try:
        account = oauth.fetch_account(bot, code)
    except LarkApiError as exc:
        log.warning("feishu sign-in: %s", exc)  # call, code, msg, log_id: no token
        return refused(request, "feishu_error")
    if account.tenant_key != settings.CARDLOOP_FEISHU_SIGNIN_TENANT:
        return refused(request, "other_tenant")
    try:
        service.complete(request, bot, account)
    except SignInRefused as exc:
        return refused(request, exc.reason)
    return HttpResponseRedirect(next_url)
