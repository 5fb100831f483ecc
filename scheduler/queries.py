"""The scheduler component's named SQL queries (scheduler/sql/*.sql), through jobs' one loader."""

from __future__ import annotations

from datetime import datetime
from typing import Any, LiteralString

import psycopg

from jobs.internal import queries, steps


def query(name: str) -> LiteralString:
    """The scheduler component's query ``name``."""
    return queries.load("scheduler")[name]


def database_now(conn: psycopg.Connection[Any], now: datetime | None = None) -> datetime:
    """``now`` when given (a pinned or injected clock), else the database clock, read once.

    The one place the scheduler asks the database for the time: an operation takes its instant
    from here once and uses it throughout (:func:`database_now_steps` in an operation written
    as steps).
    """
    return steps.on(conn, database_now_steps(now))


def database_now_steps(now: datetime | None = None) -> steps.Steps[datetime]:
    """:func:`database_now` as steps (:mod:`jobs.steps`): no statement when ``now`` is given."""
    if now is not None:
        return now
    rows = yield query("pg_now"), None
    value: datetime = rows[0][0]
    return value
