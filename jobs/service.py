"""The one shape of Tockwork's long-running services: the worker, the relay and the scheduler.

Modelled on River's ``startstop`` (one start/stop contract) and ``baseservice`` (one archetype:
a name, a logger, a clock). A :class:`Service` is a loop of passes::

    wake -> one pass (short transactions) -> sleep until the pass's deadline or a wake-up

and everything around that loop is written once, here:

- **Control.** :meth:`~Service.run` blocks (SIGTERM and SIGINT stop it when it runs in the main
  thread); :meth:`~Service.start` runs it in a background thread and returns at once;
  :meth:`~Service.run_until_idle` returns when a pass finds nothing left (scripts, tests).
  :meth:`~Service.stop` only *asks*: it never blocks, so a signal handler may call it, and it is
  a no-op on a service that is not running (stop before start, or twice). :meth:`~Service.wait`
  waits for a background run to end.
- **One name.** Every log line a service writes starts with its :attr:`~Service.label`,
  ``"<kind> <name>"`` (``worker host:123:4567``).
- **One clock.** ``clock`` is the injected :class:`timezones.Clock`. Without one, the database
  clock is the one clock: :meth:`~Service.now_or_none` gives SQL its ``now`` parameter
  (``coalesce(%(now)s, now())``) and is None; :meth:`~Service.now` is for the rare instant
  that must be stamped in Python, and falls back to :class:`timezones.SystemClock`.
- **One view of the primary** (:mod:`jobs.primary`): each new connection reads which server it
  reached; the first says the replication mode (and refuses to start without synchronous
  replication when ``require_sync`` or ``TOCKWORK_REQUIRE_SYNC_REPLICATION`` asks for it), a
  later one logs a change of primary (a failover) once.
- **One way to connect** (:mod:`jobs.connection`): ``pooler="transaction"`` (or
  ``TOCKWORK_POOLER=transaction``) for a database URL that goes through a transaction-mode
  pooler: no prepared statements, and LISTEN over ``listen_conninfo`` (a direct URL) or not at
  all (poll-only, said once in the log).
- **One reconnect policy** (:class:`Reconnect`, applied by :meth:`~Service._retrying`). A
  service that cannot connect when it starts fails at once (a wrong URL should not look like an
  outage). A connection lost later is an outage: the operation is tried again on a new
  connection, pausing with capped exponential backoff between attempts, for as long as the
  service runs; :meth:`~Service.stop` cuts a pause short, and once stopping each operation gets
  a few more attempts, so a shutdown neither gives up at the first error nor hangs on a dead
  database. An outage is logged once when it starts and once when it ends, not per attempt.
  Each service decides what one retried operation is: a relay batch, a scheduler tick, a worker
  store call. An operation that is not safe to repeat (a worker's claim) first finds out what
  its lost attempt committed: see "Lost replies" in :mod:`jobs.worker`.
- **One registry** (:mod:`jobs.processes`). The loop beats every :attr:`~Service.beat_every`
  (between passes too, so a long pause does not make a live service look dead): one upsert of
  the service's row (:meth:`~Service._process_facts`: the queues and jobs in hand of a worker),
  deleted when the run ends. A database without the registry's table (migrations behind) logs
  one warning and the service runs on unregistered.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from types import FrameType
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar

import psycopg

from jobs.connection import connect, listen_url, pooler_mode
from jobs.errors import InvalidJob, ServiceAlreadyRunning
from jobs.listener import Listener
from jobs.primary import PrimaryWatch, require_sync_replication
from jobs.processes import DEFAULT_BEAT, ProcessFacts
from jobs.processes import beat as process_beat
from jobs.processes import forget as process_forget
from jobs.retry import RetryPolicy
from timezones.clock import Clock, SystemClock

if TYPE_CHECKING:
    from jobs.metrics import Metrics

R = TypeVar("R")
T = TypeVar("T")

_SYSTEM_CLOCK = SystemClock()


@contextmanager
def stop_on_signals(
    stop: Callable[[], None], name: str, log: logging.Logger, *, install: bool = True
) -> Iterator[None]:
    """Call ``stop`` on SIGTERM or SIGINT while the block runs (main thread only).

    The previous handlers come back when the block ends. Outside the main thread (tests, an
    application's own thread) nothing is installed: the caller stops the service itself.
    """
    if not install or threading.current_thread() is not threading.main_thread():
        yield
        return

    def handle(signum: int, _frame: FrameType | None) -> None:
        # Not log.info here: the signal may have interrupted the main thread inside a write to
        # the same stream, and CPython refuses the nested write ("reentrant call inside
        # BufferedWriter"), raising out of the handler. Another thread waits for the stream.
        args = ("%s: %s received, stopping", name, signal.Signals(signum).name)
        threading.Thread(target=log.info, args=args, name="tockwork-signal-log").start()
        stop()

    previous = {s: signal.signal(s, handle) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


def default_name(prefix: str = "") -> str:
    """``[prefix]host:pid:thread``: unique enough among the replicas of one deployment."""
    return f"{prefix}{socket.gethostname()}:{os.getpid()}:{threading.get_ident() % 100000}"


@dataclass(frozen=True)
class Reconnect:
    """How a service rides out a lost database connection (see the module docstring).

    The pause after failed attempt ``n`` of an outage is ``backoff.backoff(n)``: 0.1 s doubling
    up to 5 s, shortened by up to a quarter at random so that a fleet does not reconnect in
    lockstep after a database restart. Once the service is stopping, an operation gets
    ``attempts_when_stopping`` more attempts (their pauses start again from the base), then its
    error propagates.
    """

    backoff: RetryPolicy = field(
        default_factory=lambda: RetryPolicy(
            base=timedelta(seconds=0.1), cap=timedelta(seconds=5), jitter=0.25
        )
    )
    attempts_when_stopping: int = 5

    def __post_init__(self) -> None:
        if isinstance(self.attempts_when_stopping, bool) or self.attempts_when_stopping < 0:
            raise InvalidJob(
                "attempts_when_stopping", self.attempts_when_stopping, "must be an integer >= 0"
            )


class Service(ABC, Generic[R]):
    """The base of a long-running service; ``R`` is what :meth:`run` returns (its stats).

    A subclass gives :meth:`_step` (one pass) and :meth:`_result`, and may extend
    :meth:`_session` (what is set up for a run and torn down after it) and :meth:`_connected`
    (what to do with each new connection). The service's connection is opened on first use and
    again after a loss: :meth:`_connection`.
    """

    #: Whether runs keep a row in the registry of processes (:mod:`jobs.processes`).
    registered: ClassVar[bool] = True

    def __init__(
        self,
        conninfo: str,
        *,
        kind: str,
        name: str,
        log: logging.Logger,
        clock: Clock | None = None,
        connect_kwargs: dict[str, Any] | None = None,
        autocommit: bool = True,
        reconnect: Reconnect | None = None,
        pooler: str | None = None,
        listen_conninfo: str | None = None,
        require_sync: bool | None = None,
    ) -> None:
        self.conninfo = conninfo
        # jobs/connection.py: behind a transaction-mode pooler nothing may need a session (no
        # prepared statements; LISTEN only over a direct URL).
        self.pooler = pooler_mode(pooler)
        self.listen_conninfo = listen_url(listen_conninfo)
        self.kind = kind
        self.name = name
        self.log = log
        self.clock = clock
        self.connect_kwargs: dict[str, Any] = dict(connect_kwargs or {})
        self.reconnect = reconnect or Reconnect()
        self._autocommit = autocommit
        self._conn: psycopg.Connection[Any] | None = None
        self._listener: Listener | None = None
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._started = threading.Event()
        self._lock = threading.RLock()  # re-entrant: a signal handler may call stop() mid-call
        self._running = False
        self._thread: threading.Thread | None = None
        self._failure: BaseException | None = None
        self._outage = 0  # failed attempts in the current outage; 0 while connected
        # jobs/primary.py: the primary's identity and replication mode at each new connection.
        self.primary = PrimaryWatch(
            self.label, log, require_sync=require_sync_replication(require_sync)
        )
        self._next_beat = 0.0  # time.monotonic() of the next registry heartbeat
        self._registered = False  # this run's row is in the registry
        self._registry_off = not self.registered  # True also when the registry's table is missing

    # -- naming and time ----------------------------------------------------------------------

    @property
    def label(self) -> str:
        """How this service names itself in logs: ``"<kind> <name>"``."""
        return f"{self.kind} {self.name}"

    def now_or_none(self) -> datetime | None:
        """SQL's ``now`` parameter: the injected clock's instant, or None (the database's)."""
        return self.clock.now() if self.clock is not None else None

    def now(self) -> datetime:
        """An instant stamped in Python: the injected clock's, else the system clock's."""
        return (self.clock or _SYSTEM_CLOCK).now()

    # -- control ------------------------------------------------------------------------------

    @property
    def running(self) -> bool:
        return self._running

    def run(self, *, install_signal_handlers: bool = True) -> R:
        """Run until :meth:`stop` (or SIGTERM/SIGINT when run in the main thread)."""
        self._enter()
        with stop_on_signals(self.stop, self.label, self.log, install=install_signal_handlers):
            return self._serve(until_idle=False)

    def run_until_idle(self) -> R:
        """Run until a pass finds nothing left to do, then return (scripts, tests)."""
        self._enter()
        return self._serve(until_idle=True)

    def start(self) -> None:
        """Run in a background thread (no signal handlers) and return at once.

        A no-op if the service is already running. :meth:`wait_started` waits until it is set
        up; :meth:`stop` then :meth:`wait` end it.
        """
        with self._lock:
            if self._running:
                return
            self._enter()
            self._failure = None
            self._thread = threading.Thread(
                target=self._run_in_thread, name=f"tockwork-{self.kind}", daemon=True
            )
            self._thread.start()

    def stop(self) -> None:
        """Ask the service to stop; returns at once. A no-op unless it is running."""
        with self._lock:
            if not self._running:
                return
            self._stopping.set()
        self._wake.set()

    def wait(self, timeout: float | None = None) -> bool:
        """Wait for a background run (:meth:`start`) to end; re-raise what ended it, if any.

        Returns False if it is still running after ``timeout`` seconds.
        """
        thread = self._thread
        if thread is not None:
            thread.join(timeout)
            if thread.is_alive():
                return False
        failure, self._failure = self._failure, None
        if failure is not None:
            raise failure
        return True

    def wait_started(self, timeout: float) -> bool:
        """Wait until the current run is set up (connected, listening), or has ended."""
        return self._started.wait(timeout)

    def wake(self) -> None:
        """Cut the current pause short: work may be waiting (a notification, a finished job)."""
        self._wake.set()

    def close(self) -> None:
        """Close the service's connection (it is opened again on next use)."""
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    # -- the loop -----------------------------------------------------------------------------

    def _enter(self) -> None:
        with self._lock:
            if self._running:
                raise ServiceAlreadyRunning(f"{self.label} is already running")
            self._running = True
            self._stopping.clear()
            self._started.clear()

    def _run_in_thread(self) -> None:
        try:
            self._serve(until_idle=False)
        except BaseException as exc:
            self.log.exception("%s failed", self.label)
            self._failure = exc

    def _serve(self, *, until_idle: bool) -> R:
        try:
            with self._session(until_idle=until_idle):
                self._started.set()
                self._next_beat = 0.0
                try:
                    self._passes(until_idle=until_idle)
                finally:
                    self._forget()
        finally:
            with self._lock:
                self._running = False
                self._started.set()
        return self._result()

    def _passes(self, *, until_idle: bool) -> None:
        while not self._stopping.is_set():
            # Cleared before the pass: a wake-up that arrives during it is kept.
            self._wake.clear()
            try:
                self._maybe_beat()
                pause = self._step(until_idle=until_idle)
                if pause is None:
                    break
                if pause > 0:
                    self._idle(pause)
            except psycopg.OperationalError as exc:
                if not self._stopping.is_set():
                    raise
                self.log.warning("%s: stopping with the database unreachable (%s)", self.label, exc)
                break

    def _idle(self, pause: float) -> None:
        """Sleep ``pause`` seconds, cut short by a wake-up, beating when a heartbeat falls due."""
        deadline = time.monotonic() + pause
        while not self._stopping.is_set():
            now = time.monotonic()
            if now >= deadline:
                return
            beat_in = deadline - now if self._registry_off else self._next_beat - now
            if beat_in <= 0:
                self._maybe_beat()
                continue
            if self._wake.wait(min(deadline - now, beat_in)):
                return

    # -- the registry of processes ------------------------------------------------------------

    @property
    def beat_every(self) -> timedelta:
        """How often the service's row in the registry is refreshed (a worker: its lease
        heartbeat interval)."""
        return DEFAULT_BEAT

    def _process_facts(self) -> ProcessFacts:
        """What the registry records of this service at a heartbeat (a worker adds its queues
        and the jobs it holds)."""
        return ProcessFacts(kind=self.kind, name=self.name)

    def _maybe_beat(self) -> None:
        if self._registry_off or time.monotonic() < self._next_beat:
            return
        self._next_beat = time.monotonic() + self.beat_every.total_seconds()
        facts = self._process_facts()

        def write() -> None:
            conn = self._connection()
            if conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
                self._next_beat = 0.0  # a pass left a transaction open: beat at the next one
                return
            with self._one_statement(conn):
                process_beat(conn, facts, beat_every=self.beat_every, now=self.now_or_none())
            self._registered = True

        try:
            self._retrying(write)
        except (psycopg.errors.UndefinedTable, psycopg.errors.UndefinedColumn) as exc:
            self._registry_off = True
            self.log.warning(
                "%s: not in the registry of processes (%s); run `tockwork migrate`",
                self.label,
                type(exc).__name__,
            )
        except psycopg.OperationalError:
            raise
        except psycopg.Error as exc:  # a statement timeout, a lock timeout...: the next beat
            self.log.warning("%s: registry heartbeat failed (%s)", self.label, exc)

    @staticmethod
    def _one_statement(conn: psycopg.Connection[Any]) -> AbstractContextManager[Any]:
        """One registry statement: alone in autocommit (one round trip, no COMMIT), else in a
        transaction of its own (the scheduler's connection)."""
        return nullcontext() if conn.autocommit else conn.transaction()

    def _forget(self) -> None:
        """Delete this run's row from the registry: best effort, on the open connection (a
        row left behind goes stale and is pruned)."""
        conn = self._conn
        if not self._registered or conn is None or conn.closed:
            return
        self._registered = False
        if conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
            return
        try:
            with self._one_statement(conn):
                process_forget(conn, kind=self.kind, name=self.name)
        except psycopg.Error as exc:
            self.log.info("%s: registry row left to go stale (%s)", self.label, exc)

    def _session(self, *, until_idle: bool) -> AbstractContextManager[None]:
        """Set up for one run and tear down after it; by default the connection is closed."""
        return self._closing()

    @contextmanager
    def _closing(self) -> Iterator[None]:
        try:
            yield
        finally:
            self.close()

    @abstractmethod
    def _step(self, *, until_idle: bool) -> float | None:
        """One pass; returns the seconds to sleep before the next (0: at once; a wake-up cuts
        the sleep short), or None to end the run (``until_idle`` and nothing is left)."""

    @abstractmethod
    def _result(self) -> R:
        """What :meth:`run` returns."""

    # -- the connection and the reconnect policy ----------------------------------------------

    def _connection(self) -> psycopg.Connection[Any]:
        """The service's connection, opened on first use and after a loss."""
        if self._conn is None or self._conn.closed:
            conn = connect(
                self.conninfo,
                pooler=self.pooler,
                autocommit=self._autocommit,
                **self.connect_kwargs,
            )
            try:
                self.primary.observe(conn)
                self._connected(conn)
            except BaseException:
                conn.close()
                raise
            self._conn = conn
        return self._conn

    def _connected(self, conn: psycopg.Connection[Any]) -> None:
        """Prepare a new connection (a subclass registers loaders, builds its store)."""

    def _retrying(self, op: Callable[[], T]) -> T:
        """Run ``op`` under the reconnect policy (see the module docstring).

        ``op`` must be safe to run again after a lost connection: it runs on a new connection
        (from :meth:`_connection`) after each failure.
        """
        left_when_stopping = self.reconnect.attempts_when_stopping
        pauses_when_stopping = 0
        while True:
            try:
                self._connection()
                result = op()
            except psycopg.OperationalError as exc:
                self.close()
                self._outage += 1
                if self._outage == 1:
                    self.log.warning(
                        "%s: database connection lost (%s); reconnecting", self.label, exc
                    )
                if self._stopping.is_set():
                    if left_when_stopping == 0:
                        raise
                    left_when_stopping -= 1
                    pauses_when_stopping += 1
                    attempt = pauses_when_stopping
                else:
                    attempt = self._outage
                self._pause(self.reconnect.backoff.backoff(attempt).total_seconds())
                continue
            if self._outage:
                self.log.info(
                    "%s: database connection restored after %d failed attempt(s)",
                    self.label,
                    self._outage,
                )
                self._outage = 0
            return result

    def _pause(self, seconds: float) -> None:
        """The pause between reconnect attempts: cut short by stop() while running, whole
        once stopping (the attempts left are few). Tests replace it to pause for no time."""
        if self._stopping.is_set():
            time.sleep(seconds)
        else:
            self._stopping.wait(seconds)

    # -- LISTEN ---------------------------------------------------------------------------------

    @property
    def listening(self) -> bool:
        return self._listener is not None and self._listener.alive.is_set()

    def wait_listening(self, timeout: float) -> bool:
        """Wait until the service's LISTEN is active (tests)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.listening:
                return True
            time.sleep(0.01)
        return False

    def _listen(self, channel: str, metrics: Metrics | None = None) -> None:
        """LISTEN on ``channel`` in the background: each notification wakes the loop.

        LISTEN goes over :attr:`listen_conninfo` when one is given. Through a transaction-mode
        pooler without one, the service polls only: a LISTEN there would succeed and never
        deliver a notification.
        """
        conninfo = self.listen_conninfo
        if conninfo is None:
            if self.pooler == "transaction":
                self.log.info(
                    "%s: poll-only: the database URL goes through a transaction-mode pooler "
                    "and LISTEN needs a session (give a direct --listen-url / "
                    "TOCKWORK_LISTEN_URL for wake-ups)",
                    self.label,
                )
                return
            conninfo = self.conninfo
        self._listener = Listener(
            conninfo,
            self._notified,
            channel=channel,
            connect_kwargs=self.connect_kwargs,
            metrics=metrics,
        )
        self._listener.start()
        self._listener.wait_ready(2.0)

    def _notified(self, payload: str) -> None:
        """A notification (or "*" after LISTEN was re-established), on the listener's thread:
        wake the loop. Services that cache what a notification may invalidate extend this."""
        self.wake()

    def _unlisten(self) -> None:
        listener, self._listener = self._listener, None
        if listener is not None:
            listener.stop()
