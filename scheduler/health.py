"""Health for orchestrators, and the scheduler's scrape-time figures.

``/healthz`` (and ``tockwork healthz``) answer three questions, each a named check in the JSON
body, and the whole is healthy only if every check passes:

* ``database``: a connection opens and ``SELECT 1`` answers within the timeout;
* ``listen``: LISTEN is alive in this process, or poll-only mode was declared (``--no-listen``);
  the one-shot command instead checks that the database accepts LISTEN;
* ``scheduler_lag``: the most overdue active schedule is overdue by less than the threshold (a
  stopped or overwhelmed scheduler shows here first). No ``schedules`` table passes.

and says what a failover may lose: ``replication`` is ``synchronous`` or ``asynchronous:
acknowledged work can be lost at failover`` (jobs/primary.py; ``value`` 1 or 0). It fails
when synchronous replication is required (``require_sync``, ``--require-sync-replication``,
``TOCKWORK_REQUIRE_SYNC_REPLICATION=1``) and absent, and when the primary is synchronous with
no synchronous standby attached (every commit waits until one attaches).

**From a read replica** (``read_conninfo``, ``--read-url``, ``TOCKWORK_READ_URL``): the checks
that only read (``schema``, ``scheduler_lag``) read the replica, and a ``replica`` check says
how far behind the primary it replays (:func:`replica_state`; ``value`` in seconds). It fails
when the URL reaches a primary (a failover promoted it, or it was never a replica), when no WAL
receiver runs there (it follows no primary: its figures stop at the last thing it replayed), or
when the lag is above ``max_replica_lag`` (:data:`DEFAULT_MAX_REPLICA_LAG`). What needs the
primary stays on ``conninfo``: ``database``, ``listen`` (a replica refuses LISTEN) and
``replication`` (the primary's synchronous standbys and timeline). Each connection failing is
reported on its own: a replica down leaves the primary's checks standing, and the other way.

The overdue detector (:func:`overdue_schedules`, ``tockwork schedules overdue``, the gauge
``tockwork_schedules_overdue``): active schedules whose ``next_run_at`` is past by more than a
threshold (:data:`DEFAULT_OVERDUE_AFTER`). A tick enqueues an occurrence and advances
``next_run_at`` in one transaction, so such a schedule has no job for that occurrence: every
replica is stopped or stuck, or they cannot keep up. The gauge counts at most
:data:`OVERDUE_COUNT_LIMIT` (a scrape stays cheap); the alert rule
``TockworkSchedulesOverdue`` fires on it (deploy/prometheus/tockwork-rules.yml).

The lag is read by the scheduler with its own SQL (``schedule_due_lag`` in
scheduler/sql/schedule.sql): the queue's collector (:class:`jobs.metrics.DatabaseCollector`)
knows no scheduler table, and :func:`register_metrics` adds ``tockwork_scheduler_lag_seconds``
to it through its probe hook.

The lag check is about the whole deployment, not this process: point a *readiness* or alerting
probe at it, and a *liveness* probe at a health without it (``max_scheduler_lag=None``), or a
stopped scheduler would make the orchestrator restart healthy workers.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

import psycopg
from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily, Metric
from psycopg import sql

from jobs import connect, pooler_mode
from jobs.internal import JOBS_CHANNEL, pending_migrations
from jobs.metrics import (
    DatabaseCollector,
    MetricsServer,
    make_wsgi_app,
    register_database,
)
from jobs.primary import PrimaryWatch, require_sync_replication, server_identity
from scheduler.errors import InvalidSchedule
from scheduler.migrations import COMPONENTS
from scheduler.queries import database_now, query
from scheduler.webhooks.metrics import webhook_probe

DEFAULT_MAX_SCHEDULER_LAG = timedelta(minutes=5)
DEFAULT_MAX_REPLICA_LAG = timedelta(seconds=30)
"""How far behind the primary a read replica may replay before the health check fails: the
pages, figures and health read there are that old."""
DEFAULT_OVERDUE_AFTER = timedelta(minutes=1)
"""How far past its next_run_at a schedule must be to count as overdue: a replica ticks at
least once a second and enqueues ahead, so a minute means none ran."""
OVERDUE_COUNT_LIMIT = 100_000

log = logging.getLogger("tockwork.metrics")


@dataclass(frozen=True, slots=True)
class Check:
    ok: bool
    detail: str
    value: float | None = None


@dataclass(frozen=True, slots=True)
class ReplicaState:
    """What a read replica says of itself (``pg_replica_state``)."""

    in_recovery: bool  # False: the server is a primary
    lag: float | None  # seconds behind the primary (module docstring); None: unknown or primary
    receiving: bool  # a WAL receiver runs: it follows a primary
    status: str | None  # the receiver's status ('streaming'...), None when hidden from the role

    def problem(self) -> str | None:
        """Why the server cannot serve as a read replica now (a phrase whose subject is the
        read URL), or None."""
        if not self.in_recovery:
            return (
                "reaches a primary, not a streaming replica (promoted by a failover, or never "
                "a replica): give a replica's URL, or none to read from the primary"
            )
        if not self.receiving:
            return (
                "reaches a replica where no WAL receiver runs: it follows no primary (is the "
                "primary down, or unreachable from it?), and what it serves stops at what it "
                "replayed"
            )
        if self.status is not None and self.status != "streaming":
            return f"reaches a replica whose WAL receiver is {self.status}, not streaming"
        return None


def replica_state(conn: psycopg.Connection[Any], now: datetime | None = None) -> ReplicaState:
    """Read :class:`ReplicaState` on ``conn``; ``now`` pins the clock the lag is measured at."""
    row = conn.execute(query("pg_replica_state"), {"now": now}).fetchone()
    assert row is not None
    in_recovery, lag, receiving, status = row
    return ReplicaState(
        bool(in_recovery),
        None if lag is None else max(0.0, float(lag)),
        bool(receiving),
        None if status is None else str(status),
    )


def scheduler_lag(conn: psycopg.Connection[Any], now: datetime | None = None) -> float | None:
    """Seconds the most overdue active schedule is overdue (0 if none); None without schedules."""
    row = conn.execute(query("schedule_table_exists")).fetchone()
    if row != (True,):
        return None
    lag_row = conn.execute(query("schedule_due_lag"), {"now": database_now(conn, now)}).fetchone()
    assert lag_row is not None
    return max(0.0, float(lag_row[0]))


@dataclass(frozen=True, slots=True)
class Overdue:
    """One overdue schedule: its next occurrence is ``overdue_seconds`` past."""

    id: int
    organization_id: UUID | None
    key: str | None
    subject: str | None
    job_type: str
    next_run_at: datetime
    next_occurrence_key: str | None
    overdue_seconds: float


def _after_seconds(after: timedelta) -> float:
    if not isinstance(after, timedelta) or after < timedelta(0):
        raise InvalidSchedule("after", after, "must be a timedelta of zero or more")
    return after.total_seconds()


def overdue_schedules(
    conn: psycopg.Connection[Any],
    *,
    after: timedelta = DEFAULT_OVERDUE_AFTER,
    limit: int = 100,
    now: datetime | None = None,
) -> list[Overdue]:
    """The active schedules overdue by more than ``after``, most overdue first (at most
    ``limit``): no job exists for their next occurrence (module docstring)."""
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= 100_000:
        raise InvalidSchedule("limit", limit, "must be from 1 to 100000")
    params = {"after": _after_seconds(after), "limit": limit, "now": now}
    return [Overdue(*row) for row in conn.execute(query("schedule_overdue"), params).fetchall()]


def overdue_count(
    conn: psycopg.Connection[Any],
    *,
    after: timedelta = DEFAULT_OVERDUE_AFTER,
    now: datetime | None = None,
) -> int:
    """How many active schedules are overdue by more than ``after`` (at most
    :data:`OVERDUE_COUNT_LIMIT`)."""
    params = {"after": _after_seconds(after), "limit": OVERDUE_COUNT_LIMIT, "now": now}
    row = conn.execute(query("schedule_overdue_count"), params).fetchone()
    assert row is not None
    return int(row[0])


def scheduler_lag_probe(conn: psycopg.Connection[Any], now: datetime | None) -> Iterable[Metric]:
    """A :data:`jobs.metrics.Probe`: ``tockwork_scheduler_lag_seconds`` and the overdue
    detector's ``tockwork_schedules_overdue``."""
    lag = scheduler_lag(conn, now)
    if lag is None:
        return []
    family = GaugeMetricFamily(
        "tockwork_scheduler_lag_seconds",
        "How far overdue the most overdue active schedule is (0 when none is).",
    )
    family.add_metric([], lag)
    overdue = GaugeMetricFamily(
        "tockwork_schedules_overdue",
        "Active schedules whose next occurrence is more than a minute past with no job for it "
        f"(no scheduler replica ran, or none keeps up); counted up to {OVERDUE_COUNT_LIMIT:,}.",
    )
    overdue.add_metric([], overdue_count(conn, now=database_now(conn, now)))
    return [family, overdue]


def replica_probe(conn: psycopg.Connection[Any], now: datetime | None) -> Iterable[Metric]:
    """A :data:`jobs.metrics.Probe`: on a read replica (none on a primary),
    ``tockwork_replica_lag_seconds`` and ``tockwork_replica_streaming``."""
    state = replica_state(conn, now)
    if not state.in_recovery:
        return []
    streaming = GaugeMetricFamily(
        "tockwork_replica_streaming",
        "1 if the read replica the gauges come from follows a primary (a WAL receiver runs), "
        "else 0: its figures stop at what it replayed.",
    )
    streaming.add_metric([], 1.0 if state.problem() is None else 0.0)
    if state.lag is None:
        return [streaming]
    lag = GaugeMetricFamily(
        "tockwork_replica_lag_seconds",
        "How far behind the primary the read replica the gauges come from replays (0 when it "
        "replayed all it received): the gauges are that old.",
    )
    lag.add_metric([], state.lag)
    return [lag, streaming]


def register_metrics(
    conninfo: str,
    registry: CollectorRegistry | None = None,
    *,
    timeout: float = 2.0,
    now: Callable[[], datetime] | None = None,
    primary: str | None = None,
    watch: PrimaryWatch | None = None,
) -> DatabaseCollector:
    """Register the scrape-time gauges: queues, outbox, scheduler lag, a replica's lag and
    webhooks (:func:`scheduler.webhooks.metrics.webhook_probe`).

    ``primary``: ``conninfo`` is a read replica, and the replication gauges (what the
    primary's commits wait for, its timeline) are read there; ``watch``: the scrapes log a
    change of primary (:class:`DatabaseCollector`)."""
    return register_database(
        conninfo,
        registry,
        timeout=timeout,
        probes=[scheduler_lag_probe, replica_probe, webhook_probe],
        now=now,
        primary=primary,
        watch=watch,
    )


_Step = Callable[[psycopg.Connection[Any]], Check]


class Health:
    """The checks behind ``/healthz``; calling it returns ``(ok, {"checks": {...}})``.

    ``listening`` reports whether this process's LISTEN is alive (a worker's
    ``lambda: worker.listening``); without it, the check asks the database to accept a LISTEN.
    ``read_conninfo``: a streaming replica for the checks that only read, with a ``replica``
    check of its own (module docstring).
    """

    def __init__(
        self,
        conninfo: str,
        *,
        listening: Callable[[], bool] | None = None,
        poll_only: bool = False,
        max_scheduler_lag: timedelta | None = DEFAULT_MAX_SCHEDULER_LAG,
        timeout: float = 2.0,
        now: Callable[[], datetime] | None = None,
        require_sync: bool | None = None,
        read_conninfo: str | None = None,
        max_replica_lag: timedelta | None = DEFAULT_MAX_REPLICA_LAG,
    ) -> None:
        self.conninfo = conninfo
        self.require_sync = require_sync_replication(require_sync)
        self.listening = listening
        self.poll_only = poll_only
        self.max_scheduler_lag = max_scheduler_lag
        self.timeout = timeout
        self.now = now
        self.read_conninfo = read_conninfo
        self.max_replica_lag = max_replica_lag

    def _connect(self, conninfo: str) -> psycopg.Connection[Any]:
        # The pooler mode of the process (TOCKWORK_POOLER): see jobs/connection.py.
        return connect(conninfo, autocommit=True, connect_timeout=max(1, round(self.timeout)))

    def checks(self) -> dict[str, Check]:
        replica = self.read_conninfo is not None
        # (name, step, whether it only reads: then it runs on the replica when there is one)
        plan: list[tuple[str, _Step, bool]] = [
            ("database", self._database, False),
            ("schema", self._schema, True),
            ("listen", self._listen, False),
            ("scheduler_lag", self._lag, True),
            ("replication", self._replication, False),
        ]
        if replica:
            plan.append(("replica", self._replica, True))
        opened: dict[bool, psycopg.Connection[Any] | Exception] = {}
        for reads in (False, True) if replica else (False,):
            target = self.read_conninfo if reads and self.read_conninfo else self.conninfo
            try:
                opened[reads] = self._connect(target)
            except (psycopg.Error, OSError) as exc:
                opened[reads] = exc
        result: dict[str, Check] = {}
        try:
            for name, step, reads in plan:
                conn = opened[reads and replica]
                if isinstance(conn, Exception):
                    result[name] = self._unreachable(name, conn, replica=reads and replica)
                else:
                    result[name] = self._run(conn, step)
        finally:
            for conn in opened.values():
                if not isinstance(conn, Exception):
                    conn.close()
        return result

    @staticmethod
    def _unreachable(name: str, exc: Exception, *, replica: bool) -> Check:
        if name in ("database", "replica"):
            return Check(False, f"unreachable: {type(exc).__name__}: {_one_line(exc)}")
        return Check(False, f"not checked: {'replica' if replica else 'database'} unreachable")

    def _run(self, conn: psycopg.Connection[Any], step: _Step) -> Check:
        try:
            # One transaction per check, its timeout local to it: nothing is left on the
            # session (a transaction-mode pooler hands it to other clients).
            with conn.transaction():
                timeout = {"timeout": f"{int(self.timeout * 1000)}ms"}
                conn.execute(query("pg_set_local_statement_timeout_health"), timeout)
                return step(conn)
        except psycopg.Error as exc:
            return Check(False, f"{type(exc).__name__}: {exc}".strip())

    def _database(self, conn: psycopg.Connection[Any]) -> Check:
        conn.execute(query("pg_ping"))
        return Check(True, "reachable")

    def _schema(self, conn: psycopg.Connection[Any]) -> Check:
        """The schema is there and as new as this code: a readiness probe against an empty or
        behind database fails, with what to run."""
        missing = pending_migrations(conn, COMPONENTS)
        if not missing:
            return Check(True, "up to date")
        return Check(
            False,
            f"{len(missing)} migration(s) not applied (first {missing[0]}): run 'tockwork migrate'",
        )

    def _listen(self, conn: psycopg.Connection[Any]) -> Check:
        if self.poll_only:
            return Check(True, "poll-only declared")
        if self.listening is not None:
            if self.listening():
                return Check(True, "listening")
            return Check(False, "LISTEN down: polling only until it reconnects")
        if pooler_mode() == "transaction":
            # A LISTEN through the pooler would pass and prove nothing (jobs/connection.py).
            return Check(True, "not checked: the URL goes through a transaction-mode pooler")
        channel = sql.Identifier(JOBS_CHANNEL)
        conn.execute(sql.SQL("LISTEN {}").format(channel))
        conn.execute(sql.SQL("UNLISTEN {}").format(channel))
        return Check(True, "database accepts LISTEN")

    def _lag(self, conn: psycopg.Connection[Any]) -> Check:
        lag = scheduler_lag(conn, self.now() if self.now is not None else None)
        if lag is None:
            return Check(True, "no schedules table")
        if self.max_scheduler_lag is None:
            return Check(True, "not checked", lag)
        limit = self.max_scheduler_lag.total_seconds()
        if lag <= limit:
            return Check(True, f"{lag:.1f}s <= {limit:g}s", lag)
        return Check(False, f"{lag:.1f}s > {limit:g}s: is a scheduler running?", lag)

    def _replication(self, conn: psycopg.Connection[Any]) -> Check:
        found = server_identity(conn)
        value = 1.0 if found.synchronous else 0.0
        detail = found.replication()
        if found.timeline is not None:
            detail = f"{detail}; timeline {found.timeline}"
        if self.require_sync and not found.synchronous:
            return Check(False, f"{detail} (synchronous replication is required)", value)
        if found.stalled:
            return Check(False, f"{detail} (nothing can be written)", value)
        return Check(True, detail, value)

    def _replica(self, conn: psycopg.Connection[Any]) -> Check:
        state = replica_state(conn, self.now() if self.now is not None else None)
        problem = state.problem()
        if problem is not None:
            return Check(False, f"the read URL {problem}", state.lag)
        if state.lag is None:
            return Check(True, "streaming; lag unknown: no transaction replayed since it started")
        behind = f"{state.lag:.1f}s behind the primary"
        if self.max_replica_lag is None:
            return Check(True, f"{behind} (not checked)", state.lag)
        limit = self.max_replica_lag.total_seconds()
        if state.lag <= limit:
            return Check(True, f"{behind} <= {limit:g}s", state.lag)
        return Check(False, f"{behind} > {limit:g}s: what is read there is that old", state.lag)

    def __call__(self) -> tuple[bool, dict[str, Any]]:
        checks = self.checks()
        ok = all(c.ok for c in checks.values())
        return ok, {"checks": {name: asdict(c) for name, c in checks.items()}}


def _one_line(exc: BaseException) -> str:
    """An error's text on one line (libpq's connection errors span several)."""
    return " ".join(str(exc).split())


def serve(
    conninfo: str,
    port: int,
    *,
    host: str = "0.0.0.0",
    registry: CollectorRegistry | None = None,
    health: Health | None = None,
    read_conninfo: str | None = None,
    watch: PrimaryWatch | None = None,
) -> MetricsServer:
    """Serve ``/metrics`` (instruments + database gauges) and ``/healthz`` in a thread.

    ``read_conninfo`` (a streaming replica) serves the database gauges, with its lag
    (:func:`replica_probe`), and the default health's checks that only read; the replication
    gauges and the checks that need the primary stay on ``conninfo``. ``watch``: the scrapes
    log a change of primary (a process with no service of its own: ``metrics-server``)."""
    primary = conninfo if read_conninfo else None
    register_metrics(read_conninfo or conninfo, registry, primary=primary, watch=watch)
    app = make_wsgi_app(registry, health=health or Health(conninfo, read_conninfo=read_conninfo))
    server = MetricsServer(app, port, host).start()
    log.info("serving /metrics and /healthz on %s:%d", server.host, server.port)
    return server
