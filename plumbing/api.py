"""Shared pieces of Cardloop's JSON API: the error shape and the DRF exception handler.

Every API error is `{"error": <code>, "detail": <message or {field: [messages]}>}` with a 4xx
status; nothing reaches the client as an HTML page or a 500 with a traceback. A transient
database error (`plumbing.db.transient`: the database unreachable, busy or locked) is answered
503 `database_unavailable` with `Retry-After` (RFC 9110, section 10.2.3): the request was fine and
may be sent again. The pool's wait timing out while no outage is known
(`plumbing.db.transient.is_busy`: the database is up, every connection was in use) is answered
503 `busy` with `Retry-After` instead: load, not an outage.
"""

from __future__ import annotations

import logging
from typing import Any

from django.conf import settings
from django.core.exceptions import DisallowedHost, RequestDataTooBig, SuspiciousOperation
from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.http import Http404, HttpResponseBadRequest, JsonResponse
from django.utils import translation
from django.utils.deprecation import MiddlewareMixin
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy
from django.views import defaults
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from plumbing.db.transient import is_busy, is_transient

log = logging.getLogger(__name__)

#: Seconds a client is told to wait before retrying a request the database could not serve.
RETRY_AFTER_SECONDS = 2


class ApiError(exceptions.APIException):
    """Raise from a view or service to answer `{"error": code, "detail": detail}`.

    `status_code` defaults to 400; pass e.g. 404 or 409.
    """

    def __init__(self, code: str, detail: Any = None, status_code: int = 400):
        self.status_code = status_code
        self.error_code = code
        super().__init__(detail=detail if detail is not None else code, code=code)
        self.detail_value = detail if detail is not None else code


def error_body(code: str, detail: Any) -> dict[str, Any]:
    return {"error": code, "detail": detail}


def database_unavailable_body() -> dict[str, Any]:
    """The 503 body of a request the database could not serve now (send `Retry-After`:
    `RETRY_AFTER_SECONDS`), its detail in the request's language."""
    return error_body(
        "database_unavailable",
        _("The database is unavailable right now; nothing was changed. Retry shortly."),
    )


def busy_body() -> dict[str, Any]:
    """The 503 body of a request that found every database connection in use for the pool's
    whole wait (`DATABASE_POOL_TIMEOUT`) while the database is up (send `Retry-After`)."""
    return error_body("busy", _("Cardloop is busy right now; nothing was changed. Retry shortly."))


def transient_error_body(exc: BaseException) -> dict[str, Any]:
    """The 503 body for transient database error `exc` (`is_transient`): `busy_body()` for an
    exhausted pool without a known outage (`is_busy`), else `database_unavailable_body()`."""
    return busy_body() if is_busy(exc) else database_unavailable_body()


def database_unavailable_response(exc: BaseException | None = None) -> JsonResponse:
    """503 JSON with `Retry-After` for transient database error `exc` (`transient_error_body`;
    without `exc`: `database_unavailable`), for non-DRF code paths."""
    body = database_unavailable_body() if exc is None else transient_error_body(exc)
    response = JsonResponse(body, status=503)
    response["Retry-After"] = str(RETRY_AFTER_SECONDS)
    return response


def exception_handler(exc, context):
    """DRF exception handler producing `{"error", "detail"}` bodies.

    Besides DRF's own exceptions it answers Django's `RequestDataTooBig` (a body over
    `DATA_UPLOAD_MAX_MEMORY_SIZE`, raised when a view first reads `request.data`) with 413
    `too_large` and any other `SuspiciousOperation` with 400 `bad_request`; Django would
    answer those with an HTML page; a transient database error 503 `database_unavailable`
    (or `busy`, `transient_error_body`) with `Retry-After`."""
    if isinstance(exc, ApiError):
        return Response(error_body(exc.error_code, exc.detail_value), status=exc.status_code)
    if is_transient(exc):
        log.warning("API request: database unavailable (%s); answered 503", type(exc).__name__)
        _roll_back_broken_transactions()
        return Response(
            transient_error_body(exc),
            status=status.HTTP_503_SERVICE_UNAVAILABLE,
            headers={"Retry-After": str(RETRY_AFTER_SECONDS)},
        )
    if isinstance(exc, RequestDataTooBig):
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        return Response(
            error_body(
                "too_large",
                _("The request body is larger than %(limit)s bytes.") % {"limit": limit},
            ),
            status=status.HTTP_413_REQUEST_ENTITY_TOO_LARGE,
        )
    if isinstance(exc, SuspiciousOperation):
        return Response(error_body("bad_request", str(exc)), status=status.HTTP_400_BAD_REQUEST)
    response = drf_exception_handler(exc, context)
    if response is None:
        return None  # unexpected: Django logs it and handler500 answers JSON
    if isinstance(exc, exceptions.ValidationError):
        code = "invalid"
        detail = response.data
    elif isinstance(exc, exceptions.NotAuthenticated | exceptions.AuthenticationFailed):
        code = "not_authenticated"
        detail = str(exc.detail)
    elif isinstance(exc, exceptions.PermissionDenied):
        code = "forbidden"
        detail = str(exc.detail)
    elif isinstance(exc, exceptions.NotFound):
        code = "not_found"
        detail = str(exc.detail)
    elif isinstance(exc, exceptions.MethodNotAllowed):
        code = "method_not_allowed"
        detail = str(exc.detail)
    elif isinstance(exc, exceptions.ParseError | exceptions.UnsupportedMediaType):
        code = "bad_request"
        detail = _parse_error_detail(str(exc.detail))
    elif isinstance(exc, exceptions.Throttled):
        code = "throttled"
        detail = str(exc.detail)
    else:
        code = getattr(exc, "default_code", "error")
        detail = (
            response.data.get("detail", response.data)
            if isinstance(response.data, dict)
            else response.data
        )
    response.data = error_body(code, detail)
    return response


#: How DRF's JSON parser (and `plumbing.parsers.JSONParser`) begins its ParseError; DRF does
#: not mark that text for translation.
JSON_PARSE_ERROR_PREFIX = "JSON parse error - "


def _parse_error_detail(detail: str) -> str:
    """`detail` of a ParseError in the request's language: DRF's untranslatable "JSON parse
    error - <reason>" becomes our sentence around the same reason (the JSON decoder's own
    locator, e.g. "Expecting value: line 1 column 1 (char 0)", stays as the decoder said)."""
    if detail.startswith(JSON_PARSE_ERROR_PREFIX):
        reason = detail[len(JSON_PARSE_ERROR_PREFIX) :]
        return _("The request body is not valid JSON: %(reason)s") % {"reason": reason}
    return detail


def _roll_back_broken_transactions() -> None:
    """DRF marks an atomic request for rollback only for its own exceptions it handles; a
    database error answered here must not leave a broken transaction for the next query."""
    from django.db import connections

    for connection in connections.all(initialized_only=True):
        if connection.in_atomic_block:
            connection.set_rollback(True)


def json_error(code: str, detail: Any, status_code: int) -> JsonResponse:
    """A plain Django JSON error response in the API's shape (for non-DRF views)."""
    return JsonResponse(error_body(code, detail), status=status_code)


def handler404(request, exception=None):
    return (
        json_error("not_found", _("No such resource."), status.HTTP_404_NOT_FOUND)
        if _is_api(request)
        else _html_handler("404")(request, exception)
    )


def handler500(request):
    if _is_api(request):
        return json_error("server_error", _("Internal error; it has been logged."), 500)
    return defaults.server_error(request)


NUL_DETAIL = gettext_lazy("The URL must not contain NUL (%00) characters.")


class RejectNulInUrlMiddleware(MiddlewareMixin):
    """Answer 400 to a URL whose path or query string holds a NUL character (`%00`).

    PostgreSQL text cannot hold NUL, so such a path segment (`/api/v1/asks/<id>`,
    `/lark/<app_id>/callback`) or query value (`?open_id=`, an admin search) failed inside
    the lookup with `DataError`: a 500. Bodies are covered where they are parsed (DRF and
    Django form fields refuse NUL); the URL is checked here, once, before any view. API paths
    get the `{"error": "bad_request", "detail": …}` shape, others a plain-text 400.
    """

    def process_request(self, request):
        query = request.GET
        if "\x00" not in request.path and not any(
            "\x00" in key or any("\x00" in value for value in query.getlist(key)) for key in query
        ):
            return None
        # above LocaleMiddleware (no view may see the URL): the request's language by hand
        with _request_language(request):
            detail = str(NUL_DETAIL)
        if _is_api(request):
            return json_error("bad_request", detail, status.HTTP_400_BAD_REQUEST)
        return HttpResponseBadRequest(detail, content_type="text/plain; charset=utf-8")


class ApiErrorShapeMiddleware(MiddlewareMixin):
    """Keep the API's `{"error", "detail"}` shape on `/api/` and `/lark/` paths.

    - With DEBUG, Django answers an unmatched URL with its technical HTML 404 page and an
      uncaught view exception with the HTML debug page; `handler404`/`handler500` only apply
      when DEBUG is off. `make run` serves with DEBUG on, so a bot backend with a typo in a
      path would get HTML.
    - With DEBUG on or off, a `SuspiciousOperation` raised by another middleware (above all
      `DisallowedHost`: a Host header outside `ALLOWED_HOSTS`, which `CommonMiddleware` checks
      before any view) becomes Django's HTML 400. It is answered 400 `disallowed_host` (same
      body as the Feishu callback route, `interactions.channels.feishu.asgi`) or `bad_request` JSON.
      This middleware therefore sits right below `SecurityMiddleware`, above every other one.
    - A view's transient database error (`plumbing.db.transient`) on these paths, DEBUG or
      not, is answered 503 `database_unavailable` with `Retry-After` instead of 500.
    """

    def process_response(self, request, response):
        if not _is_api(request) or response.get("Content-Type", "").startswith("application/json"):
            return response
        if response.status_code == 404 and settings.DEBUG:
            with _request_language(request):
                return json_error("not_found", _("No such resource."), status.HTTP_404_NOT_FOUND)
        if response.status_code == 400:
            try:
                request.get_host()
            except DisallowedHost:
                return json_error(
                    "disallowed_host",
                    "The Host header is not allowed.",
                    status.HTTP_400_BAD_REQUEST,
                )
            return json_error("bad_request", "Bad request.", status.HTTP_400_BAD_REQUEST)
        return response

    def process_exception(self, request, exception):
        if _is_api(request) and is_transient(exception):
            log.warning(
                "%s %s: database unavailable (%s); answered 503",
                request.method,
                request.path[:100],
                type(exception).__name__,
            )
            return database_unavailable_response(exception)
        if not settings.DEBUG or not _is_api(request) or isinstance(exception, Http404):
            return None  # a 404 is reshaped in process_response
        if isinstance(exception, RequestDataTooBig):
            limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
            detail = f"The request body is larger than {limit} bytes."
            return json_error("too_large", detail, status.HTTP_413_REQUEST_ENTITY_TOO_LARGE)
        if isinstance(exception, SuspiciousOperation):
            return json_error("bad_request", str(exception), status.HTTP_400_BAD_REQUEST)
        if isinstance(exception, DjangoPermissionDenied):
            return json_error(
                "forbidden", str(exception) or "Forbidden.", status.HTTP_403_FORBIDDEN
            )
        log.exception("unhandled error on %s %s", request.method, request.path)
        response = handler500(request)
        response._has_been_logged = True  # django.utils.log.log_response: not a second line
        return response


def _request_language(request):
    """`translation.override` with `request`'s language (Accept-Language, cookie), for the
    answers of middleware that runs outside LocaleMiddleware's activation."""
    return translation.override(translation.get_language_from_request(request))


def _is_api(request) -> bool:
    return request.path.startswith(("/api/", "/lark/", "/healthz", "/readyz"))


def _html_handler(name: str):
    return {"404": defaults.page_not_found}[name]
