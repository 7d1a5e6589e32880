"""ASGI entry point (Daphne): HTTP through Django, WebSockets through Channels.

System checks run at import so a misconfigured production process (for example without a real
secret key, `cardloop.E001`) refuses to start instead of serving.
"""

import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "botadmin.settings")

from django.core.asgi import get_asgi_application  # noqa: E402

django_asgi_app = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402
from django.core import checks  # noqa: E402
from django.core.exceptions import ImproperlyConfigured  # noqa: E402

from botadmin.routing import websocket_urlpatterns  # noqa: E402

_errors = [m for m in checks.run_checks() if m.level >= checks.ERROR]
if _errors:
    raise ImproperlyConfigured(
        "Refusing to start: " + "; ".join(f"{m.id}: {m.msg}" for m in _errors)
    )

application = ProtocolTypeRouter(
    {
        "http": django_asgi_app,
        "websocket": AllowedHostsOriginValidator(
            AuthMiddlewareStack(URLRouter(websocket_urlpatterns))
        ),
    }
)
