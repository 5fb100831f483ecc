"""The step drivers (jobs/steps.py) on fake cursors: the sync and the async driver give an
operation the same answers for each kind of step, and an error inside a savepoint reaches the
operation at its yield, rolled back to the savepoint."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from types import SimpleNamespace
from typing import Any, cast

import pytest
from psycopg.pq import ExecStatus

from jobs.steps import Copy, Savepoint, Steps, one, run, run_async


class Refused(Exception):
    """What the fake database raises for a statement named ``refuse``."""


class _Fake:
    """The state both fake cursors share: a log of what ran, and the rows of each statement
    (``None``: the statement returns no rows)."""

    def __init__(self, rows: dict[str, list[Any] | None]) -> None:
        self.rows = rows
        self.log: list[Any] = []
        self.pgresult: Any = None
        self.adapters = SimpleNamespace(register_dumper=self._register)
        self.connection = self

    def _register(self, cls: Any, dumper: Any) -> None:
        self.log.append(("dumper", cls, dumper))

    def _execute(self, sql: str, params: Any) -> None:
        self.log.append(("execute", sql, params))
        if sql == "refuse":
            raise Refused(sql)
        status = ExecStatus.COMMAND_OK if self.rows.get(sql) is None else ExecStatus.TUPLES_OK
        self.pgresult = SimpleNamespace(status=status)
        self._last = self.rows.get(sql)

    def _fetchall(self) -> list[Any]:
        assert self._last is not None, "fetchall after a statement without rows"
        return self._last


class FakeCursor(_Fake):
    def execute(self, sql: str, params: Any = None) -> None:
        self._execute(sql, params)

    def fetchall(self) -> list[Any]:
        return self._fetchall()

    @contextmanager
    def copy(self, sql: str) -> Iterator[Any]:
        written: list[Any] = []
        types: list[Any] = []
        yield SimpleNamespace(write_row=written.append, set_types=types.append)
        self.log.append(("copy", sql, types, written))

    @contextmanager
    def transaction(self) -> Iterator[None]:
        self.log.append("savepoint")
        try:
            yield
        except Exception:
            self.log.append("rollback to savepoint")
            raise
        self.log.append("release savepoint")


class FakeAsyncCursor(_Fake):
    async def execute(self, sql: str, params: Any = None) -> None:
        self._execute(sql, params)

    async def fetchall(self) -> list[Any]:
        return self._fetchall()

    @asynccontextmanager
    async def copy(self, sql: str) -> AsyncIterator[Any]:
        written: list[Any] = []
        types: list[Any] = []

        async def write_row(row: Any) -> None:
            written.append(row)

        yield SimpleNamespace(write_row=write_row, set_types=types.append)
        self.log.append(("copy", sql, types, written))

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[None]:
        self.log.append("savepoint")
        try:
            yield
        except Exception:
            self.log.append("rollback to savepoint")
            raise
        self.log.append("release savepoint")


def both(operation: Any, rows: dict[str, list[Any] | None]) -> tuple[Any, list[Any]]:
    """The result and the log of ``operation()`` on the sync driver, checked equal to the
    async driver's."""
    sync = FakeCursor(rows)
    result = run(cast(Any, sync), operation())
    asynchronous = FakeAsyncCursor(rows)
    other = asyncio.run(run_async(cast(Any, asynchronous), operation()))
    assert (other, asynchronous.log) == (result, sync.log)
    return result, sync.log


def test_a_statement_is_sent_its_rows_and_one_without_rows_an_empty_list() -> None:
    def operation() -> Steps[Any]:
        first = yield "select", {"a": 1}
        second = yield "notify", None
        return first, second

    result, log = both(operation, {"select": [(1, "x")], "notify": None})
    assert result == ([(1, "x")], [])
    assert log == [("execute", "select", {"a": 1}), ("execute", "notify", None)]


def test_a_copy_writes_its_rows_with_its_types_and_dumper() -> None:
    def operation() -> Steps[Any]:
        sent = yield Copy("copy t", iter([(1, "a"), (2, "b")]), ("int8", "text"), cast(Any, 42))
        done = yield Copy("copy u", iter([(3,)]))
        return sent, done

    result, log = both(operation, {})
    assert result == ([], [])
    assert log == [
        ("dumper", None, 42),
        ("copy", "copy t", [("int8", "text")], [(1, "a"), (2, "b")]),
        ("copy", "copy u", [], [(3,)]),
    ]


def test_a_savepoint_sends_its_body_s_result() -> None:
    def body() -> Steps[Any]:
        rows = yield "select", None
        return rows[0][0] * 2

    def operation() -> Steps[Any]:
        doubled = yield Savepoint(body())
        rows = yield Savepoint(one(("select", None)))
        return doubled, rows

    result, log = both(operation, {"select": [(21,)]})
    assert result == (42, [(21,)])
    assert log == [
        "savepoint",
        ("execute", "select", None),
        "release savepoint",
        "savepoint",
        ("execute", "select", None),
        "release savepoint",
    ]


def test_an_error_in_a_savepoint_is_rolled_back_and_raised_at_the_yield() -> None:
    """The operation catches it there and goes on (the fallback after a failed COPY)."""

    def operation() -> Steps[Any]:
        try:
            yield Savepoint(one(("refuse", None)))
        except Refused as exc:
            rows = yield "fallback", None
            return f"caught {exc}", rows
        raise AssertionError("the savepoint should have failed")

    result, log = both(operation, {"fallback": [(1,)]})
    assert result == ("caught refuse", [(1,)])
    assert log == [
        "savepoint",
        ("execute", "refuse", None),
        "rollback to savepoint",
        ("execute", "fallback", None),
    ]


def test_an_error_the_operation_does_not_catch_goes_to_the_caller() -> None:
    def operation() -> Steps[Any]:
        yield Savepoint(one(("refuse", None)))
        yield "never", None

    with pytest.raises(Refused):
        run(cast(Any, FakeCursor({})), operation())
    with pytest.raises(Refused):
        asyncio.run(run_async(cast(Any, FakeAsyncCursor({})), operation()))


def test_an_operation_without_steps_returns_its_result() -> None:
    def operation() -> Steps[Any]:
        return "nothing to do"
        yield "never", None  # a generator all the same

    assert both(operation, {}) == ("nothing to do", [])
