"""The progress card of an agent session: rendered from the database when it is applied.

Progress cards are queued with `cards.enqueue_render(card, RENDERER, version=…)`: the card
worker renders the session and its pending asks at send time (`render_card_entity`, registered
as the card-queue renderer `progress` in `InteractionsConfig.ready()`), so an update that is
late, retried or coalesced can never bring back an answered form.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db import transaction
from django.utils import timezone

from interactions import channels
from interactions.cardqueue import service as cards
from interactions.models import Ask, CardEntity, ProgressSession

#: Name of the card-queue renderer of progress cards.
RENDERER = "progress"


def refresh_card(session: ProgressSession) -> None:
    """Bump the session's state version and queue its card, rendered at apply time. Joins the
    caller's transaction (locks the session row)."""
    with transaction.atomic():
        # no select_related: a waiter for the row lock gets the row re-read but not re-joined
        # (PostgreSQL's EvalPlanQual), so a card attached meanwhile would come back as None
        locked = ProgressSession.objects.select_for_update().get(pk=session.pk)
        locked.state_version += 1
        locked.save(update_fields=["state_version", "updated_at"])
        if locked.card is not None:
            cards.enqueue_render(locked.card, RENDERER, version=locked.state_version)


def pending_asks(session: ProgressSession, *, now: datetime | None = None) -> list[Ask]:
    """The session's pending, unexpired asks (what its card shows as forms)."""
    return list(
        Ask.objects.of_session(session.bot_id, session.session_id)
        .pending()
        .filter(expires_at__gt=now or timezone.now())
        .order_by("form_index", "id")
    )


def render_session(session: ProgressSession) -> dict[str, Any]:
    """The progress message of `session` as it is now (pending asks included), rendered by
    the session's channel (`Channel.render_progress`: Feishu Card JSON 2.0, Slack Block Kit,
    …)."""
    return channels.get(session.channel).render_progress(session, pending_asks(session))


def render_card_entity(card: CardEntity) -> dict[str, Any] | None:
    """Card-queue renderer `progress`: the current card of the session shown by `card`
    (None when no session uses it any more)."""
    session = ProgressSession.objects.for_card(card).first()
    return None if session is None else render_session(session)
