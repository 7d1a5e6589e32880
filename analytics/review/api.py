"""The review API (`/api/v1/review/…`): authorize, call `analytics.review.service`, serialize.

Authentication as the analytics API: a Django session (the review page) or a DRF token. Only
reviewers (`analytics.review.access`) get in: anonymous → 401, anyone else → 403
`{"error": "forbidden"}`. A queue or item of a team the caller does not review is 404, as if
it did not exist. Refusals are `{"error": code, "detail": {field: [message]}}`.
"""

from __future__ import annotations

from django.utils import timezone
from django.utils.translation import gettext_lazy as _
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework.authentication import SessionAuthentication
from rest_framework.permissions import IsAuthenticated
from rest_framework.response import Response
from rest_framework.views import APIView

from analytics.review import service
from analytics.review.access import IsReviewer
from analytics.review.serializers import (
    AssignRequestSerializer,
    ClaimSerializer,
    CompleteRequestSerializer,
    ItemSerializer,
    ItemStateSerializer,
    QueueListSerializer,
    QueueSerializer,
)
from analytics.serializers import ErrorSerializer
from botadmin.auth import ManagerTokenAuthentication
from plumbing.api import ApiError

ERRORS = {
    400: OpenApiResponse(ErrorSerializer, description=_("Invalid field (named in detail).")),
    401: OpenApiResponse(ErrorSerializer, description=_("No or invalid credentials.")),
    403: OpenApiResponse(ErrorSerializer, description=_("Not a reviewer of any team.")),
    404: OpenApiResponse(ErrorSerializer, description=_("No such queue or item of your teams.")),
    409: OpenApiResponse(ErrorSerializer, description=_("Not claimed by you, or already done.")),
}


def _refused(exc: service.ReviewError) -> ApiError:
    return ApiError(exc.code, {exc.field: [exc.message]}, exc.status)


def queue_dict(queue, teams, now) -> dict:
    """A queue as the API shows it, with the progress over the caller's teams."""
    return {
        "id": queue.pk,
        "name": queue.name,
        "description": queue.description,
        "filters": queue.filters or {},
        "outcomes": queue.outcome_choices(),
        "claim_minutes": queue.claim_minutes,
        "progress": service.progress(queue, teams, now),
    }


class ReviewAPIView(APIView):
    """Base: session or token, reviewers only, `ReviewError` → 4xx JSON."""

    authentication_classes = (ManagerTokenAuthentication, SessionAuthentication)
    permission_classes = (IsAuthenticated, IsReviewer)

    def handle_exception(self, exc):
        if isinstance(exc, service.ReviewError):
            exc = _refused(exc)
        return super().handle_exception(exc)

    def validated(self, serializer_class, request):
        serializer = serializer_class(data=request.data)
        if not serializer.is_valid():
            detail = {k: [str(m) for m in v] for k, v in serializer.errors.items()}
            raise ApiError("invalid_request", detail)
        return serializer.validated_data


class QueueListView(ReviewAPIView):
    """Every queue covering a team the caller reviews; progress counts only those teams."""

    @extend_schema(
        tags=["review"],
        summary="Review queues of your teams with their progress",
        operation_id="review_queues_list",
        responses={200: QueueListSerializer, **ERRORS},
    )
    def get(self, request):
        now = timezone.now()
        teams = request.review_team_ids
        queues = []
        for queue in service.visible_queues(request.user):
            service.fill_queue(queue, now=now)
            covered = frozenset(queue.teams.values_list("id", flat=True)) & teams
            queues.append(queue_dict(queue, covered, now))
        return Response(QueueListSerializer({"queues": queues}).data)


@extend_schema(
    tags=["review"],
    summary="One review queue: progress and per-reviewer counts",
    responses={200: QueueSerializer, **ERRORS},
)
class QueueDetailView(ReviewAPIView):
    def get(self, request, queue_id: int):
        now = timezone.now()
        queue, teams = service.queue_for(request.user, queue_id)
        service.fill_queue(queue, now=now)
        return Response(QueueSerializer(queue_dict(queue, teams, now)).data)


ASSIGNED = OpenApiParameter(
    "assigned",
    OpenApiTypes.STR,
    OpenApiParameter.QUERY,
    enum=["me"],
    description=_("`me`: only items assigned to the caller."),
)


@extend_schema(
    tags=["review"],
    summary="Claim the next item (with the rater's comment; audited)",
    request=None,
    parameters=[ASSIGNED],
    responses={200: ClaimSerializer, **ERRORS},
)
class ClaimView(ReviewAPIView):
    """Claims the caller's next item for the queue's claim duration and returns it with the
    comment (an audit entry per call); `{"item": null}` when nothing is left for them."""

    def post(self, request, queue_id: int):
        assigned = request.query_params.get("assigned") or ""
        if assigned not in ("", "me"):
            raise ApiError(
                "invalid_request", {"assigned": [str(_("Use assigned=me or leave it out."))]}
            )
        queue, _teams = service.queue_for(request.user, queue_id)
        item = service.claim_next(queue, request.user, assigned_only=assigned == "me")
        view = service.view_item(item, request.user) if item is not None else None
        return Response(ClaimSerializer({"item": view}).data)


@extend_schema(
    tags=["review"],
    summary="One review item (with the rater's comment; audited)",
    responses={200: ItemSerializer, **ERRORS},
)
class ItemView(ReviewAPIView):
    def get(self, request, item_id: int):
        item = service.item_for(request.user, item_id)
        return Response(ItemSerializer(service.view_item(item, request.user)).data)


@extend_schema(
    tags=["review"],
    summary="Record the outcome of a claimed item",
    request=CompleteRequestSerializer,
    responses={200: ItemStateSerializer, **ERRORS},
)
class CompleteView(ReviewAPIView):
    """Emits `review.completed` (outcome; comment and note only to opted-in destinations)."""

    def post(self, request, item_id: int):
        data = self.validated(CompleteRequestSerializer, request)
        item = service.complete_item(
            item_id,
            request.user,
            outcome=data["outcome"],
            note=data["note"],
            external_link=data["external_link"],
        )
        return Response(ItemStateSerializer(_state(item)).data)


@extend_schema(
    tags=["review"],
    summary="Give a claimed item back (it goes to the end of the line)",
    request=None,
    responses={200: ItemStateSerializer, **ERRORS},
)
class SkipView(ReviewAPIView):
    def post(self, request, item_id: int):
        item = service.skip_item(item_id, request.user)
        return Response(ItemStateSerializer(_state(item)).data)


@extend_schema(
    tags=["review"],
    summary="Assign an item to a reviewer of its team (or unassign)",
    request=AssignRequestSerializer,
    responses={200: ItemStateSerializer, **ERRORS},
)
class AssignView(ReviewAPIView):
    def post(self, request, item_id: int):
        data = self.validated(AssignRequestSerializer, request)
        item = service.assign_item(item_id, request.user, data["assignee"])
        return Response(ItemStateSerializer(_state(item)).data)


def _state(item) -> dict:
    return {
        "id": item.pk,
        "status": item.status,
        "assigned_to": item.assigned_to.get_username() if item.assigned_to_id else None,
    }
