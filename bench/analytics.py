"""Analytics endpoint timings on PostgreSQL against hand-written SQL for the same figures.

Usage (after `manage.py seed_analytics --deliveries 1000000`):

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/cl_analytics DJANGO_DEBUG=true \\
        .venv/bin/python bench/analytics.py [--runs 7] [--only summary,trend]

Each endpoint is called through the whole Django stack (URL routing, DRF token
authentication, scope lookup, filter validation, queries, serialization, JSON rendering) with
the in-process test client, for a 30-day and a 365-day range ending at the newest seed delivery,
as a superuser and as the manager of one seed team. The hand-written SQL computes the same
figure with statements typed by hand (see `HAND_SQL`), run through a raw cursor, doing the
work the endpoint returns: the summary's figures and its per-verdict counts with the snapshots
that label them, the reasons with theirs, a drill-down page and its ratings. Printed:
median milliseconds of `--runs` runs after two warm-up runs, the ratio endpoint ÷ SQL, and the
target. Results are checked for equality with the SQL before timing, so a fast wrong answer
fails loudly.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import zoneinfo
from datetime import datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "cardloop.settings")
os.environ.setdefault("DJANGO_DEBUG", "true")

import django  # noqa: E402

django.setup()

from django.conf import settings  # noqa: E402
from django.contrib.auth import get_user_model  # noqa: E402
from django.db import connection  # noqa: E402
from rest_framework.test import APIClient  # noqa: E402

from analytics.seed import SEED_BOT_PREFIX, TEAMS  # noqa: E402
from botadmin import services  # noqa: E402
from botadmin.models import Team, TeamMembership  # noqa: E402
from feedback.models import Delivery  # noqa: E402

TZ = "Asia/Shanghai"
TARGETS_MS = {  # (30 days, 365 days)
    "summary": (300, 1000),
    "trend": (300, 1000),
    "reasons": (300, 1000),
    "deliveries": (50, 50),
}
#: The ratio target (≤1.5 × the hand-written SQL) is for the aggregates; a drill-down page's SQL
#: takes a few ms, so its ratio mostly measures the HTTP stack and is printed for information.
RATIO_TARGET = {"summary": 1.5, "trend": 1.5, "reasons": 1.5}

# The same figures, typed by hand against the same tables the query layer reads (the delivery
# covering indexes and the trigger-maintained rollup analytics_deliveryratingcounts).
# {scope_d}/{scope_c} are "" or "AND d.team_id = ANY(%(teams)s)" / "AND c.team_id = …".
HAND_SQL = {
    "summary": """
        SELECT * FROM
          (SELECT count(*) FILTER (WHERE d.created_at >= %(start)s),
                  count(*) FILTER (WHERE d.created_at < %(start)s),
                  count(*) FILTER (WHERE d.created_at >= %(start)s AND d.feedback_shown),
                  count(*) FILTER (WHERE d.created_at < %(start)s AND d.feedback_shown)
             FROM feedback_delivery d
            WHERE d.created_at >= %(prev)s AND d.created_at < %(end)s {scope_d}) AS dd
        CROSS JOIN
          (SELECT coalesce(sum(c.positive + c.progress + c.negative) FILTER (WHERE c.created_at >= %(start)s), 0),
                  coalesce(sum(c.positive + c.progress + c.negative) FILTER (WHERE c.created_at < %(start)s), 0),
                  count(*) FILTER (WHERE c.created_at >= %(start)s AND c.positive + c.progress + c.negative > 0),
                  count(*) FILTER (WHERE c.created_at < %(start)s AND c.positive + c.progress + c.negative > 0),
                  coalesce(sum(c.positive) FILTER (WHERE c.created_at >= %(start)s), 0),
                  coalesce(sum(c.positive) FILTER (WHERE c.created_at < %(start)s), 0),
                  coalesce(sum(c.progress) FILTER (WHERE c.created_at >= %(start)s), 0),
                  coalesce(sum(c.progress) FILTER (WHERE c.created_at < %(start)s), 0),
                  coalesce(sum(c.negative) FILTER (WHERE c.created_at >= %(start)s), 0),
                  coalesce(sum(c.negative) FILTER (WHERE c.created_at < %(start)s), 0)
             FROM analytics_deliveryratingcounts c
            WHERE c.created_at >= %(prev)s AND c.created_at < %(end)s {scope_c}) AS rr
    """,
    # The summary also returns the latest ratings of the range per (verdict key, semantic),
    # labelled from the policy snapshot of the newest delivery carrying the key.
    "summary_verdicts": """
        SELECT v.verdict_key, v.semantic, v.n, s.policy_snapshot
          FROM (SELECT lf.verdict_key, lf.semantic, count(*) AS n, max(lf.delivery_id) AS newest
                  FROM feedback_latestfeedback lf
                  JOIN feedback_delivery d ON d.id = lf.delivery_id
                 WHERE d.created_at >= %(start)s AND d.created_at < %(end)s {scope_d}
                 GROUP BY 1, 2) AS v
          JOIN feedback_delivery s ON s.id = v.newest
    """,
    "trend": """
        WITH dd AS (
          SELECT (d.created_at AT TIME ZONE %(tz)s)::date AS day, count(*) AS delivered
            FROM feedback_delivery d
           WHERE d.created_at >= %(start)s AND d.created_at < %(end)s {scope_d}
           GROUP BY 1),
        rr AS (
          SELECT (c.created_at AT TIME ZONE %(tz)s)::date AS day,
                 sum(c.positive + c.progress + c.negative) AS ratings,
                 count(*) FILTER (WHERE c.positive + c.progress + c.negative > 0) AS rated,
                 sum(c.positive) AS positive, sum(c.progress) AS progress, sum(c.negative) AS negative
            FROM analytics_deliveryratingcounts c
           WHERE c.created_at >= %(start)s AND c.created_at < %(end)s {scope_c}
           GROUP BY 1)
        SELECT dd.day, dd.delivered, rr.ratings, rr.rated, rr.positive, rr.progress, rr.negative
          FROM dd LEFT JOIN rr USING (day) ORDER BY 1
    """,
    # With the policy snapshot of the newest delivery of each reason, which labels it.
    "reasons": """
        SELECT r.reason_key, r.n, r.newest, s.policy_snapshot
          FROM (SELECT lf.reason_key, count(*) AS n, max(lf.delivery_id) AS newest
                  FROM feedback_latestfeedback lf
                 WHERE lf.semantic = 'negative'
                   AND lf.delivery_id IN (
                       SELECT c.delivery_id FROM analytics_deliveryratingcounts c
                        WHERE c.created_at >= %(start)s AND c.created_at < %(end)s
                          AND c.negative > 0 {scope_c})
                 GROUP BY lf.reason_key) AS r
          LEFT JOIN feedback_delivery s ON s.id = r.newest AND r.reason_key <> ''
    """,
    "deliveries": """
        SELECT d.id, d.delivery_id, d.created_at, d.status, d.team_id, t.name, b.app_id, b.name,
               c.chat_id, d.topic_id, d.model, d.cli_id, d.cli_version, d.skill_name,
               d.skill_version, d.workflow_id, d.task_id, d.session_id, d.turn_id,
               d.response_kind, d.feedback_shown, d.error_code, d.policy_snapshot
          FROM feedback_delivery d
          JOIN botadmin_bot b ON b.id = d.bot_id
          LEFT JOIN botadmin_team t ON t.id = d.team_id
          LEFT JOIN botadmin_chat c ON c.id = d.chat_id
         WHERE d.created_at >= %(start)s AND d.created_at < %(end)s {scope_d}
         ORDER BY d.created_at DESC, d.id DESC LIMIT 51
    """,
}

# For reference only: the same summary figure by joining the latest ratings to the deliveries
# (what the rollup replaces). Printed with --join.
JOIN_SUMMARY_SQL = """
    SELECT count(*), count(DISTINCT lf.delivery_id)
      FROM feedback_latestfeedback lf JOIN feedback_delivery d ON d.id = lf.delivery_id
     WHERE d.created_at >= %(prev)s AND d.created_at < %(end)s {scope_d}
"""


def _median_ms(fn, runs: int) -> float:
    for _ in range(2):
        fn()
    samples = []
    for _ in range(runs):
        started = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - started) * 1000)
    return statistics.median(samples)


def _hand(name: str, params: dict, scoped: bool):
    scopes = {
        "scope_d": "AND d.team_id = ANY(%(teams)s)" if scoped else "",
        "scope_c": "AND c.team_id = ANY(%(teams)s)" if scoped else "",
    }
    sql = HAND_SQL[name].format(**scopes)
    with connection.cursor() as cur:
        cur.execute(sql, params)
        rows = cur.fetchall()
        if name == "summary":  # the endpoint also counts the latest ratings per verdict
            cur.execute(HAND_SQL["summary_verdicts"].format(**scopes), params)
            rows = (rows, cur.fetchall())
        if name == "deliveries":  # the endpoint also reads the page's ratings
            ids = [r[0] for r in rows[:50]]
            cur.execute(
                "SELECT lf.delivery_id, lf.semantic, lf.verdict_key, lf.reason_key, lf.updated_at, r.revision"
                " FROM feedback_latestfeedback lf JOIN feedback_revision r ON r.id = lf.revision_id"
                " WHERE lf.delivery_id = ANY(%s) ORDER BY 1, lf.updated_at, lf.id",
                [ids],
            )
            cur.fetchall()
        return rows


def _check(name: str, body: dict, rows) -> None:
    """The endpoint and the hand-written SQL must agree before their speed is compared."""
    if name == "summary":
        rows, verdict_rows = rows
        expected = sorted((key, semantic, n) for key, semantic, n, _snapshot in verdict_rows)
        got = sorted((v["key"], v["semantic"], v["count"]) for v in body["verdicts"])
        assert got == expected, (got, expected)
        d, r = list(rows[0][:4]), list(rows[0][4:])
        cur, prev = body["current"], body["previous"]
        got = [cur["delivered"], prev["delivered"], cur["feedback_shown"], prev["feedback_shown"]]
        assert got == d, (got, d)
        got = [cur["ratings"], prev["ratings"], cur["rated_deliveries"], prev["rated_deliveries"],
               cur["positive"], prev["positive"], cur["progress"], prev["progress"],
               cur["negative"], prev["negative"]]
        assert got == r, (got, r)
    elif name == "trend":
        by_day = {str(row[0]): row for row in rows}
        for bucket in body["buckets"]:
            row = by_day.get(bucket["date"])
            expected = (row[1], row[2] or 0, row[4] or 0, row[6] or 0) if row else (0, 0, 0, 0)
            got = (bucket["delivered"], bucket["ratings"], bucket["positive"], bucket["negative"])
            assert got == expected, (bucket["date"], got, expected)
    elif name == "reasons":
        expected = {row[0]: row[1] for row in rows if row[0]}
        assert {r["key"]: r["count"] for r in body["reasons"]} == expected
        assert body["negative_ratings"] == sum(row[1] for row in rows)
    elif name == "deliveries":
        assert [r["delivery_id"] for r in body["results"]] == [row[1] for row in rows[:50]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--only", default="summary,trend,reasons,deliveries")
    parser.add_argument("--join", action="store_true", help="also time the join-based summary SQL")
    args = parser.parse_args()
    if connection.vendor != "postgresql":
        sys.exit("bench/analytics.py needs PostgreSQL (DATABASE_URL=postgres://…)")
    settings.ALLOWED_HOSTS = ["*"]
    seeded = Delivery.objects.filter(bot__app_id__startswith=SEED_BOT_PREFIX)
    total = Delivery.objects.count()
    newest = seeded.order_by("-created_at").values_list("created_at", flat=True).first()
    if newest is None:
        sys.exit("No seed data: run manage.py seed_analytics --deliveries 1000000 first.")
    User = get_user_model()
    root, _ = User.objects.get_or_create(username="bench-root", defaults={"is_superuser": True, "is_staff": True})
    manager, _ = User.objects.get_or_create(username="bench-manager")
    team = Team.objects.get(name=TEAMS[0])
    TeamMembership.objects.get_or_create(user=manager, team=team)
    clients = {}
    tokens = []
    for label, user in (("superuser", root), ("manager", manager)):
        # A fresh manager API token per run (shown once, stored hashed); revoked at the end.
        raw, token = services.issue_manager_token(None, user, label="bench/analytics.py")
        tokens.append(token)
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Token {raw}")
        clients[label] = client
    # Ranges of whole local days, as the dashboard asks for them: [today − N days, tomorrow).
    zone = zoneinfo.ZoneInfo(TZ)
    last_day = newest.astimezone(zone).date() + timedelta(days=1)
    end = datetime.combine(last_day, datetime.min.time(), tzinfo=zone)
    print(f"PostgreSQL, {total:,} deliveries; ranges end {end.isoformat()}; tz {TZ}; median of {args.runs}")
    header = f"{'endpoint':<11} {'days':>4} {'scope':<9} {'endpoint ms':>11} {'SQL ms':>8} {'ratio':>6} {'target ms':>9}  ok"
    print(header)
    print("-" * len(header))
    failed = False
    for name in args.only.split(","):
        for span, target in zip((30, 365), TARGETS_MS[name], strict=True):
            start = end - timedelta(days=span)
            prev = start - timedelta(days=span)
            params = {"from": start.date().isoformat(), "to": end.date().isoformat(), "tz": TZ}
            for scope_label, client in clients.items():
                scoped = scope_label == "manager"
                sql_params = {"start": start, "end": end, "prev": prev, "tz": TZ, "teams": [team.id]}
                url = f"/api/v1/analytics/{name}"

                def call(client=client, url=url, params=params):
                    response = client.get(url, params)
                    assert response.status_code == 200, response.content[:300]
                    return response.json()

                _check(name, call(), _hand(name, sql_params, scoped))
                api_ms = _median_ms(call, args.runs)
                sql_ms = _median_ms(lambda n=name, p=sql_params, s=scoped: _hand(n, p, s), args.runs)
                ratio = api_ms / sql_ms if sql_ms else float("inf")
                ok = api_ms < target and ratio <= RATIO_TARGET.get(name, float("inf"))
                failed |= not ok
                print(
                    f"{name:<11} {span:>4} {scope_label:<9} {api_ms:>11.1f} {sql_ms:>8.1f} {ratio:>6.2f}"
                    f" {target:>9}  {'yes' if ok else 'NO'}"
                )
    if args.join:
        for span in (30, 365):
            start = end - timedelta(days=span)
            params = {"prev": start - timedelta(days=span), "end": end}
            sql = JOIN_SUMMARY_SQL.format(scope_d="")

            def run(sql=sql, params=params):
                with connection.cursor() as cur:
                    cur.execute(sql, params)
                    cur.fetchall()

            print(f"join-based summary ratings SQL, {span} days: {_median_ms(run, args.runs):.1f} ms")
    for token in tokens:
        services.revoke_manager_token(None, token)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
