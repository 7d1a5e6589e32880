"""A realistic, deterministic analytics history for benchmarks and demos (`seed_analytics`).

What it builds (all rows belong to bots whose app_id starts with `cli_seed_`, so they can be
found and removed again without touching anything else):
- 5 teams with 8 chats each, 4 bots, 6 models, 2 CLIs with 3 versions, 8 skills, 10 workflows;
- N deliveries over `days` days ending now, busier on weekdays and in Shanghai office hours and
  growing over time; ~90% completed, 2% send_failed, 2% failed, the rest sent/cancelled/
  ambiguous; feedback shown on ~85%;
- ~40% of deliveries with feedback get latest ratings: one operator mostly, two or three on
  some; semantic mix depends on the model; ~85% of negatives carry a reason key; ~10% of
  ratings are reselects (revision chains of 2–3);
- `turn.completed` events with outbox rows for ~8% of finished deliveries (done 94%, failed 3%,
  dead 3%) plus a few `interaction.resolved` events without a delivery.

PostgreSQL: rows go in with COPY and the tables are VACUUM ANALYZEd afterwards; other
databases use bulk_create. The state change lives here (commands only parse and report).
"""

from __future__ import annotations

import json
import random
import zoneinfo
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db import connection, models, transaction
from django.utils import timezone

from analytics.models import DeliveryRatingCounts, ReviewItem
from botadmin.models import Bot, Chat, Team, TeamChat
from feedback import envelopes, events
from feedback.models import (
    Delivery,
    Event,
    LatestFeedback,
    OutboxItem,
    Revision,
    WebhookDestination,
)

SEED_BOT_PREFIX = "cli_seed_"
SHANGHAI = zoneinfo.ZoneInfo("Asia/Shanghai")
TEAMS = ["Seed · Search", "Seed · Support", "Seed · Data", "Seed · Infra", "Seed · Sales"]
MODELS = {  # model → (positive, progress, negative) weights
    "gpt-5": (0.66, 0.14, 0.20),
    "gpt-5-mini": (0.55, 0.17, 0.28),
    "claude-opus-4": (0.70, 0.12, 0.18),
    "claude-sonnet-4": (0.62, 0.15, 0.23),
    "gemini-2.5-pro": (0.58, 0.16, 0.26),
    "deepseek-v3": (0.52, 0.18, 0.30),
}
CLIS = {"claude-code": ["2.0.1", "2.1.0", "2.2.3"], "codex": ["0.40.0", "0.41.2", "0.45.0"]}
SKILLS = ["search", "summarize", "sql", "deploy", "review", "translate", "oncall", "report"]
REASONS = [
    ("inaccurate", "不准确 / Inaccurate"),
    ("incomplete", "不完整 / Incomplete"),
    ("too_slow", "太慢 / Too slow"),
    ("off_topic", "答非所问 / Off topic"),
    ("unsafe", "不安全 / Unsafe"),
]
STATUS_WEIGHTS = [
    ("completed", 0.90),
    ("sent", 0.035),
    ("send_failed", 0.02),
    ("failed", 0.02),
    ("cancelled", 0.015),
    ("ambiguous", 0.01),
]
ERROR_CODES = ["feishu_rate_limited", "card_too_large", "worker_crash", "timeout", "chat_not_found"]


def snapshot_for(team_index: int) -> dict[str, Any]:
    """The frozen policy of a team's deliveries (labels differ a little per team)."""
    reasons = REASONS[: 3 + team_index % 3]
    return {
        "enabled": True,
        "audience": "requester",
        "allow_reselect": True,
        "buttons": [
            {
                "key": "conclusive_usable",
                "label": "有用 / Useful",
                "semantic": "positive",
                "style": "primary",
            },
            {
                "key": "partly_usable",
                "label": "部分可用 / Partly",
                "semantic": "progress",
                "style": "default",
            },
            {
                "key": "not_usable",
                "label": "不可用 / Not usable",
                "semantic": "negative",
                "style": "danger",
            },
        ],
        "negative_followup": {
            "reasons": [{"key": k, "label": label} for k, label in reasons],
            "comment": {"enabled": True, "required": False, "max_length": 1000},
        },
    }


#: Semantic weights (positive, progress, negative) of ratings during a seeded incident.
INCIDENT_WEIGHTS = (0.2, 0.1, 0.7)
#: Comments of seeded negative ratings (demo review queues); invented, bilingual.
DEMO_COMMENTS = [
    "引用的文档版本过期了 / cites an outdated version of the docs",
    "SQL 少了时间过滤条件 / the SQL misses the date filter",
    "没有回答我的问题 / did not answer my question",
    "步骤顺序错了 / the steps are in the wrong order",
    "太长了，只要结论 / too long, I only need the conclusion",
    "给的链接打不开 / the link it gave does not open",
]


VERDICT_OF = {"positive": "conclusive_usable", "progress": "partly_usable", "negative": "not_usable"}


def seed_delivery_count() -> int:
    return Delivery.objects.filter(bot__app_id__startswith=SEED_BOT_PREFIX).count()


def reset() -> dict[str, int]:
    """Delete every seeded row (deliveries of `cli_seed_*` bots and what hangs off them, the
    seed bots, chats, teams and destination). Returns rows deleted per table."""
    bots = list(Bot.objects.filter(app_id__startswith=SEED_BOT_PREFIX).values_list("id", flat=True))
    deleted: dict[str, int] = {}
    if bots:
        marks = ",".join(["%s"] * len(bots))
        d = Delivery._meta.db_table
        e = Event._meta.db_table
        # Table names come from _meta and the values are bound: nothing here is user input.
        by_event = f"event_id IN (SELECT id FROM {e} WHERE bot_id IN ({marks}))"  # noqa: S608
        by_delivery = f"delivery_id IN (SELECT id FROM {d} WHERE bot_id IN ({marks}))"  # noqa: S608
        plan = [
            (ReviewItem, by_delivery),
            (OutboxItem, by_event),
            (Event, f"bot_id IN ({marks})"),
            (DeliveryRatingCounts, f"bot_id IN ({marks})"),
            (LatestFeedback, by_delivery),
            (Revision, by_delivery),
            (Delivery, f"bot_id IN ({marks})"),
        ]
        with transaction.atomic(), connection.cursor() as cur:
            if connection.vendor == "postgresql":
                # The rollup rows go first (plan); the per-row triggers would only find none.
                # Transactional: a failure rolls the switch back with the deletes.
                _switch_rollup_triggers(cur, on=False)
                cur.execute("SET CONSTRAINTS ALL DEFERRED")
            for model, where in plan:
                sql = f"DELETE FROM {model._meta.db_table} WHERE {where}"  # noqa: S608
                cur.execute(sql, bots)
                deleted[model._meta.label] = cur.rowcount
            if connection.vendor == "postgresql":
                _switch_rollup_triggers(cur, on=True)
    deleted["bots"] = Bot.objects.filter(id__in=bots).delete()[0]
    deleted["teams"] = Team.objects.filter(name__in=TEAMS).delete()[0]
    deleted["chats"] = Chat.objects.filter(chat_id__startswith="oc_seed_").delete()[0]
    deleted["destinations"] = WebhookDestination.objects.filter(name="seed-hook").delete()[0]
    return deleted


def _switch_rollup_triggers(cur, *, on: bool) -> None:
    """PostgreSQL: turn the rollup triggers of the latest-rating table off/on inside the
    current transaction (pending deferred FK checks are run first, as ALTER TABLE needs)."""
    cur.execute("SET CONSTRAINTS ALL IMMEDIATE")
    action = "ENABLE" if on else "DISABLE"
    for name in ("insert", "delete", "update"):
        cur.execute(
            f"ALTER TABLE {LatestFeedback._meta.db_table} {action} TRIGGER analytics_rating_counts_{name}"
        )


class _Writer:
    """Appends rows (dicts keyed by attname) to a table: COPY on PostgreSQL, bulk_create
    elsewhere. Ids are assigned by the caller; sequences are moved past them at the end."""

    def __init__(self, model: type[models.Model]):
        self.model = model
        self.fields = list(model._meta.concrete_fields)
        self.defaults = {
            f.attname: f.get_default() for f in self.fields if f.has_default() or f.null
        }

    def _value(self, field, row: dict[str, Any]) -> Any:
        value = row[field.attname] if field.attname in row else self.defaults.get(field.attname)
        if isinstance(value, dict | list):
            return json.dumps(value, ensure_ascii=False)
        return value

    def write(self, rows: list[dict[str, Any]]) -> None:
        if not rows:
            return
        if connection.vendor == "postgresql":
            cols = ", ".join(connection.ops.quote_name(f.column) for f in self.fields)
            table = connection.ops.quote_name(self.model._meta.db_table)
            with (
                connection.cursor() as cur,
                cur.cursor.copy(f"COPY {table} ({cols}) FROM STDIN") as copy,
            ):
                for row in rows:
                    copy.write_row([self._value(f, row) for f in self.fields])
        else:
            objs = []
            for row in rows:
                obj = self.model(**{k: v for k, v in {**self.defaults, **row}.items()})
                objs.append(obj)
            self.model.objects.bulk_create(objs, batch_size=500)

    def next_id(self) -> int:
        top = self.model.objects.aggregate(m=models.Max("id"))["m"]
        return (top or 0) + 1

    def fix_sequence(self) -> None:
        if connection.vendor == "postgresql":
            table = self.model._meta.db_table
            with connection.cursor() as cur:
                top = f"SELECT COALESCE(MAX(id), 1) FROM {connection.ops.quote_name(table)}"  # noqa: S608
                cur.execute(f"SELECT setval(pg_get_serial_sequence(%s, 'id'), ({top}))", [table])


def _timestamps(rng: random.Random, n: int, days: int, end: datetime) -> list[datetime]:
    """`n` sorted send times in `[end - days, end)`: weekday and office-hour peaks in
    Asia/Shanghai (UTC+8, no DST), volume growing ~3x from the first day to the last."""
    start = end - timedelta(days=days)
    first_midnight = start.astimezone(SHANGHAI).replace(hour=0, minute=0, second=0, microsecond=0)
    day_weights = []
    for i in range(days + 1):
        weekday = (first_midnight + timedelta(days=i)).weekday()
        day_weights.append((1 + 2 * i / days) * (0.35 if weekday >= 5 else 1.0))
    hour_weights = [0.15] * 7 + [
        0.6,
        1.2,
        2.0,
        2.2,
        1.6,
        1.0,
        1.8,
        2.1,
        2.0,
        1.7,
        1.2,
        0.8,
        0.6,
        0.5,
        0.4,
        0.3,
        0.2,
    ]
    days_drawn = rng.choices(range(days + 1), weights=day_weights, k=n)
    hours_drawn = rng.choices(range(24), weights=hour_weights, k=n)
    span = (end - start).total_seconds()
    out = []
    for d, h in zip(days_drawn, hours_drawn, strict=True):
        when = (
            first_midnight + timedelta(days=d, hours=h, seconds=rng.random() * 3600)
        ).astimezone(UTC)
        if not start <= when < end:  # the partial first/last local day: draw again, uniformly
            when = start + timedelta(seconds=rng.random() * span)
        out.append(when)
    out.sort()
    return out


def build(
    deliveries: int,
    *,
    days: int = 400,
    seed: int = 7,
    end: datetime | None = None,
    chunk: int = 20_000,
    progress: Callable[[int], None] | None = None,
    comments: bool = False,
    incident: tuple[float, float] | None = None,
) -> dict[str, int]:
    """Insert the history (see the module docstring). Returns counts per table.

    `progress(n)` is called after every chunk with the number of deliveries written.
    `comments`: ~60% of negative revisions carry one of `DEMO_COMMENTS` (for review queues).
    `incident=(from_days_ago, to_days_ago)`: ratings of deliveries sent in that stretch follow
    `INCIDENT_WEIGHTS` (mostly negative), so alert rules have a breach to find. Both off keep
    the default history exactly as it was (no extra random draws).
    Not idempotent by itself: callers check `seed_delivery_count()` or `reset()` first.
    """
    rng = random.Random(seed)
    end = end or timezone.now().replace(microsecond=0)
    incident_span = (
        (end - timedelta(days=incident[0]), end - timedelta(days=incident[1])) if incident else None
    )

    def in_incident(when: datetime) -> bool:
        return incident_span is not None and incident_span[0] <= when < incident_span[1]
    teams = [Team.objects.get_or_create(name=name)[0] for name in TEAMS]
    bots = [
        Bot.objects.get_or_create(
            app_id=f"{SEED_BOT_PREFIX}{i}", defaults={"name": f"Seed bot {i}"}
        )[0]
        for i in range(1, 5)
    ]
    chats = []
    for t_index, team in enumerate(teams):
        for c in range(8):
            chat, _ = Chat.objects.get_or_create(
                chat_id=f"oc_seed_{t_index}_{c}", defaults={"name": f"{team.name} #{c}"}
            )
            TeamChat.objects.get_or_create(team=team, chat=chat)
            chats.append((chat, t_index))
    bot_of = {bot.id: bot for bot in bots}
    chat_of = {chat.id: chat for chat, _ in chats}
    hook, _ = WebhookDestination.objects.get_or_create(
        name="seed-hook",
        defaults={"url": "https://hooks.example.com/seed", "event_types": ["turn.completed"]},
    )
    snapshots = [snapshot_for(i) for i in range(len(teams))]
    operators = [f"ou_seed_{i:04d}" for i in range(300)]
    models_list = list(MODELS)
    model_weights = [5, 4, 3, 3, 2, 2]
    statuses, status_weights = zip(*STATUS_WEIGHTS, strict=True)
    cli_names = list(CLIS)

    writers = {m: _Writer(m) for m in (Delivery, Revision, LatestFeedback, Event, OutboxItem)}
    ids = {m: w.next_id() for m, w in writers.items()}
    writers[DeliveryRatingCounts] = _Writer(DeliveryRatingCounts)
    counts = {m._meta.label: 0 for m in (*writers, DeliveryRatingCounts)}
    times = _timestamps(rng, deliveries, days, end)
    base_seq = seed_delivery_count()

    def take(model) -> int:
        value = ids[model]
        ids[model] += 1
        return value

    def batches() -> Iterator[tuple[int, int]]:
        for lo in range(0, deliveries, chunk):
            yield lo, min(lo + chunk, deliveries)

    for lo, hi in batches():
        rows: dict[Any, list[dict[str, Any]]] = {m: [] for m in writers}
        for n in range(lo, hi):
            created = times[n]
            chat, t_index = chats[rng.randrange(len(chats))]
            team = teams[t_index]
            model = rng.choices(models_list, weights=model_weights)[0]
            cli = cli_names[rng.random() < 0.35]
            status = rng.choices(statuses, weights=status_weights)[0]
            shown = status != "send_failed" and rng.random() < 0.85
            skill = SKILLS[rng.randrange(len(SKILLS))]
            did = take(Delivery)
            finished = created + timedelta(seconds=rng.randint(5, 600))
            rows[Delivery].append(
                {
                    "id": did,
                    "delivery_id": f"seed_{base_seq + n:09d}",
                    "bot_id": bots[(t_index + (n % 3 == 0)) % len(bots)].id,
                    "chat_id": chat.id,
                    "team_id": team.id,
                    "session_id": f"sess_{did}",
                    "turn_id": "t1",
                    "requester_open_id": operators[rng.randrange(len(operators))],
                    "topic_id": f"topic_{rng.randrange(200)}",
                    "response_kind": "final",
                    "platform_message_id": f"om_seed_{did}" if status != "send_failed" else "",
                    "model": model,
                    "cli_id": cli,
                    "cli_version": rng.choice(CLIS[cli]),
                    "skill_name": skill,
                    "skill_version": f"1.{rng.randrange(4)}",
                    "workflow_id": f"wf_{rng.randrange(10)}",
                    "task_id": f"task_{did}",
                    "feedback_shown": shown,
                    "feedback_reason": "enabled" if shown else "disabled",
                    "policy_snapshot": snapshots[t_index] if shown else None,
                    "status": status,
                    "error_code": rng.choice(ERROR_CODES)
                    if status in ("send_failed", "failed")
                    else "",
                    "duration_ms": rng.randint(2_000, 600_000),
                    "completed_at": finished if status != "sent" else None,
                    "created_at": created,
                    "updated_at": finished,
                }
            )
            if shown and rng.random() < 0.47:
                raters = rng.choices([1, 2, 3], weights=[80, 15, 5])[0]
                for who in rng.sample(operators, raters):
                    chain = rng.choices([1, 2, 3], weights=[90, 8, 2])[0]
                    prev_id = None
                    at = created + timedelta(seconds=rng.randint(10, 7200))
                    for step in range(1, chain + 1):
                        weights = INCIDENT_WEIGHTS if in_incident(created) else MODELS[model]
                        semantic = rng.choices(("positive", "progress", "negative"), weights=weights)[0]
                        reason = ""
                        if semantic == "negative" and rng.random() < 0.85:
                            reason = rng.choice(snapshots[t_index]["negative_followup"]["reasons"])["key"]
                        comment = ""
                        if comments and semantic == "negative" and rng.random() < 0.6:
                            comment = rng.choice(DEMO_COMMENTS)
                        rid = take(Revision)
                        rows[Revision].append(
                            {
                                "id": rid,
                                "revision_id": f"rev_seed_{rid}",
                                "delivery_id": did,
                                "operator_open_id": who,
                                "revision": step,
                                "verdict_key": VERDICT_OF[semantic],
                                "semantic": semantic,
                                "reason_key": reason,
                                "comment": comment,
                                "callback_key": f"cb_seed_{rid}",
                                "supersedes_id": prev_id,
                                "source": "card",
                                "created_at": at,
                            }
                        )
                        prev_id = rid
                        last = (rid, semantic, VERDICT_OF[semantic], reason, at)
                        at += timedelta(seconds=rng.randint(5, 900))
                    rows[LatestFeedback].append(
                        {
                            "id": take(LatestFeedback),
                            "delivery_id": did,
                            "operator_open_id": who,
                            "revision_id": last[0],
                            "semantic": last[1],
                            "verdict_key": last[2],
                            "reason_key": last[3],
                            "updated_at": last[4],
                        }
                    )
            if status in ("completed", "failed") and rng.random() < 0.08:
                _event_and_outbox(rows, take, rng, hook, rows[Delivery][-1], team.id, finished, bot_of=bot_of, chat_of=chat_of)
            if rng.random() < 0.002:
                _event_and_outbox(rows, take, rng, hook, None, team.id, finished, bots[0].id, bot_of=bot_of, chat_of=chat_of)
        with transaction.atomic():
            bulk = connection.vendor == "postgresql"
            if bulk:
                # COPY with the rollup triggers off and the rollup rows written directly (the
                # same numbers the triggers would add up, computed from this chunk); ALTER
                # TABLE is transactional, so the triggers are back on when this commits.
                with connection.cursor() as cur:
                    _switch_rollup_triggers(cur, on=False)
                    cur.execute("SET CONSTRAINTS ALL DEFERRED")
                rows[DeliveryRatingCounts] = _rollup_rows(rows[Delivery], rows[LatestFeedback])
            for model in (Delivery, Revision, LatestFeedback, Event, OutboxItem):
                writers[model].write(rows[model])
                counts[model._meta.label] += len(rows[model])
            if bulk:
                writers[DeliveryRatingCounts].write(rows[DeliveryRatingCounts])
                counts[DeliveryRatingCounts._meta.label] += len(rows[DeliveryRatingCounts])
                with connection.cursor() as cur:
                    _switch_rollup_triggers(cur, on=True)
        if progress:
            progress(hi - lo)
    for model, writer in writers.items():
        if model is not DeliveryRatingCounts:
            writer.fix_sequence()
    if connection.vendor == "postgresql":
        with connection.cursor() as cur:
            # VACUUM sets the visibility map so counts can be index-only scans; it cannot run
            # inside a transaction (tests), where ANALYZE alone refreshes the statistics.
            verb = "ANALYZE" if connection.in_atomic_block else "VACUUM (ANALYZE)"
            for model in writers:  # includes the rollup
                cur.execute(f"{verb} {connection.ops.quote_name(model._meta.db_table)}")
    return counts


def _rollup_rows(deliveries: list[dict], latest: list[dict]) -> list[dict]:
    """`DeliveryRatingCounts` rows for a chunk (what the triggers would have written)."""
    by_id = {d["id"]: d for d in deliveries}
    out: dict[int, dict] = {}
    for row in latest:
        d = by_id[row["delivery_id"]]
        slot = out.setdefault(
            d["id"],
            {
                "delivery_id": d["id"],
                "created_at": d["created_at"],
                "team_id": d["team_id"],
                "bot_id": d["bot_id"],
                "positive": 0,
                "progress": 0,
                "negative": 0,
            },
        )
        slot[row["semantic"]] += 1
    return list(out.values())


def _event_and_outbox(
    rows, take, rng, hook, delivery, team_id, at, bot_id=None, *, bot_of, chat_of
) -> None:
    """An event and its outbox row: `turn.completed` of `delivery` (a delivery row dict), or
    with `delivery=None` an `interaction.resolved` of an approval by bot `bot_id` (`bot_of`,
    `chat_of`: the seeded bots and chats by id). The body is
    the envelope CONTRACT.md §5.2 gives for the type, built from the seeded row, so the event
    feed and the outbox show what real events look like."""
    eid = take(Event)
    event_id = f"evt_seed_{eid}"
    if delivery is not None:
        bot_id = delivery["bot_id"]
        type_ = "turn.completed"
        # the seeded row as an unsaved delivery, so `data` is exactly what a real one sends
        unsaved = Delivery(**delivery)
        unsaved.bot, unsaved.chat = bot_of[bot_id], chat_of[delivery["chat_id"]]
        data = events.turn_completed_data(unsaved)
    else:
        type_ = "interaction.resolved"
        data = {
            "interaction_id": f"ia_seed_{eid}",
            "kind": "approval",
            "status": "resolved",
            "bot_app_id": bot_of[bot_id].app_id,
            "channel": "feishu",
            "chat_id": None,
            "session_id": f"sess_seed_{eid}",
            "request_id": f"req_seed_{eid}",
            "tool": "Bash",
            "platform_message_id": None,
            "resolution": {
                "action_id": "approve",
                "value": "approve",
                "operator": "ou_seed_reviewer",
                "via": "card",
                "at": envelopes.rfc3339(at),
            },
        }
    body = envelopes.serialize(envelopes.envelope(event_id, type_, at, data))
    rows[Event].append(
        {
            "id": eid,
            "event_id": event_id,
            "type": type_,
            "version": 1,
            "bot_id": bot_id,
            "team_id": team_id,
            "delivery_id": delivery["id"] if delivery is not None else None,
            "body": body,
            "created_at": at,
        }
    )
    status = rng.choices(("done", "failed", "dead"), weights=(94, 3, 3))[0]
    rows[OutboxItem].append(
        {
            "id": take(OutboxItem),
            "event_id": eid,
            "destination_id": hook.id,
            "body": body,
            "status": status,
            "attempts": 1 if status == "done" else rng.randint(3, 12),
            "next_attempt_at": at,
            "last_error": "" if status == "done" else "HTTP 503",
            "last_status_code": 200 if status == "done" else 503,
            "delivered_at": at if status == "done" else None,
            "created_at": at,
            "updated_at": at,
        }
    )
