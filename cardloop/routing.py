"""WebSocket routes. Apps append their consumers' patterns here (see interactions.routing)."""

from interactions.routing import websocket_urlpatterns as interaction_ws

websocket_urlpatterns = [*interaction_ws]
