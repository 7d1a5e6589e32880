"""Desktop tokens over the bot API and the web question panel `/panel/` (parse, authorize,
call, serialize; token state changes are `botadmin.services.issue_desktop_token` /
`revoke_desktop_token`, the panel protocol is `interactions.panels.service`).

- `POST /api/v1/desktop-tokens` `{open_id, label}` → 201 with the raw token (shown once).
- `GET /api/v1/desktop-tokens?open_id=…&active=true` — the bot's tokens (never the raw value).
- `POST /api/v1/desktop-tokens/<id>/revoke` — revoke; connected panels close at their next
  resync.
- `GET /panel/` — the web panel (a login form without a session), `POST /panel/login`
  (`token`), `POST /panel/logout`.
"""

from __future__ import annotations

import logging
import re

from django.conf import settings
from django.http import HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_POST
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from botadmin import services
from botadmin.auth import IsBot
from botadmin.models import DesktopToken
from interactions.panels import service as panels
from plumbing.api import ApiError
from plumbing.fields import OPEN_ID_MAX_LENGTH, OPEN_ID_PATTERN, OpenIdField, StrictCharField

log = logging.getLogger(__name__)

#: Most tokens one list answer returns (newest first).
LIST_LIMIT = 200


# ---------------------------------------------------------------------------------------------
# Bot API: desktop tokens
# ---------------------------------------------------------------------------------------------


class DesktopTokenIssueSerializer(serializers.Serializer):
    """Body of `POST /api/v1/desktop-tokens`."""

    open_id = OpenIdField(
        max_length=services.OPEN_ID_MAX_LENGTH,
        help_text=gettext_lazy("The Feishu user (open_id) whose questions the panel shows."),
    )
    label = StrictCharField(
        max_length=100,
        required=False,
        allow_blank=True,
        default="",
        help_text=gettext_lazy("Where it is used, e.g. “Li Lei's laptop”."),
    )


class DesktopTokenSerializer(serializers.Serializer):
    """A desktop token as the API shows it: never the raw value (only at issue, `token`)."""

    id = serializers.IntegerField()
    prefix = serializers.CharField(help_text=gettext_lazy("Public part, safe to show."))
    open_id = serializers.CharField()
    label = serializers.CharField()
    active = serializers.BooleanField()
    created_at = serializers.DateTimeField()
    last_used_at = serializers.DateTimeField(allow_null=True)
    revoked_at = serializers.DateTimeField(allow_null=True)


class DesktopTokenIssuedSerializer(DesktopTokenSerializer):
    token = serializers.CharField(
        help_text=gettext_lazy("The raw token. Shown only in this answer; only its hash is kept.")
    )


class DesktopTokenListSerializer(serializers.Serializer):
    results = DesktopTokenSerializer(many=True)


def token_json(token: DesktopToken) -> dict:
    return {
        "id": token.pk,
        "prefix": services.desktop_token_prefix(token),
        "open_id": token.open_id,
        "label": token.label,
        "active": token.is_active,
        "created_at": token.created_at,
        "last_used_at": token.last_used_at,
        "revoked_at": token.revoked_at,
    }


_ERRORS = {
    400: OpenApiResponse(
        description=gettext_lazy("Invalid body: `{error, detail}` names the field.")
    ),
    401: OpenApiResponse(description=gettext_lazy("No or invalid bot API key.")),
}


class DesktopTokensView(APIView):
    """Issue and list desktop tokens of the calling bot."""

    permission_classes = [IsBot]

    @extend_schema(
        operation_id="desktop_tokens_issue",
        request=DesktopTokenIssueSerializer,
        responses={201: DesktopTokenIssuedSerializer, **_ERRORS},
        description=(
            "Issue a desktop token for one user of this bot. The raw `token` is in this answer "
            "only. A panel connects with it to `/ws/panel/` (`Authorization: Bearer <token>` or "
            "subprotocols `cardloop.panel.v1` + `<token>`) or signs in at `/panel/`."
        ),
    )
    def post(self, request):
        body = DesktopTokenIssueSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        open_id = body.validated_data["open_id"].strip()
        if not open_id:
            raise ApiError("invalid", {"open_id": [_("This field may not be blank.")]})
        raw, token = services.issue_desktop_token(
            request.user.get_username(), request.user.bot, open_id, body.validated_data["label"]
        )
        return Response({**token_json(token), "token": raw}, status=status.HTTP_201_CREATED)

    @extend_schema(
        operation_id="desktop_tokens_list",
        parameters=[
            OpenApiParameter(
                "open_id",
                {"type": "string", "pattern": OPEN_ID_PATTERN, "maxLength": OPEN_ID_MAX_LENGTH},
                description=gettext_lazy("Only this user's tokens (a Feishu open_id, ou_…)."),
            ),
            OpenApiParameter(
                "active",
                bool,
                description=gettext_lazy(
                    "true: only tokens not revoked; false: only revoked ones. Any other value "
                    "(also an empty one) is 400 `invalid`."
                ),
            ),
        ],
        responses={200: DesktopTokenListSerializer, **_ERRORS},
        description=f"This bot's desktop tokens, newest first (at most {LIST_LIMIT}).",
    )
    def get(self, request):
        tokens = DesktopToken.objects.filter(bot=request.user.bot)
        open_id = request.query_params.get("open_id")
        if open_id is not None:
            if len(open_id) > OPEN_ID_MAX_LENGTH or not re.fullmatch(OPEN_ID_PATTERN, open_id):
                raise ApiError("invalid", {"open_id": [_("Use a Feishu open_id (ou_…).")]})
            tokens = tokens.filter(open_id=open_id)
        active = request.query_params.get("active")
        if active not in (None, "true", "false"):
            raise ApiError("invalid", {"active": [_("Use true or false.")]})
        if active == "true":
            tokens = tokens.active()
        elif active == "false":
            tokens = tokens.filter(revoked_at__isnull=False)
        return Response({"results": [token_json(t) for t in tokens[:LIST_LIMIT]]})


class DesktopTokenRevokeView(APIView):
    """Revoke one desktop token of the calling bot."""

    permission_classes = [IsBot]

    @extend_schema(
        operation_id="desktop_tokens_revoke",
        request=None,
        responses={
            200: DesktopTokenSerializer,
            404: OpenApiResponse(description=gettext_lazy("No such token of this bot.")),
            **_ERRORS,
        },
        description="Revoke; idempotent. Panels connected with it are closed (code 4401) at "
        "once, their answers are refused from now on, and they cannot reconnect.",
    )
    def post(self, request, token_id: int):
        token = DesktopToken.objects.filter(bot=request.user.bot, pk=token_id).first()
        if token is None:
            raise ApiError(
                "not_found", _("No desktop token %(id)s for this bot.") % {"id": token_id}, 404
            )
        panels.revoke_token(request.user.get_username(), token)
        return Response(token_json(token))


# ---------------------------------------------------------------------------------------------
# Web panel
# ---------------------------------------------------------------------------------------------


def _js_strings() -> dict[str, str]:
    """Texts the panel's script shows, translated for the request's language."""
    return {
        "connecting": _("Connecting…"),
        "connected": _("Connected"),
        "reconnecting": _("Connection lost; reconnecting…"),
        "signed_out": _("Your token is no longer valid. Sign in again."),
        "empty": _("No open questions. New ones appear here as the agent asks them."),
        "other": _("Other (optional)"),
        "submit": _("Submit"),
        "submitting": _("Submitting…"),
        "answered_elsewhere": _("Answered elsewhere"),
        "expires": _("Expires %(time)s"),
        "multi": _("Choose one or more"),
        "single": _("Choose one"),
        "rejected_unknown": _("This question no longer exists."),
        "rejected_finished": _("This question was already answered elsewhere or has expired."),
        "rejected_not_sender": _("Only the person the question was asked of may answer it."),
        "rejected_empty_answer": _(
            "Select at least one option or fill in “other” for every question."
        ),
        "rejected_invalid": _("The answer does not match the question's options."),
        "error": _("Something went wrong:"),
    }


def _panel_token(request) -> DesktopToken | None:
    token_id = request.session.get(panels.SESSION_KEY)
    if not isinstance(token_id, int):
        return None
    return DesktopToken.objects.active().select_related("bot").filter(pk=token_id).first()


@never_cache
@require_GET
def panel(request):
    """`/panel/`: the question panel of the signed-in desktop token, or the sign-in form."""
    token = _panel_token(request)
    if token is None:
        request.session.pop(panels.SESSION_KEY, None)
        return render(request, "interactions/panel_login.html", {"error": request.GET.get("e")})
    return render(
        request,
        "interactions/panel.html",
        {
            "token": token,
            "prefix": services.desktop_token_prefix(token),
            "strings": _js_strings(),
            "resync_seconds": settings.CARDLOOP_PANEL_RESYNC,
        },
    )


@never_cache
@require_POST
def panel_login(request):
    """`POST /panel/login` with `token`: a valid desktop token signs this browser in (the
    session holds the token's id, never the token); a wrong one shows the form again (400)."""
    token = panels.authenticate_token(request.POST.get("token", ""))
    if token is None:
        return render(
            request,
            "interactions/panel_login.html",
            {"error": "invalid"},
            status=400,
        )
    request.session.cycle_key()
    request.session[panels.SESSION_KEY] = token.pk
    return HttpResponseRedirect(reverse("panel"))


@require_POST
def panel_logout(request):
    """`POST /panel/logout`: forget the panel sign-in of this browser."""
    request.session.pop(panels.SESSION_KEY, None)
    request.session.cycle_key()
    return HttpResponseRedirect(reverse("panel"))
