"""Logging filters for the portal's own log lines."""

from __future__ import annotations

import logging

from django.core.exceptions import PermissionDenied


class RefusalsWithoutTraceback(logging.Filter):
    """A refused request (403) is the portal working as meant: log one line, not a traceback.

    Django logs "Forbidden (Permission denied): /audit/" with the exception attached, which put
    two full tracebacks in var/logs/web.log for every engineer who opened a staff-only page.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and isinstance(record.exc_info[1], PermissionDenied):
            record.exc_info = None
            record.exc_text = None
        return True
