"""API views of worker terminals and the event feed (parse, authorize, call, serialize).

- `POST /api/v1/turns/terminal` (bot API key): `feedback.terminals.record_terminal`.
- `GET /api/v1/events?after=<cursor>&types=a,b&limit=<n>&wait=<0..60>` (bot API key → that
  bot's events; staff session → all): `feedback.events.feed_page`; with `wait` a long-poll
  (`interactions.lifecycle.longpoll.wait_until`) woken by every new event.
"""

from __future__ import annotations

import json
import re

from asgiref.sync import sync_to_async
from django.db import connection
from django.http import HttpResponse
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

from botadmin.auth import BotPrincipal, IsBot, IsBotOrStaff
from feedback import events, terminals
from feedback.envelopes import FEED_TYPES
from feedback.models import WorkerTerminal
from interactions.api.base import WAIT_SCHEMA, wait_seconds
from interactions.lifecycle.longpoll import wait_until
from plumbing.api import ApiError
from plumbing.asyncapi import AsyncAPIView
from plumbing.fields import JsonObjectField, StrictCharField

#: Largest accepted `usage` object, serialized (bytes).
MAX_USAGE_BYTES = 8 * 1024


class TerminalSerializer(serializers.Serializer):
    """Body of `POST /api/v1/turns/terminal`."""

    session_id = StrictCharField(max_length=128)
    turn_id = StrictCharField(max_length=128)
    attempt = serializers.IntegerField(min_value=0, max_value=2**31 - 1, default=0)
    status = serializers.ChoiceField(choices=WorkerTerminal.Status.choices)
    completed_at = serializers.DateTimeField(required=False, allow_null=True, default=None)
    duration_ms = serializers.IntegerField(
        min_value=0, max_value=2**53, required=False, allow_null=True, default=None
    )
    usage = JsonObjectField(required=False, allow_null=True, default=None)

    def validate_usage(self, value):
        if value is None:
            return None
        if not isinstance(value, dict):
            raise serializers.ValidationError(_("usage must be a JSON object."))
        if len(json.dumps(value, separators=(",", ":"))) > MAX_USAGE_BYTES:
            raise serializers.ValidationError(_("usage must be at most 8 KiB."))
        return value


class TurnTerminalView(APIView):
    """Record the agent runtime's terminal signal for a turn; reconciles `turn.completed`."""

    permission_classes = [IsBot]

    @extend_schema(
        request=TerminalSerializer,
        responses={
            201: inline_serializer(
                "TerminalRecorded",
                {
                    "status": serializers.CharField(),
                    "created": serializers.BooleanField(),
                    "turn_completed": serializers.ListField(child=serializers.DictField()),
                },
            ),
            200: None,
            400: OpenApiResponse(
                description="`invalid`: a field breaks its rules (named in detail)."
            ),
            409: OpenApiResponse(
                description="`terminal_status_conflict`: the turn already ended with another status."
            ),
        },
        description=(
            "Store the worker terminal of (session_id, turn_id, attempt). Each sent delivery "
            "of the turn gets exactly one turn.completed event, whichever arrives first. "
            "201 when recorded, 200 for a repeat with the same status, 409 for another status."
        ),
    )
    def post(self, request):
        serializer = TerminalSerializer(data=request.data)
        if not serializer.is_valid():
            raise ApiError("invalid", serializer.errors, 400)
        data = serializer.validated_data
        try:
            result = terminals.record_terminal(request.user.bot, **data)
        except terminals.TerminalConflict as exc:
            raise ApiError(
                "terminal_status_conflict",
                {
                    "status": [
                        _("This turn already ended with status %(stored)s.")
                        % {"stored": exc.stored}
                    ]
                },
                409,
            ) from None
        body = {
            "status": result.terminal.status,
            "created": result.created,
            "turn_completed": [
                {
                    "delivery_id": e.delivery.delivery_id if e.delivery_id else None,
                    "event_id": e.event_id,
                }
                for e in result.events
            ],
        }
        return Response(body, status=status.HTTP_201_CREATED if result.created else 200)


CURSOR_REFUSED = _("Not a cursor from this feed; start without one or use the last 'next'.")


class FeedQuerySerializer(serializers.Serializer):
    """Query of `GET /api/v1/events`."""

    after = StrictCharField(required=False, allow_blank=True, max_length=200)
    types = StrictCharField(required=False, allow_blank=True, max_length=200)
    limit = serializers.IntegerField(required=False, min_value=1, max_value=1000, default=100)

    def validate_after(self, value):
        if not value:
            return None
        try:
            events.decode_cursor(value)
        except events.InvalidCursor:
            raise serializers.ValidationError(CURSOR_REFUSED) from None
        return value

    def validate_types(self, value):
        names = [t.strip() for t in (value or "").split(",") if t.strip()]
        unknown = [t for t in names if t not in FEED_TYPES]
        if unknown:
            raise serializers.ValidationError(
                _("Unknown event type(s): %(types)s. Known: %(known)s.")
                % {"types": ", ".join(unknown), "known": ", ".join(FEED_TYPES)}
            )
        return names


#: What `types` accepts: known types separated by commas (spaces and empty items ignored).
_TYPE_NAME = "(?:" + "|".join(re.escape(t) for t in FEED_TYPES) + ")"
_TYPES_PATTERN = rf"^\s*(?:{_TYPE_NAME}\s*)?(?:,\s*(?:{_TYPE_NAME}\s*)?)*$"


def _read_page(bot, after, types, limit) -> events.FeedPage:
    """One feed read; closes the connection between the polls of a long-poll."""
    try:
        return events.feed_page(bot=bot, after=after, types=types, limit=limit)
    finally:
        if not connection.in_atomic_block:
            connection.close()


async def wait_for_events(bot, wait: float, read) -> events.FeedPage:
    """Long-poll the feed: `read()` until its page has events or `wait` seconds passed, woken
    by every new event of `bot` (None: any bot) after its commit (`events.wake_feed_readers`)."""
    return await wait_until(
        events.feed_waiter_key(bot.pk if bot is not None else None),
        wait,
        read,
        ready=lambda page: bool(page.bodies),
    )


class EventFeedView(AsyncAPIView):
    """Durable event feed for subscribers without a webhook; optionally a long-poll."""

    permission_classes = [IsBotOrStaff]

    @extend_schema(
        parameters=[
            OpenApiParameter(
                "after",
                {"type": "string", "maxLength": 200},
                description=(
                    "The `next` cursor of the previous page (absent or empty: from the start). "
                    "Any other value is 400 `invalid`."
                ),
            ),
            OpenApiParameter(
                "types",
                {"type": "string", "maxLength": 200, "pattern": _TYPES_PATTERN},
                description="Comma-separated event types, of: " + ", ".join(FEED_TYPES) + ".",
            ),
            OpenApiParameter(
                "limit",
                {"type": "integer", "minimum": 1, "maximum": 1000, "default": 100},
                description="Events per page: 1 to 1000, default 100.",
            ),
            OpenApiParameter(
                "wait",
                WAIT_SCHEMA,
                description=(
                    "Seconds to hold the request while the page would be empty: 0 to 60 "
                    "(default 0). A new event (of the requested types) answers at once."
                ),
            ),
        ],
        responses={
            200: inline_serializer(
                "EventPage",
                {
                    "events": serializers.ListField(child=serializers.DictField()),
                    "next": serializers.CharField(),
                    "has_more": serializers.BooleanField(),
                },
            ),
            400: OpenApiResponse(
                description="`invalid`: a cursor this feed did not issue, an unknown type, or a "
                "limit out of range."
            ),
        },
        description=(
            "Events in order after the cursor: each item is the stored envelope "
            '{"id","type","version":1,"time","data"}. A bot key sees its bot\'s events, '
            "staff see all. Poll with the returned next cursor; with wait>0 an empty page "
            "is held until an event arrives or wait seconds passed (then the empty page is "
            "returned with the same cursor: poll again)."
        ),
    )
    async def get(self, request):
        wait = wait_seconds(request)
        query = FeedQuerySerializer(data=request.query_params)
        if not query.is_valid():
            raise ApiError("invalid", query.errors, 400)
        params = query.validated_data
        bot = request.user.bot if isinstance(request.user, BotPrincipal) else None

        def read() -> events.FeedPage:
            return _read_page(bot, params.get("after"), params.get("types"), params["limit"])

        try:
            page = await sync_to_async(read)()
        except events.InvalidCursor:  # well-formed, but past the feed's end
            raise ApiError("invalid", {"after": [str(CURSOR_REFUSED)]}, 400) from None
        if wait > 0 and not page.bodies:
            page = await wait_for_events(bot, wait, read)
        return HttpResponse(page.to_json(), content_type="application/json")
