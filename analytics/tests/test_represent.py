"""`analytics.serializers.represent` renders every analytics response exactly as the DRF
serializer it stands for would, in any current time zone, and leaves what it cannot represent
to DRF (errors included)."""

from __future__ import annotations

import zoneinfo
from datetime import UTC, datetime, timedelta

import pytest
from django.utils import timezone

from analytics import queries
from analytics.access import Scope
from analytics.filters import AnalyticsQuery
from analytics.serializers import (
    DeliveryPageSerializer,
    FailuresSerializer,
    ReasonsSerializer,
    SummarySerializer,
    TrendSerializer,
    represent,
)
from analytics.tests.test_rollups import random_history  # noqa: F401 - the fixture


def _responses(start):
    scope = Scope(team_ids=None)
    query = AnalyticsQuery(start, start + timedelta(days=10), zoneinfo.ZoneInfo("Asia/Kathmandu"))
    page = queries.deliveries_page(query, scope, page_size=20)
    return [
        (SummarySerializer, queries.summary(query, scope)),
        (TrendSerializer, queries.trend(query, scope, "day")),
        (TrendSerializer, queries.trend(query, scope, "week")),
        (ReasonsSerializer, queries.reasons(query, scope)),
        (FailuresSerializer, queries.failures(query, scope)),
        (
            DeliveryPageSerializer,
            {"results": page.rows, "next": page.next, "previous": page.previous, "page_size": 20},
        ),
    ]


@pytest.mark.parametrize("current", ["UTC", "Asia/Shanghai", "America/New_York"])
def test_represent_equals_the_drf_serializer(random_history, current):  # noqa: F811
    responses = _responses(random_history)
    assert responses[5][1]["results"] and responses[3][1]["reasons"]
    with timezone.override(zoneinfo.ZoneInfo(current)):
        for serializer_class, data in responses:
            assert represent(serializer_class, data) == serializer_class().to_representation(data)


def test_represent_leaves_what_it_cannot_represent_to_drf():
    when = datetime(2025, 3, 1, tzinfo=UTC)
    data = {
        "range": {"from": when, "to": when, "tz": "UTC"},
        "granularity": "day",
        "buckets": [{"date": when.date(), "from": when}],  # no "to" and no counts
    }
    with pytest.raises(KeyError) as drf:
        TrendSerializer().to_representation(data)
    with pytest.raises(KeyError) as ours:
        represent(TrendSerializer, data)
    assert str(ours.value) == str(drf.value)
    naive = {"from": datetime(2025, 3, 1, 8), "to": datetime(2025, 3, 2, 8), "tz": "UTC"}
    data = {"range": naive, "granularity": "day", "buckets": []}
    assert represent(TrendSerializer, data) == TrendSerializer().to_representation(data)
