"""Bot API of progress cards and asks: parse, authorize, call `interactions.asks.service` /
`interactions.asks.progress`, answer with `interactions.api.serializers.asks`.

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
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import status
from rest_framework.response import Response

from interactions import kinds
from interactions.api.base import WAIT_SCHEMA, BotAPIView, BotAsyncAPIView, invalid, wait_seconds
from interactions.api.serializers.asks import (
    AskCancelledSerializer,
    AskCreatedSerializer,
    AskCreateSerializer,
    AskStateSerializer,
    NoChannelSerializer,
    ProgressOutSerializer,
    ProgressSerializer,
    SessionAsksCancelledSerializer,
    SessionAsksCancelSerializer,
    progress_json,
)
from interactions.asks import progress
from interactions.asks import service as asks
from interactions.lifecycle.longpoll import wait_for_final
from interactions.models import ProgressSession
from plumbing.api import ApiError

#: The answer of an ask nobody can see (the agent's hook returns this text to the agent as is).
NO_CHANNEL_ERROR = "当前通道无法向用户提问"


SESSION_ID_MAX = 128


def _check_session_id(session_id: str) -> None:
    if not session_id or len(session_id) > SESSION_ID_MAX:
        raise ApiError("invalid", {"session_id": [_("session_id is 1 to 128 characters.")]}, 400)


class ProgressView(BotAPIView):
    """A session's progress card."""

    @extend_schema(
        request=ProgressSerializer,
        responses={201: ProgressOutSerializer, 200: ProgressOutSerializer, 400: None, 502: None},
        description=(
            "Record the progress state (running | completed | failed | cancelled | "
            "recovering). The first call (201) sends the card to chat_id, or to open_id's p2p "
            "chat (Feishu only), on `channel` (feishu | slack | telegram; the first call sets "
            "it, another channel later is refused 400 `channel_changed`, one this server cannot "
            "show progress on 400 `channel_unsupported`); later calls (200) update it through the card queue, rendered from the "
            "current state when applied. `recovering` withdraws every pending ask of the "
            "session (the card shows the recovery text, panels are told, old forms answer "
            "that the question is no longer valid); completed / failed / cancelled end them (reason session_ended). "
            "`cancel_requested` is true once the requester pressed 'Cancel task'. A failed "
            "first send answers 502 `send_failed` (state kept; the next PUT retries) with "
            "Feishu's `feishu_code` / `feishu_msg` / `log_id`, or `<channel>_error` for "
            "another channel."
        ),
    )
    def put(self, request, session_id: str):
        _check_session_id(session_id)
        serializer = ProgressSerializer(data=request.data)
        if not serializer.is_valid():
            raise invalid(serializer)
        data = serializer.validated_data
        receive_id, receive_id_type = data.get("chat_id", ""), "chat_id"
        if data.get("open_id"):
            receive_id, receive_id_type = data["open_id"], "open_id"
        try:
            result = progress.update_progress(
                request.user.bot,
                session_id,
                status=data["status"],
                title=data.get("title"),
                summary=data.get("summary"),
                tool_lines=data.get("tool_lines"),
                receive_id=receive_id,
                receive_id_type=receive_id_type,
                channel=data.get("channel"),
                requester_open_id=data.get("requester_open_id"),
                details_url=data.get("details_url"),
            )
        except asks.AskRefused as refused:
            raise ApiError(refused.code, {refused.field: [str(refused.message)]}, 400) from None
        except progress.SendFailed as exc:
            if exc.channel != kinds.FEISHU:  # that channel's own error code, as deliveries do
                detail = {
                    "message": str(_("The channel did not accept the message; the state is kept.")),
                    f"{exc.channel}_error": exc.code,
                    "problems": exc.problems,
                }
            else:
                detail = {
                    "message": str(_("Feishu did not accept the card; the state is kept.")),
                    "feishu_code": exc.code,
                    "feishu_msg": exc.msg,
                    "log_id": exc.log_id,
                    "problems": exc.problems,
                }
            raise ApiError("send_failed", detail, 502) from None
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


class AskCreateView(BotAPIView):
    """Ask the session's user 1–4 questions (ask_user_questions)."""

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
            "(WeChat), by the session rule of /api/v1/capabilities. Then long-poll "
            "GET /api/v1/asks/<requestId>?wait=60 (default timeout 15 minutes)."
        ),
    )
    def post(self, request, session_id: str):
        _check_session_id(session_id)
        serializer = AskCreateSerializer(data=request.data)
        if not serializer.is_valid():
            raise invalid(serializer)
        data = serializer.validated_data
        caps = kinds.session_capabilities(
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


class SessionAsksCancelView(BotAPIView):
    """Cancel every pending ask of a session (the agent runtime restarted or gave up)."""

    @extend_schema(
        request=SessionAsksCancelSerializer,
        responses={200: SessionAsksCancelledSerializer},
    )
    def post(self, request, session_id: str):
        _check_session_id(session_id)
        serializer = SessionAsksCancelSerializer(data=request.data)
        if not serializer.is_valid():
            raise invalid(serializer)
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


class AskDetailView(BotAsyncAPIView):
    """An ask's state; optionally wait for the answer."""

    @extend_schema(
        parameters=[
            OpenApiParameter(
                "wait",
                WAIT_SCHEMA,
                description="Seconds to hold the request until a final state: 0 to 60 (default 0).",
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
        wait = wait_seconds(request)
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


class AskCancelView(BotAPIView):
    """Cancel one pending ask."""

    @extend_schema(
        request=None,
        responses={
            200: AskCancelledSerializer,
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
