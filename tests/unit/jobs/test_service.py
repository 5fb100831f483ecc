"""The service shape (jobs.service) without a database: control, the clock, the reconnect policy.

A fake service stands in for the worker, relay and scheduler: its "connection" is counted, not
opened; its passes fail with OperationalError as a script says; its reconnect pauses are
recorded instead of slept; its clock is frozen.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import psycopg
import pytest

from jobs.errors import InvalidJob
from jobs.retry import RetryPolicy
from jobs.service import Reconnect, Service, default_name
from timezones.clock import FrozenClock

T0 = datetime(2026, 3, 8, 6, 0, tzinfo=UTC)
LOG = logging.getLogger("tockwork.test-service")
# 0.1, 0.2, 0.4, 0.4, ... seconds: no jitter, so the pauses can be compared exactly.
POLICY = Reconnect(
    backoff=RetryPolicy(base=timedelta(seconds=0.1), cap=timedelta(seconds=0.4), jitter=0.0),
    attempts_when_stopping=2,
)


class FakeConnection:
    closed = False

    def close(self) -> None:
        self.closed = True


class Fake(Service[list[datetime]]):
    """Passes run ``script``: True succeeds, False raises OperationalError; then idle."""

    registered = False  # no database: no row in the registry of processes

    def __init__(
        self,
        script: list[bool] | None = None,
        *,
        clock: FrozenClock | None = None,
        pause: float = 0.0,
        forever: bool = False,
    ) -> None:
        super().__init__(
            "postgresql://unused", kind="fake", name="f1", log=LOG, clock=clock, reconnect=POLICY
        )
        self.script = list(script or [])
        self.pause_after_pass = pause
        self.forever = forever  # fail on every attempt once the script is spent
        self.connects = 0
        self.attempts = 0
        self.pauses: list[float] = []
        self.on_pause: Callable[[int], None] = lambda _n: None
        self.seen: list[datetime] = []
        self.passes = threading.Event()

    def _connection(self) -> psycopg.Connection[Any]:
        if self._conn is None:
            self.connects += 1
            self._conn = cast("psycopg.Connection[Any]", FakeConnection())
        return self._conn

    def _pause(self, seconds: float) -> None:
        self.pauses.append(seconds)
        self.on_pause(len(self.pauses))

    def _attempt(self) -> None:
        self.attempts += 1
        ok = self.script.pop(0) if self.script else not self.forever
        if not ok:
            raise psycopg.OperationalError("server closed the connection unexpectedly")
        self.seen.append(self.now())

    def _step(self, *, until_idle: bool) -> float | None:
        self._retrying(self._attempt)
        self.passes.set()
        if until_idle and not self.script:
            return None
        return self.pause_after_pass

    def _result(self) -> list[datetime]:
        return self.seen


def messages(caplog: pytest.LogCaptureFixture, text: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if text in r.getMessage()]


def test_stop_before_start_is_a_no_op_and_does_not_stop_a_later_run() -> None:
    service = Fake([True, True])
    service.stop()
    service.stop()
    assert not service.running
    assert len(service.run_until_idle()) == 2
    assert service.attempts == 2
    assert not service.running


def test_start_runs_in_the_background_and_stop_cuts_the_pause_short() -> None:
    # A pass asks for an hour's pause: only stop() can end the run in time.
    service = Fake(clock=FrozenClock(T0), pause=3600.0)
    service.start()
    assert service.wait_started(5)
    assert service.passes.wait(5)
    assert service.running
    service.start()  # already running: a no-op, like River's Start
    with pytest.raises(RuntimeError, match="fake f1 is already running"):
        service.run_until_idle()
    service.stop()
    assert service.wait(5)
    assert not service.running
    assert service.seen == [T0]
    service.stop()  # after the end: a no-op


def test_a_background_failure_is_raised_by_wait() -> None:
    class Broken(Fake):
        def _step(self, *, until_idle: bool) -> float | None:
            raise ValueError("bug in a pass")

    service = Broken()
    service.start()
    with pytest.raises(ValueError, match="bug in a pass"):
        service.wait(5)
    assert not service.running
    assert service.wait(5)  # reported once


def test_an_outage_is_retried_with_capped_backoff_and_logged_once_each_way(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="tockwork")
    service = Fake([False, False, False, False, True], clock=FrozenClock(T0))
    assert service.run_until_idle() == [T0]
    assert service.pauses == [0.1, 0.2, 0.4, 0.4]
    assert service.attempts == 5
    assert service.connects == 5  # the first connection and one per failure
    assert messages(caplog, "connection lost") == [
        "fake f1: database connection lost (server closed the connection unexpectedly); "
        "reconnecting"
    ]
    assert messages(caplog, "restored") == [
        "fake f1: database connection restored after 4 failed attempt(s)"
    ]


def test_each_outage_is_logged_and_its_backoff_starts_afresh(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="tockwork")
    service = Fake([False, True, True, False, False, True])
    service.run_until_idle()
    assert service.pauses == [0.1, 0.1, 0.2]
    assert len(messages(caplog, "connection lost")) == 2
    assert messages(caplog, "restored") == [
        "fake f1: database connection restored after 1 failed attempt(s)",
        "fake f1: database connection restored after 2 failed attempt(s)",
    ]


def test_stop_during_an_outage_leaves_a_few_attempts_then_ends_the_run(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="tockwork")
    service = Fake(forever=True)

    def stop_at_third(n: int) -> None:
        if n == 3:
            service.stop()

    service.on_pause = stop_at_third
    assert service.run_until_idle() == []
    # Three pauses while running, then attempts_when_stopping = 2 more, their backoff afresh.
    assert service.pauses == [0.1, 0.2, 0.4, 0.1, 0.2]
    assert service.attempts == 6
    assert len(messages(caplog, "connection lost")) == 1
    assert messages(caplog, "stopping with the database unreachable") != []
    assert not service.running


def test_other_errors_are_not_retried() -> None:
    class Constraint(Fake):
        def _attempt(self) -> None:
            self.attempts += 1
            raise psycopg.IntegrityError("duplicate key")

    service = Constraint()
    with pytest.raises(psycopg.IntegrityError):
        service.run_until_idle()
    assert service.attempts == 1
    assert service.pauses == []
    assert not service.running


def test_one_clock_one_name() -> None:
    pinned = Fake(clock=FrozenClock(T0))
    assert (pinned.now(), pinned.now_or_none()) == (T0, T0)
    unpinned = Fake()
    assert unpinned.now_or_none() is None  # SQL falls back to the database clock
    before = datetime.now(UTC)
    instant = unpinned.now()
    assert instant.tzinfo is UTC and before <= instant <= datetime.now(UTC)
    assert pinned.label == "fake f1"
    name = default_name("relay:")
    assert name.startswith("relay:") and name.count(":") == 3


def test_the_reconnect_policy_is_validated() -> None:
    with pytest.raises(InvalidJob) as info:
        Reconnect(attempts_when_stopping=-1)
    assert info.value.field == "attempts_when_stopping"
    default = Reconnect()
    assert default.backoff.base == timedelta(seconds=0.1)
    assert default.backoff.cap == timedelta(seconds=5)
