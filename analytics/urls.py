"""URL routes of the analytics app: the JSON API, its CSV export, the dashboard page, the
review API and pages, and the alert history page."""

from django.urls import path

from analytics import api, views
from analytics.alerts import views as alert_views
from analytics.review import api as review_api
from analytics.review import views as review_views

urlpatterns = [
    path("api/v1/analytics/summary", api.SummaryView.as_view(), name="analytics-summary"),
    path("api/v1/analytics/trend", api.TrendView.as_view(), name="analytics-trend"),
    path("api/v1/analytics/reasons", api.ReasonsView.as_view(), name="analytics-reasons"),
    path("api/v1/analytics/failures", api.FailuresView.as_view(), name="analytics-failures"),
    path("api/v1/analytics/deliveries", api.DeliveriesView.as_view(), name="analytics-deliveries"),
    path(
        "api/v1/analytics/deliveries.csv",
        api.DeliveriesCsvView.as_view(),
        name="analytics-deliveries-csv",
    ),
    path("dashboard/", views.dashboard, name="analytics-dashboard"),
    path("api/v1/review/queues", review_api.QueueListView.as_view(), name="review-queues"),
    path(
        "api/v1/review/queues/<int:queue_id>",
        review_api.QueueDetailView.as_view(),
        name="review-queue",
    ),
    path(
        "api/v1/review/queues/<int:queue_id>/claim",
        review_api.ClaimView.as_view(),
        name="review-claim",
    ),
    path("api/v1/review/items/<int:item_id>", review_api.ItemView.as_view(), name="review-item"),
    path(
        "api/v1/review/items/<int:item_id>/complete",
        review_api.CompleteView.as_view(),
        name="review-complete",
    ),
    path(
        "api/v1/review/items/<int:item_id>/skip", review_api.SkipView.as_view(), name="review-skip"
    ),
    path(
        "api/v1/review/items/<int:item_id>/assign",
        review_api.AssignView.as_view(),
        name="review-assign",
    ),
    path("review/", review_views.home, name="review-home"),
    path("review/<int:queue_id>/", review_views.work, name="review-work"),
    path("alerts/", alert_views.history, name="alerts-history"),
]
