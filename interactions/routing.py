"""WebSocket routes of the interactions app."""

from django.urls import path

from interactions.panels.consumer import PanelConsumer

websocket_urlpatterns: list = [
    path("ws/panel/", PanelConsumer.as_asgi(), name="ws-panel"),
]
