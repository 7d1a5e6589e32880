"""Bot API of interactions and approval rules (parse, authorize, call, serialize; the state
changes are `interactions.approvals.service` and `interactions.lifecycle.resolve`, the long-poll
`interactions.lifecycle.longpoll`, the serializers `interactions.api.serializers.interactions`).

- `POST /api/v1/interactions` — record, render and send (Feishu) or return the text fallback.
- `GET /api/v1/interactions/<id>?wait=<0..60>` — state; long-polls until final (async view:
  between database polls it awaits a channel-layer wake-up, holding no thread or connection).
- `POST /api/v1/interactions/<id>/cancel`, `POST /api/v1/interactions/<id>/resolve`.
- `GET /api/v1/approvals/check?tool=…&session_id=…&chat_id=…` — a matching "always" rule.
"""

from __future__ import annotations

from asgiref.sync import sync_to_async
from django.db import connection
from django.utils.translation import gettext_lazy as _
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import status
from rest_framework.response import Response

from interactions import channels, kinds
from interactions.api.base import WAIT_SCHEMA, BotAPIView, BotAsyncAPIView, invalid, wait_seconds
from interactions.api.serializers.interactions import (
    ApprovalCheckOutSerializer,
    ApprovalCheckSerializer,
    CreatedSerializer,
    InteractionCreateSerializer,
    InteractionSerializer,
    OutcomeSerializer,
    ResolveSerializer,
    interaction_json,
)
from interactions.approvals import service as approvals
from interactions.lifecycle import resolve as lifecycle
from interactions.lifecycle.longpoll import wait_for_final
from interactions.models import Interaction
from interactions.render import interaction_cards
from plumbing.api import ApiError


def _find_or_404(bot, public_id: str) -> Interaction:
    ia = approvals.find(bot, public_id)
    if ia is None:
        raise ApiError("not_found", {"interaction_id": [_("No such interaction.")]}, 404)
    return ia


def _lost(ia: Interaction) -> ApiError:
    """409 for a path that lost: what won is in the detail."""
    return ApiError(
        "already_final",
        {
            "message": str(approvals.lost_message(ia)),
            "interaction": interaction_json(ia),
        },
        409,
    )


class InteractionCreateView(BotAPIView):
    """Ask a person for a decision on any channel."""

    @extend_schema(
        request=InteractionCreateSerializer,
        responses={201: CreatedSerializer, 200: CreatedSerializer, 400: None, 502: None},
        description=(
            "Record an interaction (approval, quick_reply, form or command) and render it for "
            "its channel. Feishu: Cardloop sends the card to chat_id (rendered=card). Other "
            "channels: the text fallback is returned for the backend to send (rendered=text). "
            "201 when created, 200 for a repeated request_id (returned as it is; nothing is "
            "sent again unless the first send was interrupted: no card 2 minutes on); 400 "
            "`request_id_taken` when the request_id is an ask's idempotency_key or another "
            "request's (another kind, chat, session or tool). A failed Feishu send answers 502 "
            "`send_failed` and the interaction is recorded as cancelled."
        ),
    )
    def post(self, request):
        serializer = InteractionCreateSerializer(data=request.data)
        if not serializer.is_valid():
            raise invalid(serializer)
        data = dict(serializer.validated_data)
        for key in (
            "requester_open_id",
            "session_id",
            "request_id",
            "body",
            "tool",
            "always_scope",
        ):
            data[key] = data.get(key) or ""
        try:
            ia, created = approvals.create_interaction(request.user.bot, **data)
        except approvals.RequestIdTaken as taken:
            message = (
                _("This request_id is already used by an ask.")
                if taken.ask
                else _(
                    "This request_id is already used by another request (another kind, chat, "
                    "session or tool)."
                )
            )
            raise ApiError("request_id_taken", {"request_id": [str(message)]}, 400) from None
        try:
            # Only the request that created it sends: a retry (even one racing the first
            # request's send) returns the row as it is, and Feishu gets one message — unless
            # that first send was interrupted (the creating process died).
            if created or approvals.send_was_interrupted(ia):
                ia = approvals.send_to_chat(ia)
        except approvals.SendFailed as exc:
            raise ApiError(
                "send_failed",
                {
                    "message": str(
                        _("Feishu did not accept the message; nothing is pending.")
                        if ia.channel == kinds.FEISHU
                        else _("The channel did not accept the message; nothing is pending.")
                    ),
                    "feishu_code": exc.code,
                    "feishu_msg": exc.msg,
                    "log_id": exc.log_id,
                    "problems": exc.problems,
                    "interaction": interaction_json(exc.interaction),
                },
                502,
            ) from None
        caps = channels.capabilities(ia.channel)
        body = {
            "interaction": interaction_json(ia),
            "created": created,
            "rendered": "card" if caps.buttons else "text",
            "text": interaction_cards.fallback_text(ia),
            "capabilities": caps.to_json(),
        }
        return Response(body, status=status.HTTP_201_CREATED if created else status.HTTP_200_OK)


def _read_state(bot, public_id: str) -> dict | None:
    """One poll: the interaction's JSON (expired first when due), or None. Closes this
    thread's database connection afterwards (outside a transaction), so a long-poll holds no
    connection between polls."""
    try:
        ia = approvals.find(bot, public_id)
        if ia is None:
            return None
        ia = lifecycle.expire_if_due(ia)
        return interaction_json(ia)
    finally:
        if not connection.in_atomic_block:
            connection.close()


class InteractionDetailView(BotAsyncAPIView):
    """Read an interaction; optionally wait until it is final."""

    @extend_schema(
        parameters=[
            OpenApiParameter(
                "wait",
                WAIT_SCHEMA,
                description=(
                    "Seconds to hold the request until a final state: 0 to 60 (default 0); "
                    "answers at once when final."
                ),
            )
        ],
        responses={200: InteractionSerializer, 400: None, 404: None},
        description=(
            "The interaction's state. With wait>0 the request is held until it is resolved, "
            "expired or cancelled, or until wait seconds passed (then it is returned pending)."
        ),
    )
    async def get(self, request, public_id: str):
        wait = wait_seconds(request)
        bot = request.user.bot
        read = sync_to_async(_read_state)
        state = await read(bot, public_id)
        if state is None:
            raise ApiError("not_found", {"interaction_id": [_("No such interaction.")]}, 404)
        if wait > 0 and state["status"] == Interaction.Status.PENDING:
            state = (
                await wait_for_final(bot, public_id, wait, state, read_state=_read_state) or state
            )
        return Response(state)


class InteractionCancelView(BotAPIView):
    """Cancel a pending interaction (the card shows it, the event says via=cancel)."""

    @extend_schema(
        request=None,
        responses={200: OutcomeSerializer, 404: None, 409: None},
        description="Cancel; 409 `already_final` (with what won) when it was no longer pending.",
    )
    def post(self, request, public_id: str):
        ia = _find_or_404(request.user.bot, public_id)
        outcome = lifecycle.cancel(ia)
        if not outcome.won:
            raise _lost(outcome.interaction)
        return Response({"won": True, "interaction": interaction_json(outcome.interaction)})


class InteractionResolveView(BotAPIView):
    """Resolve an interaction from the backend (its own UI), `via: api`."""

    @extend_schema(
        request=ResolveSerializer,
        responses={200: OutcomeSerializer, 400: None, 404: None, 409: None},
        description=(
            "Answer with an action (value, id or number) or form values. 400 names a refused "
            "answer (unknown_action, invalid_form, not_allowed, expired); 409 `already_final` "
            "when another path won first."
        ),
    )
    def post(self, request, public_id: str):
        serializer = ResolveSerializer(data=request.data)
        if not serializer.is_valid():
            raise invalid(serializer)
        data = serializer.validated_data
        ia = _find_or_404(request.user.bot, public_id)
        open_id = data.get("open_id") or ""
        try:
            outcome = approvals.answer(
                ia,
                choice=data.get("value") or "",
                via=Interaction.Via.API,
                operator=open_id,
                form=data.get("form"),
                check_operator=bool(open_id),
            )
        except lifecycle.Refused as refused:
            if refused.interaction is not None and refused.interaction.is_final:
                raise _lost(refused.interaction) from None
            field = {"not_allowed": "open_id", "invalid_form": "form"}.get(refused.code, "value")
            detail = {field: [str(refused.message)]}
            if refused.fields:
                detail["fields"] = refused.fields
            raise ApiError(refused.code, detail, 400) from None
        if not outcome.won:
            raise _lost(outcome.interaction)
        return Response({"won": True, "interaction": interaction_json(outcome.interaction)})


class ApprovalCheckView(BotAPIView):
    """Whether an "always" rule already approves a tool here."""

    @extend_schema(
        parameters=[ApprovalCheckSerializer],
        responses={
            200: ApprovalCheckOutSerializer,
            400: None,
        },
        description=(
            "allowed=true with the rule when someone answered 'always' for this tool in this "
            "session, this chat or for the whole bot (the most specific rule is returned)."
        ),
    )
    def get(self, request):
        serializer = ApprovalCheckSerializer(data=request.query_params)
        if not serializer.is_valid():
            raise invalid(serializer)
        data = serializer.validated_data
        rule = approvals.check_rule(
            request.user.bot,
            data["tool"],
            session_id=data.get("session_id") or "",
            chat_id=data.get("chat_id") or "",
        )
        return Response(
            {"allowed": rule is not None, "rule": lifecycle.rule_json(rule) if rule else None}
        )
