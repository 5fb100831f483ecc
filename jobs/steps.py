"""One implementation for sync and async: an operation is a generator of statements.

An operation that exists on a ``Connection`` and on an ``AsyncConnection`` is written once, as a
generator that yields each statement it needs, ``(sql, params)``, and is sent back the rows
that statement returned (``[]`` for a statement that returns none). Its ``return`` value is
the operation's result. Two small drivers run it: :func:`run` on a sync cursor, :func:`run_async`
on an async one. Every decision (validation, which statement next, what the rows mean, which
error to raise) lives in the generator, so the sync and async forms cannot drift; an
``_async`` function is a few lines that validate as the sync one does and call
:func:`run_async` (psycopg's own ``generators.py`` + ``waiting.py``).

A step is run on the caller's connection, inside whatever transaction it has open: the drivers
never commit, roll back or use session state.
"""

from __future__ import annotations

from collections.abc import Generator, Mapping
from typing import Any, LiteralString, TypeAlias, TypeVar

import psycopg

R = TypeVar("R")

Statement: TypeAlias = tuple[LiteralString, Mapping[str, Any] | None]
"""A statement to run: named query text and its parameters."""

Rows: TypeAlias = list[Any]
"""The rows a statement returned (tuples, or what the cursor's row factory makes)."""

Steps: TypeAlias = Generator[Statement, Rows, R]
"""An operation: yields statements, is sent their rows, returns its result."""


def run(cur: psycopg.Cursor[Any], steps: Steps[R]) -> R:
    """Run ``steps`` on a sync cursor; their result."""
    try:
        sql, params = next(steps)
        while True:
            cur.execute(sql, params)
            sql, params = steps.send(cur.fetchall() if cur.description is not None else [])
    except StopIteration as stop:
        result: R = stop.value
        return result


async def run_async(cur: psycopg.AsyncCursor[Any], steps: Steps[R]) -> R:
    """Run ``steps`` on an async cursor; their result."""
    try:
        sql, params = next(steps)
        while True:
            await cur.execute(sql, params)
            sql, params = steps.send(await cur.fetchall() if cur.description is not None else [])
    except StopIteration as stop:
        result: R = stop.value
        return result


def on(conn: psycopg.Connection[Any], steps: Steps[R]) -> R:
    """Run ``steps`` on a new cursor of ``conn``."""
    with conn.cursor() as cur:
        return run(cur, steps)


async def on_async(conn: psycopg.AsyncConnection[Any], steps: Steps[R]) -> R:
    """Run ``steps`` on a new cursor of ``conn``."""
    async with conn.cursor() as cur:
        return await run_async(cur, steps)
