"""The worker runtime: claim, run, record, with leases, heartbeats and isolated queues.

One dispatcher thread owns the worker's database connection and loops:

    write finished outcomes (one statement per batch, history included)
    extend leases that are due (one statement)        -> heartbeat
    recover expired leases of any worker (bounded)    -> reaper
    claim up to the free slots of every queue (one statement, SKIP LOCKED)
    hand each job to its queue's thread pool
    sleep until a notification, a finished job, the next poll or the next deadline

Each queue has its own pool of ``concurrency`` threads, so a flood of ``reports`` never takes a
slot from ``critical_alerts``. Handlers run outside any transaction. A handler's outcome is
written under the fencing token the claim handed out: a worker whose lease expired and was
taken over cannot overwrite the new owner's result.

Stopping (``stop()``, SIGTERM, SIGINT): claim nothing more, let running handlers finish within
the grace period, then give the remaining leases back so nothing stays leased.
"""

from __future__ import annotations

import logging
import queue as queue_module
import time
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import psycopg

from jobs import validate
from jobs.errors import InvalidJob
from jobs.listener import CHANNEL
from jobs.maintenance import RescueConfig, rescue_leases
from jobs.metrics import UNREGISTERED, Metrics
from jobs.model import Job, JobStatus
from jobs.outcomes import TransientError
from jobs.retry import Decision, RetryPolicies, decide
from jobs.service import Reconnect, Service, default_name
from jobs.store import Finished, JobStore, PgJobStore
from timezones.clock import Clock

Handler = Callable[[Job], object]

log = logging.getLogger("tockwork.worker")
job_log = logging.getLogger("tockwork.jobs")

NO_HANDLER = "no_handler"
# Shortest sleep while waiting for a scheduled job: wake-ups coalesce at this granularity.
_MIN_WAIT = 0.005


@dataclass
class WorkerStats:
    """What a worker did, for scripts, tests and the demo."""

    claimed: int = 0
    outcomes: dict[str, int] = field(default_factory=dict)
    fenced: int = 0
    reaped: int = 0
    released: int = 0
    lost_leases: int = 0
    claim_seconds: float = 0.0
    write_seconds: float = 0.0

    def count(self, outcome: str) -> None:
        self.outcomes[outcome] = self.outcomes.get(outcome, 0) + 1


class Worker(Service[WorkerStats]):
    """Runs handlers for jobs of the given queues.

    ``handlers`` maps a job type to a callable taking a :class:`jobs.Job`. ``queues`` maps a
    queue to its concurrency (threads). ``clock`` pins time for tests (SQL then uses it as
    ``now``); by default the database clock is the one clock. ``reconnect`` is the policy for a
    lost database connection (:class:`jobs.service.Reconnect`).

    After :meth:`stop` the worker claims nothing more; running handlers get the ``grace``
    period, then their leases are given back. :meth:`run_until_idle` returns when no job is
    ready and nothing is running.
    """

    def __init__(
        self,
        conninfo: str,
        handlers: Mapping[str, Handler],
        queues: Mapping[str, int] | None = None,
        *,
        name: str | None = None,
        lease: timedelta = timedelta(seconds=30),
        heartbeat: timedelta | None = None,
        poll_interval: timedelta = timedelta(seconds=1),
        reap_interval: timedelta = timedelta(seconds=5),
        reap_limit: int = 500,
        grace: timedelta = timedelta(seconds=20),
        listen: bool = True,
        prefetch: int = 0,
        retry: RetryPolicies | None = None,
        clock: Clock | None = None,
        connect_kwargs: Mapping[str, Any] | None = None,
        on_outcome: Callable[[Job, Decision, float], None] | None = None,
        metrics: Metrics | None = None,
        reconnect: Reconnect | None = None,
    ) -> None:
        queues = dict(queues or {"default": 4})
        if not queues:
            raise InvalidJob("queues", queues, "name at least one queue")
        for q, n in queues.items():
            validate.queue_name(q, "queues")
            if isinstance(n, bool) or not isinstance(n, int) or n < 1:
                raise InvalidJob(f"queues[{q!r}]", n, "concurrency must be a positive integer")
        if lease < timedelta(seconds=1):
            raise InvalidJob("lease", lease, "must be at least one second")
        super().__init__(
            conninfo,
            kind="worker",
            name=name or default_name(),
            log=log,
            clock=clock,
            connect_kwargs=dict(connect_kwargs or {}),
            reconnect=reconnect,
        )
        self.handlers = dict(handlers)
        self.queues = queues
        self.lease = lease
        self.heartbeat_every = heartbeat or lease / 3
        self.poll_interval = poll_interval
        self.reap_interval = reap_interval
        self.reap_limit = reap_limit
        self.grace = grace
        self.listen = listen
        self.prefetch = prefetch
        self.retry = retry or RetryPolicies()
        self.on_outcome = on_outcome
        self.metrics = metrics or Metrics.for_registry()
        self.stats = WorkerStats()

        self._done: queue_module.SimpleQueue[Finished] = queue_module.SimpleQueue()
        self._inflight: dict[int, Job] = {}
        self._inflight_by_queue: dict[str, int] = dict.fromkeys(queues, 0)
        self._pools: dict[str, ThreadPoolExecutor] = {}
        self._store: JobStore | None = None
        self._next_heartbeat = 0.0
        self._next_reap = 0.0

    # -- lifecycle --------------------------------------------------------------------------

    def _result(self) -> WorkerStats:
        return self.stats

    @contextmanager
    def _session(self, *, until_idle: bool) -> Iterator[None]:
        self._connection()
        self._pools = {
            q: ThreadPoolExecutor(max_workers=n, thread_name_prefix=f"tockwork-{q}")
            for q, n in self.queues.items()
        }
        try:
            if self.listen:
                self._listen(CHANNEL, self.metrics)
            log.info(
                "worker %s started: queues %s, %s",
                self.name,
                ", ".join(f"{q}={n}" for q, n in self.queues.items()),
                "listening" if self.listening else "poll-only",
            )
            self._next_heartbeat = time.monotonic() + self.heartbeat_every.total_seconds()
            self._next_reap = 0.0
            yield
        finally:
            self._shutdown()

    def _connected(self, conn: psycopg.Connection[Any]) -> None:
        self._store = PgJobStore(conn)

    def _shutdown(self) -> None:
        try:
            self._give_back()
        finally:
            for pool in self._pools.values():
                pool.shutdown(wait=False, cancel_futures=True)
            self._unlisten()
            self.close()
            log.info("worker %s stopped", self.name)

    def _give_back(self) -> None:
        """Let running handlers finish within the grace, then give back the leases left."""
        deadline = time.monotonic() + self.grace.total_seconds()
        while self._inflight and time.monotonic() < deadline:
            self._flush()
            self._maybe_heartbeat()
            self._wake.wait(0.05)
            self._wake.clear()
        self._flush()
        if self._inflight:
            leases = [(j.id, j.lease_token) for j in self._inflight.values()]
            released = (
                self._db(lambda s: s.release(leases, self.name, self.now_or_none()), "release")
                or []
            )
            self.stats.released += len(released)
            log.warning(
                "worker %s: %d handler(s) still running after the grace period; "
                "their leases were given back: %s",
                self.name,
                len(released),
                released,
            )
            self._inflight.clear()

    # -- the loop ---------------------------------------------------------------------------

    def _step(self, *, until_idle: bool) -> float | None:
        self._maybe_heartbeat()
        self._maybe_reap()
        claimed = self._cycle(claim=True)
        if until_idle and not claimed and not self._inflight and self._done.empty():
            return None
        if not self._done.empty():
            return 0.0
        deadline = min(self._next_heartbeat, self._next_reap) - time.monotonic()
        wait = min(self.poll_interval.total_seconds(), deadline)
        if self._has_free_slot() and wait > _MIN_WAIT:
            # Sleep until the next scheduled job falls due, if that comes first.
            due = self._db(lambda s: s.next_due(list(self.queues), self.now_or_none()), "next_due")
            if due is not None:
                wait = min(wait, max(due, _MIN_WAIT))
        return max(0.0, wait)

    def _db(self, op: Callable[[JobStore], Any], operation: str = "other") -> Any:
        """Run one store operation under the reconnect policy (:class:`jobs.service.Reconnect`).

        After a lost connection the operation runs again on a new one. A claim is not
        idempotent: if the lost connection had committed it, its jobs stay leased to nobody
        until the reaper recovers them after the lease, and its outcomes, written again, come
        back as fenced. A known limit, kept in this one place until it is fixed.
        """

        def timed() -> Any:
            assert self._store is not None
            with self.metrics.db_duration.labels(operation).time():
                return op(self._store)

        return self._retrying(timed)

    def _has_free_slot(self) -> bool:
        return any(self._inflight_by_queue[q] < n + self.prefetch for q, n in self.queues.items())

    def _cycle(self, *, claim: bool) -> int:
        """Write finished outcomes and claim into the free slots, in one transaction.

        Both statements go to the server in one pipeline and commit together: one round trip
        and one commit per cycle however many jobs finished and were claimed.
        """
        batch = self._drain_done()
        wanted: dict[str, int] = {}
        if claim:
            finishing = dict.fromkeys(self.queues, 0)
            for item in batch:
                finishing[item.job.queue] += 1
            wanted = {
                q: n + self.prefetch - self._inflight_by_queue[q] + finishing[q]
                for q, n in self.queues.items()
            }
            wanted = {q: n for q, n in wanted.items() if n > 0}
        if not batch and not wanted:
            return 0
        started = time.perf_counter()
        written, claimed = self._db(
            lambda s: s.complete_and_claim(
                batch, wanted, self.name, self.lease, self.now_or_none()
            ),
            ("complete_and_claim" if wanted else "complete") if batch else "claim",
        )
        elapsed = time.perf_counter() - started
        if wanted:
            self.metrics.claim_duration.observe(elapsed)
        self.stats.write_seconds += elapsed if batch else 0.0
        self.stats.claim_seconds += elapsed if not batch else 0.0
        self._settle(batch, written)
        for job in claimed:
            self.stats.claimed += 1
            self.metrics.claimed.labels(job.queue).inc()
            self._inflight[job.id] = job
            self._inflight_by_queue[job.queue] += 1
            self._pools[job.queue].submit(self._execute, job)
        return len(claimed)

    def _execute(self, job: Job) -> None:
        started_at = self.now()
        t0 = time.perf_counter()
        handler = self.handlers.get(job.job_type)
        error: BaseException | None = None
        try:
            if handler is None:
                raise TransientError(
                    f"no handler for job type {job.job_type!r} in worker {self.name}",
                    code=NO_HANDLER,
                )
            handler(job)
        except Exception as exc:
            error = exc
        duration_ms = (time.perf_counter() - t0) * 1000.0
        decision = decide(job, error, self.retry.for_job(job))
        self._log_outcome(job, decision, duration_ms, error)
        if self.on_outcome is not None:
            self.on_outcome(job, decision, duration_ms)
        self._done.put(Finished(job, decision, started_at, duration_ms))
        self.wake()

    def _log_outcome(
        self, job: Job, decision: Decision, duration_ms: float, error: BaseException | None
    ) -> None:
        fields = {
            "job_id": job.id,
            "job_type": job.job_type,
            "queue": job.queue,
            "attempt": job.attempt,
            "idempotency_key": job.idempotency_key,
            "duration_ms": round(duration_ms, 3),
            "outcome": decision.outcome,
            "error_code": decision.code,
        }
        if error is None or decision.status is JobStatus.PENDING:
            job_log.debug("job %s %s", job.id, decision.outcome, extra={"job": fields})
        else:
            job_log.warning(
                "job %s %s: %s",
                job.id,
                decision.outcome,
                decision.summary,
                extra={"job": fields},
                exc_info=(type(error), error, error.__traceback__) if error else None,
            )

    def _drain_done(self) -> list[Finished]:
        batch: list[Finished] = []
        while True:
            try:
                batch.append(self._done.get_nowait())
            except queue_module.Empty:
                return batch

    def _flush(self) -> None:
        """Write finished outcomes without claiming (shutdown)."""
        self._cycle(claim=False)

    def _settle(self, batch: list[Finished], written: dict[int, str]) -> None:
        for item in batch:
            outcome = written.get(item.job.id, "fenced")
            if outcome == "fenced":
                self.stats.fenced += 1
                log.warning(
                    "job %s: outcome %s rejected, the lease was lost to another worker",
                    item.job.id,
                    item.decision.outcome,
                )
            self.stats.count(outcome)
            self._observe(item, outcome)
            if self._inflight.pop(item.job.id, None) is not None:
                self._inflight_by_queue[item.job.queue] -= 1

    def _observe(self, item: Finished, outcome: str) -> None:
        job, m = item.job, self.metrics
        job_type = job.job_type if job.job_type in self.handlers else UNREGISTERED
        m.execution_duration.labels(job.queue, job_type).observe(item.duration_ms / 1000.0)
        m.outcomes.labels(job.queue, job_type, outcome).inc()
        if outcome != "fenced" and item.decision.status is JobStatus.RETRYING:
            m.retries.labels(job.queue, job_type, m.error_class(item.decision.code)).inc()

    def _maybe_heartbeat(self) -> None:
        if time.monotonic() < self._next_heartbeat:
            return
        self._next_heartbeat = time.monotonic() + self.heartbeat_every.total_seconds()
        leases = [(j.id, j.lease_token) for j in self._inflight.values()]
        if not leases:
            return
        kept: set[int] = self._db(
            lambda s: s.heartbeat(leases, self.lease, self.now_or_none()), "heartbeat"
        )
        lost = [i for i, _ in leases if i not in kept and i in self._inflight]
        if lost:
            self.stats.lost_leases += len(lost)
            self.metrics.leases_lost.inc(len(lost))
            log.warning("worker %s: leases lost for jobs %s", self.name, lost)

    def _maybe_reap(self) -> None:
        if time.monotonic() < self._next_reap:
            return
        self._next_reap = time.monotonic() + self.reap_interval.total_seconds()
        reaped: list[tuple[int, str, str]] = self._db(
            lambda s: rescue_leases(s, RescueConfig(self.reap_limit, 1), now=self.now_or_none()),
            "reap",
        )
        for _, queue, _ in reaped:
            self.metrics.lease_expirations.labels(queue).inc()
        if reaped:
            self.stats.reaped += len(reaped)
            log.warning(
                "recovered %d expired lease(s): %s",
                len(reaped),
                ", ".join(f"{i}->{st}" for i, _, st in reaped[:20]),
            )
