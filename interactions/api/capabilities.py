"""Bot API of session capabilities: `GET /api/v1/capabilities?project_key=…&workspace=…&subagent=…`
— which channel a session is on and which interaction tools it may expose
(`interactions.kinds.session_capabilities`), and what every registered channel can show
(`channels`: kind → `Capabilities.to_json()`, from `interactions.channels.registered()`)."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework.response import Response

from interactions import channels, kinds
from interactions.api.base import BotAPIView, invalid
from interactions.api.serializers.capabilities import (
    CapabilitiesQuerySerializer,
    SessionCapabilitiesSerializer,
)


class CapabilitiesView(BotAPIView):
    """Which channel a session is on and which interaction tools it may expose."""

    @extend_schema(
        parameters=[CapabilitiesQuerySerializer],
        responses={
            200: SessionCapabilitiesSerializer,
            400: None,
        },
        description=(
            "Feishu private (project_key feishu-{botId}-private-{userId}) and group "
            "(workspace containing /feishu-chat/) sessions may expose ask_user_questions; "
            "WeChat sessions and every sub-agent may not; other sessions keep their default "
            "tools (null). `channels` maps every channel registered on this Cardloop to what "
            "it can show (buttons, forms, update, markdown, text_fallback)."
        ),
    )
    def get(self, request):
        serializer = CapabilitiesQuerySerializer(data=request.query_params)
        if not serializer.is_valid():
            raise invalid(serializer)
        data = serializer.validated_data
        answer = kinds.session_capabilities(
            data.get("project_key") or "", data.get("workspace") or "", data.get("subagent") or ""
        )
        return Response({**answer.to_json(), "channels": channel_capabilities()})


def channel_capabilities() -> dict[str, dict[str, bool]]:
    """`{kind: Capabilities.to_json()}` of every registered channel, in `kinds.KINDS` order:
    what each channel implementation really does on this Cardloop (a channel that is not
    registered is not listed)."""
    return {channel.name: channel.capabilities.to_json() for channel in channels.registered()}
