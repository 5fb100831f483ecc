"""One implementation for sync and async: an operation is a generator of steps.

An operation that exists on a ``Connection`` and on an ``AsyncConnection`` is written once, as a
generator that yields each step it needs and is sent back what the step produced. Its
``return`` value is the operation's result. Four kinds of step:

- a statement, ``(sql, params)``: sent back the rows it returned (``[]`` for a statement that
  returns none);
- a :class:`Copy`: ``COPY ... FROM STDIN`` of the given rows; sent back ``[]``;
- a :class:`Many`: one statement per parameter set in one pipeline (``executemany``); sent
  back the first row of each set's result (or None);
- a :class:`Savepoint`: a nested operation run inside ``conn.transaction()`` (a savepoint in
  the caller's transaction); sent back its result. An error inside it rolls back to the
  savepoint and is raised in the generator at its ``yield``, so the operation handles it there
  as it would a ``with conn.transaction():`` block (``except UniqueViolation`` by constraint
  name, then a fallback) or lets it through.

Two small drivers run an operation: :func:`run` on a sync cursor, :func:`run_async` on an async
one (:func:`on` and :func:`on_async` open the cursor). Every decision (validation, which step
next, what the rows mean, which error to raise) lives in the generator, so the sync and async
forms cannot drift; an ``_async`` function is a few lines that call :func:`on_async` where the
sync one calls :func:`on` (psycopg's own ``generators.py`` + ``waiting.py``).

A step runs on the caller's connection, inside whatever transaction it has open: the drivers
never commit or roll back the caller's transaction (a :class:`Savepoint` releases or rolls back
only its own savepoint) and use no session state. A :class:`Savepoint` needs that transaction
to be open already (on an idle autocommit connection, ``conn.transaction()`` would begin and
commit a transaction of its own): its operation runs a statement first.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Coroutine, Generator, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Concatenate, LiteralString, ParamSpec, TypeAlias, TypeVar

import psycopg
from psycopg.adapt import Dumper
from psycopg.pq import ExecStatus

from jobs.errors import InvalidJob

R = TypeVar("R")
P = ParamSpec("P")

_ROWS = int(ExecStatus.TUPLES_OK)  # a statement's result holds rows (possibly none)

Statement: TypeAlias = tuple[LiteralString, Mapping[str, Any] | None]
"""A statement to run: named query text and its parameters."""

Rows: TypeAlias = list[Any]
"""The rows a statement returned (tuples, or what the cursor's row factory makes)."""


@dataclass(frozen=True, slots=True)
class Copy:
    """``COPY ... FROM STDIN`` (``sql``) of ``rows``, one sequence of column values each.

    ``types`` names the columns' types for a binary COPY (its format carries none);
    ``dumper``, when given, is registered on the cursor first (by its oid: what ``types``
    looks up). ``rows`` is consumed as it is written: pass an iterator, never build a list.
    """

    sql: LiteralString
    rows: Iterable[Sequence[Any]]
    types: Sequence[str] | None = None
    dumper: type[Dumper] | None = None


@dataclass(frozen=True, slots=True)
class Many:
    """``sql`` once per parameter set of ``params``, in one pipeline (``executemany``); sent
    back the first row of each set's result, or None for a set that returned no row."""

    sql: LiteralString
    params: Sequence[Mapping[str, Any]]


@dataclass(frozen=True, slots=True)
class Savepoint:
    """Run ``body`` (an operation) in a savepoint; see the module docstring."""

    body: Steps[Any]


Step: TypeAlias = Statement | Copy | Many | Savepoint
"""What an operation yields."""

Steps: TypeAlias = Generator[Step, Any, R]
"""An operation: yields steps, is sent what each produced, returns its result."""


def one(step: Step) -> Steps[Any]:
    """An operation of one step, returning what it produced (the body of a :class:`Savepoint`)."""
    return (yield step)


def run(cur: psycopg.Cursor[Any], steps: Steps[R]) -> R:
    """Run ``steps`` on a sync cursor; their result."""
    try:
        step = next(steps)
        while True:
            if type(step) is tuple:  # the common step first: one type test, no isinstance
                cur.execute(step[0], step[1])
                res = cur.pgresult  # not cur.description, which builds a Column per field
                sent: Any = cur.fetchall() if res is not None and res.status == _ROWS else []
            elif isinstance(step, Copy):
                if step.dumper is not None:
                    cur.adapters.register_dumper(None, step.dumper)
                with cur.copy(step.sql) as copy:
                    if step.types is not None:
                        copy.set_types(step.types)
                    write_row = copy.write_row
                    for row in step.rows:
                        write_row(row)
                sent = []
            elif isinstance(step, Many):
                cur.executemany(step.sql, step.params, returning=True)
                sent = [cur.fetchone()]
                while cur.nextset():
                    sent.append(cur.fetchone())
            else:
                assert isinstance(step, Savepoint)
                try:
                    with cur.connection.transaction():
                        sent = run(cur, step.body)
                except Exception as exc:  # rolled back to the savepoint: the operation decides
                    step = steps.throw(exc)
                    continue
            step = steps.send(sent)
    except StopIteration as stop:
        result: R = stop.value
        return result


async def run_async(cur: psycopg.AsyncCursor[Any], steps: Steps[R]) -> R:
    """Run ``steps`` on an async cursor; their result (:func:`run`, awaiting the I/O)."""
    try:
        step = next(steps)
        while True:
            if type(step) is tuple:
                await cur.execute(step[0], step[1])
                res = cur.pgresult
                sent: Any = await cur.fetchall() if res is not None and res.status == _ROWS else []
            elif isinstance(step, Copy):
                if step.dumper is not None:
                    cur.adapters.register_dumper(None, step.dumper)
                async with cur.copy(step.sql) as copy:
                    if step.types is not None:
                        copy.set_types(step.types)
                    for row in step.rows:
                        await copy.write_row(row)
                sent = []
            elif isinstance(step, Many):
                await cur.executemany(step.sql, step.params, returning=True)
                sent = [await cur.fetchone()]
                while cur.nextset():
                    sent.append(await cur.fetchone())
            else:
                assert isinstance(step, Savepoint)
                try:
                    async with cur.connection.transaction():
                        sent = await run_async(cur, step.body)
                except Exception as exc:
                    step = steps.throw(exc)
                    continue
            step = steps.send(sent)
    except StopIteration as stop:
        result: R = stop.value
        return result


def sync_connection(conn: Any) -> psycopg.Connection[Any]:
    """``conn``, or :class:`InvalidJob` naming ``conn`` unless it is a ``psycopg.Connection``
    (issue 26: a string failed deep in the driver with an ``AttributeError``)."""
    if not isinstance(conn, psycopg.Connection):
        hint = " (an AsyncConnection goes to the _async form)" if _is_async(conn) else ""
        raise InvalidJob("conn", conn, f"must be a psycopg.Connection{hint}, not {_kind(conn)}")
    return conn


def async_connection(conn: Any) -> psycopg.AsyncConnection[Any]:
    """``conn``, or :class:`InvalidJob` naming ``conn`` unless it is a
    ``psycopg.AsyncConnection``."""
    if not _is_async(conn):
        hint = (
            " (a Connection goes to the sync form)" if isinstance(conn, psycopg.Connection) else ""
        )
        raise InvalidJob(
            "conn", conn, f"must be a psycopg.AsyncConnection{hint}, not {_kind(conn)}"
        )
    return conn  # type: ignore[no-any-return]


def _is_async(conn: Any) -> bool:
    return isinstance(conn, psycopg.AsyncConnection)


def _kind(value: Any) -> str:
    return type(value).__qualname__


def on(conn: psycopg.Connection[Any], steps: Steps[R]) -> R:
    """Run ``steps`` on a new cursor of ``conn``."""
    with sync_connection(conn).cursor() as cur:
        return run(cur, steps)


async def on_async(conn: psycopg.AsyncConnection[Any], steps: Steps[R]) -> R:
    """Run ``steps`` on a new cursor of ``conn``."""
    async with async_connection(conn).cursor() as cur:
        return await run_async(cur, steps)


def _signed(
    form: Callable[..., Any], build: Callable[..., Any], name: str, conn_type: type, doc: str
) -> None:
    """Give ``form`` the name, doc and signature of a public function: ``build``'s parameters
    after a ``conn`` (what ``help()`` and ``inspect.signature`` show)."""
    signature = inspect.signature(build)
    conn = inspect.Parameter("conn", inspect.Parameter.POSITIONAL_ONLY, annotation=conn_type)
    return_type = signature.return_annotation  # Steps[X] (text, as annotations are): X
    if isinstance(return_type, str) and return_type.startswith("Steps[") and return_type[-1] == "]":
        return_type = return_type[len("Steps[") : -1]
    form.__signature__ = signature.replace(  # type: ignore[attr-defined]
        parameters=[conn, *signature.parameters.values()], return_annotation=return_type
    )
    form.__name__ = form.__qualname__ = name
    form.__module__ = build.__module__
    form.__doc__ = doc
    form.__wrapped__ = build  # type: ignore[attr-defined]


def forms(
    build: Callable[P, Steps[R]], name: str
) -> tuple[
    Callable[Concatenate[psycopg.Connection[Any], P], R],
    Callable[Concatenate[psycopg.AsyncConnection[Any], P], Coroutine[Any, Any, R]],
]:
    """The two public forms of the operation ``build`` makes: ``name`` runs it on a
    ``Connection``, ``name + "_async"`` on an ``AsyncConnection``. Both take ``conn`` and then
    ``build``'s parameters; the first has ``build``'s doc. An operation is then written once and
    declared in one line::

        def _requeue(*, ids=None, ...) -> Steps[Requeued]:
            '''Put dead (or cancelled) jobs back to pending...'''
            ...
        requeue, requeue_async = forms(_requeue, "requeue")

    ``build`` runs when a form is called, inside the driver: it validates its input before it
    yields a first statement, so bad input is refused before anything is sent.
    """

    def sync(conn: psycopg.Connection[Any], /, *args: P.args, **kwargs: P.kwargs) -> R:
        with sync_connection(conn).cursor() as cur:
            return run(cur, build(*args, **kwargs))

    async def async_(conn: psycopg.AsyncConnection[Any], /, *args: P.args, **kwargs: P.kwargs) -> R:
        async with async_connection(conn).cursor() as cur:
            return await run_async(cur, build(*args, **kwargs))

    _signed(sync, build, name, psycopg.Connection, build.__doc__ or "")
    doc = f":func:`{name}` on an ``AsyncConnection``: the same parameters and steps."
    _signed(async_, build, f"{name}_async", psycopg.AsyncConnection, doc)
    return sync, async_
