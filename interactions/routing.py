"""WebSocket routes of the interactions app."""

websocket_urlpatterns: list = []
