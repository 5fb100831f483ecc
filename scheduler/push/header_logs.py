"""No header value in a log record: hpack's DEBUG records are dropped.

``hpack`` (the header compression under ``h2``) logs every header it encodes or decodes at DEBUG,
values included: ``authorization: bearer <provider token>``, ``:path`` with the device token.
An application that turns DEBUG on for every logger (or a test's ``caplog``) would then write the
credentials of every push request to its logs. A filter on hpack's two loggers drops their
records below INFO; it is installed when this module is imported (by the push channels and their
fakes), once, and stays. Whoever needs hpack's trace for a protocol bug can remove
:data:`FILTER` from those loggers while debugging.
"""

from __future__ import annotations

import logging
from typing import Final

HPACK_LOGGERS: Final = ("hpack.hpack", "hpack.table")


class DropDebug(logging.Filter):
    """Lets through only records above DEBUG."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno > logging.DEBUG


FILTER: Final = DropDebug()


def silence_header_logs() -> None:
    """Install :data:`FILTER` on hpack's loggers (idempotent)."""
    for name in HPACK_LOGGERS:
        logger = logging.getLogger(name)
        if FILTER not in logger.filters:
            logger.addFilter(FILTER)


silence_header_logs()

__all__ = ["FILTER", "HPACK_LOGGERS", "silence_header_logs"]
