"""THE CHANNEL INTERFACE: what a messaging channel implements so that Cardloop's domain
(approvals, asks, progress sessions, the interactions API) can show things on it.

A channel is one place people answer: Feishu today (`interactions.channels.feishu`), the text
fallback for channels without buttons (`interactions.channels.text`), Slack or Telegram next.
A new channel is a sub-package of `interactions.channels` with a class implementing `Channel`,
registered once in `InteractionsConfig.ready()` (`interactions.channels.register(...)`); no
domain module changes. The domain finds a channel by its kind
(`interactions.channels.get(ia.channel)`), never by importing a channel's package.

What a channel does, and what it must never do:

- **Capabilities.** `name` is the channel kind stored on interactions (`Interaction.channel`);
  `capabilities` says what it can show (buttons, forms, updating a sent message, markdown).
  A channel without buttons gets the text fallback, and the backend sends that text itself.
- **Rendering is pure.** `render_interaction`, `render_progress` and `render_feedback_area`
  turn state into the channel's message JSON (Feishu: Card JSON 2.0; text channels: a
  string). No database, no network: the same state always gives the same message, so a
  message can be rendered again when an update is applied.
- **Sending and updating.** `send` delivers a rendered message and records it for later
  updates; `update` never calls the platform directly but queues the new state in the durable
  card-update queue (`interactions.cardqueue`), which coalesces bursts, keeps the platform's
  rate limits and retries, and never lets an older state overtake a newer one (`version`).
- **Applying updates.** `apply_update` is the one platform call behind the queue: the card
  worker hands it each update of a card of this channel (`CardEntity.channel`), and it raises
  `cardqueue.service.UpdateFailed` (retryable, `retry_after`) for the worker to retry.
  `update_interval` spaces updates of one message; `send_errors` are what `send` raises.
- **Callbacks.** `parse_callback` turns a *verified* platform callback (the transport checked
  its signature or token first) into the channel-neutral `CardAction` that handlers receive.
- **Identity.** The person who acted comes from the verified payload (`operator`), never from
  a value the message carried (a button value can be copied by anyone who sees it).
"""

from __future__ import annotations

import abc
from datetime import timedelta
from typing import Any

from interactions.kinds import Capabilities

#: A rendered message: a JSON object (e.g. Feishu Card JSON 2.0) or plain text.
Message = dict[str, Any] | str


class Unsupported(Exception):
    """The channel cannot do this (e.g. a text channel cannot send: the backend sends its
    text; it has no callbacks to parse)."""


class ChannelSendError(Exception):
    """A channel refused or failed a send (`code`, `msg`, `log_id`: the platform's error
    code, message and request id when it answered; no message text). Channels whose SDK has
    its own error type list it in `Channel.send_errors` instead."""

    def __init__(self, msg: str = "", *, code=None, log_id: str = ""):
        super().__init__(msg or "send failed")
        self.code, self.msg, self.log_id = code, msg, log_id


class Channel(abc.ABC):
    """One messaging channel. Subclasses set `name` and `capabilities` and implement every
    abstract method; an operation the channel cannot perform raises `Unsupported`."""

    #: The channel kind (`interactions.kinds.KINDS`, e.g. "feishu").
    name: str
    #: What the channel can show: `buttons`, `forms`, `update` (change a sent message),
    #: `markdown`; `capabilities.text_fallback` is True when there are no buttons.
    capabilities: Capabilities

    # -- rendering (pure) ----------------------------------------------------------------------

    @abc.abstractmethod
    def render_interaction(self, ia) -> Message:
        """The message showing interaction `ia` (an `Interaction`; only its own columns are
        read, so unsaved instances work) in its current state: pending with its actions or
        form; resolved, expired or cancelled with the final state and nothing left to click.
        Pure; text in the active language."""

    #: Whether `render_progress` renders progress messages (with the asks as forms or
    #: buttons) for `PUT /api/v1/sessions/<id>/progress`; channels without it refuse there.
    shows_progress: bool = False

    @abc.abstractmethod
    def render_progress(self, session, asks) -> Message:
        """The progress message of agent session `session` (a `ProgressSession`) showing the
        pending `asks` (each an `Ask`) as forms while the session runs, and none once it is
        terminal or recovering. Pure."""

    @abc.abstractmethod
    def render_feedback_area(self, policy: dict[str, Any], delivery_id: str, choice) -> Message:
        """The feedback area of a final answer for one state: the delivery's policy snapshot
        `policy`, its id and the current choice (`feedback.cards.Choice` or None). Pure. The
        feedback app owns the area's rules, so a channel may take its renderer from there."""

    # -- sending and updating ----------------------------------------------------------------

    @abc.abstractmethod
    def send(
        self,
        bot,
        message: Message,
        *,
        receive_id: str,
        receive_id_type: str = "chat_id",
        uuid: str | None = None,
        purpose: str = "",
    ):
        """Send `message` from `bot` to `receive_id` and record it for later updates; returns
        the record (`interactions.models.CardEntity`). `uuid` makes a retried send return the
        first message instead of a second one. Network I/O: call it outside any transaction.
        Raises the channel's own errors for a refused message or a failed call."""

    @abc.abstractmethod
    def update(self, sent, message: Message, *, version: int | None = None):
        """Queue replacing the sent message `sent` (what `send` returned) with `message`,
        applied by the card worker after the transaction commits (and, inside a callback,
        after the callback's answer was sent). `version` (per message, increasing) drops an
        update older than one already queued. Joins the caller's transaction."""

    #: Shortest gap between two updates of one message (the card worker paces by it).
    update_interval: timedelta = timedelta(milliseconds=200)

    @property
    def send_errors(self) -> tuple[type[Exception], ...]:
        """The exceptions `send` raises when the platform refused or the call failed; each
        has `code`, `msg` and `log_id` (the domain catches these, records a failed send and
        answers with them). Default: `ChannelSendError`."""
        return (ChannelSendError,)

    def apply_update(self, card, update) -> int | None:
        """Make the platform call that applies one queued update (called by the card worker,
        `interactions.cardqueue.worker`, never inside a transaction). `card` is the
        `CardEntity` (`address` / `open_message_id` / `card_id` say where it is shown), `update`
        the `CardUpdate` whose `card_json` holds the whole new message (or `elements`, Feishu
        only). Returns the CardKit sequence used (Feishu) or None. Raises
        `interactions.cardqueue.service.UpdateFailed`: `retryable` for rate limits, 5xx and
        network errors, with `retry_after` seconds when the platform said (HTTP 429
        `Retry-After`). Channels without updates keep this default (`Unsupported`)."""
        raise Unsupported(f"{self.name} cannot update a sent message")

    def reply_text(self, bot, reply_to: dict[str, Any], text: str, *, uuid: str = "") -> None:
        """Reply plain `text` where a typed command came from (`reply_to`: the channel's own
        address of that message, e.g. Feishu `{"message_id"}`, Slack `{"channel", "ts"}`).
        `uuid` deduplicates a retried reply where the platform can. Network I/O; raises one
        of `send_errors`."""
        raise Unsupported(f"{self.name} cannot reply")

    # -- callbacks and identity --------------------------------------------------------------

    @abc.abstractmethod
    def parse_callback(self, bot, payload: dict[str, Any]):
        """The channel-neutral `interactions.callbacks.registry.CardAction` for a *verified*
        callback `payload` of `bot` (a click or form submit). Raises
        `interactions.callbacks.registry.InvalidCallback` when it carries no action value."""

    @abc.abstractmethod
    def operator(self, action) -> str:
        """Who acted in `action` (a `CardAction`): the id from the verified payload, never
        from the action's value. "" when the platform sent none."""

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name}>"
