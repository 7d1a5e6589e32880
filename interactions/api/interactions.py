"""Bot API of interactions, approval rules and session capabilities (parse, authorize, call,
serialize; the state changes are in `interactions.approvals.service`).

- `POST /api/v1/interactions` — record, render and send (Feishu) or return the text fallback.
- `GET /api/v1/interactions/<id>?wait=<0..60>` — state; long-polls until final (async view:
  between database polls it awaits a channel-layer wake-up, holding no thread or connection).
- `POST /api/v1/interactions/<id>/cancel`, `POST /api/v1/interactions/<id>/resolve`.
- `POST /api/v1/interactions/text-command` — a typed `/_interaction …` forwarded by the backend.
- `GET /api/v1/approvals/check?tool=…&session_id=…&chat_id=…` — a matching "always" rule.
- `GET /api/v1/capabilities?project_key=…&workspace=…&subagent=…` — the seed rule.
"""

from __future__ import annotations

import asyncio
import logging
import time

from asgiref.sync import sync_to_async
from django.db import connection
from django.utils import timezone
from django.utils.translation import gettext_lazy as _
from drf_spectacular.utils import (
    OpenApiParameter,
    extend_schema,
    extend_schema_field,
    inline_serializer,
)
from rest_framework import serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from botadmin.auth import IsBot
from interactions.approvals import service as approvals
from interactions.approvals import textcommands
from interactions.channels import kinds as channels
from interactions.models import Interaction
from interactions.render import interaction_cards
from plumbing.api import ApiError
from plumbing.asyncapi import AsyncAPIView

log = logging.getLogger(__name__)

#: Longest long-poll (seconds).
MAX_WAIT = 60
#: Database polls of a long-poll start this far apart and back off up to MAX_POLL_INTERVAL;
#: a channel-layer message wakes the waiter earlier.
FIRST_POLL_INTERVAL = 0.25
MAX_POLL_INTERVAL = 5.0

ID_RE = r"^[A-Za-z0-9_-]{1,32}$"


# ---------------------------------------------------------------------------------------------
# Serializers
# ---------------------------------------------------------------------------------------------


class ActionSerializer(serializers.Serializer):
    """One button / option: `id` (stable key), `label` (shown), `value` (sent back; defaults to
    the id), `style` primary | default | danger."""

    id = serializers.RegexField(ID_RE, max_length=32)
    label = serializers.CharField(min_length=1, max_length=40)
    value = serializers.CharField(min_length=1, max_length=200, required=False)
    style = serializers.ChoiceField(
        choices=["primary", "default", "danger"], default="default", required=False
    )

    def validate(self, attrs):
        attrs.setdefault("value", attrs["id"])
        attrs.setdefault("style", "default")
        return attrs


class OptionSerializer(serializers.Serializer):
    label = serializers.CharField(min_length=1, max_length=60)
    value = serializers.CharField(min_length=1, max_length=100)


class FormFieldSerializer(serializers.Serializer):
    """One form field: `text` (an input) or `select` (one of `options`)."""

    name = serializers.RegexField(r"^[a-z][a-z0-9_]{0,30}$")
    label = serializers.CharField(min_length=1, max_length=60)
    type = serializers.ChoiceField(choices=["text", "select"], default="text")
    options = OptionSerializer(many=True, required=False, default=list)
    required = serializers.BooleanField(default=False)
    placeholder = serializers.CharField(max_length=100, required=False, allow_blank=True)
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


class InteractionCreateSerializer(serializers.Serializer):
    """Body of `POST /api/v1/interactions`."""

    kind = serializers.ChoiceField(
        choices=[c for c in Interaction.Kind.choices if c[0] != Interaction.Kind.ASK]
    )
    channel = serializers.CharField(
        default=channels.FEISHU,
        max_length=16,
        help_text=_("feishu | wechat | text (cli) | webhook (other)"),
    )
    chat_id = serializers.CharField(max_length=64)
    requester_open_id = serializers.CharField(max_length=64, required=False, allow_blank=True)
    allowed_open_ids = serializers.ListField(
        child=serializers.CharField(max_length=64), max_length=50, required=False, default=list
    )
    session_id = serializers.CharField(max_length=128, required=False, allow_blank=True)
    request_id = serializers.CharField(
        max_length=128,
        required=False,
        allow_blank=True,
        help_text=_(
            "Idempotency key: a retry with the same request_id returns the same interaction."
        ),
    )
    title = serializers.CharField(min_length=1, max_length=200)
    body = serializers.CharField(max_length=approvals.MAX_BODY, required=False, allow_blank=True)
    tool = serializers.CharField(max_length=128, required=False, allow_blank=True)
    always_scope = serializers.ChoiceField(
        choices=Interaction.Scope.choices, required=False, allow_blank=True
    )
    allow_always = serializers.BooleanField(default=True)
    actions = ActionSerializer(many=True, required=False, default=list)
    fields = FormFieldSerializer(many=True, required=False, default=list)
    timeout_seconds = serializers.IntegerField(
        min_value=approvals.MIN_TIMEOUT, max_value=approvals.MAX_TIMEOUT, required=False
    )

    def validate_channel(self, value):
        kind = channels.normalize(value)
        if kind is None:
            raise serializers.ValidationError(
                _("Unknown channel; use one of: %(kinds)s.") % {"kinds": ", ".join(channels.KINDS)}
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


def _invalid(serializer) -> ApiError:
    return ApiError("invalid", serializer.errors, 400)


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


# ---------------------------------------------------------------------------------------------
# Views
# ---------------------------------------------------------------------------------------------


class InteractionCreateView(APIView):
    """Ask a person for a decision on any channel."""

    permission_classes = [IsBot]

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
            raise _invalid(serializer)
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
                    "message": str(_("Feishu did not accept the message; nothing is pending.")),
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
        ia = approvals.expire_if_due(ia)
        return interaction_json(ia)
    finally:
        if not connection.in_atomic_block:
            connection.close()


class InteractionDetailView(AsyncAPIView):
    """Read an interaction; optionally wait until it is final."""

    permission_classes = [IsBot]

    @extend_schema(
        parameters=[
            OpenApiParameter(
                "wait",
                float,
                description="Seconds to wait for a final state (0..60); answers at once when final.",
            )
        ],
        responses={200: InteractionSerializer, 400: None, 404: None},
        description=(
            "The interaction's state. With wait>0 the request is held until it is resolved, "
            "expired or cancelled, or until wait seconds passed (then it is returned pending)."
        ),
    )
    async def get(self, request, public_id: str):
        raw = request.query_params.get("wait", "0") or "0"
        try:
            wait = float(raw)
        except ValueError:
            wait = -1.0
        if not 0 <= wait <= MAX_WAIT:
            raise ApiError("invalid", {"wait": [_("wait must be a number from 0 to 60.")]}, 400)
        bot = request.user.bot
        read = sync_to_async(_read_state)
        state = await read(bot, public_id)
        if state is None:
            raise ApiError("not_found", {"interaction_id": [_("No such interaction.")]}, 404)
        if wait > 0 and state["status"] == Interaction.Status.PENDING:
            state = await wait_for_final(bot, public_id, wait, state) or state
        return Response(state)


async def wait_for_final(
    bot,
    public_id: str,
    wait: float,
    state: dict,
    *,
    read_state=None,
    expires_key: str = "expires_at",
) -> dict | None:
    """Poll the interaction until it is final or `wait` seconds passed.

    Subscribes first — to this process's wake-ups (`approvals.add_local_waiter`) and, with
    Redis, to the channel-layer group — so a resolution between a poll and the subscription
    cannot be missed; then polls the database with backoff (FIRST_POLL_INTERVAL doubling to
    MAX_POLL_INTERVAL, never sleeping past `expires_at`, where the poll expires it). A wake-up
    only triggers the next poll: the database is the truth. Returns the last state read.

    `read_state(bot, public_id) -> dict | None` (sync; default: an interaction's JSON) and
    `expires_key` let asks (`GET /api/v1/asks/<requestId>`) share this loop; a state is
    final when its `status` is not "pending"."""
    loop = asyncio.get_running_loop()
    woken = asyncio.Event()
    approvals.add_local_waiter(public_id, loop, woken)
    layer = approvals.channel_layer_for_waiters()
    group = approvals.GROUP_PREFIX + public_id
    channel_name = None
    if layer is not None:
        try:
            channel_name = await layer.new_channel()
            await layer.group_add(group, channel_name)
        except Exception:  # noqa: BLE001 - polling alone is still correct
            log.warning("interaction %s: channel layer unavailable; polling only", public_id)
            channel_name = None
    read = sync_to_async(read_state or _read_state)
    deadline = time.monotonic() + wait
    delay = FIRST_POLL_INTERVAL
    try:
        while True:
            woken.clear()
            state = await read(bot, public_id)
            if state is None or state["status"] != Interaction.Status.PENDING:
                return state
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return state
            until_expiry = (_parse_time(state[expires_key]) - timezone.now()).total_seconds() + 0.05
            pause = max(0.01, min(delay, remaining, max(until_expiry, 0.01)))
            waits = [asyncio.ensure_future(woken.wait())]
            if channel_name is not None:
                waits.append(asyncio.ensure_future(layer.receive(channel_name)))
            try:
                done, _pending = await asyncio.wait(
                    waits, timeout=pause, return_when=asyncio.FIRST_COMPLETED
                )
            finally:
                # also when the client went away and this request was cancelled: asyncio.wait
                # leaves its tasks running ("Task was destroyed but it is pending!")
                for task in waits:
                    task.cancel()
            for task in done:
                if task.exception() is not None:
                    log.warning("interaction %s: channel layer receive failed", public_id)
                    channel_name = None
            delay = min(delay * 2, MAX_POLL_INTERVAL)
    finally:
        approvals.remove_local_waiter(public_id, loop, woken)
        if channel_name is not None:
            try:
                await layer.group_discard(group, channel_name)
            except Exception:  # noqa: BLE001
                log.debug("interaction %s: group_discard failed", public_id)


def _parse_time(value: str):
    from django.utils.dateparse import parse_datetime

    return parse_datetime(value)


class InteractionCancelView(APIView):
    """Cancel a pending interaction (the card shows it, the event says via=cancel)."""

    permission_classes = [IsBot]

    @extend_schema(
        request=None,
        responses={200: OutcomeSerializer, 404: None, 409: None},
        description="Cancel; 409 `already_final` (with what won) when it was no longer pending.",
    )
    def post(self, request, public_id: str):
        ia = _find_or_404(request.user.bot, public_id)
        outcome = approvals.cancel(ia)
        if not outcome.won:
            raise _lost(outcome.interaction)
        return Response({"won": True, "interaction": interaction_json(outcome.interaction)})


class ResolveSerializer(serializers.Serializer):
    """Body of `POST /api/v1/interactions/<id>/resolve`."""

    value = serializers.CharField(
        max_length=approvals.MAX_TEXT_ANSWER,
        required=False,
        allow_blank=True,
        help_text=_("An action value, id or number; free text for command interactions."),
    )
    form = serializers.DictField(required=False, help_text=_("Form answers by field name."))
    open_id = serializers.CharField(
        max_length=64,
        required=False,
        allow_blank=True,
        help_text=_("Who answered; checked against the allowed operators when given."),
    )


class InteractionResolveView(APIView):
    """Resolve an interaction from the backend (its own UI), `via: api`."""

    permission_classes = [IsBot]

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
            raise _invalid(serializer)
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
        except approvals.Refused as refused:
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


class TextCommandSerializer(serializers.Serializer):
    """Body of `POST /api/v1/interactions/text-command`."""

    text = serializers.CharField(max_length=textcommands.MAX_TEXT, trim_whitespace=False)
    open_id = serializers.CharField(max_length=64, help_text=_("The sender."))
    chat_id = serializers.CharField(max_length=64, help_text=_("Where it was typed."))


class TextCommandView(APIView):
    """A typed `/_interaction <id> <value>` forwarded by the backend."""

    permission_classes = [IsBot]

    @extend_schema(
        request=TextCommandSerializer,
        responses={
            200: inline_serializer(
                "TextCommandReply",
                {
                    "handled": serializers.BooleanField(),
                    "ok": serializers.BooleanField(),
                    "code": serializers.CharField(),
                    "reply": serializers.CharField(),
                    "reply_i18n": serializers.DictField(child=serializers.CharField()),
                    "interaction": InteractionSerializer(allow_null=True),
                },
            ),
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
            raise _invalid(serializer)
        data = serializer.validated_data
        reply = textcommands.handle(
            request.user.bot, data["text"], open_id=data["open_id"], chat_id=data["chat_id"]
        )
        from django.utils import translation

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


class ApprovalCheckSerializer(serializers.Serializer):
    tool = serializers.CharField(max_length=128)
    session_id = serializers.CharField(max_length=128, required=False, allow_blank=True)
    chat_id = serializers.CharField(max_length=64, required=False, allow_blank=True)


class ApprovalCheckView(APIView):
    """Whether an "always" rule already approves a tool here."""

    permission_classes = [IsBot]

    @extend_schema(
        parameters=[ApprovalCheckSerializer],
        responses={
            200: inline_serializer(
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
            ),
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
            raise _invalid(serializer)
        data = serializer.validated_data
        rule = approvals.check_rule(
            request.user.bot,
            data["tool"],
            session_id=data.get("session_id") or "",
            chat_id=data.get("chat_id") or "",
        )
        return Response(
            {"allowed": rule is not None, "rule": approvals.rule_json(rule) if rule else None}
        )


class CapabilitiesQuerySerializer(serializers.Serializer):
    project_key = serializers.CharField(max_length=300, required=False, allow_blank=True)
    workspace = serializers.CharField(max_length=1000, required=False, allow_blank=True)
    subagent = serializers.CharField(
        max_length=100,
        required=False,
        allow_blank=True,
        help_text=_("Set (e.g. foreground or background) when the session is a sub-agent."),
    )


class CapabilitiesView(APIView):
    """Which channel a session is on and which interaction tools it may expose."""

    permission_classes = [IsBot]

    @extend_schema(
        parameters=[CapabilitiesQuerySerializer],
        responses={
            200: inline_serializer(
                "SessionCapabilities",
                {
                    "channel": serializers.CharField(allow_null=True),
                    "session": serializers.CharField(allow_null=True),
                    "subagent": serializers.BooleanField(),
                    "capabilities": serializers.DictField(
                        child=serializers.BooleanField(), allow_null=True
                    ),
                    "tools": serializers.DictField(child=serializers.BooleanField(allow_null=True)),
                    "reason": serializers.CharField(),
                },
            ),
            400: None,
        },
        description=(
            "Feishu private (project_key feishu-{botId}-private-{userId}) and group "
            "(workspace containing /feishu-chat/) sessions may expose ask_user_questions; "
            "WeChat sessions and every sub-agent may not; other sessions keep their default "
            "tools (null)."
        ),
    )
    def get(self, request):
        serializer = CapabilitiesQuerySerializer(data=request.query_params)
        if not serializer.is_valid():
            raise _invalid(serializer)
        data = serializer.validated_data
        answer = channels.session_capabilities(
            data.get("project_key") or "", data.get("workspace") or "", data.get("subagent") or ""
        )
        return Response(answer.to_json())
