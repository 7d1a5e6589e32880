"""Drill-down cursor pagination over tied timestamps: every row once, none skipped or repeated."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from analytics import queries

TIED = datetime(2025, 3, 10, 12, 0, 0, tzinfo=UTC)
RANGE = {"from": "2025-03-10", "to": "2025-03-11", "tz": "UTC", "page_size": 50}


@pytest.fixture
def b18(world):
    """120 deliveries with one identical created_at plus 10 earlier ones (bulk-created)."""
    from feedback.models import Delivery

    rows = [
        Delivery(delivery_id=f"tie_{i:03d}", bot=world.bot, team=world.team_a, created_at=TIED)
        for i in range(120)
    ] + [
        Delivery(
            delivery_id=f"early_{i:03d}",
            bot=world.bot,
            team=world.team_a,
            created_at=TIED - timedelta(minutes=i + 1),
        )
        for i in range(10)
    ]
    Delivery.objects.bulk_create(rows)
    return set(Delivery.objects.values_list("delivery_id", flat=True))


def _walk(client, params, key):
    pages, cursor = [], None
    while True:
        response = client.get(
            "/api/v1/analytics/deliveries", {**params, **({"cursor": cursor} if cursor else {})}
        )
        assert response.status_code == 200, response.content
        body = response.json()
        pages.append([r["delivery_id"] for r in body["results"]])
        cursor = body[key]
        if cursor is None:
            return pages, body
        assert len(pages) < 20, "runaway pagination"


def test_walking_forward_then_back_visits_every_row_once_across_a_tie(b18, api, superuser):
    client = api(superuser)
    forward, last = _walk(client, RANGE, "next")
    assert [len(p) for p in forward] == [50, 50, 30]
    flat = [i for page in forward for i in page]
    assert len(flat) == len(set(flat)) == 130 and set(flat) == b18
    assert flat[-10:] == [f"early_{i:03d}" for i in range(10)]  # newest first

    # back from the last page with `previous` to the start
    pages, cursor = [], last["previous"]
    while cursor:
        body = client.get("/api/v1/analytics/deliveries", {**RANGE, "cursor": cursor}).json()
        pages.append([r["delivery_id"] for r in body["results"]])
        cursor = body["previous"]
    back = [i for page in reversed(pages) for i in page] + forward[-1]
    assert [len(p) for p in pages] == [50, 50]
    assert back == flat  # same rows, same order, no gap, no repeat


def test_previous_of_a_page_reached_backwards_has_a_next_that_returns_forward(b18, api, superuser):
    client = api(superuser)
    first = client.get("/api/v1/analytics/deliveries", RANGE).json()
    assert first["previous"] is None
    second = client.get("/api/v1/analytics/deliveries", {**RANGE, "cursor": first["next"]}).json()
    back = client.get(
        "/api/v1/analytics/deliveries", {**RANGE, "cursor": second["previous"]}
    ).json()
    assert [r["delivery_id"] for r in back["results"]] == [
        r["delivery_id"] for r in first["results"]
    ]
    assert back["previous"] is None
    again = client.get("/api/v1/analytics/deliveries", {**RANGE, "cursor": back["next"]}).json()
    assert again["results"] == second["results"]


def test_order_is_time_then_id_descending(b18, superuser):
    from analytics.access import Scope
    from analytics.filters import AnalyticsQuery
    from feedback.models import Delivery

    query = AnalyticsQuery(TIED - timedelta(hours=1), TIED + timedelta(hours=1), UTC, {}, {})
    rows = list(queries.iter_delivery_rows(query, Scope(None), chunk=7))
    expected = list(
        Delivery.objects.order_by("-created_at", "-id").values_list("delivery_id", flat=True)
    )
    assert [r["delivery_id"] for r in rows] == expected


def test_cursor_round_trips_microseconds():
    when = datetime(2025, 3, 10, 12, 0, 0, 123456, tzinfo=UTC)
    cursor = queries.Cursor(when, 42, "previous")
    assert queries.Cursor.decode(cursor.encode()) == cursor
    for bad in ("", "e30", "!!!", "eyJ0IjoxLCJpIjoxLCJkIjoieCJ9"):
        with pytest.raises(queries.InvalidCursor):
            queries.Cursor.decode(bad)


@pytest.mark.parametrize("endpoint", ["deliveries", "deliveries.csv"])
def test_client_ordering_is_refused(api, superuser, endpoint):
    response = api(superuser).get(
        f"/api/v1/analytics/{endpoint}", {**RANGE, "ordering": "created_at"}
    )
    assert response.status_code == 400
    assert "ordering" in response.json()["detail"]


def test_filterset_qs_is_the_drill_down_population(b18, world, make_delivery, rate, superuser):
    from analytics.access import Scope
    from analytics.filters import AnalyticsFilterSet
    from feedback.models import Delivery

    rated = Delivery.objects.get(delivery_id="tie_007")
    rate(rated, "ou_1", "wrong", reason="too_slow")
    for params in (
        {"from": "2025-03-10", "to": "2025-03-11", "tz": "UTC"},
        {"from": "2025-03-10", "to": "2025-03-11", "tz": "UTC", "reason": "too_slow"},
    ):
        fs = AnalyticsFilterSet(data=params, queryset=Delivery.objects.all())
        assert fs.is_valid(), fs.errors
        assert set(fs.qs.values_list("id", flat=True)) == set(
            queries.listed_deliveries(fs.query, Scope(None)).values_list("id", flat=True)
        )
    assert list(fs.qs.values_list("delivery_id", flat=True)) == ["tie_007"]
