"""The scheduler component's named SQL queries (scheduler/sql/*.sql), through jobs' one loader."""

from __future__ import annotations

from datetime import datetime
from typing import Any, LiteralString

import psycopg

from jobs.internal import UTC_ALIASES, queries, steps


def query(name: str) -> LiteralString:
    """The scheduler component's query ``name``."""
    return queries.load("scheduler")[name]


async def plan_once_async(conn: psycopg.AsyncConnection[Any]) -> None:
    """Let ``conn`` plan each of its statements once: prepared at their first execution, and
    executed with their generic plan (``plan_cache_mode``, this session only), and a session
    in another name of UTC set to 'UTC' (:data:`jobs.internal.UTC_ALIASES`). For a
    connection of the scheduler's own that runs a few fixed statements many times (the
    delivery handler's, the simulated channel's); not behind a transaction-mode pooler, where
    nothing is prepared (``jobs.connect_kwargs``) and a session setting would leak to other
    clients: there it does nothing.
    """
    if conn.prepare_threshold is None:
        return
    conn.prepare_threshold = 0
    utc = conn.info.parameter_status("TimeZone") in UTC_ALIASES
    await conn.execute(query("pg_session_generic_plans"), {"utc": utc})


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
