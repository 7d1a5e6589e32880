"""Request parsers of Cardloop's JSON API (`REST_FRAMEWORK["DEFAULT_PARSER_CLASSES"]`).

Kept apart from `botadmin.api`: DRF resolves the parser setting when `rest_framework.views`
is imported, which `botadmin.api` itself imports.
"""

from __future__ import annotations

from rest_framework import exceptions, parsers


class JSONParser(parsers.JSONParser):
    """DRF's JSON parser, with JSON nested deeper than Python's recursion limit (about 1000
    levels) answered as a parse error (400 `bad_request`) instead of escaping as a
    `RecursionError` (500)."""

    def parse(self, stream, media_type=None, parser_context=None):
        try:
            return super().parse(stream, media_type, parser_context)
        except RecursionError:
            raise exceptions.ParseError("JSON parse error - nested too deeply.") from None
