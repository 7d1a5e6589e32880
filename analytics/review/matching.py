"""Which latest ratings enter a review queue: the queue's filter, in the terms of the analytics
FilterSet (`analytics.filters`), checked and turned into a Q over `feedback.LatestFeedback`.

A filter is a JSON object of dimension → value, e.g. `{"semantic": "negative", "reason":
"inaccurate", "bot": "cli_x"}`. Keys are the analytics delivery dimensions except `team` (a
queue's teams say that) and the rating dimensions; the range parameters (`from`, `to`, `tz`)
have no meaning here. Values are checked by the same FilterSet fields as the dashboard's.
"""

from __future__ import annotations

from typing import Any

from django.db.models import Q
from django.utils.translation import gettext as _

from analytics.filters import DELIVERY_DIMENSIONS, RATING_DIMENSIONS, AnalyticsFilterSet
from feedback.models import Delivery

#: Filter keys a queue may use.
QUEUE_FILTER_KEYS = tuple(k for k in DELIVERY_DIMENSIONS if k != "team") + tuple(RATING_DIMENSIONS)
#: A range the FilterSet needs to validate the other fields; never applied.
_ANY_RANGE = {"from": "2000-01-01", "to": "2000-01-02", "tz": "UTC"}


def filter_errors(filters: Any) -> dict[str, list[str]]:
    """Problems of a queue filter as `{key: [message]}` (empty = valid): not an object, an
    unknown key, a value that is not text, or a value the analytics FilterSet refuses."""
    if not isinstance(filters, dict):
        return {
            "filters": [_('The filter must be a JSON object such as {"semantic": "negative"}.')]
        }
    errors: dict[str, list[str]] = {}
    for key, value in filters.items():
        if key not in QUEUE_FILTER_KEYS:
            errors[str(key)] = [
                _("Unknown filter key; use one of: %(keys)s.")
                % {"keys": ", ".join(QUEUE_FILTER_KEYS)}
            ]
        elif not isinstance(value, str) or not value.strip():
            errors[key] = [_("Use a non-empty text value.")]
    if errors:
        return errors
    filterset = AnalyticsFilterSet(data={**filters, **_ANY_RANGE}, queryset=Delivery.objects.none())
    if not filterset.is_valid():
        _code, detail = filterset.error_code_and_detail()
        return detail
    return {}


def latest_rating_q(filters: dict[str, str]) -> Q:
    """The filter as a Q on `LatestFeedback` (delivery dimensions through `delivery__`).
    Call only with a filter that `filter_errors` accepted."""
    q = Q()
    for key, value in filters.items():
        if key in RATING_DIMENSIONS:
            q &= Q(**{RATING_DIMENSIONS[key]: value})
        else:
            q &= Q(**{"delivery__" + DELIVERY_DIMENSIONS[key]: value})
    return q
