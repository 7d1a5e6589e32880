"""Bot API of progress cards and asks (issue 7): parse, authorize, call `interactions.asks.service`,
serialize.

- `PUT /api/v1/sessions/<session_id>/progress` — the progress state; the first call sends the
  card, later ones update it (201 created / 200). `GET` reads it.
- `POST /api/v1/sessions/<session_id>/asks` — ask_user_questions: 201 with the `requestId`;
  409 `{"error": "当前通道无法向用户提问", "code": "no_channel"}` at once when neither a running
  progress card nor a connected panel can show it; 403 for sub-agents.
- `POST /api/v1/sessions/<session_id>/asks/cancel` — cancel every pending ask of the session.
- `GET /api/v1/asks/<requestId>?wait=<0..60>` — state; long-polls until answered / timeout /
  cancelled: `{status, answers: [{question, selectedLabels, customInput}], answered_via, …}`.
- `POST /api/v1/asks/<requestId>/cancel`.
"""

from __future__ import annotations

from asgiref.sync import sync_to_async
from django.db import connection
from django.utils.translation import gettext_lazy as _
from drf_spectacular.utils import OpenApiParameter, extend_schema, inline_serializer
from rest_framework import serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from botadmin.auth import IsBot
from interactions.api.interactions import MAX_WAIT, wait_for_final
from interactions.asks import service as asks
from interactions.channels import kinds as channels
from interactions.models import ProgressSession
from plumbing.api import ApiError
from plumbing.asyncapi import AsyncAPIView

#: The answer of an ask nobody can see (seed design: the hook returns it to the agent as is).
NO_CHANNEL_ERROR = "当前通道无法向用户提问"

SESSION_ID_MAX = 128


def _invalid(serializer) -> ApiError:
    return ApiError("invalid", serializer.errors, 400)


def _check_session_id(session_id: str) -> None:
    if not session_id or len(session_id) > SESSION_ID_MAX:
        raise ApiError("invalid", {"session_id": [_("session_id is 1 to 128 characters.")]}, 400)


# ---------------------------------------------------------------------------------------------
# Progress
# ---------------------------------------------------------------------------------------------


class ProgressSerializer(serializers.Serializer):
    """Body of `PUT /api/v1/sessions/<session_id>/progress`. Omitted fields keep their value."""

    status = serializers.ChoiceField(choices=ProgressSession.Status.choices)
    title = serializers.CharField(max_length=200, required=False, allow_blank=True)
    summary = serializers.CharField(max_length=4000, required=False, allow_blank=True)
    tool_lines = serializers.ListField(
        child=serializers.CharField(max_length=500, allow_blank=True, trim_whitespace=False),
        max_length=50,
        required=False,
        help_text=_("Latest tool lines, newest last (the card shows the last 10)."),
    )
    chat_id = serializers.CharField(
        max_length=64,
        required=False,
        help_text=_("Where the first call sends the card (oc_…)."),
    )
    open_id = serializers.CharField(
        max_length=64,
        required=False,
        help_text=_("Instead of chat_id: send the card to this user's p2p chat."),
    )
    requester_open_id = serializers.CharField(
        max_length=64,
        required=False,
        allow_blank=True,
        help_text=_("Who started the task: the only person who may answer and cancel."),
    )
    details_url = serializers.URLField(
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
        return attrs


ProgressOutSerializer = inline_serializer(
    "ProgressSession",
    {
        "session_id": serializers.CharField(),
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
        "pending_asks": [a.public_id for a in asks.pending_asks(session)],
    }


class ProgressView(APIView):
    """A session's progress card."""

    permission_classes = [IsBot]

    @extend_schema(
        request=ProgressSerializer,
        responses={201: ProgressOutSerializer, 200: ProgressOutSerializer, 400: None, 502: None},
        description=(
            "Record the progress state (running | completed | failed | cancelled | "
            "recovering). The first call (201) sends the card to chat_id, or to open_id's p2p "
            "chat; later calls (200) update it through the card queue, rendered from the "
            "current state when applied. `recovering` withdraws every pending ask of the "
            "session (the card shows the recovery text, panels are told, old forms answer "
            "'问题已失效'); completed / failed / cancelled end them (reason session_ended). "
            "`cancel_requested` is true once the requester pressed 'Cancel task'. A failed "
            "first send answers 502 `send_failed` (state kept; the next PUT retries)."
        ),
    )
    def put(self, request, session_id: str):
        _check_session_id(session_id)
        serializer = ProgressSerializer(data=request.data)
        if not serializer.is_valid():
            raise _invalid(serializer)
        data = serializer.validated_data
        receive_id, receive_id_type = data.get("chat_id", ""), "chat_id"
        if data.get("open_id"):
            receive_id, receive_id_type = data["open_id"], "open_id"
        try:
            result = asks.update_progress(
                request.user.bot,
                session_id,
                status=data["status"],
                title=data.get("title"),
                summary=data.get("summary"),
                tool_lines=data.get("tool_lines"),
                receive_id=receive_id,
                receive_id_type=receive_id_type,
                requester_open_id=data.get("requester_open_id"),
                details_url=data.get("details_url"),
            )
        except asks.AskRefused as refused:
            raise ApiError(refused.code, {refused.field: [str(refused.message)]}, 400) from None
        except asks.SendFailed as exc:
            raise ApiError(
                "send_failed",
                {
                    "message": str(_("Feishu did not accept the card; the state is kept.")),
                    "feishu_code": exc.code,
                    "feishu_msg": exc.msg,
                    "log_id": exc.log_id,
                    "problems": exc.problems,
                },
                502,
            ) from None
        body = {
            **progress_json(result.session),
            "created": result.created,
            "sent": result.sent,
            "invalidated_asks": result.invalidated,
        }
        return Response(body, status=status.HTTP_201_CREATED if result.created else 200)

    @extend_schema(responses={200: ProgressOutSerializer, 404: None})
    def get(self, request, session_id: str):
        session = (
            ProgressSession.objects.select_related("card")
            .filter(bot=request.user.bot, session_id=session_id)
            .first()
        )
        if session is None:
            raise ApiError("not_found", {"session_id": [_("No progress for this session.")]}, 404)
        return Response(progress_json(session))


# ---------------------------------------------------------------------------------------------
# Asks
# ---------------------------------------------------------------------------------------------


class AskOptionSerializer(serializers.Serializer):
    label = serializers.CharField(min_length=1, max_length=60)
    description = serializers.CharField(
        max_length=500, required=False, allow_blank=True, default=""
    )


class QuestionSerializer(serializers.Serializer):
    """One question: `{question, header, options: [{label, description}], multiSelect}`."""

    question = serializers.CharField(min_length=1, max_length=1000)
    header = serializers.CharField(max_length=40, required=False, allow_blank=True, default="")
    options = AskOptionSerializer(many=True)
    multiSelect = serializers.BooleanField(default=False)  # noqa: N815 - the seed's name

    def validate_options(self, value):
        if not 1 <= len(value) <= 10:
            raise serializers.ValidationError(_("A question has 1 to 10 options."))
        labels = [o["label"] for o in value]
        if len(set(labels)) != len(labels):
            raise serializers.ValidationError(_("Option labels must be unique."))
        return value


class AskCreateSerializer(serializers.Serializer):
    """Body of `POST /api/v1/sessions/<session_id>/asks`."""

    questions = QuestionSerializer(many=True)
    requester_open_id = serializers.CharField(
        max_length=64,
        required=False,
        allow_blank=True,
        help_text=_("Who is asked; defaults to the progress session's requester."),
    )
    chat_id = serializers.CharField(max_length=64, required=False, allow_blank=True)
    project_key = serializers.CharField(max_length=300, required=False, allow_blank=True)
    workspace = serializers.CharField(max_length=1000, required=False, allow_blank=True)
    subagent = serializers.CharField(
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
    idempotency_key = serializers.CharField(
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


class AskCreateView(APIView):
    """Ask the session's user 1–4 questions (ask_user_questions)."""

    permission_classes = [IsBot]

    @extend_schema(
        request=AskCreateSerializer,
        responses={
            201: AskCreatedSerializer,
            200: AskCreatedSerializer,
            400: None,
            403: None,
            409: NoChannelSerializer,
        },
        description=(
            "Shown as a form on the session's running progress card (no other notification) "
            "and pushed to the requester's connected panel. 409 with body "
            '`{"error": "当前通道无法向用户提问", "code": "no_channel", "detail": …}` at once '
            "when neither exists (nothing recorded, no waiting). 403 `subagent_not_allowed` "
            "for sub-agents and `ask_not_available` for sessions whose channel has no forms "
            "(WeChat), by the seed rule of /api/v1/capabilities. Then long-poll "
            "GET /api/v1/asks/<requestId>?wait=60 (default timeout 15 minutes)."
        ),
    )
    def post(self, request, session_id: str):
        _check_session_id(session_id)
        serializer = AskCreateSerializer(data=request.data)
        if not serializer.is_valid():
            raise _invalid(serializer)
        data = serializer.validated_data
        caps = channels.session_capabilities(
            data.get("project_key") or "", data.get("workspace") or "", data.get("subagent") or ""
        )
        if caps.subagent:
            raise ApiError(
                "subagent_not_allowed",
                {"subagent": [_("Sub-agents may not ask the user questions.")]},
                403,
            )
        if caps.ask_user_questions is False:
            raise ApiError(
                "ask_not_available",
                {"project_key": [_("This session's channel cannot show questions.")]},
                403,
            )
        bot = request.user.bot
        try:
            reg = asks.register_ask(
                bot,
                session_id,
                questions=[
                    dict(q, options=[dict(o) for o in q["options"]]) for q in data["questions"]
                ],
                requester_open_id=data.get("requester_open_id") or "",
                chat_id=data.get("chat_id") or "",
                timeout_seconds=data.get("timeout_seconds"),
                idempotency_key=data.get("idempotency_key") or "",
            )
        except asks.AskRefused as refused:
            raise ApiError(refused.code, {refused.field: [str(refused.message)]}, 400) from None
        except asks.NoChannel:
            return Response(
                {
                    "error": NO_CHANNEL_ERROR,
                    "code": "no_channel",
                    "detail": {
                        "message": str(
                            _(
                                "The session has no running progress card and the user has "
                                "no connected panel; nothing was recorded."
                            )
                        )
                    },
                },
                status=status.HTTP_409_CONFLICT,
            )
        ask = reg.ask
        body = {
            "requestId": ask.public_id,
            "sessionId": ask.session_id,
            "status": asks.ask_status(ask),
            "expiresAt": ask.expires_at.isoformat(),
            "created": reg.created,
            "shown": {"card": reg.on_card, "panel": reg.on_panel},
        }
        return Response(body, status=status.HTTP_201_CREATED if reg.created else 200)


class SessionAsksCancelSerializer(serializers.Serializer):
    reason = serializers.ChoiceField(
        choices=["cancelled", "recovering"],
        default="cancelled",
        help_text=_("recovering: the agent runtime restarted (old forms answer '问题已失效')."),
    )


class SessionAsksCancelView(APIView):
    """Cancel every pending ask of a session (the agent runtime restarted or gave up)."""

    permission_classes = [IsBot]

    @extend_schema(
        request=SessionAsksCancelSerializer,
        responses={
            200: inline_serializer(
                "SessionAsksCancelled", {"cancelled": serializers.IntegerField()}
            )
        },
    )
    def post(self, request, session_id: str):
        _check_session_id(session_id)
        serializer = SessionAsksCancelSerializer(data=request.data)
        if not serializer.is_valid():
            raise _invalid(serializer)
        count = asks.invalidate_session_asks(
            request.user.bot, session_id, reason=serializer.validated_data["reason"]
        )
        return Response({"cancelled": count})


def _read_ask_state(bot, request_id: str) -> dict | None:
    """One poll (expires a due ask first); closes the connection between polls."""
    try:
        ask = asks.read_ask(bot, request_id)
        return None if ask is None else asks.ask_state(ask)
    finally:
        if not connection.in_atomic_block:
            connection.close()


class AskDetailView(AsyncAPIView):
    """An ask's state; optionally wait for the answer."""

    permission_classes = [IsBot]

    @extend_schema(
        parameters=[
            OpenApiParameter(
                "wait", float, description="Seconds to wait for a final state (0..60)."
            )
        ],
        responses={200: AskStateSerializer, 400: None, 404: None},
        description=(
            "status pending | answered | timeout | cancelled; `answers` "
            "[{question, selectedLabels, customInput}] and `answered_via` card | panel | api "
            "once answered; `reason` (answered | timeout | cancelled | session_ended | "
            "recovering) once final. With wait>0 the request is held until final or wait "
            "seconds passed (then pending is returned: poll again)."
        ),
    )
    async def get(self, request, request_id: str):
        raw = request.query_params.get("wait", "0") or "0"
        try:
            wait = float(raw)
        except ValueError:
            wait = -1.0
        if not 0 <= wait <= MAX_WAIT:
            raise ApiError("invalid", {"wait": [_("wait must be a number from 0 to 60.")]}, 400)
        bot = request.user.bot
        state = await sync_to_async(_read_ask_state)(bot, request_id)
        if state is None:
            raise ApiError("not_found", {"requestId": [_("No such ask.")]}, 404)
        if wait > 0 and state["status"] == "pending":
            state = (
                await wait_for_final(
                    bot,
                    request_id,
                    wait,
                    state,
                    read_state=_read_ask_state,
                    expires_key="expiresAt",
                )
                or state
            )
        return Response(state)


class AskCancelView(APIView):
    """Cancel one pending ask."""

    permission_classes = [IsBot]

    @extend_schema(
        request=None,
        responses={
            200: inline_serializer(
                "AskCancelled", {"won": serializers.BooleanField(), "ask": AskStateSerializer}
            ),
            404: None,
            409: None,
        },
        description=(
            "The form leaves the card, panels get ask_user_questions_cancelled (reason "
            "cancelled), long-polls answer status cancelled. 409 `already_final` with the "
            "ask's state when it was no longer pending."
        ),
    )
    def post(self, request, request_id: str):
        ask = asks.read_ask(request.user.bot, request_id)
        if ask is None:
            raise ApiError("not_found", {"requestId": [_("No such ask.")]}, 404)
        outcome = asks.cancel_ask(ask)
        state = asks.ask_state(asks.find_ask(request.user.bot, request_id))
        if not outcome.won:
            raise ApiError("already_final", {"ask": state}, 409)
        return Response({"won": True, "ask": state})
