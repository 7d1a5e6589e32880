"""`POST /api/v1/deliveries` (bot API key): parse, call `feedback.deliveries.deliver`, serialize."""

from __future__ import annotations

import json

from django.utils.translation import gettext_lazy as _
from drf_spectacular.utils import OpenApiExample, extend_schema
from rest_framework import serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from botadmin.auth import IsBot
from feedback import deliveries
from feedback.models import Delivery
from interactions.lark.cardjson import MAX_CARD_BYTES, card_bytes
from plumbing.api import ApiError
from plumbing.fields import JsonObjectField, OpenIdField, StrictCharField
from plumbing.openapi import state_rules

#: Largest accepted `usage` object, serialized (bytes).
MAX_USAGE_BYTES = 8 * 1024


@state_rules(
    together=(("session_id", "turn_id"), ("platform_message_id", "card_id")),
    rules=(
        {
            "anyOf": [
                {
                    "properties": {"card": {"type": "object", "additionalProperties": True}},
                    "required": ["card"],
                },
                {
                    "properties": {"platform_message_id": {"pattern": r"\S"}},
                    "required": ["platform_message_id"],
                },
            ]
        },
    ),
)
class DeliveryCreateSerializer(serializers.Serializer):
    """Body of `POST /api/v1/deliveries`."""

    chat_id = StrictCharField(max_length=64, help_text="Feishu chat_id (oc_…).")
    card = serializers.JSONField(
        required=False,
        allow_null=True,
        default=None,
        help_text=(
            "The answer as a Card JSON 2.0 object. Cardloop appends its feedback area; "
            "only a hash of it is stored. Optional when registering a card you sent."
        ),
    )
    response_kind = serializers.ChoiceField(
        choices=Delivery.ResponseKind.choices,
        required=False,
        allow_blank=True,
        default="",
        help_text="`final` gets feedback buttons; `progress` or absent never does.",
    )
    session_id = StrictCharField(max_length=128, required=False, allow_blank=True, default="")
    turn_id = StrictCharField(max_length=128, required=False, allow_blank=True, default="")
    native_session_id = StrictCharField(
        max_length=128, required=False, allow_blank=True, default=""
    )
    dispatch_attempt = serializers.IntegerField(
        min_value=0, max_value=2**31 - 1, required=False, default=0
    )
    discriminator = StrictCharField(max_length=64, required=False, allow_blank=True, default="")
    requester_open_id = OpenIdField(required=False, allow_blank=True, default="")
    topic_id = StrictCharField(max_length=128, required=False, allow_blank=True, default="")
    platform_message_id = StrictCharField(
        max_length=64,
        required=False,
        allow_blank=True,
        default="",
        help_text="Two-phase: the open_message_id of a card you sent yourself (with card_id).",
    )
    card_id = StrictCharField(
        max_length=64,
        required=False,
        allow_blank=True,
        default="",
        help_text="Two-phase: the CardKit card_id of that card.",
    )
    sequence = serializers.IntegerField(
        min_value=0,
        max_value=2**31 - 1,
        required=False,
        default=0,
        help_text="Two-phase: the last CardKit sequence you used on that card.",
    )
    duration_ms = serializers.IntegerField(
        min_value=0, max_value=2**53, required=False, allow_null=True, default=None
    )
    usage = JsonObjectField(required=False, allow_null=True, default=None)
    model = StrictCharField(max_length=100, required=False, allow_blank=True, default="")
    cli_id = StrictCharField(max_length=100, required=False, allow_blank=True, default="")
    cli_version = StrictCharField(max_length=50, required=False, allow_blank=True, default="")
    skill_name = StrictCharField(max_length=100, required=False, allow_blank=True, default="")
    skill_version = StrictCharField(max_length=50, required=False, allow_blank=True, default="")
    workflow_id = StrictCharField(max_length=128, required=False, allow_blank=True, default="")
    task_id = StrictCharField(max_length=128, required=False, allow_blank=True, default="")
    parent_task_id = StrictCharField(max_length=128, required=False, allow_blank=True, default="")
    reasoning_effort = StrictCharField(max_length=20, required=False, allow_blank=True, default="")
    content_ref = serializers.URLField(
        max_length=500,
        required=False,
        allow_blank=True,
        default="",
        help_text="Link to the answer in the bot backend (http/https); shown to reviewers. "
        "Cardloop never stores the answer itself.",
    )

    def validate_card(self, value):
        if value is None:
            return None
        if not isinstance(value, dict):
            raise serializers.ValidationError(_("card must be a Card JSON 2.0 object."))
        if len(card_bytes(value)) > MAX_CARD_BYTES:
            raise serializers.ValidationError(_("card must be at most 30 KB of JSON."))
        return value

    def validate_usage(self, value):
        if value is None:
            return None
        if not isinstance(value, dict):
            raise serializers.ValidationError(_("usage must be a JSON object."))
        if len(json.dumps(value, separators=(",", ":"))) > MAX_USAGE_BYTES:
            raise serializers.ValidationError(_("usage must be at most 8 KiB."))
        return value

    def validate(self, attrs):
        if bool(attrs.get("session_id")) != bool(attrs.get("turn_id")):
            field = "turn_id" if attrs.get("session_id") else "session_id"
            raise serializers.ValidationError(
                {
                    field: [
                        _("session_id and turn_id go together (or neither, for a proactive send).")
                    ]
                }
            )
        return attrs

    def to_request(self) -> deliveries.DeliveryRequest:
        data = dict(self.validated_data)
        metadata = {k: data.pop(k) for k in deliveries.METADATA_FIELDS}
        return deliveries.DeliveryRequest(metadata=metadata, **data)


class DeliverySerializer(serializers.Serializer):
    """A delivery as the API returns it."""

    delivery_id = serializers.CharField()
    status = serializers.CharField(
        help_text="pending | sent | send_failed | completed | failed | cancelled | ambiguous"
    )
    created = serializers.BooleanField(help_text="False: a retry; nothing was sent again.")
    platform_message_id = serializers.CharField(help_text="open_message_id of the card.")
    card_id = serializers.CharField(help_text="CardKit card_id.")
    feedback_shown = serializers.BooleanField()
    feedback_reason = serializers.CharField(
        help_text="enabled | disabled | api_only | ambiguous_team | invalid_policy | not_final "
        "| no_card"
    )
    content_hash = serializers.CharField()
    error_code = serializers.CharField(allow_blank=True)


def delivery_json(delivery: Delivery, created: bool) -> dict:
    return {
        "delivery_id": delivery.delivery_id,
        "status": delivery.status,
        "created": created,
        "platform_message_id": delivery.platform_message_id,
        "card_id": delivery.card_id,
        "feedback_shown": delivery.feedback_shown,
        "feedback_reason": delivery.feedback_reason,
        "content_hash": delivery.content_hash,
        "error_code": delivery.error_code,
    }


class DeliveryCreateView(APIView):
    """Send a final answer with Cardloop's feedback area (or register one you sent)."""

    permission_classes = [IsBot]

    @extend_schema(
        request=DeliveryCreateSerializer,
        responses={201: DeliverySerializer, 200: DeliverySerializer, 400: None, 502: None},
        description=(
            "Send the answer card to chat_id as a CardKit card entity. With response_kind "
            "final and feedback on for (bot, chat), Cardloop appends its feedback area and "
            "freezes the effective policy on the delivery. 201 when created; 200 with the same "
            "delivery for a retry of the same (session_id, turn_id, native_session_id, "
            "dispatch_attempt, discriminator) — nothing is sent again unless the first send "
            "failed or was interrupted (still pending after 2 minutes; resent as the same "
            "Feishu message). With platform_message_id + card_id the card you sent is registered "
            "instead (two-phase). A Feishu failure answers 502 `send_failed`; the delivery is "
            "kept as send_failed and a retry sends it again. The card's text is never stored."
        ),
        examples=[
            OpenApiExample(
                "Final answer",
                request_only=True,
                value={
                    "chat_id": "oc_demo_team_chat",
                    "session_id": "s-1",
                    "turn_id": "t-1",
                    "requester_open_id": "ou_demo_requester",
                    "response_kind": "final",
                    "model": "gpt-x",
                    "card": {
                        "schema": "2.0",
                        "config": {"update_multi": True},
                        "body": {"elements": [{"tag": "markdown", "content": "The answer"}]},
                    },
                },
            )
        ],
    )
    def post(self, request):
        serializer = DeliveryCreateSerializer(data=request.data)
        if not serializer.is_valid():
            raise ApiError("invalid", serializer.errors, 400)
        try:
            result = deliveries.deliver(request.user.bot, serializer.to_request())
        except deliveries.InvalidDelivery as exc:
            raise ApiError("invalid", exc.errors, 400) from None
        except deliveries.SendFailed as exc:
            raise ApiError(
                "send_failed",
                {
                    "message": str(
                        _(
                            "Feishu did not accept the card; the delivery is kept as send_failed "
                            "and a retry sends it again."
                        )
                    ),
                    "feishu_code": exc.code,
                    "feishu_msg": exc.msg,
                    "log_id": exc.log_id,
                    "delivery": delivery_json(exc.delivery, True),
                },
                502,
            ) from None
        created = result.created
        return Response(
            delivery_json(result.delivery, created),
            status=status.HTTP_201_CREATED if created else status.HTTP_200_OK,
        )
