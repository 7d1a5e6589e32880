"""The analytics API (`/api/v1/analytics/…`): parse the filter, authorize, call
`analytics.queries`, serialize. Read-only, GET only.

Authentication: a Django session (the dashboard) or a manager API token (`Authorization: Token
cmk_…`, issued in the admin under "Manager API tokens", stored hashed). No credentials → 401
JSON; a user who is neither a superuser nor a team manager → 403 JSON (see `analytics.access`).
"""

from __future__ import annotations

import itertools

from django.core.handlers.asgi import ASGIRequest
from django.http import StreamingHttpResponse
from django.utils.translation import gettext_lazy as _
from django_filters import ChoiceFilter
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework.authentication import SessionAuthentication
from rest_framework.negotiation import BaseContentNegotiation
from rest_framework.permissions import IsAuthenticated
from rest_framework.response import Response
from rest_framework.views import APIView

from analytics import csv_export, queries
from analytics.access import CanReadAnalytics, Scope
from analytics.filters import (
    REQUIRED_PARAMETERS,
    AnalyticsFilterSet,
    AnalyticsQuery,
    IntegerFilter,
)
from analytics.serializers import (
    DeliveryPageSerializer,
    ErrorSerializer,
    FailuresSerializer,
    ReasonsSerializer,
    SummarySerializer,
    TrendSerializer,
    represent,
)
from botadmin.auth import ManagerTokenAuthentication
from feedback.models import Delivery
from plumbing.api import ApiError


def _parameter_schema(name: str, flt) -> dict:
    """The JSON schema of one filter parameter: its type, range, length and pattern."""
    if isinstance(flt, IntegerFilter):
        return {
            "type": "integer",
            "minimum": flt.extra["min_value"],
            "maximum": flt.extra["max_value"],
        }
    schema: dict = {"type": "string"}
    if name in REQUIRED_PARAMETERS:
        schema["minLength"] = 1
    if flt.extra.get("max_length"):
        schema["maxLength"] = flt.extra["max_length"]
    for validator in flt.extra.get("validators", []):
        if getattr(validator, "regex", None) is not None:
            schema["pattern"] = validator.regex.pattern
    return schema


def filter_parameters() -> list[OpenApiParameter]:
    """OpenAPI query parameters generated from `AnalyticsFilterSet` (one source of truth)."""
    params = []
    for name, flt in AnalyticsFilterSet.base_filters.items():
        enum = (
            [value for value, _label in flt.extra["choices"]]
            if isinstance(flt, ChoiceFilter)
            else None
        )
        params.append(
            OpenApiParameter(
                name,
                _parameter_schema(name, flt),
                OpenApiParameter.QUERY,
                required=name in REQUIRED_PARAMETERS,
                description=flt.label,
                enum=enum,
            )
        )
    return params


ERRORS = {
    400: OpenApiResponse(ErrorSerializer, description=_("Invalid parameter (named in detail).")),
    401: OpenApiResponse(ErrorSerializer, description=_("No or invalid credentials.")),
    403: OpenApiResponse(ErrorSerializer, description=_("Not a superuser or team manager.")),
}


class AnalyticsAPIView(APIView):
    """Base of the analytics endpoints: auth, scope and the parsed filter."""

    # The token scheme first, so an anonymous call is answered 401 with WWW-Authenticate.
    authentication_classes = (ManagerTokenAuthentication, SessionAuthentication)
    permission_classes = (IsAuthenticated, CanReadAnalytics)

    def analytics_query(self, request) -> AnalyticsQuery:
        """The validated filter; raises `ApiError` 400 naming the parameter."""
        filterset = AnalyticsFilterSet(
            data=request.query_params, queryset=Delivery.objects.none(), request=request
        )
        if not filterset.is_valid():
            code, detail = filterset.error_code_and_detail()
            raise ApiError(code, detail)
        return filterset.query

    def scope(self, request) -> Scope:
        return request.analytics_scope


@extend_schema(
    tags=["analytics"],
    summary="KPI figures with the previous period",
    parameters=filter_parameters(),
    responses={200: SummarySerializer, **ERRORS},
)
class SummaryView(AnalyticsAPIView):
    """Delivered, ratings, rated deliveries, coverage, positive rate and counts per semantic,
    for the range and the previous period of equal length."""

    def get(self, request):
        data = queries.summary(self.analytics_query(request), self.scope(request))
        return Response(represent(SummarySerializer, data))


GRANULARITY = OpenApiParameter(
    "granularity",
    OpenApiTypes.STR,
    OpenApiParameter.QUERY,
    enum=["day", "week"],
    description=_("Bucket size in the report zone: day (default) or ISO week."),
)


@extend_schema(
    tags=["analytics"],
    summary="Counts per local day or week",
    parameters=[*filter_parameters(), GRANULARITY],
    responses={200: TrendSerializer, **ERRORS},
)
class TrendView(AnalyticsAPIView):
    """Delivered, ratings and each semantic per day/week of the report time zone."""

    def get(self, request):
        query = self.analytics_query(request)
        granularity = request.query_params.get("granularity") or "day"
        if granularity not in ("day", "week"):
            raise ApiError("invalid_filter", {"granularity": [str(_("Use day or week."))]})
        data = queries.trend(query, self.scope(request), granularity)
        return Response(represent(TrendSerializer, data))


@extend_schema(
    tags=["analytics"],
    summary="Negative reasons",
    parameters=filter_parameters(),
    responses={200: ReasonsSerializer, **ERRORS},
)
class ReasonsView(AnalyticsAPIView):
    """Negative latest ratings by reason key, labelled from the policy snapshots."""

    def get(self, request):
        data = queries.reasons(self.analytics_query(request), self.scope(request))
        return Response(represent(ReasonsSerializer, data))


@extend_schema(
    tags=["analytics"],
    summary="Failed deliveries and failed/dead outbox rows",
    parameters=filter_parameters(),
    responses={200: FailuresSerializer, **ERRORS},
)
class FailuresView(AnalyticsAPIView):
    """Deliveries in status send_failed/failed and webhook outbox rows failed/dead."""

    def get(self, request):
        data = queries.failures(self.analytics_query(request), self.scope(request))
        return Response(represent(FailuresSerializer, data))


CURSOR = OpenApiParameter(
    "cursor",
    OpenApiTypes.STR,
    OpenApiParameter.QUERY,
    description=_(
        "Opaque cursor from `next` or `previous` of an earlier page; any other value is 400 "
        "`invalid_cursor`."
    ),
)
PAGE_SIZE = OpenApiParameter(
    "page_size",
    {
        "type": "integer",
        "minimum": 1,
        "maximum": queries.MAX_PAGE_SIZE,
        "default": queries.DEFAULT_PAGE_SIZE,
    },
    OpenApiParameter.QUERY,
    description=_("Rows per page, 1–100 (default 50)."),
)


def _refuse_ordering(request) -> None:
    """The list has one order, newest first on the unique (sent time, id); a client ordering
    on a non-unique field is what makes cursors skip or repeat rows across tied timestamps."""
    if "ordering" in request.query_params:
        raise ApiError(
            "invalid_filter",
            {"ordering": [str(_("The order is fixed: newest first (sent time, then id)."))]},
        )


def _page_args(request) -> tuple[queries.Cursor | None, int]:
    raw_size = request.query_params.get("page_size") or str(queries.DEFAULT_PAGE_SIZE)
    try:
        size = int(raw_size)
    except ValueError:
        size = 0
    if not 1 <= size <= queries.MAX_PAGE_SIZE:
        raise ApiError(
            "invalid_page_size",
            {"page_size": [str(_("Use a whole number from 1 to 100."))]},
        )
    token = request.query_params.get("cursor") or ""
    if not token:
        return None, size
    try:
        return queries.Cursor.decode(token), size
    except queries.InvalidCursor:
        raise ApiError("invalid_cursor", {"cursor": [str(_("Not a cursor from this API."))]})


@extend_schema(
    tags=["analytics"],
    summary="Drill-down: deliveries with their latest ratings",
    parameters=[*filter_parameters(), CURSOR, PAGE_SIZE],
    responses={200: DeliveryPageSerializer, **ERRORS},
)
class DeliveriesView(AnalyticsAPIView):
    """Deliveries newest first (total order: sent time, id) with their latest ratings,
    redacted; cursor pagination in both directions."""

    def get(self, request):
        query = self.analytics_query(request)
        _refuse_ordering(request)
        cursor, size = _page_args(request)
        page = queries.deliveries_page(query, self.scope(request), cursor=cursor, page_size=size)
        body = {
            "results": page.rows,
            "next": page.next,
            "previous": page.previous,
            "page_size": size,
        }
        return Response(represent(DeliveryPageSerializer, body))


class _IgnoreAccept(BaseContentNegotiation):
    """The CSV endpoint answers CSV (or a JSON error) whatever the Accept header says."""

    def select_parser(self, request, parsers):
        return parsers[0] if parsers else None

    def select_renderer(self, request, renderers, format_suffix=None):
        return renderers[0], renderers[0].media_type


@extend_schema(
    tags=["analytics"],
    summary="Drill-down as CSV (UTF-8 with BOM, streamed)",
    parameters=filter_parameters(),
    responses={
        (200, "text/csv"): OpenApiResponse(
            OpenApiTypes.STR, description=_("One line per (delivery, latest rating).")
        ),
        **ERRORS,
    },
)
class DeliveriesCsvView(AnalyticsAPIView):
    """The drill-down list of the same filter as a streamed CSV file."""

    content_negotiation_class = _IgnoreAccept

    def get(self, request):
        query = self.analytics_query(request)
        _refuse_ordering(request)
        rows = queries.iter_delivery_rows(query, self.scope(request))
        # Run the first page's query here: an error in it becomes this view's error answer.
        # Inside the streamed body it could not (nothing would be sent, not even a status).
        first = next(rows, None)
        rows = itertools.chain([first], rows) if first is not None else iter(())
        name = "cardloop-deliveries-{}-{}.csv".format(
            query.start.astimezone(query.tz).strftime("%Y%m%d"),
            query.end.astimezone(query.tz).strftime("%Y%m%d"),
        )
        chunks = csv_export.stream(rows, query.tz, csv_export.header_row())
        if isinstance(request._request, ASGIRequest):  # served by Daphne: stream asynchronously
            chunks = csv_export.astream(chunks)
        response = StreamingHttpResponse(chunks, content_type="text/csv; charset=utf-8")
        response["Content-Disposition"] = f'attachment; filename="{name}"'
        response["Cache-Control"] = "no-store"
        return response
