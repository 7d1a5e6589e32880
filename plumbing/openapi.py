"""The OpenAPI document's shared parts: the error body and the answers every path can give.

Every error answer of the API is `{"error": <code>, "detail": …}` (`plumbing.api`). Views
document the errors of their own rules; `document_errors` (a drf-spectacular postprocessing
hook, `SPECTACULAR_SETTINGS["POSTPROCESSING_HOOKS"]`) adds the ones any path can answer and
gives every 4xx/5xx answer that body:

- 400 `bad_request` / `invalid`: malformed JSON, NUL or a lone surrogate in a string, `%00`
  in the URL (`plumbing.api.RejectNulInUrlMiddleware`), a field or parameter out of its rules;
- 401 `not_authenticated` and 403 `forbidden` on an authenticated path;
- 404 `not_found` on a path with a path parameter (no such object of this caller);
- 413 `too_large`: a body over `DATA_UPLOAD_MAX_MEMORY_SIZE`, on a path that takes a body;
- 500 `server_error`: an unexpected failure (logged), e.g. the database unavailable.

The document is generated in English unless `?lang=` asks for another language, so its
descriptions are in one language (`EnglishSchemaView`).
"""

from __future__ import annotations

import re

from django.conf import settings
from django.utils import translation
from drf_spectacular.utils import extend_schema
from drf_spectacular.views import SpectacularAPIView

ERROR_COMPONENT = "Error"
ERROR_SCHEMA = {
    "type": "object",
    "description": (
        'Every error answer: `{"error": code, "detail": message | {field: [messages]} | '
        "{…}}`. The codes are stable and listed in docs/CONTRACT.md; messages are translated "
        "by Accept-Language. One exception: an ask nobody can see answers 409 with the "
        'message in "error" and the code `no_channel` in "code".'
    ),
    "properties": {
        "error": {"type": "string", "description": "The stable error code."},
        "detail": {"description": "A message, a map of field to messages, or an object."},
        "code": {"type": "string", "description": "Only with `no_channel` (see above)."},
    },
    "required": ["error", "detail"],
}

#: status → description of the answers any path can give (see the module docstring).
COMMON = {
    400: "`bad_request` (malformed JSON, NUL or a lone surrogate in a string, %00 in the URL) "
    "or `invalid` (a field or parameter breaks its rules; detail names it).",
    401: "`not_authenticated`: no credential, or an invalid or revoked one.",
    403: "`forbidden`: a valid credential of the wrong kind.",
    404: "`not_found`: no such object of this caller.",
    413: "`too_large`: the body is larger than the upload limit (2.5 MiB).",
    500: "`server_error`: an unexpected failure (logged), e.g. the database is unavailable.",
}
BODY_METHODS = {"post", "put", "patch"}


#: component name → JSON-schema rules across its fields (`state_rules`).
RULES: dict[str, list[dict]] = {}


def state_rules(*, together: tuple[tuple[str, ...], ...] = (), exclusive=(), rules=()):
    """Class decorator of a request serializer: put the rules between its fields that the
    server enforces into its OpenAPI component (`allOf` next to its properties).

    - `together`: each group of string fields is given all non-blank, or all blank or absent;
    - `exclusive`: of each group at most one string field is given non-blank;
    - `rules`: further JSON-schema objects, as they are.
    """

    extra = list(rules)

    def decorate(cls):
        rules = list(extra)
        for group in together:
            rules.append(
                {
                    "anyOf": [
                        {
                            "properties": {name: {"pattern": r"\S"} for name in group},
                            "required": list(group),
                        },
                        {"properties": {name: {"pattern": r"^\s*$"} for name in group}},
                    ]
                }
            )
        for group in exclusive:
            rules.append(
                {
                    "not": {
                        "properties": {name: {"pattern": r"\S"} for name in group},
                        "required": list(group),
                    }
                }
            )
        RULES[cls.__name__.removesuffix("Serializer")] = rules
        return cls

    return decorate


def _error_content() -> dict:
    return {"application/json": {"schema": {"$ref": f"#/components/schemas/{ERROR_COMPONENT}"}}}


def document_errors(result, generator, request, public):
    """drf-spectacular postprocessing hook: the shared error component, the rules between
    fields (`state_rules`), and the error answers of every operation (module docstring)."""
    components = result.setdefault("components", {}).setdefault("schemas", {})
    components[ERROR_COMPONENT] = ERROR_SCHEMA
    for name, rules in RULES.items():
        if name in components and rules:
            components[name]["allOf"] = rules
    for path, item in result.get("paths", {}).items():
        for method, operation in item.items():
            if not isinstance(operation, dict) or "responses" not in operation:
                continue
            responses = operation["responses"]
            wanted = [400, 500]
            if operation.get("security") and {} not in operation["security"]:
                wanted += [401, 403]
            if "{" in path:
                wanted.append(404)
            if method in BODY_METHODS:
                wanted.append(413)
            for code in wanted:
                responses.setdefault(str(code), {"description": COMMON[code]})
            for code, response in responses.items():
                if code[0] in "45" and not response.get("content"):
                    response["content"] = _error_content()
                    if not response.get("description"):
                        response["description"] = COMMON.get(int(code), "An error.")
    return result


class EnglishSchemaView(SpectacularAPIView):
    """`/api/schema/`: the document in English (descriptions in one language), or in the
    language `?lang=` names."""

    @extend_schema(exclude=True)
    def get(self, request, *args, **kwargs):
        if settings.USE_I18N and request.GET.get("lang"):
            return super().get(request, *args, **kwargs)
        with translation.override("en"):
            return super().get(request, *args, **kwargs)


def case_insensitive_pattern(words) -> str:
    """A pattern matching exactly one of `words`, in any letter case (JSON-schema patterns
    have no flags)."""

    def one(word: str) -> str:
        return "".join(f"[{c.lower()}{c.upper()}]" if c.isalpha() else re.escape(c) for c in word)

    return r"^(?:" + "|".join(one(w) for w in sorted(words)) + r")$"


def when(field: str, values, then: dict) -> dict:
    """The rule "when `field` is one of `values`, `then` holds" (OpenAPI 3.0 has no
    if/then: it is "`field` is another value, or `then` holds")."""
    return {"anyOf": [{"properties": {field: {"not": {"enum": list(values)}}}}, then]}
