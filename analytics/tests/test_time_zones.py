"""Report time zone: local-midnight buckets, DST days, previous period (local days never drift across a DST change)."""

from __future__ import annotations

import zoneinfo
from datetime import UTC, date, datetime, timedelta

import pytest

from analytics import periods

SHANGHAI = zoneinfo.ZoneInfo("Asia/Shanghai")
NEW_YORK = zoneinfo.ZoneInfo("America/New_York")


def test_a_date_boundary_is_local_midnight_converted_to_utc():
    assert periods.parse_boundary("2025-03-01", SHANGHAI) == datetime(2025, 2, 28, 16, tzinfo=UTC)
    assert periods.parse_boundary("2025-03-01T08:00", SHANGHAI) == datetime(
        2025, 3, 1, 0, tzinfo=UTC
    )
    assert periods.parse_boundary("2025-03-01T08:00Z", SHANGHAI) == datetime(
        2025, 3, 1, 8, tzinfo=UTC
    )
    with pytest.raises(ValueError):
        periods.parse_boundary("yesterday", SHANGHAI)


def test_unknown_zone_names_are_refused():
    for bad in ("Mars/Olympus", "CST8CDT ", "../../etc/passwd", "+08:00", ""):
        with pytest.raises(periods.UnknownZone):
            periods.resolve_zone(bad)
    assert periods.resolve_zone("UTC").key == "UTC"


def test_new_york_dst_day_is_one_23_hour_bucket_and_fall_back_day_one_25_hour_bucket():
    start = periods.parse_boundary("2025-03-08", NEW_YORK)
    end = periods.parse_boundary("2025-03-11", NEW_YORK)
    spring = periods.buckets(start, end, NEW_YORK, "day")
    assert [b.label for b in spring] == [date(2025, 3, 8), date(2025, 3, 9), date(2025, 3, 10)]
    assert [b.end - b.start for b in spring] == [
        timedelta(hours=24),
        timedelta(hours=23),
        timedelta(hours=24),
    ]
    autumn = periods.buckets(
        periods.parse_boundary("2025-11-02", NEW_YORK),
        periods.parse_boundary("2025-11-03", NEW_YORK),
        NEW_YORK,
        "day",
    )
    assert len(autumn) == 1 and autumn[0].end - autumn[0].start == timedelta(hours=25)


def test_week_buckets_start_on_local_monday_and_are_clipped_to_the_range():
    start = periods.parse_boundary("2025-03-05", SHANGHAI)  # a Wednesday
    end = periods.parse_boundary("2025-03-18", SHANGHAI)
    weeks = periods.buckets(start, end, SHANGHAI, "week")
    assert [w.label for w in weeks] == [date(2025, 3, 3), date(2025, 3, 10), date(2025, 3, 17)]
    assert weeks[0].start == start and weeks[-1].end == end
    assert len(weeks[1].days) == 7 and weeks[2].days == (date(2025, 3, 17),)


def test_previous_period_has_equal_local_length_across_dst():
    start = periods.parse_boundary("2025-03-09", NEW_YORK)
    end = periods.parse_boundary("2025-03-16", NEW_YORK)
    prev_start, prev_end = periods.previous_period(start, end, NEW_YORK)
    assert prev_end == start
    assert prev_start == periods.parse_boundary("2025-03-02", NEW_YORK)


def test_range_span_is_measured_in_local_days():
    start = periods.parse_boundary("2024-03-01", NEW_YORK)
    assert not periods.exceeds_max_span(
        start, periods.parse_boundary("2025-03-02", NEW_YORK), NEW_YORK
    )
    assert periods.exceeds_max_span(start, periods.parse_boundary("2025-03-03", NEW_YORK), NEW_YORK)


# --- through the API, on the real database (a DST day replayed end to end) -------------------


@pytest.fixture
def b19(make_delivery, rate):
    late = make_delivery(at=datetime(2025, 3, 1, 15, 59, 59, tzinfo=UTC))  # 03-01 23:59:59 +08
    early = make_delivery(at=datetime(2025, 3, 1, 16, 30, tzinfo=UTC))  # 03-02 00:30 +08
    rate(late, "ou_a", "conclusive_usable")
    rate(early, "ou_a", "wrong")
    rate(early, "ou_b", "partly")
    return late, early


def _trend(client, **params):
    response = client.get("/api/v1/analytics/trend", params)
    assert response.status_code == 200, response.content
    return {b["date"]: b for b in response.json()["buckets"]}


def test_shanghai_buckets_split_at_local_midnight(b19, api, superuser):
    days = _trend(
        api(superuser), **{"from": "2025-03-01", "to": "2025-03-03", "tz": "Asia/Shanghai"}
    )
    assert {d: b["delivered"] for d, b in days.items()} == {"2025-03-01": 1, "2025-03-02": 1}
    assert days["2025-03-01"]["positive"] == 1
    assert (days["2025-03-02"]["negative"], days["2025-03-02"]["progress"]) == (1, 1)
    assert days["2025-03-01"]["from"] == "2025-02-28T16:00:00Z"


def test_utc_buckets_put_both_on_the_first_and_keep_the_empty_day(b19, api, superuser):
    days = _trend(api(superuser), **{"from": "2025-03-01", "to": "2025-03-03", "tz": "UTC"})
    assert {d: b["delivered"] for d, b in days.items()} == {"2025-03-01": 2, "2025-03-02": 0}
    assert days["2025-03-02"] == {
        "date": "2025-03-02",
        "from": "2025-03-02T00:00:00Z",
        "to": "2025-03-03T00:00:00Z",
        "delivered": 0,
        "ratings": 0,
        "rated_deliveries": 0,
        "positive": 0,
        "progress": 0,
        "negative": 0,
    }


def test_new_york_range_across_dst_has_one_bucket_per_day(make_delivery, api, superuser):
    # 2025-03-09 is 23 hours long in New York: 05:00Z (00:00 EST) to 04:00Z next day (00:00 EDT)
    make_delivery(at=datetime(2025, 3, 9, 5, 0, tzinfo=UTC))  # 03-09 00:00 local
    make_delivery(at=datetime(2025, 3, 10, 3, 59, tzinfo=UTC))  # 03-09 23:59 EDT
    make_delivery(at=datetime(2025, 3, 10, 4, 0, tzinfo=UTC))  # 03-10 00:00 EDT
    days = _trend(
        api(superuser), **{"from": "2025-03-08", "to": "2025-03-11", "tz": "America/New_York"}
    )
    assert {d: b["delivered"] for d, b in days.items()} == {
        "2025-03-08": 0,
        "2025-03-09": 2,
        "2025-03-10": 1,
    }
    assert (days["2025-03-09"]["from"], days["2025-03-09"]["to"]) == (
        "2025-03-09T05:00:00Z",
        "2025-03-10T04:00:00Z",
    )


def test_zone_names_that_look_like_offsets_bucket_correctly(make_delivery, api, superuser):
    # Etc/GMT+10 is UTC−10 (POSIX sign); the database must not read it as UTC+10.
    make_delivery(at=datetime(2025, 3, 2, 9, 59, tzinfo=UTC))  # 03-01 23:59 local
    make_delivery(at=datetime(2025, 3, 2, 10, 0, tzinfo=UTC))  # 03-02 00:00 local
    days = _trend(api(superuser), **{"from": "2025-03-01", "to": "2025-03-03", "tz": "Etc/GMT+10"})
    assert {d: b["delivered"] for d, b in days.items()} == {"2025-03-01": 1, "2025-03-02": 1}


@pytest.mark.parametrize("name", ["localtime", "Factory", "posixrules"])
def test_names_in_the_zone_database_that_are_not_places_are_400(api, superuser, name):
    """`localtime` would be whatever zone the server's machine is set to."""
    response = api(superuser).get(
        "/api/v1/analytics/trend", {"from": "2025-03-01", "to": "2025-03-02", "tz": name}
    )
    assert response.status_code == 400 and response.json()["error"] == "unknown_tz"


def test_unknown_tz_is_400_naming_tz(api, superuser):
    response = api(superuser).get(
        "/api/v1/analytics/trend", {"from": "2025-03-01", "to": "2025-03-02", "tz": "Mars/Base"}
    )
    assert response.status_code == 400
    assert response.json()["error"] == "unknown_tz"
    assert "tz" in response.json()["detail"]


def test_default_zone_is_the_report_zone_setting(b19, api, superuser, settings):
    settings.CARDLOOP_REPORT_TZ = "Asia/Shanghai"
    body = (
        api(superuser)
        .get("/api/v1/analytics/trend", {"from": "2025-03-01", "to": "2025-03-03"})
        .json()
    )
    assert body["range"]["tz"] == "Asia/Shanghai"
    assert [b["delivered"] for b in body["buckets"]] == [1, 1]


def test_half_hour_zone_splits_at_its_own_midnight(make_delivery, api, superuser):
    # Asia/Kolkata is UTC+05:30: local midnight of 03-02 is 03-01 18:30Z.
    make_delivery(at=datetime(2025, 3, 1, 18, 29, 59, tzinfo=UTC))
    make_delivery(at=datetime(2025, 3, 1, 18, 30, tzinfo=UTC))
    days = _trend(
        api(superuser), **{"from": "2025-03-01", "to": "2025-03-03", "tz": "Asia/Kolkata"}
    )
    assert {d: b["delivered"] for d, b in days.items()} == {"2025-03-01": 1, "2025-03-02": 1}


def test_an_unaligned_range_start_still_buckets_by_local_day(make_delivery, api, superuser):
    make_delivery(at=datetime(2025, 3, 1, 10, 7, 59, tzinfo=UTC))  # before the range
    make_delivery(at=datetime(2025, 3, 1, 10, 8, 1, tzinfo=UTC))
    make_delivery(at=datetime(2025, 3, 1, 16, 0, 0, tzinfo=UTC))  # 03-02 00:00 Shanghai
    days = _trend(
        api(superuser),
        **{"from": "2025-03-01T10:08:00Z", "to": "2025-03-03", "tz": "Asia/Shanghai"},
    )
    assert {d: b["delivered"] for d, b in days.items()} == {"2025-03-01": 1, "2025-03-02": 1}
    assert days["2025-03-01"]["from"] == "2025-03-01T10:08:00Z"


@pytest.mark.postgres
def test_postgresql_groups_aligned_ranges_by_utc_slots_and_others_per_row(db):
    from analytics import queries
    from analytics.filters import AnalyticsQuery

    def grouping(start, tz):
        zone = zoneinfo.ZoneInfo(tz)
        q = AnalyticsQuery(
            periods.parse_boundary(start, zone), periods.parse_boundary("2025-03-10", zone), zone
        )
        plan = periods.buckets(q.start, q.end, zone, "day")
        return queries._slot_seconds(q, plan), plan

    assert grouping("2025-03-01", "Asia/Shanghai")[0] == 86400
    assert grouping("2025-03-01", "Asia/Kolkata")[0] == 86400
    assert grouping("2025-03-01", "America/New_York")[0] == 3600  # hours across DST
    assert grouping("2025-03-01T10:15:00", "Asia/Shanghai")[0] == 900  # clipped first day
    assert grouping("2025-03-01T10:07:13", "Asia/Shanghai")[0] is None  # per row
