"""Response shapes of the analytics API (output only; they render the dicts built by
`analytics.queries` and document them in the OpenAPI schema)."""

from __future__ import annotations

from typing import Any

from django.utils.translation import gettext_lazy as _
from rest_framework import serializers

from feedback.models import Delivery, Semantic

#: serializer class → its one bound instance, reused by `represent`.
_BOUND: dict[type[serializers.Serializer], serializers.Serializer] = {}


def represent(serializer_class: type[serializers.Serializer], data: Any) -> dict[str, Any]:
    """`serializer_class(data).data` without building a serializer per call: DRF deep-copies
    every declared field of a serializer and of each nested one when it creates one (about
    fifty fields for a summary, the larger part of its rendering cost), while representing
    data only reads them. The serializers here take no context, so one bound instance per class
    serves every request and thread. Returns the plain dict DRF would have rendered."""
    bound = _BOUND.get(serializer_class)
    if bound is None:
        bound = _BOUND.setdefault(serializer_class, serializer_class())
    return bound.to_representation(data)


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
