"""Analytics stay comparable when answers offer the agent's own options: totals group by
semantic, and the per-key breakdown names each key with its label from the delivery's snapshot
(configured or proposed), in the reader's language."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from analytics.tests import conftest as fixtures

CONFIGURED_DAY = {"from": "2025-03-10", "to": "2025-03-11", "tz": "UTC"}
PROPOSED_DAY = {"from": "2025-03-12", "to": "2025-03-13", "tz": "UTC"}
PROPOSED = {
    **fixtures.SNAPSHOT,
    "buttons": [
        {
            "key": "plan_ok",
            "label": "方案可行",
            "label_en": "Plan works",
            "semantic": "positive",
            "style": "primary",
        },
        {"key": "plan_partial", "label": "部分可行", "semantic": "progress", "style": "default"},
        {"key": "plan_wrong", "label": "方案不对", "semantic": "negative", "style": "default"},
    ],
    "feedback_options_used": "buttons",
}
#: the same ratings by semantic: two positive, one progress, one negative
PATTERN = ("positive", "positive", "progress", "negative")


@pytest.fixture
def rated(make_delivery, rate, monkeypatch):
    for button in PROPOSED["buttons"]:
        monkeypatch.setitem(fixtures.SEMANTIC_OF, button["key"], button["semantic"])
    configured = {b["semantic"]: b["key"] for b in fixtures.SNAPSHOT["buttons"]}
    proposed = {b["semantic"]: b["key"] for b in PROPOSED["buttons"]}
    for day, snapshot, keys in ((10, fixtures.SNAPSHOT, configured), (12, PROPOSED, proposed)):
        for hour, semantic in enumerate(PATTERN):
            delivery = make_delivery(at=datetime(2025, 3, day, hour, tzinfo=UTC), snapshot=snapshot)
            rate(delivery, f"ou_{day}_{hour}", keys[semantic])


def test_totals_are_equal_with_and_without_proposed_options(rated, superuser, api):
    client = api(superuser)
    configured = client.get("/api/v1/analytics/summary", CONFIGURED_DAY).json()
    proposed = client.get("/api/v1/analytics/summary", PROPOSED_DAY).json()
    figures = ("delivered", "ratings", "rated_deliveries", "positive", "progress", "negative")
    assert [configured["current"][f] for f in figures] == [4, 4, 4, 2, 1, 1]
    assert [proposed["current"][f] for f in figures] == [configured["current"][f] for f in figures]
    assert proposed["current"]["positive_rate"] == configured["current"]["positive_rate"]
    for summary in (configured, proposed):
        for semantic in ("positive", "progress", "negative"):
            assert (
                sum(v["count"] for v in summary["verdicts"] if v["semantic"] == semantic)
                == summary["current"][semantic]
            )


def test_the_per_key_breakdown_names_proposed_keys_with_their_snapshot_labels(
    rated, superuser, api
):
    client = api(superuser)
    zh = client.get("/api/v1/analytics/summary", PROPOSED_DAY, HTTP_ACCEPT_LANGUAGE="zh-hans")
    assert zh.json()["verdicts"] == [
        {"key": "plan_ok", "label": "方案可行", "semantic": "positive", "count": 2},
        {"key": "plan_partial", "label": "部分可行", "semantic": "progress", "count": 1},
        {"key": "plan_wrong", "label": "方案不对", "semantic": "negative", "count": 1},
    ]
    en = client.get("/api/v1/analytics/summary", PROPOSED_DAY, HTTP_ACCEPT_LANGUAGE="en")
    assert [v["label"] for v in en.json()["verdicts"]] == ["Plan works", "部分可行", "方案不对"]
    rows = client.get("/api/v1/analytics/deliveries", PROPOSED_DAY, HTTP_ACCEPT_LANGUAGE="en")
    labels = {r["verdict_label"] for row in rows.json()["results"] for r in row["ratings"]}
    assert labels == {"Plan works", "部分可行", "方案不对"}
