"""The time stamp that starts each line of ``provledger serve``'s log.

RFC 3339, to the second, in local time with its offset
(``2026-12-05T17:31:55+00:00``): the form of every other time provledger prints,
which ``time.strftime``'s ``%z`` (``+0000``) is not.
"""

from __future__ import annotations

import logging
from datetime import datetime

import uvicorn.logging


def stamp(created: float) -> str:
    """``created`` (seconds since the epoch) as the log shows it."""
    return datetime.fromtimestamp(created).astimezone().isoformat(timespec="seconds")


class DefaultFormatter(uvicorn.logging.DefaultFormatter):
    """uvicorn's formatter of its own messages, stamped by :func:`stamp`."""

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        return stamp(record.created)


class AccessFormatter(uvicorn.logging.AccessFormatter):
    """uvicorn's formatter of request lines, stamped by :func:`stamp`."""

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        return stamp(record.created)


#: uvicorn's formatters, by the name its logging configuration gives them.
STAMPED: dict[str, type[logging.Formatter]] = {
    "uvicorn.logging.DefaultFormatter": DefaultFormatter,
    "uvicorn.logging.AccessFormatter": AccessFormatter,
}
