"""`POST /api/v1/deliveries` (bot API key): parse, call `feedback.deliveries.deliver`, serialize."""

from __future__ import annotations

import json
import re

from django.core.validators import RegexValidator
from django.utils.translation import gettext_lazy as _
from drf_spectacular.utils import OpenApiExample, extend_schema
from rest_framework import serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from botadmin import policy as pol
from botadmin.auth import IsBot
from feedback import deliveries
from feedback.models import Delivery, Semantic
from interactions import kinds
from interactions.channels.telegram.render import MAX_TEXT as TELEGRAM_TEXT_MAX
from interactions.lark.cardjson import MAX_CARD_BYTES, card_bytes
from plumbing.api import ApiError
from plumbing.fields import JsonObjectField, OpenIdField, StrictCharField, StrictRegexField
from plumbing.openapi import state_rules

#: Largest accepted `usage` object, serialized (bytes).
MAX_USAGE_BYTES = 8 * 1024

#: A policy label as the schema states it: no control, line-separator or bidirectional
#: characters, and at least one character that is not white space, zero-width or blank
#: (`botadmin.policy` refuses the rest: a label a card could not show).
_HIDDEN = (
    r"\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069"
    r"\u200b-\u200f\u2060-\u2064\ufeff\u115f\u1160\u3164\uffa0\u2800\u0300-\u036f"
)
_CONTROL = r"\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069"
LABEL_PATTERN = rf"^[^{_CONTROL}]*[^\s{_HIDDEN}][^{_CONTROL}]*$"


class LabelField(StrictCharField):
    """A button or reason label of `feedback_options` (`LABEL_PATTERN`, 1–`max_length`)."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.validators = [v for v in self.validators if getattr(v, "regex", None) is None] + [
            RegexValidator(LABEL_PATTERN, _("Use a label a card can show."), code="invalid")
        ]


class AgentButtonSerializer(serializers.Serializer):
    """One proposed button: the limits of a policy layer's `buttons`."""

    key = StrictRegexField(
        r"^[a-z0-9_-]+$", max_length=pol.KEY_MAX, help_text="Unique in the proposal."
    )
    label = LabelField(max_length=pol.BUTTON_LABEL_MAX, help_text="Main wording.")
    label_en = LabelField(
        max_length=pol.BUTTON_LABEL_MAX, required=False, help_text="English form (optional)."
    )
    semantic = serializers.ChoiceField(choices=Semantic.choices)
    style = serializers.ChoiceField(choices=pol.STYLES, required=False)


class AgentReasonSerializer(serializers.Serializer):
    """One proposed negative reason: the limits of a layer's `negative_followup.reasons`."""

    key = StrictRegexField(
        r"^[a-z0-9_-]+$", max_length=pol.KEY_MAX, help_text="Unique in the proposal."
    )
    label = LabelField(max_length=pol.REASON_LABEL_MAX)
    label_en = LabelField(max_length=pol.REASON_LABEL_MAX, required=False)


@state_rules(
    rules=(
        {
            "properties": {
                "buttons": {"minItems": pol.BUTTONS_MIN, "maxItems": pol.BUTTONS_MAX},
                "reasons": {"maxItems": pol.REASONS_MAX},
            }
        },
    )
)
class FeedbackOptionsSerializer(serializers.Serializer):
    """The feedback options the agent proposes for this answer (`botadmin.policy.
    validate_agent_options`): used only when the effective policy's `agent_options` allows."""

    buttons = AgentButtonSerializer(
        many=True,
        help_text="2 to 4 buttons, keys unique; each semantic is one of the three fixed ones.",
    )
    reasons = AgentReasonSerializer(
        many=True,
        required=False,
        help_text="0 to 6 negative reasons, keys unique; only beside a negative button.",
    )


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
                {
                    "properties": {"blocks": {"type": "array"}},
                    "required": ["blocks"],
                },
                {
                    "properties": {"channel": {"enum": ["telegram"]}, "text": {"pattern": r"\S"}},
                    "required": ["channel", "text"],
                },
            ]
        },
    ),
)
class DeliveryCreateSerializer(serializers.Serializer):
    """Body of `POST /api/v1/deliveries`."""

    channel = serializers.ChoiceField(
        choices=Delivery.Channel.choices,
        required=False,
        help_text=(
            "feishu (sends `card`), slack (sends `blocks` through the bot's Slack app) or "
            "telegram (sends `text` through the bot's Telegram bot). Absent: slack when "
            "`blocks` is given, else feishu."
        ),
    )
    chat_id = StrictCharField(
        max_length=64,
        help_text="Feishu chat_id (oc_…), the Slack conversation id (C…, G…, D…), or the "
        "Telegram chat id (an integer; groups are negative).",
    )
    blocks = serializers.JSONField(
        required=False,
        allow_null=True,
        default=None,
        help_text=(
            "Slack: the answer as a list of Block Kit blocks, ≤ 30 KB of JSON. Cardloop appends "
            "its feedback area (blocks with block_id fb_…); only a hash is stored."
        ),
    )
    text = StrictCharField(
        max_length=TELEGRAM_TEXT_MAX,
        required=False,
        allow_blank=True,
        default="",
        help_text="Slack: the message's fallback text (notifications), at most 4000 characters. "
        "Telegram: the answer (plain text, at most 4096). Never stored.",
    )
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
    requester_user_id = StrictRegexField(
        r"^(?:[UW][A-Z0-9]{2,30}|[0-9]{1,20})$",
        required=False,
        allow_blank=True,
        default="",
        help_text="Slack: the user id (U…/W…) of the person who asked; Telegram: their user id "
        "(digits). Instead of requester_open_id.",
    )
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
    feedback_options = FeedbackOptionsSerializer(
        required=False,
        help_text=(
            "Buttons (and reasons) proposed for this answer. Used when the effective policy's "
            "agent_options is buttons or buttons_and_reasons; otherwise ignored, and the "
            "answer's feedback_options_ignored says why."
        ),
    )
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

    def validate_blocks(self, value):
        if value is None:
            return None
        if not isinstance(value, list) or not all(isinstance(b, dict) for b in value):
            raise serializers.ValidationError(_("blocks must be a list of Block Kit blocks."))
        if len(card_bytes(value)) > MAX_CARD_BYTES:
            raise serializers.ValidationError(_("blocks must be at most 30 KB of JSON."))
        return value

    def validate_feedback_options(self, value):
        try:
            return pol.validate_agent_options(_plain(value))
        except pol.PolicyError as exc:
            raise serializers.ValidationError(exc.messages()) from None

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
        given = "channel" in attrs
        channel = attrs.get("channel") or (
            Delivery.Channel.SLACK if attrs.get("blocks") is not None else Delivery.Channel.FEISHU
        )
        attrs["channel"] = channel
        attrs["channel_field"] = "channel" if given else "blocks"
        if channel == Delivery.Channel.FEISHU:
            if attrs.get("blocks") is not None:
                raise serializers.ValidationError(
                    {"blocks": [_("Only a Slack message (channel slack) takes this field.")]}
                )
            for name in ("text", "requester_user_id"):
                if attrs.get(name):
                    raise serializers.ValidationError(
                        {name: [_("Only a Slack or Telegram message takes this field.")]}
                    )
            return attrs
        if attrs.get("requester_open_id"):
            raise serializers.ValidationError(
                {
                    "requester_open_id": [
                        _("On Slack the requester is requester_user_id (U…).")
                        if channel == Delivery.Channel.SLACK
                        else _("On Telegram the requester is requester_user_id (digits).")
                    ]
                }
            )
        requester = attrs.get("requester_user_id") or ""
        if requester and not re.match(kinds.OPERATOR_ID_PATTERNS[channel], requester):
            raise serializers.ValidationError(
                {"requester_user_id": [_("Use a user id of this channel.")]}
            )
        return attrs

    def to_request(self) -> deliveries.DeliveryRequest:
        data = dict(self.validated_data)
        metadata = {k: data.pop(k) for k in deliveries.METADATA_FIELDS}
        slack_requester = data.pop("requester_user_id", "")
        if data["channel"] != Delivery.Channel.FEISHU:
            data["requester_open_id"] = slack_requester
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
    feedback_options_used = serializers.ChoiceField(
        choices=(pol.USED_NONE, pol.USED_BUTTONS, pol.USED_BUTTONS_AND_REASONS),
        help_text="What of the request's feedback_options the feedback area uses.",
    )
    feedback_options_ignored = serializers.ChoiceField(
        choices=(
            "",
            pol.IGNORED_OFF,
            pol.IGNORED_REASONS,
            pol.IGNORED_NOT_SHOWN,
            pol.IGNORED_INCONSISTENT,
        ),
        allow_blank=True,
        help_text=(
            "Why (part of) the proposed feedback_options was not used: agent_options_off (the "
            "policy's agent_options is off), reasons_not_allowed (agent_options is buttons: "
            "the configured reasons stay), feedback_not_shown (no feedback area on this "
            "answer), not_consistent (the buttons break a rule of the effective policy, e.g. "
            "a hidden semantic); empty when all of it was used or none was proposed."
        ),
    )


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
        **deliveries.agent_options_outcome(delivery),
    }


def _plain(value):
    """DRF's nested serializers return OrderedDicts; plain dicts and lists for the policy."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


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
            channel = exc.delivery.channel
            if channel != Delivery.Channel.FEISHU:
                raise ApiError(
                    "send_failed",
                    {
                        "message": str(
                            _(
                                "%(channel)s did not accept the message; the delivery is kept "
                                "as send_failed and a retry sends it again."
                            )
                        )
                        % {"channel": Delivery.Channel(channel).label},
                        f"{channel}_error": exc.msg,
                        "delivery": delivery_json(exc.delivery, True),
                    },
                    502,
                ) from None
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
