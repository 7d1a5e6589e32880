"""Serializers of progress sessions and asks (`/api/v1/sessions/<id>/progress`,
`/api/v1/sessions/<id>/asks…`, `/api/v1/asks/<requestId>…`)."""

from __future__ import annotations

import re

from django.utils.translation import gettext_lazy as _
from drf_spectacular.utils import inline_serializer
from rest_framework import serializers

from interactions import kinds
from interactions.asks import card as session_card
from interactions.asks import service as asks
from interactions.models import ProgressSession
from plumbing.fields import (
    OPEN_ID_PATTERN,
    HttpsUrlField,
    OpenIdField,
    StrictBooleanField,
    StrictCharField,
    StrictRegexField,
)
from plumbing.openapi import state_rules, when

#: Channels a progress message can be shown on (each needs its channel's `render_progress`).
PROGRESS_CHANNELS = (kinds.FEISHU, kinds.SLACK, kinds.TELEGRAM)
_CHANNEL_IDS = {**kinds.OPERATOR_ID_PATTERNS, kinds.FEISHU: OPEN_ID_PATTERN}


def _requester_matches(pattern: str) -> dict:
    """`requester_open_id` blank or matching `pattern` (a Python pattern anchored with `^` and
    `$` or `\\Z`), as a JSON schema property rule."""
    core = pattern.removeprefix("^").removesuffix("\\Z").removesuffix("$")
    return {"properties": {"requester_open_id": {"pattern": rf"^(?:{core})?$"}}}


#: What JSON schema can state of `ProgressSerializer.validate`: a requester given with a
#: `channel` is a person id of that channel, and only Feishu takes `open_id`. Without
#: `channel` the session's channel applies (Feishu for a new one), which the server checks.
PROGRESS_RULES = (
    when("channel", [kinds.FEISHU], _requester_matches(OPEN_ID_PATTERN)),
    when("channel", [kinds.SLACK], _requester_matches(kinds.OPERATOR_ID_PATTERNS[kinds.SLACK])),
    when(
        "channel",
        [kinds.TELEGRAM],
        _requester_matches(kinds.OPERATOR_ID_PATTERNS[kinds.TELEGRAM]),
    ),
    when("channel", [kinds.SLACK, kinds.TELEGRAM], {"not": {"required": ["open_id"]}}),
)


@state_rules(exclusive=(("chat_id", "open_id"),), rules=PROGRESS_RULES)
class ProgressSerializer(serializers.Serializer):
    """Body of `PUT /api/v1/sessions/<session_id>/progress`. Omitted fields keep their value."""

    status = serializers.ChoiceField(choices=ProgressSession.Status.choices)
    channel = serializers.ChoiceField(
        choices=PROGRESS_CHANNELS,
        required=False,
        help_text=_(
            "Where the progress message is shown (feishu | slack | telegram); the first call "
            "sets it (default feishu), later calls may leave it out but not change it."
        ),
    )
    title = StrictCharField(max_length=200, required=False, allow_blank=True)
    summary = StrictCharField(max_length=4000, required=False, allow_blank=True)
    tool_lines = serializers.ListField(
        child=StrictCharField(max_length=500, allow_blank=True, trim_whitespace=False),
        max_length=50,
        required=False,
        help_text=_("Latest tool lines, newest last (the card shows the last 10)."),
    )
    chat_id = StrictCharField(
        max_length=64,
        required=False,
        help_text=_("Where the first call sends the card (oc_…)."),
    )
    open_id = OpenIdField(
        max_length=64,
        required=False,
        help_text=_("Instead of chat_id: send the card to this user's p2p chat."),
    )
    requester_open_id = StrictRegexField(
        kinds.ANY_OPERATOR_ID_PATTERN,
        max_length=64,
        required=False,
        allow_blank=True,
        help_text=_(
            "Who started the task: the only person who may answer and cancel (the person's "
            "id on the channel: Feishu open_id, Slack user id, Telegram user number)."
        ),
    )
    details_url = HttpsUrlField(
        max_length=500,
        required=False,
        allow_blank=True,
        help_text=_("Opened by the card's 'Session details' button (https)."),
    )

    def validate_details_url(self, value):
        if value and not value.startswith("https://"):
            raise serializers.ValidationError(_("Use an https:// URL."))
        return value

    def validate(self, attrs):
        if attrs.get("chat_id") and attrs.get("open_id"):
            raise serializers.ValidationError(
                {"open_id": [_("Give chat_id or open_id, not both.")]}
            )
        channel = attrs.get("channel")
        if channel is None:  # the session's channel: checked by the service against it
            return attrs
        if channel != kinds.FEISHU and attrs.get("open_id"):
            raise serializers.ValidationError(
                {"open_id": [_("open_id is Feishu's; on this channel give chat_id.")]}
            )
        requester = attrs.get("requester_open_id") or ""
        if requester and not re.match(_CHANNEL_IDS[channel], requester):
            raise serializers.ValidationError(
                {
                    "requester_open_id": [
                        _("Use the requester's id on %(channel)s.") % {"channel": channel}
                    ]
                }
            )
        return attrs


ProgressOutSerializer = inline_serializer(
    "ProgressSession",
    {
        "session_id": serializers.CharField(),
        "channel": serializers.CharField(),
        "status": serializers.ChoiceField(choices=ProgressSession.Status.choices),
        "title": serializers.CharField(),
        "summary": serializers.CharField(),
        "tool_lines": serializers.ListField(child=serializers.CharField()),
        "receive_id_type": serializers.CharField(),
        "receive_id": serializers.CharField(),
        "requester_open_id": serializers.CharField(),
        "card_id": serializers.CharField(allow_null=True),
        "platform_message_id": serializers.CharField(allow_null=True),
        "state_version": serializers.IntegerField(),
        "cancel_requested": serializers.BooleanField(),
        "cancel_requested_at": serializers.DateTimeField(allow_null=True),
        "pending_asks": serializers.ListField(child=serializers.CharField()),
        "created": serializers.BooleanField(required=False),
        "sent": serializers.BooleanField(required=False),
        "invalidated_asks": serializers.IntegerField(required=False),
    },
)


def progress_json(session: ProgressSession) -> dict:
    card = session.card
    return {
        "session_id": session.session_id,
        "channel": session.channel,
        "status": session.status,
        "title": session.title,
        "summary": session.summary,
        "tool_lines": list(session.tool_lines or []),
        "receive_id_type": session.receive_id_type,
        "receive_id": session.receive_id,
        "requester_open_id": session.requester_open_id,
        "card_id": (card.card_id or None) if card else None,
        "platform_message_id": (card.open_message_id or None) if card else None,
        "state_version": session.state_version,
        "cancel_requested": session.cancel_requested_at is not None,
        "cancel_requested_at": session.cancel_requested_at.isoformat()
        if session.cancel_requested_at
        else None,
        "pending_asks": [a.public_id for a in session_card.pending_asks(session)],
    }


class AskOptionSerializer(serializers.Serializer):
    label = StrictCharField(min_length=1, max_length=60)
    description = StrictCharField(max_length=500, required=False, allow_blank=True, default="")


@state_rules(rules=({"properties": {"options": {"minItems": 1, "maxItems": 10}}},))
class QuestionSerializer(serializers.Serializer):
    """One question: `{question, header, options: [{label, description}], multiSelect}`;
    option labels are unique within it."""

    question = StrictCharField(min_length=1, max_length=1000)
    header = StrictCharField(max_length=40, required=False, allow_blank=True, default="")
    options = AskOptionSerializer(many=True)
    multiSelect = StrictBooleanField(default=False)  # noqa: N815 - the field name the agent protocol uses

    def validate_options(self, value):
        if not 1 <= len(value) <= 10:
            raise serializers.ValidationError(_("A question has 1 to 10 options."))
        labels = [o["label"] for o in value]
        if len(set(labels)) != len(labels):
            raise serializers.ValidationError(_("Option labels must be unique."))
        return value


@state_rules(
    rules=({"properties": {"questions": {"minItems": 1, "maxItems": asks.MAX_QUESTIONS}}},)
)
class AskCreateSerializer(serializers.Serializer):
    """Body of `POST /api/v1/sessions/<session_id>/asks`."""

    questions = QuestionSerializer(many=True)
    requester_open_id = StrictRegexField(
        kinds.ANY_OPERATOR_ID_PATTERN,
        max_length=64,
        required=False,
        allow_blank=True,
        help_text=_(
            "Who is asked (the person's id on the session's channel); defaults to the "
            "progress session's requester."
        ),
    )
    chat_id = StrictCharField(max_length=64, required=False, allow_blank=True)
    project_key = StrictCharField(max_length=300, required=False, allow_blank=True)
    workspace = StrictCharField(max_length=1000, required=False, allow_blank=True)
    subagent = StrictCharField(
        max_length=100,
        required=False,
        allow_blank=True,
        help_text=_("Set when the asking session is a sub-agent: refused (403)."),
    )
    timeout_seconds = serializers.IntegerField(
        min_value=asks.MIN_TIMEOUT,
        max_value=asks.MAX_TIMEOUT,
        required=False,
        help_text=_("Default 900 (15 minutes)."),
    )
    idempotency_key = StrictCharField(
        max_length=128,
        required=False,
        allow_blank=True,
        help_text=_("A retry with the same key returns the same ask."),
    )

    def validate_questions(self, value):
        if not 1 <= len(value) <= asks.MAX_QUESTIONS:
            raise serializers.ValidationError(_("Ask 1 to 4 questions."))
        return value


class AnswerSerializer(serializers.Serializer):
    """One answer: the question (from the request), chosen labels, the "other" text."""

    question = serializers.CharField()
    selectedLabels = serializers.ListField(child=serializers.CharField())  # noqa: N815
    customInput = serializers.CharField(allow_blank=True)  # noqa: N815


AskStateSerializer = inline_serializer(
    "AskState",
    {
        "requestId": serializers.CharField(),
        "sessionId": serializers.CharField(),
        "status": serializers.CharField(help_text="pending | answered | timeout | cancelled"),
        "reason": serializers.ChoiceField(choices=list(asks.REASONS), allow_null=True),
        "answers": AnswerSerializer(many=True),
        "answered_via": serializers.ChoiceField(choices=["card", "panel", "api"], allow_null=True),
        "questions": QuestionSerializer(many=True),
        "expiresAt": serializers.DateTimeField(),
        "createdAt": serializers.DateTimeField(),
        "resolvedAt": serializers.DateTimeField(allow_null=True),
    },
)


AskCreatedSerializer = inline_serializer(
    "AskCreated",
    {
        "requestId": serializers.CharField(),
        "sessionId": serializers.CharField(),
        "status": serializers.CharField(),
        "expiresAt": serializers.DateTimeField(),
        "created": serializers.BooleanField(),
        "shown": inline_serializer(
            "AskShown", {"card": serializers.BooleanField(), "panel": serializers.BooleanField()}
        ),
    },
)


NoChannelSerializer = inline_serializer(
    "AskNoChannel",
    {
        "error": serializers.CharField(),
        "code": serializers.CharField(),
        "detail": serializers.DictField(),
    },
)


class SessionAsksCancelSerializer(serializers.Serializer):
    reason = serializers.ChoiceField(
        choices=["cancelled", "recovering"],
        default="cancelled",
        help_text=_(
            "recovering: the agent runtime restarted (old forms answer that the question is no longer valid)."
        ),
    )


SessionAsksCancelledSerializer = inline_serializer(
    "SessionAsksCancelled", {"cancelled": serializers.IntegerField()}
)


AskCancelledSerializer = inline_serializer(
    "AskCancelled", {"won": serializers.BooleanField(), "ask": AskStateSerializer}
)
