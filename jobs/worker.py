"""The worker runtime: claim, run, record, with leases, heartbeats and isolated queues.

One dispatcher thread owns the worker's database connection and loops:

    write finished outcomes, their completion effects first   (one transaction, pipelined
    claim what each queue wants                                  with the outcomes)
    extend leases that are due (one statement)        -> heartbeat
    recover expired leases of any worker (bounded)    -> reaper
    hand the jobs claimed to their queue's thread pool
    sleep until a notification, a finished job, the next poll or the next deadline

Each queue has its own pool of ``concurrency`` threads, so a flood of ``reports`` never takes a
slot from ``critical_alerts``. Handlers run outside any transaction. A handler's outcome is
written under the fencing token the claim handed out: a worker whose lease expired and was
taken over cannot overwrite the new owner's result.

**Single and batch handlers.** A job type's handler is a callable taking one job, or a
:class:`jobs.batch.BatchHandler` taking a :class:`jobs.batch.Batch`. Claimed jobs wait per
(queue, job type); a pool thread that becomes free takes one job, or for a batch handler every
waiting job of its type up to ``max_batch``. A batch occupies one thread: a queue's
concurrency counts handler calls at once, not jobs.

**Async handlers.** An ``async def`` handler (single or batch, detected by
:func:`jobs.batch.is_async_handler`) runs as a task on the worker's one event loop, in a thread
of its own started with the run. Each queue owes handler calls in claim order and starts them
while it has a free slot, whatever their kind: ``concurrency`` counts sync threads and
coroutines together. A call's end (a pool thread's, or its task's last step on the loop)
frees its slot, hands its outcomes to the dispatcher and starts the queue's next calls. Both
kinds share the outcome classification (``_single_run``, ``_batch_run`` and the bisection of
:mod:`jobs.batch`). When stopping, running coroutines get the grace like threads; then their
leases are given back and they are cancelled.

**How much a claim asks for** (:class:`ClaimSizer`, per queue): the free threads, plus jobs
claimed *ahead* so that a finishing thread finds work without waiting for the next round trip
and each cycle writes and claims many jobs at once. The ahead target grows (doubling) while
claims come back full, halves when one comes back short (the backlog is small), and is capped
by what the queue's threads can start within a tenth of the lease at the measured handler time
per job (moving average; a batch counts its time over its jobs), and by
:data:`MAX_AHEAD`: a 2-second handler with 4 threads and a 30-second lease holds at most 6
jobs ahead, a no-op handler up to 500, and a queue whose handler has not finished yet holds
none. ``prefetch=N`` fixes the ahead target at N instead. Leased jobs that have not started are
given back at once when the worker stops, as if never claimed.

**Lost replies.** When the connection dies while a write commits, the worker cannot know from
the error whether it committed. Writes that are safe to repeat are repeated on a new
connection: a heartbeat (it extends the same leases), a reap (it finds only leases still
expired), a release (only leases still held under their token). A claim is not: repeated, it
would lease other jobs and leave the first ones leased to a live worker with no handler, until
the reaper took them back as ``lease_expired`` with an attempt used. So each cycle's
transaction (outcomes and claim, atomic) carries a claim id chosen before it is sent and
stamped on the rows it leases; after a lost reply the worker first asks what committed
(:meth:`jobs.store.JobStore.lost_reply`: the attempt rows its outcomes left, the rows still
leased under the claim id). Any trace means the whole transaction committed: its outcomes are
counted as written (not as "fenced"), its jobs are run here, and one warning says so. No trace
means nothing committed, and the cycle runs again under the same claim id, so a reply lost
again is resolved the same way. The normal path pays nothing for this but one parameter.

**Expiry.** A job enqueued with a ``max_lateness`` carries ``expires_at``. A handler call
first sets aside its jobs past it (by the worker's clock): they are not run but written
``expired`` with the call's other outcomes (``EXPIRED``: the claim's attempt given back, no
attempt row), and the handler's ``on_expired(conn, jobs)``, if it has one, runs as their
completion effect. A job without a limit costs one attribute test.

Stopping (``stop()``, SIGTERM, SIGINT): claim nothing more, give back the jobs claimed ahead,
let running handlers finish within the grace period, then give the remaining leases back so
nothing stays leased.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import math
import queue as queue_module
import threading
import time
from collections import Counter, defaultdict, deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from operator import attrgetter, itemgetter
from typing import Any
from uuid import uuid4

import psycopg
from psycopg.types.json import set_json_loads

from jobs import tracing, validate
from jobs.batch import (
    BatchHandler,
    BatchResult,
    Decided,
    RunEffects,
    collecting_effects,
    is_async_handler,
    run_batch,
    run_batch_async,
    single_effects,
)
from jobs.config import UNSET, Unset, merged, setting
from jobs.connection import UTC_ALIASES, json_loads
from jobs.errors import InvalidJob
from jobs.listener import CHANNEL, POLICIES_CHANGED
from jobs.maintenance import RescueConfig, rescue_leases
from jobs.metrics import UNREGISTERED, Metrics, observe_many
from jobs.model import Job, JobStatus
from jobs.outcomes import TransientError
from jobs.processes import ProcessFacts
from jobs.queries import query
from jobs.retry import EXPIRED, SUCCEEDED, Decision, RetryPolicies, decide, summarize
from jobs.service import Reconnect, Service, default_name
from jobs.store import Finished, JobStore, PgJobStore, effect_failure_decisions
from timezones.clock import Clock

Handler = Callable[[Job], object]

log = logging.getLogger("tockwork.worker")


job_log = logging.getLogger("tockwork.jobs")

NO_HANDLER = "no_handler"


# Shortest sleep while waiting for a scheduled job: wake-ups coalesce at this granularity.
_MIN_WAIT = 0.005
# Jobs claimed ahead are bounded by what the threads can start within this share of the lease,
MAX_AHEAD_LEASE_SHARE = 0.1
# and by this many per queue.
MAX_AHEAD = 500
# A running job is reported started (jobs.started_token) by the first cycle once it has run for
# this share of the lease (3 s of the default 30 s), or by the heartbeat, whichever comes first:
# a job that finishes sooner costs no mark, and a worker killed within it gives the attempt back.
MARK_AFTER_LEASE_SHARE = 0.1
# How long a stopping worker waits for its cancelled coroutines to end.
_CANCEL_WAIT = 5.0
# Weight of the newest sample in the moving average of handler time per job.
_EWMA_WEIGHT = 0.2


# A worker process's cyclic garbage collector: its youngest generation collected after this
# many new container objects, not Python's 700 (collect_less).
GC_YOUNG_THRESHOLD = 10_000


def collect_less() -> None:
    """Tune the process's cyclic garbage collector for a worker (``tockwork worker`` calls it;
    the collector is the process's, so an application embedding a :class:`Worker` decides).

    A batch keeps its jobs, payloads, messages and results alive while it runs: a few dozen
    container objects a job, thousands a batch. Collected every 700 allocations, the youngest
    generation was mostly those live objects, scanned, promoted, then scanned again in the
    older generations: about a sixth of a worker's CPU a delivered reminder
    (``bench.delivery_worker``, docs/performance.md). Every 10,000 most have been freed by
    their reference counts first. Nothing else changes: cycles are still collected, later.
    A threshold set higher already, or 0 (the collector disabled), is left as it is.
    """
    first, second, third = gc.get_threshold()
    if first and first < GC_YOUNG_THRESHOLD:  # 0: the application disabled it
        gc.set_threshold(GC_YOUNG_THRESHOLD, second, third)


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
    claims: int = 0  # claim statements (cycles that claimed)
    batches: int = 0  # batch handler invocations, re-runs not counted
    reruns: int = 0  # batch re-runs that isolated a failure (bisection)
    effect_failures: int = 0  # completion effects that raised (their jobs were retried)
    returned: int = 0  # jobs claimed ahead and given back unstarted when stopping
    recovered_claims: int = 0  # writes whose reply was lost although they had committed
    recovered: int = 0  # jobs those lost claims had leased, found and run here

    def count(self, outcome: str) -> None:
        self.outcomes[outcome] = self.outcomes.get(outcome, 0) + 1


class ClaimSizer:
    """How many jobs one queue asks for in a claim (see the module docstring).

    Not thread-safe by itself: the worker calls it under its pool lock.
    """

    def __init__(self, threads: int, lease: timedelta, prefetch: int | None) -> None:
        self.threads = threads
        self.window = lease.total_seconds() * MAX_AHEAD_LEASE_SHARE
        self.prefetch = prefetch
        self.ahead = 0
        self.seconds_per_job: float | None = None

    def observe(self, jobs: int, seconds: float) -> None:
        """One handler call of ``jobs`` jobs took ``seconds`` of a thread."""
        if jobs < 1:
            return
        sample = max(seconds, 1e-6) / jobs
        if self.seconds_per_job is None:
            self.seconds_per_job = sample
        else:
            self.seconds_per_job += _EWMA_WEIGHT * (sample - self.seconds_per_job)

    def bound(self) -> int:
        """The most jobs to hold claimed ahead of the threads."""
        if self.prefetch is not None:
            return self.prefetch
        if self.seconds_per_job is None:
            return 0
        return min(MAX_AHEAD, int(self.threads * self.window / self.seconds_per_job))

    def wanted(self, running: int, unstarted: int) -> int:
        """Jobs to claim now, with ``running`` threads busy and ``unstarted`` jobs waiting."""
        ahead = self.prefetch if self.prefetch is not None else min(self.ahead, self.bound())
        return max(0, self.threads - running + ahead - unstarted)

    def claimed(self, wanted: int, got: int) -> None:
        """A claim asked for ``wanted`` jobs and got ``got``: grow or shrink the target."""
        if self.prefetch is not None or wanted <= 0:
            return
        if got >= wanted:
            self.ahead = min(self.bound(), max(2 * self.ahead, self.threads))
        else:
            self.ahead //= 2


@dataclass(slots=True)
class _Run:
    """What one pool task produced: finished attempts and their completion effects.

    ``quiet``: every attempt succeeded, all of one queue and job type with one duration (a
    batch whose first run returned, or one job): the settle counts them at once."""

    finished: list[Finished]
    effects: list[RunEffects]
    batch: bool = False
    reruns: int = 0
    quiet: bool = False


def _joined(first: _Run | None, second: _Run) -> _Run:
    """Two runs of one handler call as one (the expired jobs' and the others')."""
    if first is None:
        return second
    return _Run(
        first.finished + second.finished,
        first.effects + second.effects,
        batch=second.batch,
        reruns=second.reruns,
    )


@dataclass(frozen=True, slots=True)
class WorkerConfig:
    """The worker's settings, each with its default, bounds and help (:mod:`jobs.config`).

    ``Worker(conninfo, handlers, config=WorkerConfig(...))``; the worker's keyword arguments of
    the same names override single fields. ``tockwork worker`` builds its options from these
    fields.
    """

    queues: Mapping[str, int] = setting(
        default_factory=lambda: {"default": 4},
        help="each queue the worker serves and its concurrency (handler threads)",
    )
    lease: timedelta = setting(
        timedelta(seconds=30),
        help="seconds a claimed job stays leased between heartbeats (at least 1)",
        flag="--lease",
        minimum=1,
        metavar="SECONDS",
    )
    heartbeat: timedelta | None = setting(
        None, help="how often running jobs' leases are extended (None: a third of the lease)"
    )
    grace: timedelta = setting(
        timedelta(seconds=20),
        help="seconds running handlers get to finish after SIGTERM",
        flag="--grace",
        metavar="SECONDS",
    )
    poll_interval: timedelta = setting(
        timedelta(seconds=1),
        help="seconds between reconciliation polls (above 0)",
        flag="--poll",
        positive=True,
        metavar="SECONDS",
    )
    reap_interval: timedelta = setting(
        timedelta(seconds=5), help="how often expired leases of any worker are recovered"
    )
    reap_limit: int = setting(500, help="expired leases recovered per reap, at most")
    # LISTEN for notifications; the help line is the switch's (--no-listen turns it off).
    listen: bool = setting(True, help="poll only (e.g. behind PgBouncer)", flag="--no-listen")
    prefetch: int | None = setting(
        None, help="jobs each queue claims ahead of its threads (None: adaptive)"
    )

    def __post_init__(self) -> None:
        queues = dict(self.queues)
        if not queues:
            raise InvalidJob("queues", queues, "name at least one queue")
        for q, n in queues.items():
            validate.queue_name(q, "queues")
            if isinstance(n, bool) or not isinstance(n, int) or n < 1:
                raise InvalidJob(f"queues[{q!r}]", n, "concurrency must be a positive integer")
        object.__setattr__(self, "queues", queues)  # a copy: the caller's dict may change
        prefetch = self.prefetch
        if prefetch is not None and (
            isinstance(prefetch, bool) or not isinstance(prefetch, int) or prefetch < 0
        ):
            raise InvalidJob("prefetch", prefetch, "must be None (adaptive) or an integer >= 0")
        if self.lease < timedelta(seconds=1):
            raise InvalidJob("lease", self.lease, "must be at least one second")


class Worker(Service[WorkerStats]):
    """Runs handlers for jobs of the given queues.

    ``handlers`` maps a job type to a callable taking a :class:`jobs.Job` or to a
    :class:`jobs.BatchHandler`; a worker may mix both. ``queues`` maps a queue to its
    concurrency (threads). ``prefetch`` fixes how many jobs each queue claims ahead of its
    threads (default: adaptive, see the module docstring). ``clock`` pins time for tests (SQL
    then uses it as ``now``); by default the database clock is the one clock. ``reconnect`` is
    the policy for a lost database connection (:class:`jobs.service.Reconnect`).
    ``pooler="transaction"`` for a URL through a transaction-mode pooler (``listen_conninfo``:
    a direct URL for LISTEN; without it the worker polls only), see :mod:`jobs.connection`.

    The settings (``queues``, ``lease``, ``grace``, ``poll_interval``, ...) come from ``config``
    (:class:`WorkerConfig`, its defaults when none is given); a keyword argument of the same
    name overrides that field.

    After :meth:`stop` the worker claims nothing more; running handlers get the ``grace``
    period, then their leases are given back. :meth:`run_until_idle` returns when no job is
    ready and nothing is running.
    """

    def __init__(
        self,
        conninfo: str,
        handlers: Mapping[str, Handler | BatchHandler],
        queues: Mapping[str, int] | None = None,
        *,
        config: WorkerConfig | None = None,
        name: str | None = None,
        lease: timedelta | Unset = UNSET,
        heartbeat: timedelta | Unset | None = UNSET,
        poll_interval: timedelta | Unset = UNSET,
        reap_interval: timedelta | Unset = UNSET,
        reap_limit: int | Unset = UNSET,
        grace: timedelta | Unset = UNSET,
        listen: bool | Unset = UNSET,
        prefetch: int | Unset | None = UNSET,
        retry: RetryPolicies | None = None,
        clock: Clock | None = None,
        connect_kwargs: Mapping[str, Any] | None = None,
        on_outcome: Callable[[Job, Decision, float], None] | None = None,
        metrics: Metrics | None = None,
        reconnect: Reconnect | None = None,
        pooler: str | None = None,
        listen_conninfo: str | None = None,
    ) -> None:
        config = merged(
            config,
            WorkerConfig,
            queues=queues or UNSET,  # None or empty: the config's queues
            lease=lease,
            heartbeat=heartbeat,
            poll_interval=poll_interval,
            reap_interval=reap_interval,
            reap_limit=reap_limit,
            grace=grace,
            listen=listen,
            prefetch=prefetch,
        )
        if not handlers:
            # Issue 26: such a worker started and served nothing (and claimed no job it could run).
            raise InvalidJob("handlers", handlers, "has no handler: give at least one job type")
        for job_type, handler in handlers.items():
            if not callable(handler):
                raise InvalidJob(f"handlers[{job_type!r}]", handler, "must be callable")
        super().__init__(
            conninfo,
            kind="worker",
            name=name or default_name(),
            log=log,
            clock=clock,
            connect_kwargs=dict(connect_kwargs or {}),
            reconnect=reconnect,
            pooler=pooler,
            listen_conninfo=listen_conninfo,
        )
        self.config = config
        self.handlers = dict(handlers)
        self.queues = queues = dict(config.queues)
        self.lease = lease = config.lease
        self.heartbeat_every = config.heartbeat or lease / 3
        self.poll_interval = config.poll_interval
        self.reap_interval = config.reap_interval
        self.reap_limit = config.reap_limit
        self.grace = config.grace
        self.listen = config.listen
        self.prefetch = prefetch = config.prefetch
        self.retry = retry or RetryPolicies()
        self.on_outcome = on_outcome
        self.metrics = metrics or Metrics.for_registry()
        self.stats = WorkerStats()

        self._done: queue_module.SimpleQueue[_Run] = queue_module.SimpleQueue()
        self._inflight: dict[int, Job] = {}  # leased to this worker, outcome not written
        # Shared with the pool threads, under _pool_lock: jobs waiting for a thread by (queue,
        # job type), threads busy and jobs waiting per queue, the claim sizers.
        self._pool_lock = threading.Lock()
        self._waiting: defaultdict[tuple[str, str], deque[Job]] = defaultdict(deque)
        self._busy: dict[str, int] = dict.fromkeys(queues, 0)
        self._unstarted: dict[str, int] = dict.fromkeys(queues, 0)
        # Leases (id, token) handed to a thread and not yet reported started to the database,
        # so that a reaper counts their attempt (job_reap): one group per handler call, in the
        # order they started, with the monotonic instant of the start (shared with the pool
        # threads). A cycle marks the leases of the groups that started at least ``mark_after``
        # ago and are still running, the heartbeat (which writes every running job's row
        # anyway) all of them: a job that finishes within ``mark_after`` is never marked.
        self._unmarked: deque[tuple[float, list[tuple[int, int]]]] = deque()
        self.mark_after = lease.total_seconds() * MARK_AFTER_LEASE_SHARE
        self._sizers = {q: ClaimSizer(n, lease, prefetch) for q, n in queues.items()}
        self._replaced: dict[int, Decision] = {}  # outcomes changed by a failed effect
        self._labelled: dict[tuple[str, str, str], tuple[Any, Any]] = {}  # see _settle
        self._pools: dict[str, ThreadPoolExecutor] = {}
        # Handler calls owed per queue, in claim order (the job type of each), started while the
        # queue has a free slot: sync ones on its pool, async ones on the event loop.
        self._calls: dict[str, deque[str]] = {q: deque() for q in queues}
        self._async = frozenset(t for t, h in self.handlers.items() if is_async_handler(h))
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: threading.Thread | None = None
        self._tasks: dict[int, asyncio.Task[None]] = {}
        self._store: JobStore | None = None
        self._next_heartbeat = 0.0
        self._next_reap = 0.0
        # Whether the last cycle's claim got every job it asked for (see _step).
        self._claimed_full = False

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
        if self._async:
            self._start_loop()
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
        set_json_loads(json_loads, conn)  # claimed payloads: orjson, several times json's speed
        if self.pooler != "transaction":
            # The claim's cost estimate can pass jit_above_cost on a big table, and compiling
            # it then takes a hundred times longer than running it (measured on PostgreSQL 15:
            # 105 ms of JIT for a 2 ms claim). Only for this session; through a
            # transaction-mode pooler a SET would reach other clients' sessions, so it is
            # left to the server's setting there (docs/jobs.md, "PgBouncer").
            conn.execute(query("pg_session_jit_off"))
            if conn.info.parameter_status("TimeZone") in UTC_ALIASES:
                # The same zone by another name, which psycopg loads a timestamptz into
                # through datetime.timezone.utc rather than a ZoneInfo: 0.17 against 0.40 us
                # a value, two a claimed row (run_at, created_at). Nothing the SQL computes
                # changes (one zone's rules); the handlers' and the effects' datetimes from
                # this connection have the same instant and offset (tzinfo timezone.utc).
                conn.execute(query("pg_session_time_zone_utc"))
        self._store = PgJobStore(conn)

    def _notified(self, payload: str) -> None:
        # A policy or a limit changed (or notifications may have been lost): the store re-reads
        # which claim statements to use before its next claim (jobs/store.py).
        store = self._store
        if payload in (POLICIES_CHANGED, "*") and isinstance(store, PgJobStore):
            store.policies_changed()
        self.wake()

    def _shutdown(self) -> None:
        try:
            self._give_back()
        finally:
            for pool in self._pools.values():
                pool.shutdown(wait=False, cancel_futures=True)
            self._stop_loop()
            self._unlisten()
            self.close()
            log.info("worker %s stopped", self.name)

    def _give_back(self) -> None:
        """Give back the jobs that never started, let running handlers finish within the
        grace, then give back the leases left."""
        with self._pool_lock:
            unstarted = [j for waiting in self._waiting.values() for j in waiting]
            self._waiting.clear()
            for calls in self._calls.values():
                calls.clear()
            self._unstarted = dict.fromkeys(self.queues, 0)
        if unstarted:
            for j in unstarted:
                self._inflight.pop(j.id, None)
            leases = [(j.id, j.lease_token) for j in unstarted]
            returned = self._db(lambda s: s.release_unstarted(leases), "release") or []
            self.stats.returned += len(returned)
            log.info(
                "worker %s: %d job(s) claimed ahead given back unstarted", self.name, len(returned)
            )
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
        if self._has_free_slot() and wait > _MIN_WAIT and not self._claimed_full:
            # Sleep until the next scheduled job falls due, if that comes first.
            # or until a rate limit holding back ready jobs has refilled (jobs.limits).
            # Not after a claim that got all it asked for: ready jobs are likely left, and
            # the next cycle (at the next handler's end, a notification or the poll) claims
            # again, a job fallen due since included. In a drain that is every cycle, and the
            # probe was a round trip and a planned statement each time.
            due = self._db(
                lambda s: s.next_due(
                    list(self.queues), self.now_or_none(), job_types=list(self.handlers)
                ),
                "next_due",
            )
            if due is not None:
                wait = min(wait, max(due, _MIN_WAIT))
        return max(0.0, wait)

    def _db(
        self,
        op: Callable[[JobStore], Any],
        operation: str = "other",
        *,
        again: Callable[[JobStore], Any] | None = None,
    ) -> Any:
        """Run one store operation under the reconnect policy (:class:`jobs.service.Reconnect`).

        After a lost connection the operation runs again on a new one, as ``again`` when given:
        an operation that is not idempotent (a claim) first finds out what the lost attempt
        committed (see "Lost replies" in the module docstring). The others are safe to repeat:
        a heartbeat extends the same leases again, a reap finds only leases still expired, a
        release only leases still held under their token.
        """
        attempts = 0

        def timed() -> Any:
            nonlocal attempts
            assert self._store is not None
            attempts += 1
            run = op if attempts == 1 or again is None else again
            with self.metrics.db_duration.labels(operation).time():
                return run(self._store)

        return self._retrying(timed)

    def _due_marks(
        self, started_before: float, finished: Sequence[Finished]
    ) -> list[tuple[int, int]]:
        """Take the unmarked leases of the handler calls started before ``started_before``
        (monotonic): those still running and not among ``finished`` (whose outcomes end their
        leases) are to be marked started."""
        inflight = self._inflight
        with self._pool_lock:
            unmarked, groups = self._unmarked, []
            while unmarked and unmarked[0][0] <= started_before:
                groups.append(unmarked.popleft()[1])
            # The calls that ended since (most of them, in a drain of short jobs) go too: the
            # queue holds about the jobs still running, not every start of the last mark_after.
            running = inflight.keys()
            while unmarked and running.isdisjoint(map(_FIRST, unmarked[0][1])):
                unmarked.popleft()
        if not groups:
            return []
        done = {f.job.id for f in finished} if finished else ()
        return [m for g in groups for m in g if m[0] in inflight and m[0] not in done]

    def _wanted(self) -> dict[str, int]:
        with self._pool_lock:
            wanted = {
                q: s.wanted(self._busy[q], self._unstarted[q]) for q, s in self._sizers.items()
            }
        return {q: n for q, n in wanted.items() if n > 0}

    def _has_free_slot(self) -> bool:
        return bool(self._wanted())

    def _cycle(self, *, claim: bool) -> int:
        """Write finished outcomes and claim what each queue wants, in one transaction.

        Both statements go to the server in one pipeline and commit together: one round trip
        and one commit per cycle however many jobs finished and were claimed. Completion
        effects, when some finished job has one, run first in the same transaction.
        """
        runs = self._drain_done()
        finished = [f for r in runs for f in r.finished]
        effects = [e for r in runs for e in r.effects]
        wanted = self._wanted() if claim else {}
        if claim:
            self._claimed_full = False
        if not finished and not wanted:
            return 0
        self._replaced.clear()
        claim_id = uuid4() if wanted else None
        # Marked: the jobs started at least mark_after ago and still running. Most jobs finish
        # sooner (their outcome ends the lease: no mark, no second write of the row), and what
        # a crash in between costs is the attempt given back, bounded (docs/jobs.md, "Crashes
        # and jobs claimed ahead").
        marks = self._due_marks(time.monotonic() - self.mark_after, finished)
        started = time.perf_counter()

        def attempt(s: JobStore) -> tuple[dict[int, str], list[Job]]:
            return s.complete_and_claim(
                finished,
                wanted,
                self.name,
                self.lease,
                self.now_or_none(),
                effects=effects,
                effect_failed=self._effect_failed,
                claim=claim_id,
                started=marks,
                job_types=list(self.handlers),  # their rate limits (jobs.limits)
            )

        def again(s: JobStore) -> tuple[dict[int, str], list[Job]]:
            # The lost attempt committed whole or not at all (one transaction): if any trace
            # of it is found, it is what happened; if none, running it again is safe.
            written, leased = s.lost_reply(finished, claim_id, self.name)
            if not written and not leased:
                return attempt(s)
            self.stats.recovered_claims += 1
            self.stats.recovered += len(leased)
            log.warning(
                "worker %s: the reply to a %s was lost with the connection, but it had "
                "committed: %d outcome(s) written, %d job(s) leased and now run here%s",
                self.name,
                "claim" if not finished else "completion" if not wanted else "completion+claim",
                len(written),
                len(leased),
                f" ({', '.join(str(j.id) for j in leased[:20])})" if leased else "",
            )
            return written, leased

        written, claimed = self._db(
            attempt,
            ("complete_and_claim" if wanted else "complete") if finished else "claim",
            again=again,
        )
        elapsed = time.perf_counter() - started
        if wanted:
            self.stats.claims += 1
            self.metrics.claim_duration.observe(elapsed)
        self.stats.write_seconds += elapsed if finished else 0.0
        self.stats.claim_seconds += elapsed if not finished else 0.0
        for r in runs:
            self.stats.batches += r.batch
            self.stats.reruns += r.reruns
        self._settle(runs, written)
        got = self._by_queue(claimed)
        if wanted:
            with self._pool_lock:
                for q, n in wanted.items():
                    self._sizers[q].claimed(n, got.get(q, 0))
            self._claimed_full = all(got.get(q, 0) >= n for q, n in wanted.items())
        self._dispatch(claimed, got)
        return len(claimed)

    @staticmethod
    def _by_queue(claimed: Sequence[Job]) -> dict[str, int]:
        """How many of the claimed jobs each queue got (one pass, no generator per job)."""
        if not claimed:
            return {}
        first = claimed[0].queue
        if claimed[-1].queue == first and all(j.queue == first for j in claimed):
            return {first: len(claimed)}
        got: dict[str, int] = {}
        for job in claimed:
            got[job.queue] = got.get(job.queue, 0) + 1
        return got

    def _dispatch(self, claimed: Sequence[Job], by_queue: Mapping[str, int]) -> None:
        """Queue the claimed jobs by (queue, job type), owe each queue one handler call per
        job (per ``max_batch`` jobs for a batch handler), and start what the free slots allow
        (a call that finds its jobs taken by an earlier one ends at once). ``by_queue``: how
        many each queue got."""
        if not claimed:
            return
        self._inflight.update(zip(map(_ID, claimed), claimed, strict=True))
        first = claimed[0]
        job_types = list(map(_JOB_TYPE, claimed))
        groups: dict[tuple[str, str], list[Job]] = {}
        if len(by_queue) == 1 and job_types.count(first.job_type) == len(job_types):
            groups[(first.queue, first.job_type)] = list(claimed)  # the usual claim: one group
        else:
            for job in claimed:
                key = (job.queue, job.job_type)
                group = groups.get(key)
                if group is None:
                    groups[key] = [job]
                else:
                    group.append(job)
        self.stats.claimed += len(claimed)
        for q, n in by_queue.items():
            self.metrics.claimed.labels(q).inc(n)  # once per queue, not per job
        with self._pool_lock:
            for (q, t), group in groups.items():
                self._waiting[(q, t)].extend(group)
                self._unstarted[q] += len(group)
                handler = self.handlers.get(t)
                calls = (
                    math.ceil(len(group) / handler.max_batch)
                    if isinstance(handler, BatchHandler)
                    else len(group)
                )
                self._calls[q].extend([t] * calls)
            starts = [s for q in {q for q, _ in groups} for s in self._take(q)]
        self._launch(starts)

    def _take(self, queue: str) -> list[tuple[str, list[Job]]]:
        """Under the pool lock: take the jobs of the handler calls the queue's free slots can
        start now. Sync and async calls of a queue share its ``concurrency`` slots."""
        calls, started = self._calls[queue], []
        busy, limit = self._busy[queue], self.queues[queue]
        now = time.monotonic()
        while calls and busy < limit:
            job_type = calls.popleft()
            waiting = self._waiting.get((queue, job_type))
            if not waiting:
                continue
            handler = self.handlers.get(job_type)
            if isinstance(handler, BatchHandler):
                if handler.max_batch >= len(waiting):
                    taken = list(waiting)
                    waiting.clear()
                else:
                    taken = [waiting.popleft() for _ in range(handler.max_batch)]
                self._unmarked.append((now, list(map(_LEASE, taken))))
            else:  # one job: this runs once per job, so no comprehension
                job = waiting.popleft()
                taken = [job]
                self._unmarked.append((now, [(job.id, job.lease_token)]))
            started.append((job_type, taken))
            self._unstarted[queue] -= len(taken)
            busy += 1
        self._busy[queue] = busy
        return started

    def _launch(self, starts: Sequence[tuple[str, list[Job]]], *, on_loop: bool = False) -> None:
        """Start taken handler calls: a sync one on its queue's pool, an async one as a task
        on the loop (all of them in one hand-over to the loop's thread, none from inside it)."""
        calls = []
        for job_type, taken in starts:
            if job_type in self._async and self._loop is not None:
                calls.append((job_type, taken))
            else:
                self._pools[taken[0].queue].submit(self._task, job_type, taken)
        if not calls:
            return
        assert self._loop is not None
        if on_loop:
            self._create_tasks(calls)
        else:
            self._loop.call_soon_threadsafe(self._create_tasks, calls)

    def _create_tasks(self, calls: Sequence[tuple[str, list[Job]]]) -> None:
        """On the loop's thread: one task per async handler call."""
        assert self._loop is not None
        create, tasks, t0 = self._loop.create_task, self._tasks, time.perf_counter()
        for job_type, taken in calls:
            # The loop holds tasks weakly: this keeps each until its call ends, keyed by its
            # list of jobs (one per call) so that the call can drop it without current_task().
            tasks[id(taken)] = create(self._call_async(job_type, taken, t0))

    def _finished_call(
        self, queue: str, n: int, t0: float, run: _Run | None, *, on_loop: bool = False
    ) -> None:
        """A handler call ended (``run`` is None when it was cancelled): free its slot, hand
        its outcomes to the dispatcher and start the queue's next calls."""
        with self._pool_lock:
            self._busy[queue] -= 1
            self._sizers[queue].observe(n, time.perf_counter() - t0)
            starts = self._take(queue)
        if run is not None:
            self._done.put(run)
            # Put first, then look: a wake-up already pending covers this run too (the
            # dispatcher clears it before it drains the finished runs). A busy dispatcher so
            # costs no condition-variable round per job.
            if not self._wake.is_set():
                self.wake()
        if starts:
            try:  # noqa: SIM105 (not contextlib.suppress: a context manager per job)
                self._launch(starts, on_loop=on_loop)
            except RuntimeError:
                # Stopping, the pool or the loop may be shut: these jobs' leases are then
                # given back with the other running ones.
                pass

    def _task(self, job_type: str, taken: list[Job]) -> None:
        """One pool task: run one handler call on the jobs taken for it, report."""
        handler = self.handlers.get(job_type)
        t0 = time.perf_counter()
        run: _Run | None = None
        try:
            expired, live = self._expired(handler, taken)
            if not live:
                run = expired
            elif isinstance(handler, BatchHandler):
                run = _joined(expired, self._execute_batch(handler, live))
            else:
                run = _joined(expired, self._execute(handler, live[0]))
        finally:
            self._finished_call(taken[0].queue, len(taken), t0, run)

    def _expired(self, handler: Any, taken: list[Job]) -> tuple[_Run | None, list[Job]]:
        """The jobs taken past their ``expires_at`` (max_lateness), ended 'expired' without
        running, and the others. Only a job enqueued with a lateness has an expires_at: the
        common call costs one attribute test per job. The handler's ``on_expired(conn, jobs)``,
        if it has one, runs in the completion transaction (as a completion effect: with the
        leases verified, committed with the outcomes)."""
        if taken[0].expires_at is None and (
            len(taken) == 1 or all(j.expires_at is None for j in taken)
        ):
            return None, taken
        now = self.now()
        # Within the limit includes the limit itself: a job started at expires_at is on time.
        expired = [j for j in taken if j.expires_at is not None and j.expires_at < now]
        if not expired:
            return None, taken
        live = [j for j in taken if j.expires_at is None or j.expires_at >= now]
        hook = getattr(handler, "on_expired", None)
        effects = [RunEffects((hook,), tuple(expired))] if callable(hook) else []
        finished = [Finished(j, EXPIRED, now, 0.0) for j in expired]
        for job in expired:
            if self.on_outcome is not None:
                self.on_outcome(job, EXPIRED, 0.0)
        job_log.info(
            "%d %r job(s) expired unrun (claimed after their max_lateness): ids %s",
            len(expired),
            expired[0].job_type,
            [j.id for j in expired[:20]],
        )
        return _Run(finished, effects), live

    async def _execute_async(self, job_type: str, taken: list[Job]) -> _Run:
        """One async handler call on the event loop: the outcome is classified as for sync
        (expired jobs are not run, as :meth:`_task` does)."""
        handler: Any = self.handlers[job_type]
        expired, live = self._expired(handler, taken)
        if expired is None:
            return await self._execute_live_async(handler, taken)
        if not live:
            return expired
        return _joined(expired, await self._execute_live_async(handler, live))

    async def _execute_live_async(self, handler: Any, taken: list[Job]) -> _Run:
        if isinstance(handler, BatchHandler):
            started_at = self.now()
            with tracing.batch_span(taken, self.name, started_at) as span:
                result = await run_batch_async(handler, taken, self.retry, time.perf_counter)
            batch_run = self._batch_run(handler, taken, started_at, result)
            span.finish(batch_run.finished, next(iter(result.errors), None), runs=result.runs)
            return batch_run
        job = taken[0]
        started_at = self.now()
        t0 = time.perf_counter()
        error: BaseException | None = None
        with collecting_effects() as fns, tracing.job_span(job, self.name, started_at) as span:
            try:
                await handler(job)
            except Exception as exc:
                error = exc
        run = self._single_run(job, error, fns, started_at, t0)
        span.finish(run.finished, error)
        return run

    async def _call_async(self, job_type: str, taken: list[Job], t0: float) -> None:
        """One async handler call, a task of its own, that reports its own end (a done
        callback would cost the loop one more scheduled callback per job). Cancelled (at
        stop), it frees its slot and reports no outcome: its lease is given back."""
        run: _Run | None = None
        try:
            run = await self._execute_async(job_type, taken)
        except Exception as exc:
            log.error(
                "worker %s: an async handler call failed outside its handler: %s",
                self.name,
                summarize(exc),
            )
        finally:
            self._tasks.pop(id(taken), None)
            self._finished_call(taken[0].queue, len(taken), t0, run, on_loop=True)

    def _start_loop(self) -> None:
        """The event loop of the async handlers, in one thread of its own."""
        loop = asyncio.new_event_loop()
        ready = threading.Event()

        def run() -> None:
            asyncio.set_event_loop(loop)
            loop.call_soon(ready.set)
            loop.run_forever()

        self._loop = loop
        self._loop_thread = threading.Thread(target=run, name="tockwork-async", daemon=True)
        self._loop_thread.start()
        ready.wait()

    def _stop_loop(self) -> None:
        """Cancel the coroutines still running (their leases were given back) and stop."""
        loop, thread = self._loop, self._loop_thread
        if loop is None or thread is None:
            return

        async def cancel_all() -> None:
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await loop.shutdown_asyncgens()

        try:
            # The grace is spent already: a coroutine that ignores its cancellation gets a few
            # seconds, then is left behind with the loop's daemon thread.
            asyncio.run_coroutine_threadsafe(cancel_all(), loop).result(_CANCEL_WAIT)
        except Exception as exc:  # a coroutine that will not end: do not hang the stop
            log.warning("worker %s: async handlers did not end on cancel: %s", self.name, exc)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5.0)
        if not thread.is_alive():
            loop.close()
        self._loop = self._loop_thread = None
        self._tasks.clear()

    def _execute(self, handler: Handler | None, job: Job) -> _Run:
        started_at = self.now()
        t0 = time.perf_counter()
        error: BaseException | None = None
        # The execution span (jobs/tracing.py; OFF when tracing is off) is current while the
        # handler runs, and ends once the outcome is classified.
        with collecting_effects() as fns, tracing.job_span(job, self.name, started_at) as span:
            try:
                if handler is None:
                    raise TransientError(
                        f"no handler for job type {job.job_type!r} in worker {self.name}",
                        code=NO_HANDLER,
                    )
                handler(job)
            except Exception as exc:
                error = exc
        run = self._single_run(job, error, fns, started_at, t0)
        span.finish(run.finished, error)
        return run

    def _single_run(
        self,
        job: Job,
        error: BaseException | None,
        fns: Sequence[Any],
        started_at: Any,
        t0: float,
    ) -> _Run:
        """Classify a single handler call's outcome (sync or async), log and report it."""
        duration_ms = (time.perf_counter() - t0) * 1000.0
        # A success needs no retry policy (decide() returns SUCCEEDED before reading it).
        decision = SUCCEEDED if error is None else decide(job, error, self.retry.for_job(job))
        self._log_outcome(job, decision, duration_ms, error)
        if self.on_outcome is not None:
            self.on_outcome(job, decision, duration_ms)
        effects = [RunEffects((single_effects(fns),), (job,))] if fns and error is None else []
        return _Run(
            [Finished(job, decision, started_at, duration_ms)], effects, quiet=error is None
        )

    def _execute_batch(self, handler: BatchHandler, batch: list[Job]) -> _Run:
        started_at = self.now()
        with tracing.batch_span(batch, self.name, started_at) as span:
            result = run_batch(handler, batch, self.retry, time.perf_counter)
        run = self._batch_run(handler, batch, started_at, result)
        span.finish(run.finished, next(iter(result.errors), None), runs=result.runs)
        return run

    def _batch_run(
        self, handler: BatchHandler, batch: list[Job], started_at: Any, result: BatchResult
    ) -> _Run:
        """A batch call's outcomes (sync or async): log and report them."""
        if result.quiet:  # every job succeeded, in one run: one duration
            ms = result.duration_ms
            finished = [Finished(j, SUCCEEDED, started_at, ms) for j in result.jobs]
        else:
            finished = [
                Finished(d.job, d.decision, started_at, d.duration_ms) for d in result.decided
            ]
        if self.on_outcome is not None or job_log.isEnabledFor(logging.DEBUG):
            debug = job_log.isEnabledFor(logging.DEBUG)
            for d in result.decided:
                if debug:
                    job_log.debug(
                        "job %s %s", d.job.id, d.decision.outcome, extra={"job": self._fields(d)}
                    )
                if self.on_outcome is not None:
                    self.on_outcome(d.job, d.decision, d.duration_ms)
        failed = (
            [] if result.quiet else [d for d in result.decided if d.decision.status not in _QUIET]
        )
        if failed:
            self._log_batch(handler, batch, failed, result.errors, result.runs)
        return _Run(
            finished, result.effects, batch=True, reruns=result.runs - 1, quiet=result.quiet
        )

    @staticmethod
    def _fields(d: Decided) -> dict[str, Any]:
        job, decision = d.job, d.decision
        return {
            "job_id": job.id,
            "job_type": job.job_type,
            "queue": job.queue,
            "attempt": job.attempt,
            "idempotency_key": job.idempotency_key,
            "duration_ms": round(d.duration_ms, 3),
            "outcome": decision.outcome,
            "error_code": decision.code,
        }

    def _log_batch(
        self,
        handler: BatchHandler,
        batch: Sequence[Job],
        failed: Sequence[Decided],
        errors: Sequence[BaseException],
        runs: int,
    ) -> None:
        """One warning per batch: the outcomes that were not success, the first error."""
        by_outcome = Counter(f"{d.decision.outcome} [{d.decision.code}]" for d in failed)
        summary = ", ".join(f"{n} {k}" for k, n in sorted(by_outcome.items()))
        first = errors[0] if errors else None
        raised = (
            f"; the handler raised {summarize(first)}"
            + (f", isolated in {runs - 1} re-run(s)" if runs > 1 else "")
            if first is not None
            else ""
        )
        job_log.warning(
            "batch of %d %r job(s) (queue %s): %d succeeded, %s%s; failed ids %s",
            len(batch),
            batch[0].job_type,
            batch[0].queue,
            len(batch) - len(failed),
            summary,
            raised,
            [d.job.id for d in failed[:20]],
            extra={
                "batch": {
                    "job_type": batch[0].job_type,
                    "queue": batch[0].queue,
                    "size": len(batch),
                    "runs": runs,
                    "failed": len(failed),
                    "handler": repr(handler),
                }
            },
            exc_info=(type(first), first, first.__traceback__) if first is not None else None,
        )

    def _effect_failed(self, held: Sequence[Job], exc: Exception) -> list[Decision]:
        """A completion effect raised: its jobs are retried (transient, 'completion_effect')."""
        self.stats.effect_failures += 1
        log.warning(
            "worker %s: completion effect of %d %r job(s) failed, retrying them: %s",
            self.name,
            len(held),
            held[0].job_type,
            summarize(exc),
            exc_info=(type(exc), exc, exc.__traceback__),
        )
        decisions = effect_failure_decisions(held, exc, self.retry.for_job)
        self._replaced.update(zip((j.id for j in held), decisions, strict=True))
        return decisions

    def _log_outcome(
        self, job: Job, decision: Decision, duration_ms: float, error: BaseException | None
    ) -> None:
        quiet = error is None or decision.status is JobStatus.PENDING
        if quiet and not job_log.isEnabledFor(logging.DEBUG):
            return  # the common case: no record, so no fields to build (a fast job's cost)
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
        if quiet:
            job_log.debug("job %s %s", job.id, decision.outcome, extra={"job": fields})
        else:
            job_log.warning(
                "job %s %s: %s",
                job.id,
                decision.outcome,
                decision.summary,
                extra={"job": fields},
                # No traceback for a missing handler: it would show the worker's own raise at
                # every retry (issue 26); the message names the job type.
                exc_info=(type(error), error, error.__traceback__)
                if error is not None and decision.code != NO_HANDLER
                else None,
            )

    def _drain_done(self) -> list[_Run]:
        runs: list[_Run] = []
        while True:
            try:
                runs.append(self._done.get_nowait())
            except queue_module.Empty:
                return runs

    def _flush(self) -> None:
        """Write finished outcomes without claiming (shutdown)."""
        self._cycle(claim=False)

    def _settle(self, runs: Sequence[_Run], written: dict[int, str]) -> None:
        # The labelled children of this settle are looked up once per label set, not per job
        # (``labels`` is the costliest part of a fast job's bookkeeping), and the outcome
        # counters are added to once per label set. A quiet run (a batch whose jobs all
        # succeeded in one run: one queue, job type and duration) written as such is counted
        # at once, its handler time observed for all its jobs in one call
        # (jobs.metrics.observe_many: the same exposition as one observe per job, in the same
        # order); the other runs' jobs one by one.
        labelled = self._labelled
        labelled.clear()
        tally: dict[tuple[str, str, str], int] = {}
        inflight, replaced, handlers = self._inflight, self._replaced, self.handlers
        outcome_of, done = written.get, inflight.pop
        for run in runs:
            finished = run.finished
            if run.quiet and finished:
                ids = [f.job.id for f in finished]
                # None fenced, none changed by a failed completion effect: all as decided.
                if set(map(outcome_of, ids)) == _SUCCEEDED_ONLY:
                    first = finished[0]
                    job = first.job
                    job_type = job.job_type if job.job_type in handlers else UNREGISTERED
                    key = (job.queue, job_type, SUCCEEDED.outcome)
                    children = labelled.get(key)
                    if children is None:
                        children = labelled[key] = self._children(key)
                    observe_many(children[0], first.duration_ms / 1000.0, len(ids))
                    tally[key] = tally.get(key, 0) + len(ids)
                    for job_id in ids:
                        done(job_id, None)
                    continue
            for item in finished:
                job = item.job
                outcome = outcome_of(job.id, "fenced")
                if outcome == "fenced":
                    self.stats.fenced += 1
                    log.warning(
                        "job %s: outcome %s not recorded: its lease had ended before it was "
                        "written (expired and recovered, then perhaps claimed again)",
                        job.id,
                        item.decision.outcome,
                    )
                job_type = job.job_type if job.job_type in handlers else UNREGISTERED
                key = (job.queue, job_type, outcome)
                children = labelled.get(key)
                if children is None:
                    children = labelled[key] = self._children(key)
                if outcome != "expired":  # not run: no handler time to observe
                    children[0].observe(item.duration_ms / 1000.0)
                tally[key] = tally.get(key, 0) + 1
                decision = replaced.get(job.id, item.decision)
                if outcome != "fenced" and decision.status is JobStatus.RETRYING:
                    m = self.metrics
                    m.retries.labels(job.queue, job_type, m.error_class(decision.code)).inc()
                elif outcome == "expired":
                    self.metrics.expired.labels(job.queue, job_type).inc()
                done(job.id, None)
        outcomes = self.stats.outcomes
        for key, n in tally.items():
            labelled[key][1].inc(n)
            outcomes[key[2]] = outcomes.get(key[2], 0) + n

    def _children(self, key: tuple[str, str, str]) -> tuple[Any, Any]:
        """The duration histogram and the outcome counter of (queue, job type, outcome)."""
        queue, job_type, outcome = key
        m = self.metrics
        return (
            m.execution_duration.labels(queue, job_type),
            m.outcomes.labels(queue, job_type, outcome),
        )

    @property
    def beat_every(self) -> timedelta:
        # The registry of processes is refreshed at the pace of the lease heartbeats.
        return self.heartbeat_every

    def _process_facts(self) -> ProcessFacts:
        return ProcessFacts(
            kind=self.kind, name=self.name, queues=self.queues, jobs_in_hand=len(self._inflight)
        )

    def _maybe_heartbeat(self) -> None:
        if time.monotonic() < self._next_heartbeat:
            return
        self._next_heartbeat = time.monotonic() + self.heartbeat_every.total_seconds()
        leases = [(j.id, j.lease_token) for j in self._inflight.values()]
        if not leases:
            return
        marks = [i for i, _ in self._due_marks(math.inf, ())]
        kept: set[int] = self._db(
            lambda s: s.heartbeat(leases, self.lease, self.now_or_none(), started=marks),
            "heartbeat",
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


_ID = attrgetter("id")
_JOB_TYPE = attrgetter("job_type")
_LEASE = attrgetter("id", "lease_token")  # a job's (id, token) pair
_FIRST = itemgetter(0)  # a lease's id
# A batch's outcomes that need no warning: success, and a snooze (it uses no attempt).
_QUIET = frozenset({JobStatus.SUCCEEDED, JobStatus.PENDING})
# The outcomes written for a quiet run when none was fenced or replaced (_settle).
_SUCCEEDED_ONLY = {SUCCEEDED.outcome}
