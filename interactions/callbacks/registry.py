"""Card-action and event handler registry: how other apps receive Feishu callbacks and events.

Register from your app's `AppConfig.ready()` (this module is cheap to import: no lark-oapi):

    from interactions.callbacks import registry

    def on_feedback(action: registry.CardAction) -> registry.Answer | None:
        ...                                  # verify, record (one transaction), enqueue updates
        return registry.Answer.success(_("Thanks for the feedback!"))

    registry.register("feedback", on_feedback)                 # value {"kind": "feedback", …}
    registry.register_event("im.message.receive_v1", on_message)

Card actions (`card.action.trigger`): the callback value is read from `event.action.value`
(an object, or a string holding a JSON object), and its `kind` picks the handler. The handler
gets a `CardAction` and returns an `Answer` (toast and/or a full raw 2.0 card), a plain answer
dict, or None (answered `{}`). It runs in a worker thread with its own database connection,
inside the dispatcher's budget (`CARDLOOP_CALLBACK_BUDGET`, 2.0 s); see
`interactions.callbacks.dispatcher` for what happens on unknown kinds, exceptions and overruns.

Events (everything that is not a card action, e.g. `im.message.receive_v1`): every handler
registered for the `event_type` is called with a `LarkEvent`; Feishu always gets its JSON ack.

Both paths are deduplicated on `header.event_id` before any handler runs: a repeated event
gets the first delivery's answer. A card action whose first run died (process killed,
database gone) is run again from its stored action until its answer is recorded, so a card
handler must find out from the database whether the click is already recorded (see
docs/DEVELOPING.md, "Durability").
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any

from django.utils import translation

TOAST_TYPES = ("info", "success", "warning", "error")


class InvalidCallback(ValueError):
    """A card.action.trigger payload lacks what Cardloop needs (an object `action.value`)."""


@dataclass(frozen=True)
class Toast:
    """A Feishu toast in both languages Cardloop ships (`zh_cn`, `en_us`).

    `type` is info | success | warning | error. Build it from an English msgid with
    `Toast.of(type, gettext_lazy("…"))`; the zh-hans text comes from the app's locale.
    """

    type: str
    zh_cn: str
    en_us: str

    def __post_init__(self) -> None:
        if self.type not in TOAST_TYPES:
            raise ValueError(f"toast type must be one of {TOAST_TYPES}")

    @classmethod
    def of(cls, type_: str, message) -> Toast:
        """Render `message` (a gettext_lazy msgid or a callable returning text) in zh-hans and
        in English."""
        with translation.override("zh-hans"):
            zh = str(message)
        with translation.override("en"):
            en = str(message)
        return cls(type_, zh, en)

    def to_json(self) -> dict[str, Any]:
        """`{"type", "content", "i18n": {"zh_cn", "en_us"}}` (content = zh_cn, the default
        locale)."""
        return {
            "type": self.type,
            "content": self.zh_cn,
            "i18n": {"zh_cn": self.zh_cn, "en_us": self.en_us},
        }


@dataclass(frozen=True)
class Answer:
    """What a card-action handler answers: an optional toast and an optional full card.

    `card` is the raw Card JSON 2.0 object of the whole card (never a string); it must pass
    `interactions.lark.cardjson.validate_card`, otherwise the dispatcher answers toast-only and
    queues the card as an update after the answer (Feishu rejects an answer whose card is
    invalid). Return only what Cardloop owns entirely:
    a final-answer card's body is never re-sent.
    """

    toast: Toast | None = None
    card: dict[str, Any] | None = None

    @classmethod
    def info(cls, message, card: dict | None = None) -> Answer:
        return cls(Toast.of("info", message), card)

    @classmethod
    def success(cls, message, card: dict | None = None) -> Answer:
        return cls(Toast.of("success", message), card)

    @classmethod
    def warning(cls, message, card: dict | None = None) -> Answer:
        return cls(Toast.of("warning", message), card)

    @classmethod
    def error(cls, message, card: dict | None = None) -> Answer:
        return cls(Toast.of("error", message), card)

    def to_json(self) -> dict[str, Any]:
        """The callback response body: `{}`, `{"toast": …}` and/or `{"card": {"type": "raw",
        "data": card}}`."""
        body: dict[str, Any] = {}
        if self.toast is not None:
            body["toast"] = self.toast.to_json()
        if self.card is not None:
            body["card"] = {"type": "raw", "data": self.card}
        return body


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def decode_value(value: Any) -> dict[str, Any]:
    """The callback value as an object: a dict as is, a string holding a JSON object decoded
    (lark-oapi's typed model raises on a string value). Raises `InvalidCallback`."""
    if isinstance(value, dict):
        return value
    if isinstance(value, str):
        try:
            decoded = json.loads(value)
        except ValueError:
            raise InvalidCallback("action.value is a string but not JSON") from None
        if isinstance(decoded, dict):
            return decoded
    raise InvalidCallback("action.value must be a JSON object")


@dataclass(frozen=True, repr=False)
class CardAction:
    """One verified `card.action.trigger` click or form submit, as handlers see it.

    Identity comes from the verified callback, never from the value: `operator_open_id` /
    `operator_union_id` / `operator_user_id` ("" when Feishu did not send them; user_id needs
    an extra scope). `value` is the button's callback object (with `kind`); `form_value` is the
    submitted form keyed by component name (strings, lists for multi-selects; {} outside
    forms). `option` / `options` / `input_value` / `checked` are the values of components
    outside a form. The callback's delayed-update token is deliberately not carried: Cardloop
    updates cards through CardKit and PATCH. `repr()` names only ids safe to log.
    """

    bot: Any
    event_id: str
    kind: str
    value: dict[str, Any]
    open_message_id: str
    open_chat_id: str
    operator_open_id: str = ""
    operator_union_id: str = ""
    operator_user_id: str = ""
    tenant_key: str = ""
    tag: str = ""
    name: str = ""
    form_value: dict[str, Any] = field(default_factory=dict)
    option: str = ""
    options: list[Any] = field(default_factory=list)
    input_value: str = ""
    checked: bool | None = None
    timezone: str = ""
    host: str = ""
    #: The channel the click came from: "feishu" for Feishu's own callbacks; a channel that
    #: turns its clicks into this shape names itself in the payload's `header.channel`
    #: (Slack: `interactions.channels.slack.channel.neutral_payload`).
    channel: str = "feishu"

    def __repr__(self) -> str:
        app_id = getattr(self.bot, "app_id", "?")
        return (
            f"CardAction(app_id={app_id!r}, event_id={self.event_id!r}, kind={self.kind!r}, "
            f"open_message_id={self.open_message_id!r}, tag={self.tag!r}, name={self.name!r})"
        )

    def to_stored(self) -> dict[str, Any]:
        """The action as a JSON-safe dict without the bot (`InboundEvent.action`: what the
        handler needs to run again after a crash; no callback token, which is never carried).
        `from_stored(bot, data)` turns it back."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "bot"}

    @classmethod
    def from_stored(cls, bot, data: dict[str, Any]) -> CardAction:
        """The action `to_stored()` gave, for `bot`; keys this version does not know are
        ignored. Raises `InvalidCallback` when `data` is not such a dict."""
        if not isinstance(data, dict) or not isinstance(data.get("value"), dict):
            raise InvalidCallback("the stored action is not an object with a value")
        known = {f.name for f in fields(cls)} - {"bot"}
        return cls(bot=bot, **{k: v for k, v in data.items() if k in known})

    @classmethod
    def from_payload(cls, bot, payload: dict[str, Any]) -> CardAction:
        """Build from a verified, decrypted schema-2.0 callback body (unknown keys ignored).
        Raises `InvalidCallback` when `event.action.value` is missing or not a JSON object."""
        header = _dict(payload.get("header"))
        event = _dict(payload.get("event"))
        action = _dict(event.get("action"))
        operator = _dict(event.get("operator"))
        context = _dict(event.get("context"))
        value = decode_value(action.get("value"))
        checked = action.get("checked")
        options = action.get("options")
        return cls(
            bot=bot,
            event_id=_str(header.get("event_id")),
            kind=_str(value.get("kind")),
            value=value,
            open_message_id=_str(context.get("open_message_id")),
            open_chat_id=_str(context.get("open_chat_id")),
            operator_open_id=_str(operator.get("open_id")),
            operator_union_id=_str(operator.get("union_id")),
            operator_user_id=_str(operator.get("user_id")),
            tenant_key=_str(operator.get("tenant_key")) or _str(header.get("tenant_key")),
            tag=_str(action.get("tag")),
            name=_str(action.get("name")),
            form_value=_dict(action.get("form_value")),
            option=_str(action.get("option")),
            options=options if isinstance(options, list) else [],
            input_value=_str(action.get("input_value")),
            checked=checked if isinstance(checked, bool) else None,
            timezone=_str(action.get("timezone")),
            host=_str(event.get("host")),
            channel=_str(header.get("channel")) or "feishu",
        )


#: Fields of a card action every handler relies on, as dotted paths into the payload: which
#: card was clicked and who clicked (Feishu's card callback structure:
#: https://open.feishu.cn/document/feishu-cards/card-callback-communication).
EXPECTED_CARD_ACTION_FIELDS = ("event.context.open_message_id", "event.operator.open_id")


def missing_fields(payload: dict[str, Any]) -> list[str]:
    """The `EXPECTED_CARD_ACTION_FIELDS` a card-action payload lacks (absent, empty or not a
    string), as dotted paths (pure; safe to log: names, never values)."""
    missing = []
    for path in EXPECTED_CARD_ACTION_FIELDS:
        node: Any = payload
        for part in path.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        if not isinstance(node, str) or not node:
            missing.append(path)
    return missing


@dataclass(frozen=True, repr=False)
class LarkEvent:
    """One verified ordinary event (schema 2.0), e.g. `im.message.receive_v1`.

    `event` is the raw `event` object (sender ids and message content included: never log
    it); `header` fields other than the verification token are flattened into attributes.
    """

    bot: Any
    event_id: str
    event_type: str
    tenant_key: str
    create_time: str
    event: dict[str, Any]

    def __repr__(self) -> str:
        app_id = getattr(self.bot, "app_id", "?")
        return f"LarkEvent(app_id={app_id!r}, event_type={self.event_type!r}, event_id={self.event_id!r})"

    @classmethod
    def from_payload(cls, bot, payload: dict[str, Any]) -> LarkEvent:
        header = _dict(payload.get("header"))
        return cls(
            bot=bot,
            event_id=_str(header.get("event_id")) or _str(payload.get("uuid")),
            event_type=_str(header.get("event_type")),
            tenant_key=_str(header.get("tenant_key")),
            create_time=_str(header.get("create_time")),
            event=_dict(payload.get("event")),
        )


CardActionHandler = Callable[[CardAction], "Answer | dict | None"]
EventHandler = Callable[[LarkEvent], None]

_lock = threading.Lock()
_card_handlers: dict[str, CardActionHandler] = {}
_event_handlers: dict[str, list[EventHandler]] = {}


class AlreadyRegistered(ValueError):
    """Another handler is already registered for this card-action kind."""


def register(kind: str, handler: CardActionHandler) -> None:
    """Route card actions whose value has `"kind": kind` to `handler`.

    Registering the same handler again is a no-op (ready() may run twice); a different handler
    for a taken kind raises `AlreadyRegistered`.
    """
    if not kind or not isinstance(kind, str):
        raise ValueError("kind must be a non-empty string")
    with _lock:
        current = _card_handlers.get(kind)
        if current is not None and current is not handler:
            raise AlreadyRegistered(f"card-action kind {kind!r} already has a handler")
        _card_handlers[kind] = handler


#: The attribute `answered_in_transaction` sets on a handler.
_IN_TRANSACTION = "cardloop_answered_in_transaction"


def answered_in_transaction(handler: CardActionHandler) -> CardActionHandler:
    """Mark `handler` (returned unchanged, for use as a decorator) as one that only reads and
    writes Cardloop's database — no network call, no sleep — and so may run inside the
    transaction that records its click's answer: the dispatcher then runs it and the claim's
    final answer (`interactions.callbacks.inbound.finish_claim`) in **one** transaction,
    instead of the handler's transaction followed by one of the claim's. A click then costs
    two write transactions, the durable claim and this one, and the answer commits with the
    handler's effects or not at all. A handler that talks to the network, or may wait, must
    not be marked: on SQLite the transaction holds the single write lock from its start
    (`BEGIN IMMEDIATE`), so every other writer of the process would wait for it."""
    setattr(handler, _IN_TRANSACTION, True)
    return handler


def is_answered_in_transaction(handler: CardActionHandler | None) -> bool:
    """Whether `handler` was marked with `answered_in_transaction`."""
    return bool(getattr(handler, _IN_TRANSACTION, False))


def unregister(kind: str) -> None:
    """Remove the handler of `kind` (tests)."""
    with _lock:
        _card_handlers.pop(kind, None)


def handler_for(kind: str) -> CardActionHandler | None:
    """The handler registered for `kind`, or None."""
    return _card_handlers.get(kind)


def register_event(event_type: str, handler: EventHandler) -> None:
    """Call `handler(LarkEvent)` for every verified event of `event_type` (several handlers per
    type are called in registration order; one raising does not stop the others)."""
    if not event_type or not isinstance(event_type, str):
        raise ValueError("event_type must be a non-empty string")
    with _lock:
        handlers = _event_handlers.setdefault(event_type, [])
        if handler not in handlers:
            handlers.append(handler)


def unregister_event(event_type: str, handler: EventHandler) -> None:
    """Remove `handler` for `event_type` (tests)."""
    with _lock:
        handlers = _event_handlers.get(event_type, [])
        if handler in handlers:
            handlers.remove(handler)


def event_handlers(event_type: str) -> list[EventHandler]:
    """The handlers registered for `event_type` (a copy)."""
    with _lock:
        return list(_event_handlers.get(event_type, []))
