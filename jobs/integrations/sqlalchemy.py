"""SQLAlchemy 2 adapter: enqueue in a ``Session``'s (or ``AsyncSession``'s) current transaction.

::

    from jobs.integrations import sqlalchemy as tw

    with Session(engine) as session, session.begin():
        session.add(User(...))
        tw.enqueue(session, "send_welcome", {"user_id": 42})   # commits with the user row

    async with AsyncSession(async_engine) as session, session.begin():
        await tw.enqueue_async(session, "send_welcome", {"user_id": 42})
        await tw.enqueue_many_async(session, [JobSpec("digest", {"user_id": 42})])

The engine must use the psycopg 3 dialect (``postgresql+psycopg://...``).
:func:`connection` / :func:`async_connection` give the raw psycopg connection for anything
else Tockwork takes a connection for (``scheduler.create_schedule(connection(session), ...)``).
Tockwork's statements run in the session's transaction and never commit it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

import psycopg

from jobs.enqueue import enqueue as _enqueue
from jobs.enqueue import enqueue_async as _enqueue_async
from jobs.enqueue import enqueue_many as _enqueue_many
from jobs.enqueue import enqueue_many_async as _enqueue_many_async
from jobs.errors import InvalidJob
from jobs.model import Enqueued, JobSpec

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection
    from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession
    from sqlalchemy.orm import Session

__all__ = [
    "async_connection",
    "connection",
    "enqueue",
    "enqueue_async",
    "enqueue_many",
    "enqueue_many_async",
]


def connection(session: Session | Connection) -> psycopg.Connection[Any]:
    """The psycopg connection of ``session``'s current transaction (begun if none is)."""
    from sqlalchemy.engine import Connection as SAConnection
    from sqlalchemy.orm import Session as SASession

    if isinstance(session, SASession):
        conn = session.connection()
    elif isinstance(session, SAConnection):
        conn = session
    else:
        raise InvalidJob("session", session, "must be a SQLAlchemy Session or Connection")
    driver = conn.connection.driver_connection
    if not isinstance(driver, psycopg.Connection):
        raise _not_psycopg(conn.dialect.driver)
    return driver


async def async_connection(session: AsyncSession | AsyncConnection) -> psycopg.AsyncConnection[Any]:
    """The psycopg async connection of ``session``'s current transaction (begun if none is)."""
    from sqlalchemy.ext.asyncio import AsyncConnection as SAAsyncConnection
    from sqlalchemy.ext.asyncio import AsyncSession as SAAsyncSession

    if isinstance(session, SAAsyncSession):
        conn = await session.connection()
    elif isinstance(session, SAAsyncConnection):
        conn = session
    else:
        raise InvalidJob("session", session, "must be a SQLAlchemy AsyncSession or AsyncConnection")
    raw = await conn.get_raw_connection()
    driver = raw.driver_connection
    if not isinstance(driver, psycopg.AsyncConnection):
        raise _not_psycopg(conn.dialect.driver)
    return driver


def _not_psycopg(driver: str) -> InvalidJob:
    return InvalidJob(
        "session",
        driver,
        "Tockwork needs the psycopg 3 dialect: create the engine from postgresql+psycopg://",
    )


def enqueue(
    session: Session | Connection, job_type: str, payload: Any = None, **options: Any
) -> Enqueued:
    """:func:`jobs.enqueue` in the session's transaction (same options)."""
    return _enqueue(connection(session), job_type, payload, **options)


def enqueue_many(
    session: Session | Connection,
    specs: Iterable[JobSpec | Mapping[str, Any]],
    **options: Any,
) -> list[Enqueued]:
    """:func:`jobs.enqueue_many` in the session's transaction."""
    return _enqueue_many(connection(session), specs, **options)


async def enqueue_async(
    session: AsyncSession | AsyncConnection, job_type: str, payload: Any = None, **options: Any
) -> Enqueued:
    """:func:`jobs.enqueue_async` in the async session's transaction (same options)."""
    return await _enqueue_async(await async_connection(session), job_type, payload, **options)


async def enqueue_many_async(
    session: AsyncSession | AsyncConnection,
    specs: Iterable[JobSpec | Mapping[str, Any]],
    **options: Any,
) -> list[Enqueued]:
    """:func:`jobs.enqueue_many_async` in the async session's transaction."""
    return await _enqueue_many_async(await async_connection(session), specs, **options)
