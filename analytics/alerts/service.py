"""Every state change of alerts: evaluate a rule (fire / resolve), notify, mute.

`evaluate_rule(rule_id, now)` measures the rule's figure (`analytics.alerts.rules.measure`),
then, in one transaction holding the rule's row lock (PostgreSQL `SELECT … FOR UPDATE`;
SQLite's immediate transactions serialize writers), reads the rule's open alert and applies
`rules.decide`: a breach with no open alert inserts an `Alert` and emits `alert.fired`; a
clear reading with an open alert resolves it and emits `alert.resolved`. Several alert
workers may evaluate the same rule at once: the lock makes the second one see the first one's
alert, and the partial unique constraint (one open alert per rule) backs that up, so each
breach fires once.

The card of a fired alert is sent after commit, by the worker that fired it, through the
normal card path (`interactions.cardqueue.service.send_card`: dry run when the bot has no app secret); a
resolution queues an update of that same card (`enqueue_card`) inside its transaction. A
muted rule fires nothing until `muted_until`; its open alert can still resolve.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from analytics.alerts import cards, rules
from analytics.models import Alert, AlertRule
from botadmin import audit
from feedback.envelopes import rfc3339, stable_event_id
from feedback.events import emit
from feedback.models import Event
from interactions.cardqueue.service import enqueue_card, register_card, send_card
from interactions.lark.cardjson import validate_card
from interactions.render.bilingual import bilingual, bot_language

log = logging.getLogger(__name__)


def scope_label(rule: AlertRule) -> str:
    """The watched scope in words: "team A · cli_x", "team A", "cli_x" or "all deliveries"."""
    parts = [
        p
        for p in (rule.team.name if rule.team_id else "", rule.bot.app_id if rule.bot_id else "")
        if p
    ]
    return " · ".join(parts) if parts else _("all deliveries")


def alert_facts(alert: Alert, base_url: str | None = None) -> dict[str, Any]:
    """The facts of `alert` for its card, events and the history page (rule, team and bot
    loaded or loadable). `base_url`: prefix of the dashboard link (default
    CARDLOOP_PUBLIC_URL; "" gives a path)."""
    rule = alert.rule
    return {
        "rule": rule.name,
        "kind": rule.kind,
        "kind_label": str(AlertRule.Kind(rule.kind).label),
        "scope": scope_label(rule),
        "value": alert.value,
        "threshold": alert.threshold,
        "window_minutes": rule.window_minutes,
        "sample": alert.sample,
        "fired_at": alert.fired_at,
        "resolved_at": alert.resolved_at,
        "resolved_value": alert.resolved_value,
        "link": cards.dashboard_link(
            settings.CARDLOOP_PUBLIC_URL if base_url is None else base_url,
            start=alert.window_start,
            end=alert.window_end,
            team_id=rule.team_id,
            bot_app_id=rule.bot.app_id if rule.bot_id else None,
            kind=rule.kind,
        ),
    }


def render_card(alert: Alert) -> dict[str, Any]:
    """The alert's card in Chinese and English (`interactions.render.bilingual`), `content` in
    the notifying bot's `card_language` (the deployment's `LANGUAGE_CODE` without one)."""
    rule = alert.rule
    bot = rule.notify_bot if rule.notify_bot_id else None
    language = bot_language(bot) if bot is not None else settings.LANGUAGE_CODE
    return bilingual(lambda: cards.alert_card(alert_facts(alert)), language)


def event_data(alert: Alert) -> dict[str, Any]:
    """`data` of `alert.fired` / `alert.resolved`: alert_id, rule {id, name, kind}, team_id,
    bot_app_id, value, threshold, clear_margin, window_minutes, window_start, window_end,
    sample, fired_at, resolved_at, resolved_value, dashboard_url (values in the rule's units:
    percent, count or factor)."""
    rule = alert.rule
    facts = alert_facts(alert)
    return {
        "alert_id": alert.pk,
        "rule": {"id": rule.pk, "name": rule.name, "kind": rule.kind},
        "team_id": rule.team_id,
        "bot_app_id": rule.bot.app_id if rule.bot_id else None,
        "value": alert.value,
        "threshold": alert.threshold,
        "clear_margin": rule.clear_margin,
        "window_minutes": rule.window_minutes,
        "window_start": rfc3339(alert.window_start),
        "window_end": rfc3339(alert.window_end),
        "sample": alert.sample,
        "fired_at": rfc3339(alert.fired_at),
        "resolved_at": rfc3339(alert.resolved_at),
        "resolved_value": alert.resolved_value,
        "dashboard_url": facts["link"],
    }


def _emit(alert: Alert, type_: str, time: datetime) -> None:
    rule = alert.rule
    emit(
        type_,
        stable_event_id(type_, alert.pk),
        event_data(alert),
        bot=rule.bot if rule.bot_id else None,
        team=rule.team if rule.team_id else None,
        time=time,
    )


def evaluate_rule(rule_id: int, *, now: datetime | None = None, notify: bool = True) -> str | None:
    """Evaluate one rule at `now`; returns `rules.FIRE`, `rules.RESOLVE` or None (see the
    module docstring). `notify=False` records and emits without a card (history replays).
    A disabled or deleted rule does nothing."""
    now = now or timezone.now()
    rule = AlertRule.objects.select_related("team", "bot").filter(pk=rule_id).first()
    if rule is None or not rule.enabled:
        return None
    reading = rules.measure(rule, now)
    fired: Alert | None = None
    with transaction.atomic():
        locked = AlertRule.objects.filter(pk=rule_id)
        if connection.vendor == "postgresql":
            locked = locked.select_for_update()
        if not locked.exists():
            return None
        open_alert = Alert.objects.filter(rule_id=rule_id, resolved_at__isnull=True).first()
        action = rules.decide(
            rule.kind, rule.threshold, rule.clear_margin, reading, firing=open_alert is not None
        )
        if action == rules.FIRE and rule.is_muted(now):
            action = None
        if action == rules.FIRE:
            fired = _fire(rule, reading, now, notify)
            if fired is None:
                action = None
        elif action == rules.RESOLVE:
            _resolve(rule, open_alert, reading, now)
    if fired is not None and fired.notice == Alert.Notice.PENDING:
        send_fired_card(fired.pk)
    return action


def _fire(rule: AlertRule, reading: rules.Reading, now: datetime, notify: bool) -> Alert | None:
    notice = (
        Alert.Notice.PENDING
        if notify and rule.notify_bot_id and rule.notify_chat_id
        else Alert.Notice.NONE
    )
    try:
        with transaction.atomic():
            alert = Alert.objects.create(
                rule=rule,
                fired_at=now,
                value=reading.value,
                threshold=rule.threshold,
                sample=reading.sample,
                window_start=reading.start,
                window_end=reading.end,
                notice=notice,
            )
    except IntegrityError:  # another worker's alert is open (the unique constraint)
        return None
    _emit(alert, Event.Type.ALERT_FIRED, now)
    log.info("alert rule %s: fired (alert %s)", rule.pk, alert.pk)
    return alert


def _resolve(rule: AlertRule, alert: Alert, reading: rules.Reading, now: datetime) -> None:
    alert.rule = rule
    alert.resolved_at = now
    alert.resolved_value = reading.value
    alert.save(update_fields=["resolved_at", "resolved_value"])
    _emit(alert, Event.Type.ALERT_RESOLVED, now)
    if alert.card_id and rule.notify_bot_id:
        entity = register_card(rule.notify_bot, card_id=alert.card_id, purpose="alert")
        enqueue_card(entity, render_card(alert))
    log.info("alert rule %s: resolved (alert %s)", rule.pk, alert.pk)


def send_fired_card(alert_id: int) -> str:
    """Send the card of a fired alert to the rule's chat (outside any transaction: network
    I/O); records `sent` with the card's ids, or `failed` with the error's class name (never a
    message text or secret). Returns the new notice state."""
    alert = Alert.objects.select_related(
        "rule__team", "rule__bot", "rule__notify_bot", "rule__notify_chat"
    ).get(pk=alert_id)
    rule = alert.rule
    if not (rule.notify_bot_id and rule.notify_chat_id):
        Alert.objects.filter(pk=alert_id).update(notice=Alert.Notice.NONE)
        return Alert.Notice.NONE
    card = render_card(alert)
    problems = validate_card(card)
    if problems:
        log.error("alert %s: card invalid (%d problem(s))", alert_id, len(problems))
        Alert.objects.filter(pk=alert_id).update(
            notice=Alert.Notice.FAILED, notice_error="invalid_card"
        )
        return Alert.Notice.FAILED
    try:
        entity = send_card(
            rule.notify_bot,
            card,
            receive_id=rule.notify_chat.chat_id,
            uuid=f"cardloop_alert_{alert_id}",
            purpose="alert",
        )
    except Exception as exc:  # noqa: BLE001 - a failed card must not stop the worker
        log.warning("alert %s: card not sent (%s)", alert_id, type(exc).__name__)
        Alert.objects.filter(pk=alert_id).update(
            notice=Alert.Notice.FAILED, notice_error=type(exc).__name__[:200]
        )
        return Alert.Notice.FAILED
    Alert.objects.filter(pk=alert_id).update(
        notice=Alert.Notice.SENT,
        card_id=entity.card_id,
        open_message_id=entity.open_message_id,
        notice_error="",
    )
    return Alert.Notice.SENT


def evaluate_all(now: datetime | None = None) -> dict[str, int]:
    """`evaluate_rule` for every enabled rule (the alert worker's tick); a rule that raises is
    logged and skipped. Returns `{"rules", "fired", "resolved"}` counts."""
    counts = {"rules": 0, "fired": 0, "resolved": 0}
    for rule_id in (
        AlertRule.objects.filter(enabled=True).order_by("pk").values_list("pk", flat=True)
    ):
        counts["rules"] += 1
        try:
            action = evaluate_rule(rule_id, now=now)
        except Exception:
            log.exception("alert rule %s: evaluation failed", rule_id)
            continue
        if action == rules.FIRE:
            counts["fired"] += 1
        elif action == rules.RESOLVE:
            counts["resolved"] += 1
    return counts


def replay(rule_id: int, *, start: datetime, end: datetime, step: timedelta) -> dict[str, int]:
    """Evaluate a rule at `start`, `start + step`, … before `end` without cards (fills the
    alert history from past data, e.g. the demo's). Returns `{"fired", "resolved"}`."""
    counts = {"fired": 0, "resolved": 0}
    at = start
    while at < end:
        action = evaluate_rule(rule_id, now=at, notify=False)
        if action == rules.FIRE:
            counts["fired"] += 1
        elif action == rules.RESOLVE:
            counts["resolved"] += 1
        at += step
    return counts


def rule_snapshot(rule: AlertRule) -> dict[str, Any]:
    """The audit form of a rule: every setting (ids for team, bot and chat)."""
    return {
        "name": rule.name,
        "enabled": rule.enabled,
        "team": rule.team_id,
        "bot": rule.bot_id,
        "kind": rule.kind,
        "threshold": rule.threshold,
        "window_minutes": rule.window_minutes,
        "min_ratings": rule.min_ratings,
        "clear_margin": rule.clear_margin,
        "notify_bot": rule.notify_bot_id,
        "notify_chat": rule.notify_chat_id,
        "muted_until": rule.muted_until.isoformat() if rule.muted_until else None,
    }


def save_rule(actor: Any, rule: AlertRule) -> AlertRule:
    """Create or change `rule` (values validated by the caller, `AlertRule.clean`) with an
    audit entry (`alert_rule.created` / `.changed`) in one transaction."""
    with transaction.atomic():
        stored = AlertRule.objects.filter(pk=rule.pk).first() if rule.pk else None
        before = rule_snapshot(stored) if stored else None
        rule.save()
        action = "alert_rule.created" if before is None else "alert_rule.changed"
        audit.record(actor, action, rule, before, rule_snapshot(rule))
    return rule


def mute_rule(rule: AlertRule, *, until: datetime | None, actor: Any) -> AlertRule:
    """Mute `rule` until `until` (None: unmute), audited as `alert_rule.muted` /
    `alert_rule.unmuted`."""
    with transaction.atomic():
        before = rule.muted_until.isoformat() if rule.muted_until else None
        rule.muted_until = until
        rule.save(update_fields=["muted_until", "updated_at"])
        audit.record(
            actor,
            "alert_rule.muted" if until else "alert_rule.unmuted",
            rule,
            {"muted_until": before},
            {"muted_until": until.isoformat() if until else None},
        )
    return rule
