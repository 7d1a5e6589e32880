"""Serializers of `/api/v1/interactions…` and `/api/v1/approvals/check`: request bodies,
their validation rules, and the interaction as the API returns it."""

from __future__ import annotations

import re

from django.core.validators import RegexValidator
from django.utils.functional import lazy
from django.utils.translation import gettext_lazy as _
from drf_spectacular.utils import extend_schema_field, inline_serializer
from rest_framework import serializers

from interactions import kinds
from interactions.approvals import service as approvals
from interactions.lifecycle import resolve as lifecycle
from interactions.models import Interaction
from plumbing.fields import (
    OPEN_ID_PATTERN,
    OpenIdField,
    StrictBooleanField,
    StrictCharField,
    StrictRegexField,
)
from plumbing.openapi import case_insensitive_pattern, state_rules, when

ID_RE = r"^[A-Za-z0-9_-]{1,32}$"
_OPEN_ID_MESSAGE = _("Use a Feishu open_id: ou_ followed by letters, digits, _ or -.")


class ActionSerializer(serializers.Serializer):
    """One button / option: `id` (stable key), `label` (shown), `value` (sent back; defaults to
    the id), `style` primary | default | danger."""

    id = StrictRegexField(ID_RE, max_length=32)
    label = StrictCharField(min_length=1, max_length=40)
    value = StrictCharField(min_length=1, max_length=200, required=False)
    style = serializers.ChoiceField(
        choices=["primary", "default", "danger"], default="default", required=False
    )

    def validate(self, attrs):
        attrs.setdefault("value", attrs["id"])
        attrs.setdefault("style", "default")
        return attrs


class OptionSerializer(serializers.Serializer):
    label = StrictCharField(min_length=1, max_length=60)
    value = StrictCharField(min_length=1, max_length=100)


@state_rules(
    rules=(
        when(
            "type",
            ["select"],
            {"properties": {"options": {"minItems": 1, "maxItems": 20}}, "required": ["options"]},
        ),
    )
)
class FormFieldSerializer(serializers.Serializer):
    """One form field: `text` (an input) or `select` (one of `options`)."""

    name = StrictRegexField(r"^[a-z][a-z0-9_]{0,30}$")
    label = StrictCharField(min_length=1, max_length=60)
    type = serializers.ChoiceField(choices=["text", "select"], default="text")
    options = OptionSerializer(many=True, required=False, default=list)
    required = StrictBooleanField(default=False)
    placeholder = StrictCharField(max_length=100, required=False, allow_blank=True)
    max_length = serializers.IntegerField(min_value=1, max_value=1000, required=False)

    def validate(self, attrs):
        if attrs["type"] == "select":
            values = [o["value"] for o in attrs.get("options") or []]
            if not 1 <= len(values) <= 20:
                raise serializers.ValidationError(
                    {"options": [_("A select field needs 1 to 20 options.")]}
                )
            if len(set(values)) != len(values):
                raise serializers.ValidationError({"options": [_("Option values must be unique.")]})
        return attrs


def _unknown_channel() -> str:
    return str(_("Unknown channel; use one of: %(kinds)s.")) % {"kinds": ", ".join(kinds.KINDS)}


_K = Interaction.Kind
NON_BLANK = {"pattern": r"\S"}
_TELEGRAM = case_insensitive_pattern([kinds.TELEGRAM])


def _person_ids(pattern: str) -> dict:
    """requester_open_id blank or matching `pattern`, every allowed_open_ids item matching it."""
    return {
        "properties": {
            "requester_open_id": {"pattern": rf"^(?:{pattern.strip('^$')})?$"},
            "allowed_open_ids": {"items": {"pattern": pattern}},
        }
    }


#: The rules of `InteractionCreateSerializer.validate` that JSON schema can state.
CREATE_RULES = (
    {
        "anyOf": [
            {
                "properties": {"requester_open_id": {"minLength": 1}},
                "required": ["requester_open_id"],
            },
            {"properties": {"allowed_open_ids": {"minItems": 1}}, "required": ["allowed_open_ids"]},
        ]
    },
    {"properties": {"actions": {"maxItems": 10}, "fields": {"maxItems": 10}}},
    # person ids: Telegram user numbers on Telegram, Slack user ids on Slack, Feishu open_ids
    # everywhere else (`kinds.OPERATOR_ID_PATTERNS`); the schema states the Telegram rule and
    # that other channels take open_ids or Slack user ids (a third branch for Slack made the
    # schema too intricate for JSON-schema test generators), the description the rest
    {
        "anyOf": [
            {"properties": {"channel": {"not": {"pattern": _TELEGRAM}}}},
            _person_ids(r"^[0-9]{1,20}$"),
        ]
    },
    {
        "anyOf": [
            {"properties": {"channel": {"pattern": _TELEGRAM}}, "required": ["channel"]},
            _person_ids(r"^(?:ou_[A-Za-z0-9_-]+|[UW][A-Z0-9]{2,30})$"),
        ]
    },
    when(
        "kind",
        [_K.APPROVAL],
        {"properties": {"tool": NON_BLANK, "actions": {"maxItems": 0}}, "required": ["tool"]},
    ),
    when(
        "always_scope",
        [Interaction.Scope.SESSION],
        {"properties": {"session_id": NON_BLANK}, "required": ["session_id"]},
    ),
    when(
        "kind",
        [_K.QUICK_REPLY, _K.FORM, _K.COMMAND],
        {"properties": {"always_scope": {"enum": [""]}}},
    ),
    when(
        "kind",
        [_K.QUICK_REPLY],
        {"properties": {"actions": {"minItems": 1}}, "required": ["actions"]},
    ),
    when("kind", [_K.FORM], {"properties": {"fields": {"minItems": 1}}, "required": ["fields"]}),
    when(
        "kind",
        [_K.APPROVAL, _K.QUICK_REPLY, _K.COMMAND],
        {"properties": {"fields": {"maxItems": 0}}},
    ),
)


@state_rules(rules=CREATE_RULES)
class InteractionCreateSerializer(serializers.Serializer):
    """Body of `POST /api/v1/interactions`. Besides the rules of its fields and of
    `CREATE_RULES`: action ids and values are unique, and so are form field names; on Slack
    the requester and the allowed people are Slack user ids (U… or W…), on channels other
    than Slack and Telegram Feishu open_ids."""

    kind = serializers.ChoiceField(
        choices=[c for c in Interaction.Kind.choices if c[0] != Interaction.Kind.ASK]
    )
    channel = StrictCharField(
        default=kinds.FEISHU,
        max_length=16,
        trim_whitespace=False,
        validators=[
            RegexValidator(
                case_insensitive_pattern([*kinds.CAPABILITIES, *kinds.ALIASES]),
                lazy(_unknown_channel, str)(),
            )
        ],
        help_text=_("feishu | slack | telegram | wechat | text (cli) | webhook (other)"),
    )
    chat_id = StrictCharField(max_length=64)
    # a Feishu open_id, or the channel's own person id (Telegram: the user's numeric id)
    requester_open_id = StrictRegexField(
        kinds.ANY_OPERATOR_ID_PATTERN,
        max_length=64,
        required=False,
        allow_blank=True,
        error_messages={"invalid": _OPEN_ID_MESSAGE},
    )
    allowed_open_ids = serializers.ListField(
        child=StrictRegexField(
            kinds.ANY_OPERATOR_ID_PATTERN,
            max_length=64,
            error_messages={"invalid": _OPEN_ID_MESSAGE},
        ),
        max_length=50,
        required=False,
        default=list,
    )
    session_id = StrictCharField(max_length=128, required=False, allow_blank=True)
    request_id = StrictCharField(
        max_length=128,
        required=False,
        allow_blank=True,
        help_text=_(
            "Idempotency key: a retry with the same request_id returns the same interaction."
        ),
    )
    title = StrictCharField(min_length=1, max_length=200)
    body = StrictCharField(max_length=approvals.MAX_BODY, required=False, allow_blank=True)
    tool = StrictCharField(max_length=128, required=False, allow_blank=True)
    always_scope = serializers.ChoiceField(
        choices=Interaction.Scope.choices, required=False, allow_blank=True
    )
    allow_always = StrictBooleanField(default=True)
    actions = ActionSerializer(many=True, required=False, default=list)
    fields = FormFieldSerializer(many=True, required=False, default=list)
    timeout_seconds = serializers.IntegerField(
        min_value=lifecycle.MIN_TIMEOUT, max_value=lifecycle.MAX_TIMEOUT, required=False
    )

    def validate_channel(self, value):
        kind = kinds.normalize(value)
        if kind is None:
            raise serializers.ValidationError(
                _("Unknown channel; use one of: %(kinds)s.") % {"kinds": ", ".join(kinds.KINDS)}
            )
        return kind

    def validate(self, attrs):
        errors: dict[str, list] = {}
        kind = attrs["kind"]
        actions = attrs.get("actions") or []
        fields = attrs.get("fields") or []
        if not (attrs.get("requester_open_id") or attrs.get("allowed_open_ids")):
            errors["requester_open_id"] = [
                _("Give the requester_open_id or a non-empty allowed_open_ids list.")
            ]
        pattern = kinds.OPERATOR_ID_PATTERNS.get(attrs.get("channel"), OPEN_ID_PATTERN)
        for name, ids in (
            ("requester_open_id", [attrs.get("requester_open_id") or ""]),
            ("allowed_open_ids", attrs.get("allowed_open_ids") or []),
        ):
            if any(i and not re.match(pattern, i) for i in ids):
                errors[name] = [
                    _OPEN_ID_MESSAGE
                    if pattern == OPEN_ID_PATTERN
                    else _("Use a Slack user id: U or W followed by capital letters and digits.")
                    if attrs.get("channel") == kinds.SLACK
                    else _("Use the person's id on this channel (Telegram: the user's number).")
                ]
        if kind == Interaction.Kind.APPROVAL:
            if not attrs.get("tool"):
                errors["tool"] = [_("An approval names the tool it asks about.")]
            if actions:
                errors["actions"] = [_("Approvals have fixed actions: approve, deny, always.")]
            if attrs.get("always_scope") == Interaction.Scope.SESSION and not attrs.get(
                "session_id"
            ):
                errors["always_scope"] = [_("The session scope needs a session_id.")]
        elif attrs.get("always_scope"):
            errors["always_scope"] = [_("Only approvals have an 'always' scope.")]
        if kind == Interaction.Kind.QUICK_REPLY and not actions:
            errors["actions"] = [_("A quick reply needs 1 to 10 actions.")]
        if len(actions) > 10:
            errors["actions"] = [_("At most 10 actions.")]
        ids = [a["id"] for a in actions]
        values = [a["value"] for a in actions]
        if len(set(ids)) != len(ids) or len(set(values)) != len(values):
            errors["actions"] = [_("Action ids and values must be unique.")]
        if kind == Interaction.Kind.FORM:
            if not 1 <= len(fields) <= 10:
                errors["fields"] = [_("A form needs 1 to 10 fields.")]
            names = [f["name"] for f in fields]
            if len(set(names)) != len(names):
                errors["fields"] = [_("Field names must be unique.")]
        elif fields:
            errors["fields"] = [_("Only forms have fields.")]
        if errors:
            raise serializers.ValidationError(errors)
        return attrs


class ResolutionSerializer(serializers.Serializer):
    action_id = serializers.CharField(allow_null=True)
    value = serializers.JSONField(allow_null=True)
    operator = serializers.CharField(allow_null=True)
    via = serializers.ChoiceField(choices=Interaction.Via.choices)
    at = serializers.CharField()
    reason = serializers.CharField(required=False)


class InteractionSerializer(serializers.Serializer):
    """An interaction as the API returns it."""

    id = serializers.CharField(source="public_id")
    kind = serializers.ChoiceField(choices=Interaction.Kind.choices)
    status = serializers.ChoiceField(choices=Interaction.Status.choices)
    channel = serializers.CharField()
    chat_id = serializers.CharField()
    session_id = serializers.CharField()
    request_id = serializers.CharField()
    title = serializers.CharField()
    body = serializers.CharField()
    tool = serializers.CharField()
    always_scope = serializers.CharField()
    actions = ActionSerializer(many=True)
    fields = FormFieldSerializer(many=True)
    expires_at = serializers.DateTimeField()
    created_at = serializers.DateTimeField()
    resolved_at = serializers.DateTimeField(allow_null=True)
    platform_message_id = serializers.CharField(source="open_message_id")
    resolution = serializers.SerializerMethodField()

    @extend_schema_field(ResolutionSerializer(allow_null=True))
    def get_resolution(self, ia):
        if not ia.resolution:
            return None
        r = ia.resolution
        data = {
            "action_id": r.get("action_id") or None,
            "value": r.get("value"),
            "operator": r.get("operator") or None,
            "via": r.get("via"),
            "at": r.get("at"),
        }
        if r.get("reason"):
            data["reason"] = r["reason"]
        return data


def interaction_json(ia: Interaction) -> dict:
    return dict(InteractionSerializer(ia).data)


CreatedSerializer = inline_serializer(
    "InteractionCreated",
    {
        "interaction": InteractionSerializer(),
        "created": serializers.BooleanField(),
        "rendered": serializers.ChoiceField(choices=["card", "text"]),
        "text": serializers.CharField(),
        "capabilities": serializers.DictField(child=serializers.BooleanField()),
    },
)


OutcomeSerializer = inline_serializer(
    "InteractionOutcome",
    {"won": serializers.BooleanField(), "interaction": InteractionSerializer()},
)


class ResolveSerializer(serializers.Serializer):
    """Body of `POST /api/v1/interactions/<id>/resolve`."""

    value = StrictCharField(
        max_length=approvals.MAX_TEXT_ANSWER,
        required=False,
        allow_blank=True,
        help_text=_("An action value, id or number; free text for command interactions."),
    )
    form = serializers.DictField(required=False, help_text=_("Form answers by field name."))
    open_id = OpenIdField(
        max_length=64,
        required=False,
        allow_blank=True,
        help_text=_("Who answered; checked against the allowed operators when given."),
    )


class ApprovalCheckSerializer(serializers.Serializer):
    tool = StrictCharField(max_length=128)
    session_id = StrictCharField(max_length=128, required=False, allow_blank=True)
    chat_id = StrictCharField(max_length=64, required=False, allow_blank=True)


ApprovalCheckOutSerializer = inline_serializer(
    "ApprovalCheck",
    {
        "allowed": serializers.BooleanField(),
        "rule": inline_serializer(
            "ApprovalRuleOut",
            {
                "tool": serializers.CharField(),
                "scope": serializers.CharField(),
                "session_id": serializers.CharField(allow_null=True),
                "chat_id": serializers.CharField(allow_null=True),
                "created_at": serializers.CharField(),
                "interaction_id": serializers.CharField(allow_null=True),
            },
            allow_null=True,
        ),
    },
)
