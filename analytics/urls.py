"""URL routes of the analytics app: the JSON API, its CSV export and the dashboard page."""

from django.urls import path

from analytics import api, views

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
]
