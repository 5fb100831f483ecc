"""The scheduler component's named SQL queries (scheduler/sql/*.sql), through jobs' one loader."""

from __future__ import annotations

from datetime import datetime
from typing import Any, LiteralString

import psycopg

from jobs.internal import queries


def query(name: str) -> LiteralString:
    """The scheduler component's query ``name``."""
    return queries.load("scheduler")[name]


def database_now(conn: psycopg.Connection[Any], now: datetime | None = None) -> datetime:
    """``now`` when given (a pinned or injected clock), else the database clock, read once.

    The one place the scheduler asks the database for the time: an operation takes its instant
    from here once and uses it throughout.
    """
    if now is not None:
        return now
    row = conn.execute(query("pg_now")).fetchone()
    assert row is not None
    value: datetime = row[0]
    return value
