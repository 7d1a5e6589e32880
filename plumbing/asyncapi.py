"""`AsyncAPIView`: a DRF `APIView` whose handlers are coroutines (for long-polls under Daphne).

DRF 3.18 dispatches synchronously. This view keeps DRF's request parsing, authentication,
permissions, throttling, exception handler (`{"error", "detail"}`) and drf-spectacular
documentation, but runs them in a worker thread (`sync_to_async`, they touch the database)
and awaits the handler on the event loop, so a handler that waits (`asyncio.sleep`, a
channel-layer receive) holds neither a server thread nor a database connection meanwhile.
Django marks the view as async because every handler it defines is a coroutine function.
"""

from __future__ import annotations

import inspect

from asgiref.sync import sync_to_async
from rest_framework.views import APIView


class AsyncAPIView(APIView):
    """Define `async def get(self, request, …)` (every handler must be async; Django refuses
    a mix). Database work inside a handler goes through `sync_to_async`."""

    async def dispatch(self, request, *args, **kwargs):
        self.args = args
        self.kwargs = kwargs
        request = self.initialize_request(request, *args, **kwargs)
        self.request = request
        self.headers = self.default_response_headers
        try:
            await sync_to_async(self.initial)(request, *args, **kwargs)
            method = request.method.lower()
            handler = (
                getattr(self, method, self.http_method_not_allowed)
                if method in self.http_method_names
                else self.http_method_not_allowed
            )
            response = handler(request, *args, **kwargs)
            if inspect.isawaitable(response):
                response = await response
        except Exception as exc:  # noqa: BLE001 - DRF's handler turns it into the API error
            response = await sync_to_async(self.handle_exception)(exc)
        self.response = self.finalize_response(request, response, *args, **kwargs)
        return self.response
