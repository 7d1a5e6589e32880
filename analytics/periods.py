"""Report time zone, range boundaries and trend buckets: pure functions, no database.

Rules (a report is read in one time zone, and local days must not drift across DST changes):
- every range is half-open `[start, end)` in absolute time; a bare date (`2025-03-01`) means
  local midnight of that day in the report zone, a naive datetime is read in the report zone,
  an aware one keeps its offset;
- a day bucket is one local calendar day, from local midnight to the next local midnight
  converted to UTC, so a DST day is one 23- or 25-hour bucket and nothing moves to a
  neighbouring day; a week bucket is Monday 00:00 to the next Monday 00:00 local;
- the previous period has the same length in local wall-clock time and ends where the range
  starts, so a 30-day range of local midnights is compared with the 30 local days before it.
"""

from __future__ import annotations

import zoneinfo
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from functools import lru_cache

#: The longest range accepted (366 days, so a leap year fits).
MAX_RANGE_DAYS = 366


class UnknownZone(ValueError):
    """The name is not an IANA time zone known to this machine."""


#: Names the system's zone database lists that are not zones a reader means: `localtime` is
#: whatever zone the server's machine is set to, `Factory` a placeholder without a place.
NOT_ZONES = frozenset({"localtime", "Factory", "posixrules"})


@lru_cache(maxsize=1)
def known_zones() -> frozenset[str]:
    """The IANA zone names a `tz` parameter may take (`zoneinfo.available_timezones()`, plus
    `UTC`, without `NOT_ZONES`). Read once per process: listing them walks the zone database's
    directory tree, a few milliseconds on every request otherwise."""
    return (frozenset(zoneinfo.available_timezones()) | {"UTC"}) - NOT_ZONES


def resolve_zone(name: str) -> zoneinfo.ZoneInfo:
    """The `ZoneInfo` for an IANA name (`Asia/Shanghai`, `UTC`).

    Raises `UnknownZone` for anything else (abbreviations such as `CST`, offsets, paths), so a
    bad `tz` parameter is a 400 and never reaches the database.
    """
    if not isinstance(name, str) or name not in known_zones():
        raise UnknownZone(name)
    return zoneinfo.ZoneInfo(name)


def local_midnight(day: date, tz: zoneinfo.ZoneInfo) -> datetime:
    """The first instant of local calendar day `day` in `tz`, as an aware UTC datetime.

    Where midnight does not exist (a DST gap at 00:00) the day starts at the end of the gap;
    where it exists twice, at the first one (zoneinfo's fold=0 rule gives both).
    """
    return datetime.combine(day, time(0), tzinfo=tz).astimezone(UTC)


#: `from`/`to` must lie in [EARLIEST, LATEST]: far enough from datetime.min/max that the
#: span check (+MAX_RANGE_DAYS) and the previous period (−span) cannot overflow.
EARLIEST = datetime(1970, 1, 1, tzinfo=UTC)
LATEST = datetime(9000, 1, 1, tzinfo=UTC)


class OutOfRange(ValueError):
    """A `from`/`to` value that parses but lies outside [EARLIEST, LATEST]."""


def parse_boundary(value: str, tz: zoneinfo.ZoneInfo) -> datetime:
    """Parse a `from`/`to` value into an aware UTC datetime.

    Accepts `YYYY-MM-DD` (local midnight in `tz`) or an ISO 8601 datetime (naive → read in
    `tz`; `Z` or an offset → kept). Raises `OutOfRange` (a `ValueError`) outside
    [EARLIEST, LATEST] and `ValueError` for anything else.
    """
    text = (value or "").strip()
    if not text:
        raise ValueError("empty")
    try:
        if len(text) == 10:
            result = local_midnight(date.fromisoformat(text), tz)
        else:
            parsed = datetime.fromisoformat(text.replace("z", "Z"))
            if parsed.tzinfo is None:
                parsed = parsed.replace(tzinfo=tz)
            result = parsed.astimezone(UTC)
    except OverflowError:  # e.g. 0001-01-01 at +08:00 is before datetime.min in UTC
        raise OutOfRange(text) from None
    if not EARLIEST <= result <= LATEST:
        raise OutOfRange(text)
    return result


def exceeds_max_span(start: datetime, end: datetime, tz: zoneinfo.ZoneInfo) -> bool:
    """True when `[start, end)` is longer than MAX_RANGE_DAYS local days (wall-clock, so a
    range of 366 local midnights across a DST change is still allowed)."""
    limit = start.astimezone(tz) + timedelta(days=MAX_RANGE_DAYS)  # wall-clock arithmetic
    return end > limit.astimezone(UTC)


def previous_period(
    start: datetime, end: datetime, tz: zoneinfo.ZoneInfo
) -> tuple[datetime, datetime]:
    """The period of equal local wall-clock length that ends at `start`: `(prev_start, start)`.

    Example (Asia/Shanghai): `[2025-03-01, 2025-03-31)` → `[2025-01-30, 2025-03-01)` local.
    """
    local_start, local_end = start.astimezone(tz), end.astimezone(tz)
    wall = local_end.replace(tzinfo=None) - local_start.replace(tzinfo=None)
    prev_local = (local_start.replace(tzinfo=None) - wall).replace(tzinfo=tz)
    return prev_local.astimezone(UTC), start


@dataclass(frozen=True)
class Bucket:
    """One trend bucket: `label` is the local date it starts on (the Monday for weeks);
    `start`/`end` are UTC instants clipped to the requested range; `days` lists the local
    dates it covers (what the database groups by)."""

    label: date
    start: datetime
    end: datetime
    days: tuple[date, ...]


def buckets(
    start: datetime, end: datetime, tz: zoneinfo.ZoneInfo, granularity: str
) -> list[Bucket]:
    """Every day (`granularity="day"`) or ISO week (`"week"`, Monday first) that intersects
    `[start, end)` in `tz`, in order, empty ones included. Raises `ValueError` for another
    granularity. A pure function of its arguments, so the plans of recent ranges are kept
    (a year of days is ~730 time-zone conversions; the dashboard asks for the same range
    again and again)."""
    if granularity not in ("day", "week"):
        raise ValueError(granularity)
    # Equal instants in other zones are equal keys: the zones are part of the key too.
    return list(_buckets(start, end, tz, granularity, start.tzinfo, end.tzinfo))


@lru_cache(maxsize=64)
def _buckets(
    start: datetime, end: datetime, tz: zoneinfo.ZoneInfo, granularity: str, *_zones
) -> tuple[Bucket, ...]:
    first = start.astimezone(tz).date()
    last = (end - timedelta(microseconds=1)).astimezone(tz).date()
    days: list[date] = []
    day = first
    while day <= last:
        days.append(day)
        day += timedelta(days=1)
    groups: dict[date, list[date]] = {}
    for day in days:
        key = day if granularity == "day" else day - timedelta(days=day.weekday())
        groups.setdefault(key, []).append(day)
    result = []
    for label, members in groups.items():
        span = 1 if granularity == "day" else 7
        b_start = max(local_midnight(label, tz), start)
        b_end = min(local_midnight(label + timedelta(days=span), tz), end)
        result.append(Bucket(label=label, start=b_start, end=b_end, days=tuple(members)))
    return tuple(result)
