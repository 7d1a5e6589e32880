"""Progress sessions (`PUT /api/v1/sessions/<session_id>/progress`): their state, the first
send of their card, and the requester's "Cancel task".

    result = update_progress(bot, "sess_1", status="running", title="…", receive_id="oc_…")
    session = session_for_message(bot, "om_…"); request_cancel(session, operator_open_id="ou_…")

"Cancel task" also emits `session.cancel_requested` (through `interactions.events`, in the
transaction that records it).

The first send goes through `cards.send_card` with the session's own message `uuid`
(`send_uuid`): the card entity is recorded before the message is sent, so a PUT after a first
send that died (older than `cards.SEND_STALE`, the one stale-send rule) sends that recorded
entity again and Feishu answers with the first message — one card, whichever step died.
Every later change queues the card rendered at apply time (`interactions.asks.card`). A
`recovering` or terminal status invalidates the session's pending asks
(`interactions.asks.service.invalidate_session_asks`).
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from botadmin.models import Bot
from botadmin.services import effective_policy_for
from interactions import channels, events, kinds
from interactions.asks.card import RENDERER, refresh_card, render_session
from interactions.asks.service import AskRefused, invalidate_session_asks, person_fits
from interactions.cardqueue import service as cards
from interactions.models import Ask, ProgressSession

log = logging.getLogger(__name__)

PS = ProgressSession.Status


@dataclass(frozen=True)
class ProgressResult:
    """`update_progress` result: the session, whether it was created / its card sent by this
    call, and how many pending asks the new state invalidated."""

    session: ProgressSession
    created: bool
    sent: bool
    invalidated: int


class SendFailed(Exception):
    """The first send of a progress message on `channel` failed (`code`, `msg`, `log_id` from
    the channel's platform, `problems` from message validation); the state is kept and the next PUT sends again."""

    def __init__(self, *, code=None, msg="", log_id="", problems=(), channel=kinds.FEISHU):
        super().__init__(msg or "send failed")
        self.code, self.msg, self.log_id, self.problems = code, msg, log_id, list(problems)
        self.channel = channel


def send_uuid(bot: Bot, session_id: str) -> str:
    """Feishu `uuid` of a session's first send (a retried send within 1 h is deduplicated)."""
    digest = hashlib.sha256(f"progress:{bot.pk}:{session_id}".encode()).hexdigest()
    return f"pg_{digest[:32]}"


def update_progress(
    bot: Bot,
    session_id: str,
    *,
    status: str,
    title: str | None = None,
    summary: str | None = None,
    tool_lines: list[str] | None = None,
    receive_id: str = "",
    receive_id_type: str = "chat_id",
    channel: str | None = None,
    requester_open_id: str | None = None,
    details_url: str | None = None,
    now: datetime | None = None,
) -> ProgressResult:
    """Record the session's progress state and show it: the first call sends the card (CardKit
    entity, to `receive_id` of type chat_id or open_id), later calls queue an update rendered
    from the database at apply time (coalesced, ≤ 5/s, increasing sequence).

    Fields left None keep their stored value. `recovering` invalidates every pending ask of
    the session (reason `recovering`), a terminal status (completed | failed | cancelled) with
    reason `session_ended`; their forms leave the card and panels are told.

    `channel` (a kind whose channel renders progress: feishu, slack, telegram; None: the
    session's, Feishu for a new session) is where the first call sends the message; the
    session keeps it, and a later call naming another channel is refused (`channel_changed`).
    `requester_open_id` must be a person id of the session's channel (`requester_channel`);
    `receive_id_type` `open_id` is Feishu's (`open_id_channel`).

    Network I/O (the first send) happens outside any transaction. Raises `AskRefused` when the
    first call names no `receive_id`, when `channel` cannot show progress messages
    (`channel_unsupported`) or differs from the session's (`channel_changed`), `SendFailed` when
    the channel refused the first send (state kept; the next call tries again).
    """
    if status not in PS.values:
        raise ValueError(f"unknown progress status {status!r}")
    asked = (kinds.normalize(channel) or channel) if channel else None
    if asked is not None and not _shows_progress(asked):
        raise AskRefused(
            "channel_unsupported",
            "channel",
            _("Progress messages are shown on feishu, slack and telegram only."),
        )
    now = now or timezone.now()
    created = False
    with transaction.atomic():
        # no select_related("card"): see refresh_card
        session = (
            ProgressSession.objects.select_for_update()
            .filter(bot=bot, session_id=session_id)
            .first()
        )
        if session is not None and asked is not None and session.channel != asked:
            raise AskRefused(
                "channel_changed",
                "channel",
                _("This session's progress is shown on %(channel)s; its channel cannot change.")
                % {"channel": session.channel},
            )
        channel_kind = session.channel if session is not None else asked or kinds.FEISHU
        if requester_open_id and not person_fits(channel_kind, requester_open_id):
            raise AskRefused(
                "requester_channel",
                "requester_open_id",
                _("Use the requester's id on %(channel)s.") % {"channel": channel_kind},
            )
        if session is None and receive_id_type == "open_id" and channel_kind != kinds.FEISHU:
            raise AskRefused(
                "open_id_channel",
                "open_id",
                _("open_id is Feishu's; on this channel give chat_id."),
            )
        if session is None:
            if not receive_id:
                raise AskRefused(
                    "receive_id_required",
                    "chat_id",
                    _("The first progress update needs chat_id (or open_id for a p2p chat)."),
                )
            try:
                with transaction.atomic():
                    session = ProgressSession.objects.create(
                        bot=bot,
                        session_id=session_id,
                        channel=channel_kind,
                        receive_id=receive_id,
                        receive_id_type=receive_id_type,
                        chat_id=receive_id if receive_id_type == "chat_id" else "",
                        created_at=now,
                    )
                created = True
            except IntegrityError:  # a concurrent first PUT created it
                session = ProgressSession.objects.select_for_update().get(
                    bot=bot, session_id=session_id
                )
        session.status = status
        if title is not None:
            session.title = title
        if summary is not None:
            session.summary = summary
        if tool_lines is not None:
            session.tool_lines = list(tool_lines)[-20:]
        if requester_open_id is not None:
            session.requester_open_id = requester_open_id
        if details_url is not None:
            session.details_url = details_url
        session.state_version += 1
        # a first send that began and is not stale may still be running: only state changes
        need_send = session.card_id is None and (
            session.sending_since is None or cards.send_is_stale(session.sending_since, now)
        )
        if need_send:
            session.sending_since = now
        session.save()
        if session.card is not None:
            cards.enqueue_render(session.card, RENDERER, version=session.state_version)
    invalidated = 0
    if status != PS.RUNNING:
        reason = "recovering" if status == PS.RECOVERING else "session_ended"
        invalidated = invalidate_session_asks(bot, session_id, reason=reason)
    sent = False
    if need_send:
        rendered_version = ProgressSession.objects.values_list("state_version", flat=True).get(
            pk=session.pk
        )
        card_json = render_session(ProgressSession.objects.get(pk=session.pk))
        channel = channels.get(session.channel)
        try:
            entity = channel.send(
                bot,
                card_json,
                receive_id=session.receive_id,
                receive_id_type=session.receive_id_type,
                uuid=send_uuid(bot, session_id),
                purpose="progress",
            )
        except (cards.InvalidCard, *channel.send_errors) as exc:
            ProgressSession.objects.filter(pk=session.pk).update(sending_since=None)
            log.warning("progress %s: first send failed: %s", session.pk, exc)
            raise SendFailed(
                code=getattr(exc, "code", None),
                msg=getattr(exc, "msg", "") or "invalid card",
                log_id=getattr(exc, "log_id", ""),
                problems=getattr(exc, "problems", ()),
                channel=session.channel,
            ) from None
        # asks registered while sending point at the card (their rows first, then the
        # session's: the lock order of resolve(), so the two never deadlock)
        Ask.objects.of_session(bot, session_id).pending().filter(card__isnull=True).update(
            card=entity, open_message_id=entity.open_message_id
        )
        with transaction.atomic():
            locked = ProgressSession.objects.select_for_update().get(pk=session.pk)
            locked.card = entity
            locked.sending_since = None
            locked.save(update_fields=["card", "sending_since", "updated_at"])
            if locked.state_version != rendered_version:  # changed while sending
                refresh_card(locked)
        sent = True
    session = ProgressSession.objects.select_related("card").get(pk=session.pk)
    return ProgressResult(session, created, sent, invalidated)


def _shows_progress(kind: str) -> bool:
    """Whether channel `kind` is registered and can show a progress message with forms."""
    try:
        channel = channels.get(kind)
    except LookupError:
        return False
    return channel.name == kind and channel.shows_progress


def session_for_message(bot: Bot, open_message_id: str) -> ProgressSession | None:
    """The progress session whose card is in message `open_message_id`, or None."""
    return ProgressSession.objects.for_message(bot, open_message_id).select_related("card").first()


def request_cancel(session: ProgressSession, *, operator_open_id: str) -> bool:
    """Record that the requester pressed "Cancel task" (once; later presses change nothing),
    re-render the card (the button is replaced by "cancellation requested") and emit
    `session.cancel_requested` (`cancel_requested_event_data`; webhooks through the outbox,
    the feed, and a wake-up of waiting feed long-polls after commit) — all in one transaction,
    so the flag and its event commit together, and only the press that set the flag emits.

    Cardloop stops nothing itself: the backend learns of the request from the event or from
    `cancel_requested` in every progress answer, and ends the session with a `cancelled`
    progress update. Returns True when recorded now. Raises `interactions.events.NoEventSink`
    when no event sink is registered (then nothing is recorded)."""
    now = timezone.now()
    with transaction.atomic():
        updated = ProgressSession.objects.filter(
            pk=session.pk, cancel_requested_at__isnull=True
        ).update(cancel_requested_at=now, cancel_requested_by=operator_open_id)
        if updated:
            current = ProgressSession.objects.select_related("bot", "card").get(pk=session.pk)
            events.emit(
                CANCEL_REQUESTED,
                cancel_requested_event_id(current),
                cancel_requested_event_data(current),
                bot=current.bot,
                team=effective_policy_for(current.bot, current.chat_id).team,
                time=now,
            )
            refresh_card(session)
    return bool(updated)


#: Event type of a requester's "Cancel task".
CANCEL_REQUESTED = "session.cancel_requested"


def cancel_requested_event_id(session: ProgressSession) -> str:
    """`evt_` + 32 hex of sha256(["session.cancel_requested", <session row id>]): one event
    per progress session (the request is recorded once)."""
    digest = hashlib.sha256(
        json.dumps([CANCEL_REQUESTED, session.pk], separators=(",", ":")).encode()
    ).hexdigest()
    return f"evt_{digest[:32]}"


def cancel_requested_event_data(session: ProgressSession) -> dict[str, Any]:
    """`data` of `session.cancel_requested` (pure): always `session_id`, `bot_app_id`,
    `operator_open_id` (the requester who pressed it), `requested_at` (RFC 3339 UTC,
    milliseconds); when known `chat_id`, `card_id`, `platform_message_id`."""
    at = session.cancel_requested_at.astimezone(UTC)
    data = {
        "session_id": session.session_id,
        "bot_app_id": session.bot.app_id,
        "operator_open_id": session.cancel_requested_by,
        "requested_at": at.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
    }
    card = session.card
    known = {
        "chat_id": session.chat_id,
        "card_id": card.card_id if card else "",
        "platform_message_id": card.open_message_id if card else "",
    }
    return data | {k: v for k, v in known.items() if v}
