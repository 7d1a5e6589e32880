"""What a reviewer sees of an item, and what `review.completed` says (pure functions of rows
already loaded).

The reviewer's view is the one place a rater's comment is shown; `review.completed` carries
the outcome and never the comment or the reviewer's note in `data` — they go in `private`,
which reaches only webhook destinations that opt into comments (`include_comment`).
"""

from __future__ import annotations

from typing import Any

from analytics.queries import snapshot_labels
from feedback.envelopes import rfc3339


def _user(user) -> str | None:
    return user.get_username() if user is not None else None


def item_view(item, queue, latest) -> dict[str, Any]:
    """The reviewer's view: `{"id", "status", "claim_expires_at", "assigned_to", "queue":
    {"id", "name", "outcomes": [{"key", "label"}]}, "delivery": {delivery_id, sent_at, status,
    team, bot: {app_id, name}, chat_id, model, skill_name, skill_version, workflow_id, task_id,
    session_id, turn_id, content_ref}, "rating": {semantic, verdict_key, verdict_label,
    reason_key, reason_label, revision, rated_at, comment}, "outcome", "note", "external_link",
    "completed_by", "completed_at"}`. `latest` is the item's `LatestFeedback` with revision,
    delivery, bot, chat and team loaded. Never the rater's open_id, the card or a secret.
    """
    delivery = latest.delivery
    revision = latest.revision
    verdicts, reasons = snapshot_labels(delivery.policy_snapshot)
    return {
        "id": item.pk,
        "status": item.status,
        "claim_expires_at": item.claim_expires_at,
        "assigned_to": _user(item.assigned_to) if item.assigned_to_id else None,
        "queue": {
            "id": queue.pk,
            "name": queue.name,
            "outcomes": queue.outcome_choices(),
        },
        "delivery": {
            "delivery_id": delivery.delivery_id,
            "sent_at": delivery.created_at,
            "status": delivery.status,
            "team": {"id": delivery.team_id, "name": delivery.team.name}
            if delivery.team_id
            else None,
            "bot": {"app_id": delivery.bot.app_id, "name": delivery.bot.name},
            "chat_id": delivery.chat.chat_id if delivery.chat_id else "",
            "model": delivery.model,
            "skill_name": delivery.skill_name,
            "skill_version": delivery.skill_version,
            "workflow_id": delivery.workflow_id,
            "task_id": delivery.task_id,
            "session_id": delivery.session_id,
            "turn_id": delivery.turn_id,
            "content_ref": getattr(delivery, "content_ref", "") or "",
        },
        "rating": {
            "semantic": latest.semantic,
            "verdict_key": latest.verdict_key,
            "verdict_label": verdicts.get(latest.verdict_key, latest.verdict_key),
            "reason_key": latest.reason_key,
            "reason_label": reasons.get(latest.reason_key, latest.reason_key)
            if latest.reason_key
            else "",
            "revision": revision.revision,
            "rated_at": latest.updated_at,
            "comment": revision.comment,
        },
        "outcome": item.outcome,
        "note": item.note,
        "external_link": item.external_link,
        "completed_by": _user(item.completed_by) if item.completed_by_id else None,
        "completed_at": item.completed_at,
    }


def review_completed_payload(
    item, queue, latest, reviewer
) -> tuple[dict[str, Any], dict[str, Any]]:
    """`(data, private)` of `review.completed`.

    data: item_id, queue {id, name}, delivery_id, bot_app_id, revision_id, semantic,
    verdict_key, reason_key (or None), has_comment, outcome, outcome_label, has_note,
    external_link (or None), reviewer (username), completed_at. private: `comment` (the
    rater's) and `note` (the reviewer's) when present — for opted-in destinations only.
    """
    revision = latest.revision
    data = {
        "item_id": item.pk,
        "queue": {"id": queue.pk, "name": queue.name},
        "delivery_id": latest.delivery.delivery_id,
        "bot_app_id": latest.delivery.bot.app_id,
        "revision_id": revision.revision_id,
        "semantic": latest.semantic,
        "verdict_key": latest.verdict_key,
        "reason_key": latest.reason_key or None,
        "has_comment": bool(revision.comment),
        "outcome": item.outcome,
        "outcome_label": queue.outcome_label(item.outcome),
        "has_note": bool(item.note),
        "external_link": item.external_link or None,
        "reviewer": reviewer.get_username(),
        "completed_at": rfc3339(item.completed_at),
    }
    private = {k: v for k, v in (("comment", revision.comment), ("note", item.note)) if v}
    return data, private
