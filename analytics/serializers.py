"""Response shapes of the analytics API (output only; they render the dicts built by
`analytics.queries` and document them in the OpenAPI schema)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from django.conf import settings
from django.utils import timezone
from django.utils.translation import gettext_lazy as _
from rest_framework import ISO_8601, serializers
from rest_framework.settings import api_settings

from feedback.models import Delivery, Semantic

#: serializer class → its one bound instance, reused by `represent`.
_BOUND: dict[type[serializers.Serializer], serializers.Serializer] = {}
#: serializer class → its representation compiled to plain functions (`_compile`).
_COMPILED: dict[type[serializers.Serializer], Callable[[Any, Any], dict[str, Any]]] = {}


def represent(serializer_class: type[serializers.Serializer], data: Any) -> dict[str, Any]:
    """`serializer_class(data).data` without DRF's per-field machinery: returns the plain dict
    DRF would have rendered.

    DRF deep-copies every declared field of a serializer and of each nested one when it
    creates one, and then calls two methods per field and value (a year-long trend is 366
    buckets of ten fields; each date-time asks for the current time zone again). The response
    shapes here are dicts of plain values and take no context, so each class is bound once and
    compiled once into plain functions per field (`_compile`): integers, floats and strings are
    converted as DRF converts them, date-times with the time zone read once per call; any other
    field is left to its own `to_representation`. Should the fast path raise (a missing key, a
    value DRF would refuse), the response is represented by DRF itself, error included.
    """
    bound = _BOUND.get(serializer_class)
    if bound is None:
        bound = _BOUND.setdefault(serializer_class, serializer_class())
    compiled = _COMPILED.get(serializer_class)
    if compiled is None:
        try:
            made = _compile(bound)
        except ValueError:  # a field the fast path does not read (a `source`): DRF's own way

            def made(data, _zone, bound=bound):
                return bound.to_representation(data)

        compiled = _COMPILED.setdefault(serializer_class, made)
    zone = timezone.get_current_timezone() if settings.USE_TZ else None
    try:
        return compiled(data, zone)
    except Exception:  # noqa: BLE001 - DRF represents it again and raises its own error
        return bound.to_representation(data)


def _compile(serializer: serializers.BaseSerializer) -> Callable[[Any, Any], Any]:
    """`(data, current zone) → representation` of a bound serializer (see `represent`)."""
    if isinstance(serializer, serializers.ListSerializer):
        child = _compile(serializer.child)
        return lambda data, zone: [child(item, zone) for item in data]
    parts = []
    for field in serializer._readable_fields:
        if field.source_attrs != [field.field_name]:
            raise ValueError(f"{type(serializer).__name__}.{field.field_name}: a source")
        parts.append((field.field_name, _convert(field)))

    def represent_one(data: Any, zone: Any) -> dict[str, Any]:
        if not isinstance(data, Mapping):
            raise TypeError(type(data))
        out = {}
        for name, convert in parts:
            value = data[name]
            out[name] = None if value is None else convert(value, zone)
        return out

    return represent_one


def _convert(field: serializers.Field) -> Callable[[Any, Any], Any]:
    """`(non-None value, current zone) → representation` of one field, as DRF's
    `to_representation` (exact classes only: a subclass may represent differently)."""
    kind = type(field)
    if isinstance(field, serializers.BaseSerializer):
        return _compile(field)
    if kind is serializers.IntegerField:
        return lambda value, zone: int(value)
    if kind is serializers.FloatField:
        return lambda value, zone: float(value)
    if kind is serializers.CharField:
        return lambda value, zone: str(value)
    if kind is serializers.DateTimeField and _is_iso(field, api_settings.DATETIME_FORMAT):
        own = getattr(field, "timezone", _CURRENT)
        to_representation = field.to_representation

        def datetime_value(value: Any, zone: Any) -> Any:
            target = zone if own is _CURRENT else own
            if type(value) is not datetime or value.utcoffset() is None or target is None:
                return to_representation(value)
            text = value.astimezone(target).isoformat()
            return text[:-6] + "Z" if text.endswith("+00:00") else text

        return datetime_value
    to_representation = field.to_representation
    return lambda value, zone: to_representation(value)


#: A date-time field without its own `timezone` uses the current one.
_CURRENT = object()


def _is_iso(field: serializers.Field, default: str | None) -> bool:
    output_format = getattr(field, "format", default)
    return isinstance(output_format, str) and output_format.lower() == ISO_8601


class ErrorSerializer(serializers.Serializer):
    """`{"error": code, "detail": message or {parameter: [messages]}}`."""

    error = serializers.CharField()
    detail = serializers.JSONField()


class RateSerializer(serializers.Serializer):
    """A rate with its parts; `value` is null when the denominator is 0."""

    numerator = serializers.IntegerField()
    denominator = serializers.IntegerField()
    value = serializers.FloatField(allow_null=True)


class PeriodSerializer(serializers.Serializer):
    """A half-open period `[from, to)` in UTC."""

    locals()["from"] = serializers.DateTimeField()
    to = serializers.DateTimeField()


class RangeSerializer(PeriodSerializer):
    """The requested range and the report time zone."""

    tz = serializers.CharField()


class FiguresSerializer(serializers.Serializer):
    delivered = serializers.IntegerField(help_text=_("Deliveries sent in the range, any status."))
    feedback_shown = serializers.IntegerField(help_text=_("Delivered with feedback buttons shown."))
    ratings = serializers.IntegerField(
        help_text=_("Latest ratings (one per delivery and operator).")
    )
    rated_deliveries = serializers.IntegerField(help_text=_("Deliveries with at least one rating."))
    positive = serializers.IntegerField()
    progress = serializers.IntegerField()
    negative = serializers.IntegerField()
    coverage = RateSerializer(help_text=_("rated_deliveries / delivered"))
    positive_rate = RateSerializer(help_text=_("positive / ratings"))


class DeltaSerializer(serializers.Serializer):
    delivered = serializers.IntegerField()
    feedback_shown = serializers.IntegerField()
    ratings = serializers.IntegerField()
    rated_deliveries = serializers.IntegerField()
    positive = serializers.IntegerField()
    progress = serializers.IntegerField()
    negative = serializers.IntegerField()
    coverage = serializers.FloatField(allow_null=True)
    positive_rate = serializers.FloatField(allow_null=True)


class VerdictCountSerializer(serializers.Serializer):
    key = serializers.CharField()
    label = serializers.CharField(
        help_text=_(
            "From the newest delivery's policy snapshot (configured or proposed by the agent), "
            "in the reader's language."
        )
    )
    semantic = serializers.ChoiceField(choices=Semantic.choices)
    count = serializers.IntegerField()


class SummarySerializer(serializers.Serializer):
    range = RangeSerializer()
    previous_range = PeriodSerializer()
    current = FiguresSerializer()
    previous = FiguresSerializer()
    delta = DeltaSerializer(help_text=_("current − previous; rate deltas are null when either is."))
    verdicts = VerdictCountSerializer(
        many=True,
        help_text=_(
            "Latest ratings of the range per button key; the counts of one semantic add up to "
            "current's count of that semantic."
        ),
    )


class TrendBucketSerializer(serializers.Serializer):
    date = serializers.DateField(help_text=_("Local date the bucket starts on (Monday for weeks)."))
    locals()["from"] = serializers.DateTimeField()
    to = serializers.DateTimeField()
    delivered = serializers.IntegerField()
    ratings = serializers.IntegerField()
    rated_deliveries = serializers.IntegerField()
    positive = serializers.IntegerField()
    progress = serializers.IntegerField()
    negative = serializers.IntegerField()


class TrendSerializer(serializers.Serializer):
    range = RangeSerializer()
    granularity = serializers.ChoiceField(choices=["day", "week"])
    buckets = TrendBucketSerializer(many=True)


class ReasonSerializer(serializers.Serializer):
    key = serializers.CharField()
    label = serializers.CharField(help_text=_("From the newest delivery's policy snapshot."))
    count = serializers.IntegerField()
    share = RateSerializer(help_text=_("count / negative_ratings"))


class ReasonsSerializer(serializers.Serializer):
    range = RangeSerializer()
    negative_ratings = serializers.IntegerField()
    without_reason = serializers.IntegerField()
    reasons = ReasonSerializer(many=True)


class ErrorCodeCountSerializer(serializers.Serializer):
    error_code = serializers.CharField()
    count = serializers.IntegerField()


class DeliveryFailureStatusSerializer(serializers.Serializer):
    send_failed = serializers.IntegerField()
    failed = serializers.IntegerField()


class DeliveryFailuresSerializer(serializers.Serializer):
    failed = serializers.IntegerField()
    by_status = DeliveryFailureStatusSerializer()
    rate = RateSerializer(help_text=_("failed / delivered"))
    top_error_codes = ErrorCodeCountSerializer(many=True)


class OutboxStatusSerializer(serializers.Serializer):
    failed = serializers.IntegerField()
    dead = serializers.IntegerField()


class DestinationCountSerializer(serializers.Serializer):
    destination_id = serializers.IntegerField()
    name = serializers.CharField()
    count = serializers.IntegerField()


class EventTypeCountSerializer(serializers.Serializer):
    event_type = serializers.CharField()
    count = serializers.IntegerField()


class OutboxFailuresSerializer(serializers.Serializer):
    failed = serializers.IntegerField()
    by_status = OutboxStatusSerializer()
    by_destination = DestinationCountSerializer(many=True)
    by_event_type = EventTypeCountSerializer(many=True)


class FailuresSerializer(serializers.Serializer):
    range = RangeSerializer()
    deliveries = DeliveryFailuresSerializer()
    outbox = OutboxFailuresSerializer()


class TeamRefSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    name = serializers.CharField()


class BotRefSerializer(serializers.Serializer):
    app_id = serializers.CharField()
    name = serializers.CharField()


class RatingSerializer(serializers.Serializer):
    """A latest rating, redacted: no operator open_id, no comment."""

    semantic = serializers.ChoiceField(choices=Semantic.choices)
    verdict_key = serializers.CharField()
    verdict_label = serializers.CharField()
    reason_key = serializers.CharField(allow_blank=True)
    reason_label = serializers.CharField(allow_blank=True)
    revision = serializers.IntegerField(help_text=_("Position in the operator's revision chain."))
    rated_at = serializers.DateTimeField()


class DeliveryRowSerializer(serializers.Serializer):
    """A delivery of the drill-down, redacted: no card, answer, requester or secret."""

    delivery_id = serializers.CharField()
    sent_at = serializers.DateTimeField()
    status = serializers.ChoiceField(choices=Delivery.Status.choices)
    channel = serializers.ChoiceField(choices=Delivery.Channel.choices)
    team = TeamRefSerializer(allow_null=True)
    bot = BotRefSerializer()
    chat_id = serializers.CharField(allow_blank=True)
    topic_id = serializers.CharField(allow_blank=True)
    model = serializers.CharField(allow_blank=True)
    cli_id = serializers.CharField(allow_blank=True)
    cli_version = serializers.CharField(allow_blank=True)
    skill_name = serializers.CharField(allow_blank=True)
    skill_version = serializers.CharField(allow_blank=True)
    workflow_id = serializers.CharField(allow_blank=True)
    task_id = serializers.CharField(allow_blank=True)
    session_id = serializers.CharField(allow_blank=True)
    turn_id = serializers.CharField(allow_blank=True)
    response_kind = serializers.ChoiceField(choices=Delivery.ResponseKind.choices)
    feedback_shown = serializers.BooleanField()
    error_code = serializers.CharField(allow_blank=True)
    ratings = RatingSerializer(many=True)


class DeliveryPageSerializer(serializers.Serializer):
    results = DeliveryRowSerializer(many=True)
    next = serializers.CharField(allow_null=True, help_text=_("Cursor of the older page."))
    previous = serializers.CharField(allow_null=True, help_text=_("Cursor of the newer page."))
    page_size = serializers.IntegerField()
