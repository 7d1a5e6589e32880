"""Request and response shapes of the review API (`/api/v1/review/…`), for validation and
the OpenAPI schema. Responses render the dicts of `analytics.review.payloads` / `service`."""

from __future__ import annotations

from django.utils.translation import gettext_lazy as _
from rest_framework import serializers

from analytics.models import ReviewItem
from analytics.serializers import BotRefSerializer, TeamRefSerializer
from feedback.models import Semantic


class OutcomeSerializer(serializers.Serializer):
    key = serializers.CharField()
    label = serializers.CharField()


class ReviewerCountSerializer(serializers.Serializer):
    username = serializers.CharField()
    done = serializers.IntegerField()
    in_review = serializers.IntegerField()


class ReviewProgressSerializer(serializers.Serializer):
    """Items of the caller's teams: open (expired claims included), in review, done."""

    open = serializers.IntegerField()
    in_review = serializers.IntegerField()
    done = serializers.IntegerField()
    total = serializers.IntegerField()
    reviewers = ReviewerCountSerializer(many=True)


class QueueSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    name = serializers.CharField()
    description = serializers.CharField(allow_blank=True)
    filters = serializers.DictField(child=serializers.CharField())
    outcomes = OutcomeSerializer(many=True)
    claim_minutes = serializers.IntegerField()
    progress = ReviewProgressSerializer()


class QueueListSerializer(serializers.Serializer):
    queues = QueueSerializer(many=True)


class QueueRefSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    name = serializers.CharField()
    outcomes = OutcomeSerializer(many=True)


class ItemDeliverySerializer(serializers.Serializer):
    """The delivery's correlation (frozen at send time); never the answer itself."""

    delivery_id = serializers.CharField()
    sent_at = serializers.DateTimeField()
    status = serializers.CharField(help_text=_("The delivery's status (as in the drill-down)."))
    team = TeamRefSerializer(allow_null=True)
    bot = BotRefSerializer()
    chat_id = serializers.CharField(allow_blank=True)
    model = serializers.CharField(allow_blank=True)
    skill_name = serializers.CharField(allow_blank=True)
    skill_version = serializers.CharField(allow_blank=True)
    workflow_id = serializers.CharField(allow_blank=True)
    task_id = serializers.CharField(allow_blank=True)
    session_id = serializers.CharField(allow_blank=True)
    turn_id = serializers.CharField(allow_blank=True)
    content_ref = serializers.CharField(
        allow_blank=True, help_text=_("The backend's link to the answer, when it gave one.")
    )


class ItemRatingSerializer(serializers.Serializer):
    """The rating's current revision, with the rater's comment (reviewers only)."""

    semantic = serializers.ChoiceField(choices=Semantic.choices)
    verdict_key = serializers.CharField()
    verdict_label = serializers.CharField()
    reason_key = serializers.CharField(allow_blank=True)
    reason_label = serializers.CharField(allow_blank=True)
    revision = serializers.IntegerField()
    rated_at = serializers.DateTimeField()
    comment = serializers.CharField(allow_blank=True)


class ItemSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    status = serializers.ChoiceField(choices=ReviewItem.Status.choices)
    claim_expires_at = serializers.DateTimeField(allow_null=True)
    assigned_to = serializers.CharField(allow_null=True)
    queue = QueueRefSerializer()
    delivery = ItemDeliverySerializer()
    rating = ItemRatingSerializer()
    outcome = serializers.CharField(allow_blank=True)
    note = serializers.CharField(allow_blank=True)
    external_link = serializers.CharField(allow_blank=True)
    completed_by = serializers.CharField(allow_null=True)
    completed_at = serializers.DateTimeField(allow_null=True)


class ClaimSerializer(serializers.Serializer):
    """The claimed item, or null when nothing is left for the caller."""

    item = ItemSerializer(allow_null=True)


class CompleteRequestSerializer(serializers.Serializer):
    outcome = serializers.CharField(max_length=64, help_text=_("A key of the queue's outcomes."))
    note = serializers.CharField(
        max_length=2000, required=False, allow_blank=True, default="", trim_whitespace=True
    )
    external_link = serializers.CharField(
        max_length=500,
        required=False,
        allow_blank=True,
        default="",
        help_text=_("An http(s) link, e.g. the issue tracker entry."),
    )


class AssignRequestSerializer(serializers.Serializer):
    assignee = serializers.CharField(
        max_length=150,
        required=False,
        allow_blank=True,
        allow_null=True,
        default=None,
        help_text=_("Username of a reviewer of the item's team; empty or null unassigns."),
    )


class ItemStateSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    status = serializers.ChoiceField(choices=ReviewItem.Status.choices)
    assigned_to = serializers.CharField(allow_null=True)
