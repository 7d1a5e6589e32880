"""The analytics part of `manage.py seed_demo` (registered in `AnalyticsConfig.ready()`):
a newcomer's dashboard, review queue and alert history show real figures on first open.

Idempotent, each part on its own:
- a history of `DEMO_DELIVERIES` deliveries over the last `DEMO_DAYS` days made by the
  analytics seeder (`analytics.seed`: teams "Seed · …", bots `cli_seed_*`) with ratings,
  reasons, comments, failures and webhook outbox rows, plus an incident from 12 to 10 days
  ago where most ratings are negative — only when no seed delivery exists yet;
- the review queue "Negative feedback (demo)" over the seed teams, filled with their negative
  ratings;
- with DEBUG, the demo superuser becomes a reviewer of the seed teams (reviewing is its own
  permission; a superuser is not a reviewer by being a superuser);
- the alert rule "Positive rate below 40% (demo)" over every delivery (24 hours, at least 30
  ratings, clear at 55%), notifying `cli_demo_bot` in `oc_demo_team_chat` (dry run); when it
  is new, its alert history is replayed over the seeded days every 6 hours, so the incident
  shows up as a fired and resolved alert.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

from django.conf import settings
from django.contrib.auth import get_user_model
from django.utils import timezone

from analytics import seed
from analytics.alerts import service as alerts
from analytics.models import Alert, AlertRule, Reviewer, ReviewQueue
from analytics.review import service as review
from botadmin.models import Bot, Chat, Team

#: Who the audit log names for the demo's queue, reviewers and rule.
ACTOR = "seed_demo"
DEMO_DELIVERIES = 3000
DEMO_DAYS = 30
DEMO_SEED = 11
QUEUE_NAME = "Negative feedback (demo)"
RULE_NAME = "Positive rate below 40% (demo)"
REPLAY_STEP = timedelta(hours=6)
#: The seeded incident: from 12 to 10 days before the seed's end.
INCIDENT = (12, 10)


def seed_demo(say: Callable[[str], None]) -> None:
    """Create what is missing of the analytics demo (see the module docstring); `say(text)`
    reports progress."""
    _history(say)
    queue = _queue(say)
    _reviewer(say)
    _rule(say)
    added = review.fill_queue(queue, since=None)
    say(f"review queue {QUEUE_NAME!r}: {queue.items.count()} item(s) ({added} new)")


def _history(say) -> None:
    existing = seed.seed_delivery_count()
    if existing:
        say(f"demo history: {existing} deliveries exist, left as is")
        return
    say(f"demo history: building {DEMO_DELIVERIES} deliveries over {DEMO_DAYS} days ...")
    done = 0

    def progress(n: int) -> None:
        nonlocal done
        done += n
        say(f"  {done}/{DEMO_DELIVERIES} deliveries")

    counts = seed.build(
        DEMO_DELIVERIES,
        days=DEMO_DAYS,
        seed=DEMO_SEED,
        chunk=1000,
        progress=progress,
        comments=True,
        incident=INCIDENT,
    )
    say(
        f"demo history: created ({counts['feedback.LatestFeedback']} ratings, "
        f"{counts['feedback.OutboxItem']} outbox rows)"
    )


def _queue(say) -> ReviewQueue:
    queue = ReviewQueue.objects.filter(name=QUEUE_NAME).first()
    created = queue is None
    if created:
        queue = review.save_queue(
            ACTOR,
            ReviewQueue(
                name=QUEUE_NAME,
                description="Demo: every negative rating of the seed teams.",
                filters={"semantic": "negative"},
            ),
            Team.objects.filter(name__in=seed.TEAMS),
        )
    say(f"review queue {QUEUE_NAME!r}: {'created' if created else 'exists, left as is'}")
    return queue


def _reviewer(say) -> None:
    if not settings.DEBUG:
        say("demo reviewer: skipped (DEBUG is off; add reviewers in the admin)")
        return
    user = get_user_model().objects.filter(username="admin").first()
    if user is None:
        return
    created = 0
    for team in Team.objects.filter(name__in=seed.TEAMS):
        if not Reviewer.objects.filter(team=team, user=user).exists():
            review.add_reviewer(ACTOR, Reviewer(team=team, user=user))
            created += 1
    say(
        f"demo reviewer 'admin' of the seed teams: {'created' if created else 'exists, left as is'}"
    )


def _rule(say) -> None:
    rule = AlertRule.objects.filter(name=RULE_NAME).first()
    created = rule is None
    if created:
        rule = alerts.save_rule(
            ACTOR,
            AlertRule(
                name=RULE_NAME,
                kind=AlertRule.Kind.POSITIVE_RATE_BELOW,
                threshold=40,
                window_minutes=24 * 60,
                min_ratings=30,
                clear_margin=15,
                notify_bot=Bot.objects.filter(app_id="cli_demo_bot").first(),
                notify_chat=Chat.objects.filter(chat_id="oc_demo_team_chat").first(),
            ),
        )
    say(f"alert rule {RULE_NAME!r}: {'created' if created else 'exists, left as is'}")
    if Alert.objects.filter(rule=rule).exists():
        return
    end = timezone.now()
    counts = alerts.replay(
        rule.pk, start=end - timedelta(days=DEMO_DAYS), end=end, step=REPLAY_STEP
    )
    say(f"alert history of the demo rule: {counts['fired']} fired, {counts['resolved']} resolved")
