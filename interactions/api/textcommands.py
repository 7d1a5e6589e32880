"""Bot API of typed commands: `POST /api/v1/interactions/text-command` — a typed
`/_interaction <id> <value>` the backend forwards (`interactions.approvals.textcommands`)."""

from __future__ import annotations

from django.utils import translation
from drf_spectacular.utils import extend_schema
from rest_framework.response import Response

from interactions.api.base import BotAPIView, invalid
from interactions.api.serializers.interactions import interaction_json
from interactions.api.serializers.textcommands import (
    TextCommandReplySerializer,
    TextCommandSerializer,
)
from interactions.approvals import textcommands


class TextCommandView(BotAPIView):
    """A typed `/_interaction <id> <value>` forwarded by the backend."""

    @extend_schema(
        request=TextCommandSerializer,
        responses={
            200: TextCommandReplySerializer,
            400: None,
        },
        description=(
            "Cardloop validates the id, expiry, state, sender and chat and answers with the "
            "reply to show. handled=false: the text is not a /_interaction command. ok=false "
            "with a code (malformed, unknown_interaction, wrong_chat, not_allowed, expired, "
            "already_final, lost, unknown_action, invalid_form, empty_answer): nothing changed."
        ),
    )
    def post(self, request):
        serializer = TextCommandSerializer(data=request.data)
        if not serializer.is_valid():
            raise invalid(serializer)
        data = serializer.validated_data
        reply = textcommands.handle(
            request.user.bot, data["text"], open_id=data["open_id"], chat_id=data["chat_id"]
        )
        i18n = {}
        for key, lang in (("zh_cn", "zh-hans"), ("en_us", "en")):
            with translation.override(lang):
                i18n[key] = str(reply.text)
        return Response(
            {
                "handled": reply.handled,
                "ok": reply.ok,
                "code": reply.code,
                "reply": str(reply.text),
                "reply_i18n": i18n,
                "interaction": interaction_json(reply.interaction) if reply.interaction else None,
            }
        )
