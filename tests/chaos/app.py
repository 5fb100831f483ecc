"""The handlers and projections the chaos suite's worker and relay processes run.

Every handler first records that it started (``chaos_runs``, autocommit, on a connection of its
own thread), so "no job dead without having run" is checked against what really ran, not
against the queue's own history. Then it makes its effect once with one of the project's two
effect-once tools:

* ``chaos.tick`` and ``chaos.burst`` (schedule occurrences, bursts): a database effect in the
  worker's completion transaction (:func:`jobs.in_completion`): it commits exactly when the
  job's success does;
* ``chaos.order`` and ``chaos.projected`` (the producer's jobs and the relay's): the effect and
  :func:`jobs.effects.record_once` in one transaction of the handler's own.

``chaos_effects`` has no unique constraint on purpose: an effect made twice is two rows.

Handlers connect to ``$TOCKWORK_TEST_DB`` (the database itself, never through the fault
proxy a worker may sit behind). A handler never raises: a lost connection (PostgreSQL
restarting) is retried on a new one, so a handler adds no traceback to the logs and no retry to
the figures. The tables are created by the harness (:func:`tests.chaos.harness.create_tables`).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

import psycopg

import jobs
from jobs import Job, JobSpec
from jobs.effects import effect_key, record_once
from jobs.outbox import Event, Projections

T = TypeVar("T")
_local = threading.local()
# How long a handler keeps trying to reach the database (PostgreSQL restarts take ~1 s).
RETRY_FOR_SECONDS = 60.0
SLOW_SECONDS = 2.0


def _with_connection(fn: Callable[[psycopg.Connection[Any]], T]) -> T:
    """Run ``fn`` on this thread's autocommit connection, reconnecting while the server is away."""
    deadline = time.monotonic() + RETRY_FOR_SECONDS
    while True:
        conn: psycopg.Connection[Any] | None = getattr(_local, "conn", None)
        try:
            if conn is None or conn.closed:
                conn = psycopg.connect(os.environ["TOCKWORK_TEST_DB"], autocommit=True)
                _local.conn = conn
            return fn(conn)
        except psycopg.OperationalError:
            if conn is not None:
                conn.close()
            _local.conn = None
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)  # reconnect back-off while the server restarts


def _started(job: Job) -> None:
    tokens = os.environ.get("TOCKWORK_TOKEN_LOG")
    if tokens:
        # Outside the database (which a failover may roll back): the lease this run holds. The
        # failover suite checks that no (job, token) is run under two leases.
        with open(os.path.join(tokens, f"{os.getpid()}.tokens"), "a") as f:
            f.write(f"{job.id} {job.lease_token}\n")
    _with_connection(
        lambda c: c.execute(
            "INSERT INTO chaos_runs (job_id, attempt, job_type) VALUES (%s, %s, %s)",
            (job.id, job.attempt, job.job_type),
        )
    )


def in_completion_effect(job: Job) -> None:
    """Run record, then the effect in the worker's completion transaction."""
    _started(job)
    job_id = job.id

    def effect(conn: psycopg.Connection[Any]) -> None:
        conn.execute(
            "INSERT INTO chaos_effects (job_id, effect_key, via) VALUES (%s, %s, 'completion')",
            (job_id, f"completion:{job_id}"),
        )

    jobs.in_completion(effect)


def record_once_effect(job: Job) -> None:
    """Run record, then the effect and its record_once in one transaction of the handler's.

    A job whose payload says ``slow`` first works for 2 s (longer than a third of the chaos
    run's 5 s lease), so that workers heartbeat.
    """
    _started(job)
    if isinstance(job.payload, dict) and job.payload.get("slow"):
        time.sleep(SLOW_SECONDS)  # the handler's work
    key = effect_key(job, "chaos")

    def effect(conn: psycopg.Connection[Any]) -> None:
        with conn.transaction():
            if record_once(conn, key, job_id=job.id):
                conn.execute(
                    "INSERT INTO chaos_effects (job_id, effect_key, via)"
                    " VALUES (%s, %s, 'record_once')",
                    (job.id, key),
                )

    _with_connection(effect)


handlers: dict[str, jobs.Handler] = {
    "chaos.tick": in_completion_effect,
    "chaos.burst": in_completion_effect,
    "chaos.order": record_once_effect,
    "chaos.projected": record_once_effect,
}

projections = Projections()


@projections.on("chaos.order.placed", name="chaos-projected")
def projected(event: Event) -> list[JobSpec]:
    return [JobSpec("chaos.projected", {"order": event.payload["order"]})]
