"""Bot API of MCP tokens (parse, authorize, call `interactions.mcp.tokens`, serialize).

- `POST /api/v1/sessions/<session_id>/mcp-tokens` — issue a token for one agent session;
  201 `{token, url, expires_at, prefix, session_id, subagent, tools}` (the token is shown
  only here).
- `POST /api/v1/mcp-tokens/<prefix>/revoke` — revoke one of the bot's tokens (`cmt_<lookup>_…`
  or the lookup alone); 200 `{prefix, revoked_at}`, 404 for another bot's or an unknown one.
"""

from __future__ import annotations

import re

from django.utils.translation import gettext_lazy as _
from drf_spectacular.utils import (
    OpenApiParameter,
    OpenApiResponse,
    extend_schema,
    inline_serializer,
)
from rest_framework import serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from botadmin.auth import IsBot
from interactions.mcp import server, tokens, tools
from plumbing.api import ApiError
from plumbing.fields import OpenIdField, StrictBooleanField, StrictCharField, StrictRegexField
from plumbing.openapi import state_rules

SESSION_ID_MAX = 128
#: `ou_…` / `oc_…` ids: printable ASCII without spaces.
ID_RE = r"^[A-Za-z0-9_-]{1,64}$"


@state_rules(
    exclusive=(("chat_id", "open_id"),),
    rules=(
        {
            "anyOf": [
                {"properties": {"chat_id": {"pattern": r"\S"}}, "required": ["chat_id"]},
                {"properties": {"open_id": {"pattern": r"\S"}}, "required": ["open_id"]},
            ]
        },
    ),
)
class McpTokenCreateSerializer(serializers.Serializer):
    """Body of `POST /api/v1/sessions/<session_id>/mcp-tokens`."""

    chat_id = StrictRegexField(
        ID_RE,
        max_length=64,
        required=False,
        help_text=_("The session's chat (oc_…): where approval cards go."),
    )
    open_id = OpenIdField(
        required=False,
        help_text=_("Instead of chat_id: the user of a p2p session (ou_…)."),
    )
    requester_open_id = OpenIdField(
        required=False,
        help_text=_("Who is asked and may approve; defaults to the progress session's requester."),
    )
    subagent = StrictBooleanField(
        default=False,
        help_text=_("True for a sub-agent: its tool list has no ask_user_questions."),
    )
    project_key = StrictCharField(
        max_length=300,
        required=False,
        allow_blank=True,
        help_text=_("As for GET /api/v1/capabilities (decides the tool list)."),
    )
    workspace = StrictCharField(
        max_length=1000,
        required=False,
        allow_blank=True,
        help_text=_("As for GET /api/v1/capabilities (decides the tool list)."),
    )
    ttl = serializers.IntegerField(
        min_value=tokens.MIN_TTL,
        max_value=tokens.MAX_TTL,
        default=tokens.DEFAULT_TTL,
        help_text=_("Seconds until the token expires: 60 to 86400, default 3600."),
    )
    label = StrictCharField(max_length=100, required=False, allow_blank=True)

    def validate(self, attrs):
        if attrs.get("chat_id") and attrs.get("open_id"):
            raise serializers.ValidationError(
                {"open_id": [_("Give chat_id or open_id, not both.")]}
            )
        if not (attrs.get("chat_id") or attrs.get("open_id")):
            raise serializers.ValidationError(
                {"chat_id": [_("Give chat_id (a group session) or open_id (a p2p session).")]}
            )
        return attrs


McpTokenIssuedSerializer = inline_serializer(
    "McpTokenIssued",
    {
        "token": serializers.CharField(help_text="cmt_… — shown only in this answer"),
        "url": serializers.URLField(help_text="The MCP endpoint (Streamable HTTP)."),
        "expires_at": serializers.DateTimeField(),
        "prefix": serializers.CharField(help_text="cmt_<lookup>_… (for revoking and logs)"),
        "session_id": serializers.CharField(),
        "subagent": serializers.BooleanField(),
        "tools": serializers.ListField(
            child=serializers.ChoiceField(choices=list(tools.SPECS)),
            help_text="The tools /mcp lists for this token.",
        ),
    },
)

McpTokenRevokedSerializer = inline_serializer(
    "McpTokenRevoked",
    {"prefix": serializers.CharField(), "revoked_at": serializers.DateTimeField()},
)

ErrorSerializer = inline_serializer(
    "McpTokenError",
    {
        "error": serializers.CharField(help_text="A stable code, e.g. invalid, not_found."),
        "detail": serializers.JSONField(help_text="A message or {field: [messages]}."),
    },
)

SESSION_ID_PARAMETER = OpenApiParameter(
    "session_id",
    {"type": "string", "minLength": 1, "maxLength": SESSION_ID_MAX},
    OpenApiParameter.PATH,
    description="The agent session (1 to 128 characters).",
)
PREFIX_PARAMETER = OpenApiParameter(
    "prefix",
    {"type": "string", "pattern": r"^(cmt_)?[0-9a-f]{8}(_…?)?$"},
    OpenApiParameter.PATH,
    description="The token's prefix cmt_<lookup>_… or its 8-hex lookup.",
)


def _check_session_id(session_id: str) -> None:
    if not session_id or len(session_id) > SESSION_ID_MAX:
        raise ApiError("invalid", {"session_id": [_("session_id is 1 to 128 characters.")]}, 400)


def mcp_url(request) -> str:
    """The absolute `/mcp` URL as the caller reached this server."""
    return request.build_absolute_uri(server.PATH)


class McpTokenCreateView(APIView):
    """Issue a session-scoped MCP token."""

    permission_classes = [IsBot]

    @extend_schema(
        parameters=[SESSION_ID_PARAMETER],
        request=McpTokenCreateSerializer,
        responses={
            201: McpTokenIssuedSerializer,
            400: OpenApiResponse(ErrorSerializer, description="invalid: detail names the field"),
            401: OpenApiResponse(ErrorSerializer, description="no or a wrong bot API key"),
            403: OpenApiResponse(ErrorSerializer, description="not a bot API key"),
        },
        description=(
            "Issue a short-lived token that lets an agent CLI use the MCP tool server at "
            "`url` (Streamable HTTP, `Authorization: Bearer <token>`) as this session of the "
            "calling bot, and nothing else; the CLI never holds the bot key. The token is "
            "shown only in this answer and stored hashed. Its tools follow the rule of "
            "GET /api/v1/capabilities: a sub-agent (or a WeChat session) gets no "
            "ask_user_questions. chat_id or open_id is required (not both); ttl 60..86400 "
            "seconds (default 3600). After expiry or revocation /mcp answers 401."
        ),
    )
    def post(self, request, session_id: str):
        _check_session_id(session_id)
        serializer = McpTokenCreateSerializer(data=request.data)
        if not serializer.is_valid():
            raise ApiError("invalid", serializer.errors, 400)
        data = serializer.validated_data
        raw, token = tokens.issue_token(
            request.user,
            request.user.bot,
            session_id,
            chat_id=data.get("chat_id") or "",
            open_id=data.get("open_id") or "",
            requester_open_id=data.get("requester_open_id") or "",
            subagent=data["subagent"],
            project_key=data.get("project_key") or "",
            workspace=data.get("workspace") or "",
            ttl_seconds=data["ttl"],
            label=data.get("label") or "",
        )
        body = {
            "token": raw,
            "url": mcp_url(request),
            "expires_at": token.expires_at.isoformat(),
            "prefix": tokens.token_prefix(token),
            "session_id": token.session_id,
            "subagent": token.subagent,
            "tools": [spec.name for spec in tools.tools_for(token)],
        }
        return Response(body, status=status.HTTP_201_CREATED)


PREFIX_RE = re.compile(r"^(?:cmt_)?(?P<lookup>[0-9a-f]{8})(?:_…?)?$")


class McpTokenRevokeView(APIView):
    """Revoke one of the calling bot's MCP tokens."""

    permission_classes = [IsBot]

    @extend_schema(
        parameters=[PREFIX_PARAMETER],
        request=None,
        responses={
            200: McpTokenRevokedSerializer,
            401: OpenApiResponse(ErrorSerializer, description="no or a wrong bot API key"),
            403: OpenApiResponse(ErrorSerializer, description="not a bot API key"),
            404: OpenApiResponse(ErrorSerializer, description="no such token of this bot"),
        },
        description=(
            "`prefix` is the token's `cmt_<lookup>_…` prefix (or the 8-hex lookup). /mcp "
            "refuses the token from the next request on. Revoking twice answers 200 with the "
            "first revocation time."
        ),
    )
    def post(self, request, prefix: str):
        match = PREFIX_RE.match(prefix or "")
        token = tokens.find_for_bot(request.user.bot, match["lookup"]) if match else None
        if token is None:
            raise ApiError("not_found", {"prefix": [_("No such MCP token.")]}, 404)
        token = tokens.revoke_token(request.user, token)
        return Response(
            {"prefix": tokens.token_prefix(token), "revoked_at": token.revoked_at.isoformat()}
        )
