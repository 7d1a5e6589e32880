"""URL routes of the feedback app."""

from django.urls import path

from feedback import delivery_views, event_views

urlpatterns: list = [
    path("api/v1/deliveries", delivery_views.DeliveryCreateView.as_view(), name="deliveries"),
    path("api/v1/turns/terminal", event_views.TurnTerminalView.as_view(), name="turn-terminal"),
    path("api/v1/events", event_views.EventFeedView.as_view(), name="event-feed"),
]
