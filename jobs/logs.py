"""Structured logs: one line per job outcome, as text or JSON.

The worker logs each outcome on the ``tockwork.jobs`` logger with an ``extra={"job": {...}}``
record (job id, type, queue, attempt, idempotency key, duration, outcome, error code). Full
tracebacks go to the logs only; the jobs table keeps a bounded summary.

:func:`configure` owns the ``psycopg`` logger too, so that nothing reaches stderr unformatted
(a ``--log-json`` stream stays one JSON object per line). psycopg's "error ignored ..." warnings
(a pipeline or transaction that could not be closed on a connection already lost) come with an
error the service handles and logs itself ("database connection lost"): they are demoted to
debug. Every record passes :class:`jobs.redaction.RedactingFilter`: no secret reaches a line.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any

from jobs.redaction import RedactingFilter


class JsonFormatter(logging.Formatter):
    """One JSON object per line."""

    def format(self, record: logging.LogRecord) -> str:
        data: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        job = getattr(record, "job", None)
        if isinstance(job, dict):
            data.update(job)
        if record.exc_text:  # RedactingFilter's, secrets masked
            data["traceback"] = record.exc_text
        elif record.exc_info:
            data["traceback"] = self.formatException(record.exc_info)
        return json.dumps(data, default=str)


class TextFormatter(logging.Formatter):
    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        job = getattr(record, "job", None)
        if isinstance(job, dict):
            text += " " + " ".join(f"{k}={v}" for k, v in job.items() if v is not None)
        return text


class DemoteIgnoredErrors(logging.Filter):
    """psycopg's "error ignored ..." warnings become debug records (see the module docstring)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if (
            record.name.split(".")[0] == "psycopg"
            and record.levelno == logging.WARNING
            and str(record.msg).startswith("error ignored")
        ):
            record.levelno, record.levelname = logging.DEBUG, "DEBUG"
            return logging.getLogger("psycopg").isEnabledFor(logging.DEBUG)
        return True


def configure(level: str = "info", *, json_lines: bool = False) -> None:
    """Send tockwork's logs, and psycopg's, to stderr, as JSON lines when asked."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if json_lines else TextFormatter())
    # On the handler, not the logger: psycopg's child loggers (psycopg.transaction) propagate
    # to it past the parent logger's filters.
    handler.addFilter(DemoteIgnoredErrors())
    # No secret in a log line: passwords, tokens, keys (jobs/redaction.py).
    handler.addFilter(RedactingFilter())
    for name in ("tockwork", "psycopg"):
        logger = logging.getLogger(name)
        logger.handlers[:] = [handler]
        logger.setLevel(level.upper())
        logger.propagate = False
