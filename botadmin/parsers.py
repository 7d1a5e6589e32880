"""Parsing JSON from outside: the API's request parser (`REST_FRAMEWORK["DEFAULT_PARSER_CLASSES"]`)
and `loads_untrusted` for other bodies and frames (Feishu callbacks, panel WebSocket frames).

Kept apart from `botadmin.api`: DRF resolves the parser setting when `rest_framework.views`
is imported, which `botadmin.api` itself imports.
"""

from __future__ import annotations

import json
from typing import Any

from rest_framework import exceptions, parsers


def loads_untrusted(data: str | bytes) -> Any:
    """`json.loads` for bodies and frames from outside: raises `ValueError` (as for any
    malformed JSON) also when the nesting is deeper than Python's recursion limit, where
    `json.loads` raises `RecursionError` instead. `UnicodeDecodeError` is a ValueError too."""
    try:
        return json.loads(data)
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None


def contains_nul(value: Any) -> bool:
    """True when a NUL character (U+0000) is in any string of parsed JSON `value` (keys
    included). PostgreSQL text cannot store one (`DataError`), so input that would reach the
    database is refused with a clear answer before any write. Walks iteratively (no recursion
    limit)."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if "\x00" in item:
                return True
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


class JSONParser(parsers.JSONParser):
    """DRF's JSON parser, with JSON nested deeper than Python's recursion limit (about 1000
    levels) answered as a parse error (400 `bad_request`) instead of escaping as a
    `RecursionError` (500)."""

    def parse(self, stream, media_type=None, parser_context=None):
        try:
            return super().parse(stream, media_type, parser_context)
        except RecursionError:
            raise exceptions.ParseError("JSON parse error - nested too deeply.") from None
