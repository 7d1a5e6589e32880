"""The tools of the `/mcp` server: which a session gets, their input schemas, and what a call
does (it calls the same service functions as the REST API; no state change lives here).

| tool | does | result (`structuredContent`, also as JSON text) |
|---|---|---|
| `ask_user_questions` | `asks.register_ask`, then waits for the first answer (card, panel, REST) | `{"answers": [{question, selectedLabels, customInput}]}` |
| `request_approval` | an "always" rule answers at once; else `approvals.create_interaction` + `send_to_chat`, then waits | `{"decision": approve \\| deny \\| always, …}` |
| `check_approval` | `approvals.check_rule` | `{"allowed": bool, "rule": {…} \\| null}` |

**Which tools a session gets** is the rule of `GET /api/v1/capabilities`
(`channels.session_capabilities` of the token's project_key, workspace and sub-agent flag): a
sub-agent's list and a WeChat session's have no `ask_user_questions`; the approval tools are
always listed. A call of a tool the session does not get is refused as a tool error.

**Limits** are the REST API's: the arguments are validated with the serializers of
`POST /api/v1/sessions/<id>/asks` (1–4 questions, 1–10 options with unique labels ≤ 60
characters, question ≤ 1000, header ≤ 40, description ≤ 500) and the interaction timeout
bounds (10–3600 s). A refused argument is a tool error naming the field, e.g.
`questions[0].options: A question has 1 to 10 options.`

**Blocking calls** (`ask_user_questions`, `request_approval` when it asks) wait for the first
answer up to the interaction's own timeout (`wait_for_final`: database polls woken through
the channel layer, so an answer in any process is seen), reporting MCP progress every
`CARDLOOP_MCP_PROGRESS_SECONDS` (10 s) while they wait. When the call is cancelled (the client closes the
request's response stream, disconnects, or sends `notifications/cancelled`) the question is
withdrawn exactly as the cancel API does (`asks.cancel_ask` / `lifecycle.cancel`): the form
or card shows it is no longer valid and panels are told.

Tool errors (`isError: true`) carry text the model can act on; with no card and no panel an
ask answers at once with 「当前通道无法向用户提问」 so the model continues in text.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import anyio
from asgiref.sync import ThreadSensitiveContext, sync_to_async
from django.conf import settings
from django.db import connection, transaction
from django.utils import translation
from django.utils.translation import gettext_lazy as _
from rest_framework import serializers

from interactions import kinds as channels
from interactions.api.asks import NO_CHANNEL_ERROR
from interactions.api.serializers.asks import QuestionSerializer
from interactions.approvals import service as approvals
from interactions.asks import service as asks
from interactions.lifecycle import resolve as lifecycle
from interactions.lifecycle.longpoll import wait_for_final
from interactions.mcp import calls
from interactions.models import Interaction, McpToken, ProgressSession

log = logging.getLogger(__name__)

ASK = "ask_user_questions"
REQUEST_APPROVAL = "request_approval"
CHECK_APPROVAL = "check_approval"


def progress_every() -> float:
    """Seconds between progress notifications of a waiting call
    (`CARDLOOP_MCP_PROGRESS_SECONDS`, default 10)."""
    return max(0.1, float(settings.CARDLOOP_MCP_PROGRESS_SECONDS))


#: Longest tool name an approval names (the Interaction column).
TOOL_NAME_MAX = 128
SUMMARY_MAX = 200

_TIMEOUT_SCHEMA = {
    "type": "integer",
    "minimum": approvals.MIN_TIMEOUT,
    "maximum": approvals.MAX_TIMEOUT,
    "description": "Seconds to wait for the answer (10..3600).",
}

ASK_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "questions": {
            "type": "array",
            "minItems": 1,
            "maxItems": asks.MAX_QUESTIONS,
            "description": "1 to 4 questions, answered together.",
            "items": {
                "type": "object",
                "properties": {
                    "question": {"type": "string", "minLength": 1, "maxLength": 1000},
                    "header": {
                        "type": "string",
                        "maxLength": 40,
                        "description": "A short title of the question.",
                    },
                    "options": {
                        "type": "array",
                        "minItems": 1,
                        "maxItems": 10,
                        "description": "1 to 10 options; labels must be unique.",
                        "items": {
                            "type": "object",
                            "properties": {
                                "label": {"type": "string", "minLength": 1, "maxLength": 60},
                                "description": {"type": "string", "maxLength": 500},
                            },
                            "required": ["label"],
                            "additionalProperties": False,
                        },
                    },
                    "multiSelect": {"type": "boolean", "default": False},
                },
                "required": ["question", "options"],
                "additionalProperties": False,
            },
        },
        "timeout_seconds": {**_TIMEOUT_SCHEMA, "description": "Default 900 (15 minutes)."},
    },
    "required": ["questions"],
    "additionalProperties": False,
}

REQUEST_APPROVAL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "tool": {
            "type": "string",
            "minLength": 1,
            "maxLength": TOOL_NAME_MAX,
            "description": "Name of the tool that needs approval, e.g. bash.",
        },
        "summary": {
            "type": "string",
            "minLength": 1,
            "maxLength": SUMMARY_MAX,
            "description": "One line the approver reads, e.g. 'Run rm -rf build/'.",
        },
        "arguments": {
            "type": "object",
            "description": "The tool call's arguments, shown to the approver "
            f"(as JSON, at most {approvals.MAX_BODY} characters).",
        },
        "always_scope": {
            "type": "string",
            "enum": [c for c, _label in Interaction.Scope.choices],
            "description": "What an 'always' answer covers: this session (default), this "
            "chat, or the whole bot.",
        },
        "timeout_seconds": {
            **_TIMEOUT_SCHEMA,
            "description": "Default: the server's interaction timeout; a timeout denies.",
        },
    },
    "required": ["tool", "summary"],
    "additionalProperties": False,
}

CHECK_APPROVAL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "tool": {"type": "string", "minLength": 1, "maxLength": TOOL_NAME_MAX},
    },
    "required": ["tool"],
    "additionalProperties": False,
}


@dataclass(frozen=True)
class ToolSpec:
    """One tool as `tools/list` shows it."""

    name: str
    title: str
    description: str
    input_schema: dict[str, Any]


SPECS: dict[str, ToolSpec] = {
    ASK: ToolSpec(
        ASK,
        "Ask the user",
        "Ask the user 1 to 4 multiple-choice questions (each may also be answered with free "
        "text) on the session's Feishu progress card and question panel, and wait for the "
        "answer. Returns {answers: [{question, selectedLabels, customInput}]}. When nobody "
        "can be asked the tool fails at once with 当前通道无法向用户提问: ask in text instead.",
        ASK_SCHEMA,
    ),
    REQUEST_APPROVAL: ToolSpec(
        REQUEST_APPROVAL,
        "Request approval",
        "Ask the requester to approve a tool call before running it (a Feishu card with "
        "approve / deny / always). Returns {decision: approve | deny | always}. 'always' is "
        "remembered for its scope: the next request for the same tool returns approve at "
        "once without asking. A timeout denies.",
        REQUEST_APPROVAL_SCHEMA,
    ),
    CHECK_APPROVAL: ToolSpec(
        CHECK_APPROVAL,
        "Check approval",
        "Whether an earlier 'always' answer already approves this tool here. Returns "
        "{allowed: bool, rule: {tool, scope, session_id, chat_id, created_at, "
        "interaction_id} | null}.",
        CHECK_APPROVAL_SCHEMA,
    ),
}


def session_capabilities(token: McpToken) -> channels.SessionCapabilities:
    """The seed rule of `GET /api/v1/capabilities` applied to the token's session."""
    return channels.session_capabilities(token.project_key, token.workspace, token.subagent)


def tools_for(token: McpToken) -> list[ToolSpec]:
    """The tools `token`'s session may use, in a stable order (pure)."""
    caps = session_capabilities(token)
    names = [REQUEST_APPROVAL, CHECK_APPROVAL]
    if caps.ask_user_questions is not False:
        names.insert(0, ASK)
    return [SPECS[n] for n in names]


# ---------------------------------------------------------------------------------------------
# Results
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ToolResult:
    """What a call answers: `text` (the content block), `data` (structuredContent or None),
    `is_error` (a tool error: the model reads `text` and carries on)."""

    text: str
    data: dict[str, Any] | None = None
    is_error: bool = False


def _ok(data: dict[str, Any]) -> ToolResult:
    return ToolResult(json.dumps(data, ensure_ascii=False), data, False)


def _error(message, data: dict[str, Any] | None = None) -> ToolResult:
    """A tool error whose text is the message in Chinese and English (`中文 / English`)."""
    return ToolResult(bilingual(message), data, True)


def bilingual(message) -> str:
    """`message` (a lazy msgid) as "zh-hans / en"; one text when both are the same."""
    with translation.override("zh-hans"):
        zh = str(message)
    with translation.override("en"):
        en = str(message)
    return zh if zh == en else f"{zh} / {en}"


SUBAGENT_REFUSED = _("Sub-agents may not ask the user questions.")
ASK_NOT_AVAILABLE = _("This session's channel cannot show questions.")
NO_REQUESTER = _(
    "Nobody to ask: the token names no requester_open_id and the session's progress card "
    "names nobody."
)
NOT_ANSWERED = {
    "timeout": _("The user did not answer in time."),
    "cancelled": _("The question was withdrawn before it was answered."),
}
NO_CHAT = _("Approvals need a chat: issue the MCP token with chat_id.")
APPROVALS_NOT_AVAILABLE = _(
    "This session's channel cannot show approval buttons; ask for approval in text."
)
SEND_FAILED = _("Feishu did not accept the approval card; nothing is pending.")
APPROVAL_CANCELLED = _("The approval request was withdrawn before it was answered.")
UNKNOWN_TOOL = _("Unknown tool.")
INVALID_ARGUMENTS = _("Invalid arguments")


# ---------------------------------------------------------------------------------------------
# Argument validation (the REST API's serializers)
# ---------------------------------------------------------------------------------------------


class AskArguments(serializers.Serializer):
    """Arguments of `ask_user_questions` (the limits of `POST /api/v1/sessions/<id>/asks`)."""

    questions = QuestionSerializer(many=True)
    timeout_seconds = serializers.IntegerField(
        min_value=asks.MIN_TIMEOUT, max_value=asks.MAX_TIMEOUT, required=False
    )

    def validate_questions(self, value):
        if not 1 <= len(value) <= asks.MAX_QUESTIONS:
            raise serializers.ValidationError(_("Ask 1 to 4 questions."))
        return value


class ApprovalArguments(serializers.Serializer):
    """Arguments of `request_approval`."""

    tool = serializers.CharField(min_length=1, max_length=TOOL_NAME_MAX)
    summary = serializers.CharField(min_length=1, max_length=SUMMARY_MAX)
    arguments = serializers.DictField(required=False, default=dict)
    always_scope = serializers.ChoiceField(choices=Interaction.Scope.choices, required=False)
    timeout_seconds = serializers.IntegerField(
        min_value=approvals.MIN_TIMEOUT, max_value=approvals.MAX_TIMEOUT, required=False
    )

    def validate_arguments(self, value):
        if len(_arguments_text(value)) > approvals.MAX_BODY:
            raise serializers.ValidationError(
                _("The arguments are too long to show (at most 4000 characters as JSON).")
            )
        return value


class CheckArguments(serializers.Serializer):
    tool = serializers.CharField(min_length=1, max_length=TOOL_NAME_MAX)


ARGUMENTS = {ASK: AskArguments, REQUEST_APPROVAL: ApprovalArguments, CHECK_APPROVAL: CheckArguments}


def _arguments_text(value: dict[str, Any]) -> str:
    return json.dumps(value, ensure_ascii=False, indent=1, sort_keys=True, default=str)


def _flatten(errors: Any, prefix: str = "") -> list[str]:
    """DRF errors → `["questions[0].options: …", …]`."""
    lines: list[str] = []
    if isinstance(errors, dict):
        for key, value in errors.items():
            if isinstance(key, int):  # DRF keys nested list errors by position
                lines += _flatten(value, f"{prefix}[{key}]")
                continue
            name = key if key != "non_field_errors" else ""
            lines += _flatten(value, f"{prefix}.{name}" if prefix and name else (prefix or name))
    elif isinstance(errors, list):
        if all(not isinstance(e, (dict, list)) for e in errors):
            lines += [f"{prefix}: {e}" if prefix else str(e) for e in errors]
        else:
            for i, item in enumerate(errors):
                if item:
                    lines += _flatten(item, f"{prefix}[{i}]")
    else:
        lines.append(f"{prefix}: {errors}" if prefix else str(errors))
    return lines


def validate_arguments(
    name: str, arguments: Any
) -> tuple[dict[str, Any] | None, ToolResult | None]:
    """`(validated data, None)` or `(None, tool error naming each refused field)`. Unknown
    top-level fields are refused (the schemas say `additionalProperties: false`)."""
    arguments = arguments if arguments is not None else {}
    if not isinstance(arguments, dict):
        return None, _invalid(["arguments: must be an object"])
    serializer_class = ARGUMENTS[name]
    unknown = sorted(set(arguments) - set(serializer_class().fields))
    if unknown:
        return None, _invalid([f"{key}: unknown field" for key in unknown])
    with translation.override("en"):
        serializer = serializer_class(data=arguments)
        if not serializer.is_valid():
            return None, _invalid(_flatten(serializer.errors))
    return dict(serializer.validated_data), None


def _invalid(lines: list[str]) -> ToolResult:
    return ToolResult(
        f"{bilingual(INVALID_ARGUMENTS)}: " + "; ".join(lines),
        {"error": "invalid", "fields": lines},
        True,
    )


# ---------------------------------------------------------------------------------------------
# Calls
# ---------------------------------------------------------------------------------------------

Progress = Callable[[float, float | None, str | None], Awaitable[None]]


async def _no_progress(progress: float, total: float | None, message: str | None) -> None:
    return None


def _closing(fn):
    """`fn` (database work, run in a worker thread) closing that thread's connection after
    it, so a waiting call holds no connection between polls."""

    def run(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        finally:
            if not connection.in_atomic_block:
                connection.close()

    return run


def _in_thread(fn, *args, **kwargs):
    """Run `fn` in this call's worker thread (`_closing`)."""
    return sync_to_async(_closing(fn))(*args, **kwargs)


async def call_tool(
    token: McpToken,
    name: str,
    arguments: Any,
    *,
    rpc_request_id: str = "",
    progress: Progress = _no_progress,
) -> ToolResult:
    """Run tool `name` for `token`'s session. Never raises for a refused call (tool error);
    cancellation propagates after the question was withdrawn.

    `rpc_request_id`: the JSON-RPC id of this call (kept in `McpCall` while it waits, so a
    `notifications/cancelled` reaching another process can withdraw it, `calls`). `progress(done,
    total, message)`: sends an MCP progress notification (seconds waited of the timeout)."""
    if name not in {spec.name for spec in tools_for(token)}:
        if name == ASK:
            caps = session_capabilities(token)
            return _error(SUBAGENT_REFUSED if caps.subagent else ASK_NOT_AVAILABLE)
        return _error(UNKNOWN_TOOL)
    data, refused = validate_arguments(name, arguments)
    if refused is not None:
        return refused
    # sync_to_async in this call runs in a thread of its own (not the process-wide one)
    async with ThreadSensitiveContext():
        if name == ASK:
            return await _ask(token, data, rpc_request_id, progress)
        if name == REQUEST_APPROVAL:
            return await _request_approval(token, data, rpc_request_id, progress)
        return await _in_thread(_check_approval, token, data)


def _check_approval(token: McpToken, data: dict[str, Any]) -> ToolResult:
    rule = approvals.check_rule(
        token.bot, data["tool"], session_id=token.session_id, chat_id=_chat_of(token)
    )
    return _ok({"allowed": rule is not None, "rule": lifecycle.rule_json(rule) if rule else None})


def _chat_of(token: McpToken) -> str:
    """Where approvals of the session go: the token's chat, else its progress card's chat."""
    if token.chat_id:
        return token.chat_id
    session = ProgressSession.objects.filter(bot=token.bot, session_id=token.session_id).first()
    return session.chat_id if session is not None else ""


async def _wait(
    token: McpToken,
    public_id: str,
    read: Callable[[Any, str], dict | None],
    expires_key: str,
    total: float,
    progress: Progress,
) -> dict | None:
    """Wait until `read(bot, public_id)["status"]` is final, reporting progress every
    `progress_every()` seconds. Returns the last state."""
    started = time.monotonic()
    state = await _in_thread(read, token.bot, public_id)
    while state is not None and state["status"] == "pending":
        state = (
            await wait_for_final(
                token.bot,
                public_id,
                progress_every(),
                state,
                read_state=read,
                expires_key=expires_key,
            )
            or state
        )
        if state["status"] == "pending":
            waited = round(time.monotonic() - started, 1)
            await progress(waited, total, bilingual(_("Waiting for the answer")))
    return state


async def _withdraw(kind: str, token: McpToken, public_id: str) -> None:
    """The call was cancelled: withdraw the question as the cancel API does (shielded, so it
    completes while the call is being cancelled)."""

    def withdraw():
        if kind == Interaction.Kind.ASK:
            ask = asks.find_ask(token.bot, public_id)
            if ask is not None and not ask.is_final:
                asks.cancel_ask(ask)
        else:
            ia = approvals.find(token.bot, public_id)
            if ia is not None and not ia.is_final:
                lifecycle.cancel(ia)

    with anyio.CancelScope(shield=True):
        try:
            await _in_thread(withdraw)
        except Exception:  # noqa: BLE001 - the call is gone either way; the sweeper expires it
            log.warning(
                "mcp: withdrawing %s after a cancelled call failed", public_id, exc_info=True
            )
    log.info("mcp: call cancelled, %s withdrawn", public_id)


@_closing
def _read_ask(bot, request_id: str) -> dict | None:
    ask = asks.read_ask(bot, request_id)
    return None if ask is None else asks.ask_state(ask)


def _register_ask(token: McpToken, data: dict[str, Any], rpc_request_id: str):
    """The ask and its `McpCall` commit together: a `notifications/cancelled` sent as soon as
    the question is visible finds the call."""
    with transaction.atomic():
        reg = asks.register_ask(
            token.bot,
            token.session_id,
            questions=[dict(q, options=[dict(o) for o in q["options"]]) for q in data["questions"]],
            requester_open_id=token.requester_open_id,
            chat_id=token.chat_id,
            timeout_seconds=data.get("timeout_seconds"),
        )
        return reg.ask, calls.remember(token, rpc_request_id, reg.ask)


async def _ask(token: McpToken, data: dict[str, Any], rpc_request_id: str, progress) -> ToolResult:
    try:
        ask, call_pk = await _in_thread(_register_ask, token, data, rpc_request_id)
    except asks.NoChannel:
        return ToolResult(NO_CHANNEL_ERROR, {"error": "no_channel"}, True)
    except asks.AskRefused as refused:
        message = NO_REQUESTER if refused.code == "requester_required" else refused.message
        return _error(message, {"error": refused.code})
    total = (ask.expires_at - ask.created_at).total_seconds()
    try:
        state = await _wait(token, ask.public_id, _read_ask, "expiresAt", total, progress)
    except anyio.get_cancelled_exc_class():
        await _withdraw(Interaction.Kind.ASK, token, ask.public_id)
        raise
    finally:
        with anyio.CancelScope(shield=True):
            await _in_thread(calls.forget, call_pk)
    status = state["status"] if state else "cancelled"
    if status == "answered":
        return _ok({"answers": state["answers"]})
    reason = NOT_ANSWERED["timeout" if status == "timeout" else "cancelled"]
    return _error(reason, {"answers": [], "status": status, "requestId": ask.public_id})


@_closing
def _read_interaction(bot, public_id: str) -> dict | None:
    ia = approvals.find(bot, public_id)
    if ia is None:
        return None
    ia = lifecycle.expire_if_due(ia)
    return {"status": ia.status, "expires_at": ia.expires_at.isoformat()}


def _start_approval(token: McpToken, data: dict[str, Any], rpc_request_id: str):
    """→ ("done", ToolResult: approved by a rule, or refused) | ("asked", interaction, call
    pk)."""
    bot = token.bot
    chat_id = _chat_of(token)
    rule = approvals.check_rule(bot, data["tool"], session_id=token.session_id, chat_id=chat_id)
    if rule is not None:
        return (
            "done",
            _ok(
                {
                    "decision": "approve",
                    "status": "resolved",
                    "via": "always",
                    "interaction_id": rule.interaction.public_id if rule.interaction_id else None,
                    "asked": False,
                    "rule": lifecycle.rule_json(rule),
                }
            ),
        )
    caps = session_capabilities(token)
    if caps.channel == channels.WECHAT:
        return ("done", _error(APPROVALS_NOT_AVAILABLE, {"error": "approvals_not_available"}))
    if not chat_id:
        return ("done", _error(NO_CHAT, {"error": "chat_required"}))
    requester = token.requester_open_id
    if not requester:
        session = ProgressSession.objects.filter(bot=bot, session_id=token.session_id).first()
        requester = session.requester_open_id if session is not None else ""
    if not requester:
        return ("done", _error(NO_REQUESTER, {"error": "requester_required"}))
    with transaction.atomic():  # the interaction and its McpCall commit together
        ia, _created = approvals.create_interaction(
            bot,
            kind=Interaction.Kind.APPROVAL,
            channel=channels.FEISHU,
            chat_id=chat_id,
            title=data["summary"],
            body=_arguments_text(data.get("arguments") or {}) if data.get("arguments") else "",
            tool=data["tool"],
            requester_open_id=requester,
            session_id=token.session_id,
            always_scope=data.get("always_scope") or Interaction.Scope.SESSION,
            timeout_seconds=data.get("timeout_seconds"),
        )
        call_pk = calls.remember(token, rpc_request_id, ia)
    try:
        ia = approvals.send_to_chat(ia)  # network I/O, outside the transaction
    except approvals.SendFailed as exc:
        calls.forget(call_pk)
        log.warning("mcp: approval %s: the card was not sent (code %s)", ia.public_id, exc.code)
        return ("done", _error(SEND_FAILED, {"error": "send_failed", "feishu_code": exc.code}))
    return ("asked", ia, call_pk)


def _approval_result(ia: Interaction, rule=None) -> dict[str, Any]:
    resolution = ia.resolution or {}
    action = resolution.get("action_id") or ""
    decision = {"approve": "approve", "always": "always"}.get(action, "deny")
    return {
        "decision": decision,
        "status": ia.status,
        "via": resolution.get("via"),
        "interaction_id": ia.public_id,
        "asked": True,
        "rule": lifecycle.rule_json(rule) if rule else None,
    }


def _final_approval(token: McpToken, public_id: str) -> dict[str, Any] | None:
    ia = approvals.find(token.bot, public_id)
    if ia is None or ia.status == Interaction.Status.CANCELLED:
        return None
    rule = None
    if (ia.resolution or {}).get("action_id") == "always":
        rule = approvals.check_rule(
            token.bot, ia.tool, session_id=ia.session_id, chat_id=ia.chat_id
        )
    return _approval_result(ia, rule)


async def _request_approval(
    token: McpToken, data: dict[str, Any], rpc_request_id: str, progress
) -> ToolResult:
    started = await _in_thread(_start_approval, token, data, rpc_request_id)
    if started[0] == "done":
        return started[1]
    _kind, ia, call_pk = started
    total = (ia.expires_at - ia.created_at).total_seconds()
    try:
        await _wait(token, ia.public_id, _read_interaction, "expires_at", total, progress)
    except anyio.get_cancelled_exc_class():
        await _withdraw(Interaction.Kind.APPROVAL, token, ia.public_id)
        raise
    finally:
        with anyio.CancelScope(shield=True):
            await _in_thread(calls.forget, call_pk)
    result = await _in_thread(_final_approval, token, ia.public_id)
    if result is None:
        return _error(APPROVAL_CANCELLED, {"decision": "cancelled", "interaction_id": ia.public_id})
    return _ok(result)
