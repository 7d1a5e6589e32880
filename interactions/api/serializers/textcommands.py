"""Serializers of `POST /api/v1/interactions/text-command`."""

from __future__ import annotations

from django.utils.translation import gettext_lazy as _
from drf_spectacular.utils import inline_serializer
from rest_framework import serializers

from interactions.api.serializers.interactions import InteractionSerializer
from interactions.approvals import textcommands
from plumbing.fields import OpenIdField, StrictCharField


class TextCommandSerializer(serializers.Serializer):
    """Body of `POST /api/v1/interactions/text-command`."""

    text = StrictCharField(max_length=textcommands.MAX_TEXT, trim_whitespace=False)
    open_id = OpenIdField(max_length=64, help_text=_("The sender."))
    chat_id = StrictCharField(max_length=64, help_text=_("Where it was typed."))


TextCommandReplySerializer = inline_serializer(
    "TextCommandReply",
    {
        "handled": serializers.BooleanField(),
        "ok": serializers.BooleanField(),
        "code": serializers.CharField(),
        "reply": serializers.CharField(),
        "reply_i18n": serializers.DictField(child=serializers.CharField()),
        "interaction": InteractionSerializer(allow_null=True),
    },
)
