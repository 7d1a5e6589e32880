"""Parsing JSON from outside: the API's request parser (`REST_FRAMEWORK["DEFAULT_PARSER_CLASSES"]`)
and `loads_untrusted` for other bodies and frames (Feishu callbacks, panel WebSocket frames).

Kept apart from `plumbing.api`: DRF resolves the parser setting when `rest_framework.views`
is imported, which `plumbing.api` itself imports.
"""

from __future__ import annotations

import json
import re
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


def ascii_int(text: str, *, max_digits: int = 18) -> int | None:
    """`text` as a non-negative int when it is 1 to `max_digits` ASCII digits, else None.

    For numbers typed or sent from outside (an option index, a `Retry-After`, a timestamp):
    `str.isdigit()` also accepts "²" and other Unicode digits that `int()` refuses with
    ValueError, and `int()` refuses more than 4300 digits; checking with `isdigit()` and then
    converting turned such input into a 500 or a traceback.
    """
    if not isinstance(text, str) or not 0 < len(text) <= max_digits:
        return None
    if not (text.isascii() and text.isdigit()):
        return None
    return int(text)


#: What no Cardloop store can hold: NUL (PostgreSQL text and jsonb refuse it) and lone UTF-16
#: surrogates U+D800–U+DFFF (`json.loads` turns a valid `\ud83d\ude00` pair into one code
#: point, so any surrogate left in a str is lone; UTF-8 cannot encode it, and neither SQLite,
#: PostgreSQL nor Feishu's JSON can take it).
UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def contains_unstorable(value: Any) -> bool:
    """True when a NUL character or a lone surrogate (`UNSTORABLE`) is in any string of parsed
    JSON `value` (keys included). Such input would fail later inside a database write or a
    UTF-8 encode (`DataError`, `UnicodeEncodeError`: a 500 or a traceback), so it is refused
    with a clear answer before any write. Walks iteratively (no recursion limit)."""
    stack = [value]
    search = UNSTORABLE.search
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if search(item):
                return True
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


def storable_text(text: str) -> str:
    """`text` with each NUL character and lone surrogate (`UNSTORABLE`) replaced by U+FFFD, for
    text from outside that Cardloop keeps as a record rather than refuses (a webhook
    receiver's answer, an error message quoting it). PostgreSQL text cannot hold NUL
    ("invalid byte sequence", https://www.postgresql.org/docs/current/datatype-character.html)
    and a lone surrogate cannot be encoded as UTF-8. Pure."""
    return UNSTORABLE.sub("\ufffd", text)


class JSONParser(parsers.JSONParser):
    """DRF's JSON parser, with two more parse errors (400 `bad_request`) instead of a 500:
    JSON nested deeper than Python's recursion limit (about 1000 levels; `RecursionError`),
    and a NUL character or a lone surrogate in any string (`contains_unstorable`; DRF's
    CharField refuses them, but JSON fields such as a delivery's `card` or `usage` would reach
    a UTF-8 encode or the database with them)."""

    def parse(self, stream, media_type=None, parser_context=None):
        try:
            data = super().parse(stream, media_type, parser_context)
        except RecursionError:
            raise exceptions.ParseError("JSON parse error - nested too deeply.") from None
        if contains_unstorable(data):
            raise exceptions.ParseError(
                "JSON parse error - strings must not contain NUL (\\u0000) or a lone "
                "surrogate (\\ud800-\\udfff)."
            )
        return data
