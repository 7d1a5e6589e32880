"""ASGI entry point (Daphne): HTTP through Django (Feishu callbacks through
`interactions.channels.feishu.asgi.LarkCallbackApp` in front of it, the MCP tool server `/mcp`
through `interactions.mcp.server.McpMount` in front of both), WebSockets through Channels.

System checks run at import so a misconfigured production process (for example without a real
secret key, `cardloop.E001`) refuses to start instead of serving.
"""

import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "cardloop.settings")

from django.core.asgi import get_asgi_application  # noqa: E402

django_asgi_app = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import OriginValidator  # noqa: E402
from django.conf import settings  # noqa: E402
from django.core import checks  # noqa: E402
from django.core.exceptions import ImproperlyConfigured  # noqa: E402

from cardloop.routing import websocket_urlpatterns  # noqa: E402
from interactions.channels.feishu.asgi import LarkCallbackApp  # noqa: E402
from interactions.mcp.server import mount as mount_mcp  # noqa: E402
from plumbing.asgi import ServerSendInScope  # noqa: E402

_errors = [m for m in checks.run_checks() if m.level >= checks.ERROR]
if _errors:
    raise ImproperlyConfigured(
        "Refusing to start: " + "; ".join(f"{m.id}: {m.msg}" for m in _errors)
    )


class BrowserOriginValidator(OriginValidator):
    """`AllowedHostsOriginValidator`, except that a handshake without an `Origin` header is let
    through: browsers always send one (so a page of another site cannot ride on the session
    cookie), while desktop clients send none and authenticate with a token in the handshake.
    Consumers must not accept cookie authentication without an Origin
    (`interactions.panels.service.authenticate_scope` does not)."""

    def __init__(self, application):
        super().__init__(application, [])

    @property
    def allowed_origins(self) -> list[str]:
        """settings.ALLOWED_HOSTS, read per handshake (as Django's host check does)."""
        hosts = list(settings.ALLOWED_HOSTS)
        if settings.DEBUG and not hosts:
            hosts = ["localhost", "127.0.0.1", "[::1]"]
        return hosts

    @allowed_origins.setter
    def allowed_origins(self, value) -> None:
        pass  # always settings.ALLOWED_HOSTS

    def valid_origin(self, parsed_origin):
        return parsed_origin is None or super().valid_origin(parsed_origin)


application = ProtocolTypeRouter(
    {
        "http": mount_mcp(LarkCallbackApp(django_asgi_app)),
        # the server's own `send` in the scope, for pushes past the session wrapper
        "websocket": ServerSendInScope(
            BrowserOriginValidator(AuthMiddlewareStack(URLRouter(websocket_urlpatterns)))
        ),
    }
)
