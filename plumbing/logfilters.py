"""Logging filters named in `settings.LOGGING` (imported while logging is configured, before the
apps are ready: no Django imports here)."""

from __future__ import annotations

import logging


class OneLineLog(logging.Filter):
    """Drop a record's traceback and keep its one line.

    Django logs every `DisallowedHost` (`django.security.DisallowedHost`, a WARNING for the
    400) with the exception's traceback, though the line already says all there is to say
    (the host, quoted with `%r`); settings.LOGGING attaches this filter to that logger.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        record.exc_info = None
        record.exc_text = None
        return True
