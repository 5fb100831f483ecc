"""Health for orchestrators, and the scheduler's scrape-time figures.

``/healthz`` (and ``tockwork healthz``) answer three questions, each a named check in the JSON
body, and the whole is healthy only if every check passes:

* ``database``: a connection opens and ``SELECT 1`` answers within the timeout;
* ``listen``: LISTEN is alive in this process, or poll-only mode was declared (``--no-listen``);
  the one-shot command instead checks that the database accepts LISTEN;
* ``scheduler_lag``: the most overdue active schedule is overdue by less than the threshold (a
  stopped or overwhelmed scheduler shows here first). No ``schedules`` table passes.

and says what a failover may lose: ``replication`` is ``synchronous`` or ``asynchronous:
acknowledged work can be lost at failover`` (jobs/primary.py; ``value`` 1 or 0). It fails only
when synchronous replication is required (``require_sync``, ``--require-sync-replication``,
``TOCKWORK_REQUIRE_SYNC_REPLICATION=1``) and absent.

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
from jobs.primary import require_sync_replication, server_identity
from scheduler.errors import InvalidSchedule
from scheduler.migrations import COMPONENTS
from scheduler.queries import database_now, query
from scheduler.webhooks.metrics import webhook_probe

DEFAULT_MAX_SCHEDULER_LAG = timedelta(minutes=5)
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


def register_metrics(
    conninfo: str,
    registry: CollectorRegistry | None = None,
    *,
    timeout: float = 2.0,
    now: Callable[[], datetime] | None = None,
) -> DatabaseCollector:
    """Register the scrape-time gauges: queues, outbox, scheduler lag and webhooks
    (:func:`scheduler.webhooks.metrics.webhook_probe`)."""
    return register_database(
        conninfo, registry, timeout=timeout, probes=[scheduler_lag_probe, webhook_probe], now=now
    )


class Health:
    """The checks behind ``/healthz``; calling it returns ``(ok, {"checks": {...}})``.

    ``listening`` reports whether this process's LISTEN is alive (a worker's
    ``lambda: worker.listening``); without it, the check asks the database to accept a LISTEN.
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
    ) -> None:
        self.conninfo = conninfo
        self.require_sync = require_sync_replication(require_sync)
        self.listening = listening
        self.poll_only = poll_only
        self.max_scheduler_lag = max_scheduler_lag
        self.timeout = timeout
        self.now = now

    def checks(self) -> dict[str, Check]:
        try:
            # The pooler mode of the process (TOCKWORK_POOLER): see jobs/connection.py.
            conn = connect(
                self.conninfo, autocommit=True, connect_timeout=max(1, round(self.timeout))
            )
        except (psycopg.Error, OSError) as exc:
            skipped = Check(False, "not checked: database unreachable")
            return {
                "database": Check(False, f"unreachable: {type(exc).__name__}: {exc}".strip()),
                "schema": skipped,
                "listen": skipped,
                "scheduler_lag": skipped,
                "replication": skipped,
            }
        result: dict[str, Check] = {}
        with conn:
            steps: list[tuple[str, Callable[[psycopg.Connection[Any]], Check]]] = [
                ("database", self._database),
                ("schema", self._schema),
                ("listen", self._listen),
                ("scheduler_lag", self._lag),
                ("replication", self._replication),
            ]
            timeout = {"timeout": f"{int(self.timeout * 1000)}ms"}
            for name, step in steps:
                try:
                    # One transaction per check, its timeout local to it: nothing is left on
                    # the session (a transaction-mode pooler hands it to other clients).
                    with conn.transaction():
                        conn.execute(query("pg_set_local_statement_timeout_health"), timeout)
                        result[name] = step(conn)
                except psycopg.Error as exc:
                    result[name] = Check(False, f"{type(exc).__name__}: {exc}".strip())
        return result

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
        return Check(True, detail, value)

    def __call__(self) -> tuple[bool, dict[str, Any]]:
        checks = self.checks()
        ok = all(c.ok for c in checks.values())
        return ok, {"checks": {name: asdict(c) for name, c in checks.items()}}


def serve(
    conninfo: str,
    port: int,
    *,
    host: str = "0.0.0.0",
    registry: CollectorRegistry | None = None,
    health: Health | None = None,
    read_conninfo: str | None = None,
) -> MetricsServer:
    """Serve ``/metrics`` (instruments + database gauges) and ``/healthz`` in a thread.

    ``read_conninfo`` (a streaming replica) serves the database gauges; the health checks stay
    on ``conninfo`` (the primary)."""
    register_metrics(read_conninfo or conninfo, registry)
    app = make_wsgi_app(registry, health=health or Health(conninfo))
    server = MetricsServer(app, port, host).start()
    log.info("serving /metrics and /healthz on %s:%d", server.host, server.port)
    return server
