"""Serializers of `GET /api/v1/capabilities`."""

from __future__ import annotations

from django.utils.translation import gettext_lazy as _
from drf_spectacular.utils import inline_serializer
from rest_framework import serializers

from plumbing.fields import StrictCharField


class CapabilitiesQuerySerializer(serializers.Serializer):
    project_key = StrictCharField(max_length=300, required=False, allow_blank=True)
    workspace = StrictCharField(max_length=1000, required=False, allow_blank=True)
    subagent = StrictCharField(
        max_length=100,
        required=False,
        allow_blank=True,
        help_text=_("Set (e.g. foreground or background) when the session is a sub-agent."),
    )


SessionCapabilitiesSerializer = inline_serializer(
    "SessionCapabilities",
    {
        "channel": serializers.CharField(allow_null=True),
        "session": serializers.CharField(allow_null=True),
        "subagent": serializers.BooleanField(),
        "capabilities": serializers.DictField(child=serializers.BooleanField(), allow_null=True),
        "tools": serializers.DictField(child=serializers.BooleanField(allow_null=True)),
        "reason": serializers.CharField(),
        "channels": serializers.DictField(
            child=serializers.DictField(child=serializers.BooleanField()),
            help_text=_(
                "Every channel registered on this Cardloop → what it can show: buttons, "
                "forms, update (a sent message can change), markdown, text_fallback."
            ),
        ),
    },
)
