"""What every bot-API view shares: the permission header and the answers to bad input.

    class InteractionCancelView(BotAPIView):          # or BotAsyncAPIView (long-polls)
        @extend_schema(...)
        def post(self, request, public_id): ...
        data = validated(ResolveSerializer, request.data)   # 400 `invalid` with the errors

The caller is a bot authenticated by its API key (`botadmin.auth.IsBot`; `request.user.bot`).
"""

from __future__ import annotations

from django.utils.translation import gettext_lazy as _
from rest_framework.views import APIView

from botadmin.auth import IsBot
from interactions.lifecycle.longpoll import MAX_WAIT
from plumbing.api import ApiError
from plumbing.asyncapi import AsyncAPIView


class BotAPIView(APIView):
    """A bot-API view: only an authenticated bot may call it."""

    permission_classes = [IsBot]


class BotAsyncAPIView(AsyncAPIView):
    """An async bot-API view (long-polls hold no thread): only an authenticated bot may call it."""

    permission_classes = [IsBot]


def invalid(serializer) -> ApiError:
    """400 `invalid` with the serializer's errors (field → messages)."""
    return ApiError("invalid", serializer.errors, 400)


def validated(serializer_class, data) -> dict:
    """`data` validated by `serializer_class`; raises `invalid(...)` when it does not fit."""
    serializer = serializer_class(data=data)
    if not serializer.is_valid():
        raise invalid(serializer)
    return serializer.validated_data


#: The OpenAPI schema of `wait` (what `wait_seconds` accepts).
WAIT_SCHEMA = {"type": "number", "minimum": 0, "maximum": MAX_WAIT, "default": 0}


def wait_seconds(request) -> float:
    """The `wait` query parameter of a long-poll: 0..MAX_WAIT seconds (default 0). Raises 400
    `invalid` for anything else."""
    raw = request.query_params.get("wait", "0") or "0"
    try:
        wait = float(raw)
    except ValueError:
        wait = -1.0
    if not 0 <= wait <= MAX_WAIT:
        raise ApiError("invalid", {"wait": [_("wait must be a number from 0 to 60.")]}, 400)
    return wait
