"""Final answers on channels other than Feishu: the one interface `feedback.deliveries` and
`feedback.revisions` use for them, and the registry of its implementations.

Feishu answers are CardKit cards with their own two-phase registration and element updates,
handled in `feedback.deliveries` itself. Every other channel sends the backend's message as a
plain platform message with the feedback area composed in, and repaints the area after a click;
it plugs in as an `AnswerChannel` registered here from `FeedbackConfig.ready()`
(`feedback.slack_delivery.SlackAnswers`, `feedback.telegram_delivery.TelegramAnswers`). The
delivery path calls these members, in this order, and nothing channel-specific:

| member | what |
|---|---|
| `message(request)` | what the backend gave to send (Slack: `blocks`; Telegram: `text`), or None |
| `request_problems(bot, request)` | `{field: [messages]}` that keep the request from being sent |
| `compose(request, snapshot, delivery_id)` | the message with the area of `snapshot` (None: no area); raises `MessageRefused` |
| `content_hash(request)` | the `content_hash` kept instead of the message (never stored) |
| `send(delivery, request, composed)` | the platform call; returns the message id; raises `AnswerSendError` |
| `queue_repaint(delivery)` | queue the area's new state after a click (caller's transaction) |
"""

from __future__ import annotations

from typing import Any

from feedback.models import Delivery


class MessageRefused(ValueError):
    """The backend's message (or it with the feedback area) breaks a rule of the channel;
    `errors` maps the request field to messages. Nothing was written or sent."""

    def __init__(self, errors: dict[str, list[str]]):
        self.errors = errors
        super().__init__("; ".join(f"{k}: {', '.join(v)}" for k, v in errors.items()))


class AnswerSendError(Exception):
    """The platform refused the message or could not be reached: `error` is a short code
    (the platform's error code, or `transport`), recorded as `<kind>_<error>` on the
    delivery."""

    def __init__(self, error: str):
        self.error = error
        super().__init__(error)


class AnswerChannel:
    """The per-channel part of a final answer (see the module docstring). Subclasses set
    `kind` (a `feedback.models.Delivery.Channel` value) and `requester_field` (the request
    field naming the requester, for the error when the policy needs one)."""

    kind: str = ""
    requester_field: str = "requester_user_id"

    def message(self, request) -> Any:
        raise NotImplementedError

    def request_problems(self, bot, request) -> dict[str, list[str]]:
        raise NotImplementedError

    def compose(self, request, snapshot: dict[str, Any] | None, delivery_id: str) -> Any:
        raise NotImplementedError

    def content_hash(self, request) -> str:
        raise NotImplementedError

    def send(self, delivery, request, composed: Any) -> str:
        raise NotImplementedError

    def queue_repaint(self, delivery) -> None:
        raise NotImplementedError


def shown_delivery(card, kind: str) -> Delivery | None:
    """The delivery of channel `kind` that message `card` (a `CardEntity` recorded at send,
    `send_uuid` = the delivery id) shows, with its current revision, if feedback was shown on
    it; else None (what a card-queue renderer of the area starts from)."""
    delivery = (
        Delivery.objects.filter(bot_id=card.bot_id, delivery_id=card.send_uuid, channel=kind)
        .select_related("current_revision")
        .first()
    )
    if delivery is None or not delivery.feedback_shown or not delivery.policy_snapshot:
        return None
    return delivery


_registry: dict[str, AnswerChannel] = {}


def register(channel: AnswerChannel) -> None:
    """Make `channel` the answer channel of `channel.kind` (from `AppConfig.ready()`)."""
    if not channel.kind:
        raise ValueError("an answer channel needs a kind")
    _registry[channel.kind] = channel


def get(kind: str) -> AnswerChannel | None:
    """The answer channel registered for `kind`, or None (Feishu: `feedback.deliveries`'
    own CardKit path)."""
    return _registry.get(kind)
