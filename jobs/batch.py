"""Batch handlers, and database effects that commit with their jobs' outcomes.

**A batch handler** takes the jobs of one claim of one job type together (up to its
``max_batch``) as a :class:`Batch` and sets an outcome per job with the vocabulary of single
handlers (:mod:`jobs.outcomes`); a job it leaves undecided succeeds. The worker classifies each
outcome with the same policy as a single handler's (:func:`jobs.retry.decide`), so a retry on
the last attempt is dead, a rate-limit hint is capped, a snooze gives the attempt back.

**An exception escaping a batch handler** applies to the jobs that run left undecided, never to
the ones it decided. One poison job must not drag the others down, so a failed run is repeated
on each half of its undecided jobs (the same attempt, in the same pool thread), down to single
jobs, which then get the exception's outcome alone: in a batch of 500 with one bad job, 499
succeed after at most ``2 * ceil(log2(500)) = 18`` re-runs. The re-runs are bounded by that
figure per batch; jobs still undecided when it is spent get the exception's outcome. Two kinds
of exception are not bisected, because they speak for the whole batch and take no job to dead:
a transient failure (:class:`~jobs.outcomes.TransientError`, ``Retry``, ``RateLimited``: the
provider is down or asked us to back off, and re-running pieces would only call it more) and a
:class:`~jobs.outcomes.Snooze`; if such an exception would take some job to dead (its last
attempt), the batch is bisected after all.

**Completion effects** (:meth:`Batch.in_completion`, :func:`in_completion` for a single-job
handler) are database writes that run in the worker's completion transaction, the one that
records the outcomes: the worker locks the rows of the jobs that have effects, checking their
fencing tokens, runs each run's effects under a savepoint with the jobs still leased to it whose
outcome is ``succeeded``, then writes all outcomes and commits. What an effect writes therefore
commits exactly when its jobs' outcomes commit; a worker that lost a lease runs no effect for
that job. An effect that raises is rolled back to its savepoint and its jobs are retried
(transient, code ``completion_effect``). Effects run on the worker's connection, in its
dispatcher thread, one transaction for every job that finished: database writes only, short,
no external call (those belong in the handler, before it returns).

The effects of one run (a handler call) receive the jobs *that run decided*: after a bisection,
the first run's effects see the jobs it decided explicitly, each re-run's effects the jobs it
decided, so no job is handed to two runs' effects.
"""

from __future__ import annotations

import contextvars
import inspect
import math
from collections.abc import Awaitable, Callable, Generator, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import timedelta
from operator import attrgetter
from typing import Any, cast, overload

import psycopg

from jobs.errors import InvalidJob, NotInHandler
from jobs.model import Job, JobStatus
from jobs.outcomes import (
    Cancel,
    HandlerOutcome,
    PermanentError,
    RateLimited,
    Retry,
    Snooze,
    TransientError,
)
from jobs.retry import SUCCEEDED, Decision, RetryPolicies, decide

BatchEffect = Callable[[psycopg.Connection[Any], Sequence[Job]], None]
SingleEffect = Callable[[psycopg.Connection[Any]], None]

_ID = attrgetter("id")

DEFAULT_MAX_BATCH = 500
# The error code of a job retried because its completion effect raised.
COMPLETION_EFFECT = "completion_effect"
MAX_BATCH_LIMIT = 10_000


class Batch:
    """The jobs of one claim of one job type, handed to a batch handler together.

    Each method that decides a job may be called again for it: the last call wins. Deciding a
    job that is not in the batch raises :class:`jobs.InvalidJob`.
    """

    __slots__ = ("_effects", "_ids", "_outcomes", "jobs")

    def __init__(self, jobs: Sequence[Job]) -> None:
        self.jobs: Sequence[Job] = tuple(jobs)
        self._ids = frozenset(map(_ID, self.jobs))
        # job id -> the outcome as the exception a single handler would raise (None: succeeded)
        self._outcomes: dict[int, HandlerOutcome | None] = {}
        self._effects: list[BatchEffect] = []

    def __len__(self) -> int:
        return len(self.jobs)

    def __iter__(self) -> Iterator[Job]:
        return iter(self.jobs)

    def __repr__(self) -> str:
        return f"Batch({len(self.jobs)} jobs, {len(self._outcomes)} decided)"

    def _set(self, job: Job, outcome: HandlerOutcome | None) -> None:
        if job.id not in self._ids:
            raise InvalidJob("job", job.id, "is not in this batch")
        self._outcomes[job.id] = outcome

    def succeed(self, job: Job) -> None:
        """The job succeeded (the default for a job the handler leaves undecided)."""
        # _set's body, inlined: a handler may call this for every job of every batch.
        if job.id not in self._ids:
            raise InvalidJob("job", job.id, "is not in this batch")
        self._outcomes[job.id] = None

    def retry(
        self,
        job: Job,
        message: str = "",
        *,
        code: str = "error",
        delay: timedelta | None = None,
    ) -> None:
        """A transient failure: retry after the backoff, or after ``delay`` when given."""
        self._set(job, Retry(message, after=delay, code=code))

    def rate_limited(self, job: Job, retry_after: timedelta, message: str = "") -> None:
        """The provider rate-limited this job: retry after its hint (capped by the policy)."""
        self._set(job, RateLimited(retry_after, message))

    def fail(self, job: Job, message: str, *, code: str = "permanent") -> None:
        """Retrying cannot help: the job is dead now."""
        self._set(job, PermanentError(message, code=code))

    def cancel(self, job: Job, reason: str = "") -> None:
        """The work must not happen: the job is cancelled."""
        self._set(job, Cancel(reason))

    def snooze(self, job: Job, delay: timedelta) -> None:
        """Run the job again after ``delay`` without using an attempt."""
        self._set(job, Snooze(delay))

    def in_completion(self, fn: BatchEffect) -> None:
        """Register database writes to run inside the worker's completion transaction.

        ``fn(conn, jobs)`` runs in the transaction that records these jobs' outcomes, with the
        jobs of this batch (this run, see the module docstring) still leased to this worker
        (lease tokens verified and rows locked in that transaction) whose outcome is
        'succeeded'; it is not called when there is none. What fn writes commits exactly when
        those outcomes commit; a worker that lost the lease commits neither. If fn raises,
        nothing it wrote commits and those jobs are retried (transient, code
        'completion_effect'). The effects of one batch run in the order registered, under one
        savepoint.
        """
        if not callable(fn):
            raise InvalidJob("fn", fn, "must be callable")
        self._effects.append(fn)

    def undecided(self) -> list[Job]:
        """The jobs no outcome was set for yet, in claim order."""
        return [j for j in self.jobs if j.id not in self._outcomes]


class BatchHandler:
    """A handler that takes a :class:`Batch` of up to ``max_batch`` jobs of its job type.

    Put it in a worker's ``handlers`` mapping like a single-job handler. Make one with
    :func:`batch_handler`, or subclass and override :meth:`__call__`.
    """

    def __init__(
        self,
        fn: Callable[[Batch], object] | None = None,
        *,
        max_batch: int = DEFAULT_MAX_BATCH,
    ) -> None:
        if isinstance(max_batch, bool) or not isinstance(max_batch, int):
            raise InvalidJob("max_batch", max_batch, "must be an integer")
        if not 1 <= max_batch <= MAX_BATCH_LIMIT:
            raise InvalidJob("max_batch", max_batch, f"must be from 1 to {MAX_BATCH_LIMIT}")
        self.fn = fn
        self.max_batch = max_batch
        if fn is not None:
            self.__doc__ = fn.__doc__
            self.__name__ = getattr(fn, "__name__", type(self).__name__)

    def __call__(self, batch: Batch) -> object:
        if self.fn is None:
            raise NotImplementedError("pass fn or override __call__")
        return self.fn(batch)

    def __repr__(self) -> str:
        name = getattr(self, "__name__", type(self).__name__)
        return f"BatchHandler({name}, max_batch={self.max_batch})"


@overload
def batch_handler(fn: Callable[[Batch], object], *, max_batch: int = ...) -> BatchHandler: ...
@overload
def batch_handler(
    fn: None = None, *, max_batch: int = ...
) -> Callable[[Callable[[Batch], object]], BatchHandler]: ...
def batch_handler(
    fn: Callable[[Batch], object] | None = None, *, max_batch: int = DEFAULT_MAX_BATCH
) -> BatchHandler | Callable[[Callable[[Batch], object]], BatchHandler]:
    """Make ``fn(batch)`` a batch handler: ``@batch_handler``, ``@batch_handler(max_batch=100)``."""
    if fn is not None:
        return BatchHandler(fn, max_batch=max_batch)
    BatchHandler(None, max_batch=max_batch)  # validate now, at the decoration
    return lambda f: BatchHandler(f, max_batch=max_batch)


# -- the single-job handler's completion effects --------------------------------------------

# A context variable, not a thread-local: async handlers of one worker share the event loop's
# thread, and each runs in its own task's context.
_current: contextvars.ContextVar[list[SingleEffect] | None] = contextvars.ContextVar(
    "tockwork_effects", default=None
)


def in_completion(fn: SingleEffect) -> None:
    """Register database writes in the completion transaction of the current job.

    Called from inside a single-job handler: ``fn(conn)`` runs in the worker's transaction that
    records this job's outcome, if the job is still leased to this worker and its outcome is
    'succeeded' (see :meth:`Batch.in_completion`). A batch handler uses
    ``batch.in_completion``.
    """
    effects = _current.get()
    if effects is None:
        raise NotInHandler(
            "jobs.in_completion must be called from inside a single-job handler "
            "(a batch handler uses batch.in_completion)"
        )
    if not callable(fn):
        raise InvalidJob("fn", fn, "must be callable")
    effects.append(fn)


class _Collecting:
    """``with collecting_effects() as fns``: a class, not a generator context manager, since
    the worker enters one per job (a third of the cost)."""

    __slots__ = ("_token",)

    def __enter__(self) -> list[SingleEffect]:
        effects: list[SingleEffect] = []
        self._token = _current.set(effects)
        return effects

    def __exit__(self, *_exc: object) -> None:
        _current.reset(self._token)


def collecting_effects() -> AbstractContextManager[list[SingleEffect]]:
    """The worker's side of :func:`in_completion`: collect the effects a handler registers."""
    return _Collecting()


def single_effects(fns: Sequence[SingleEffect]) -> BatchEffect:
    """One batch-shaped effect running a single handler's effects in order."""
    steps = tuple(fns)

    def run(conn: psycopg.Connection[Any], _jobs: Sequence[Job]) -> None:
        for step in steps:
            step(conn)

    return run


# -- running a batch, with bisection --------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RunEffects:
    """The completion effects of one handler run and the jobs that run decided."""

    fns: tuple[BatchEffect, ...]
    jobs: tuple[Job, ...]


@dataclass(slots=True)
class Decided:
    """One job's outcome from a batch: the decision, the error behind it, its run's time.

    Not frozen (nothing changes one after :func:`run_batch` built it): one per job of every
    batch, and a frozen dataclass's constructor costs twice a plain one's."""

    job: Job
    decision: Decision
    error: BaseException | None
    duration_ms: float


class BatchResult:
    """What running one batch produced: a decision per job (claim order) and the effects.

    ``quiet``: every job succeeded in the first run, so all share one duration
    (``duration_ms``) and a reader may count the batch at once instead of job by job
    (``jobs``: a quiet batch's jobs). A quiet result builds its ``decided`` list only when it
    is read (one object a job that the worker's usual path does not need)."""

    __slots__ = ("_decided", "duration_ms", "effects", "errors", "jobs", "quiet", "runs")

    def __init__(
        self,
        decided: list[Decided] | None,
        effects: list[RunEffects],
        runs: int,
        errors: list[BaseException],
        *,
        jobs: Sequence[Job] = (),
        duration_ms: float = 0.0,
    ) -> None:
        self._decided = decided
        self.effects = effects
        self.runs = runs
        self.errors = errors
        self.quiet = decided is None  # built by _first_run: every job succeeded
        self.jobs = jobs
        self.duration_ms = duration_ms

    @property
    def decided(self) -> list[Decided]:
        """Each job's outcome in claim order."""
        if self._decided is None:
            ms = self.duration_ms
            self._decided = [Decided(j, SUCCEEDED, None, ms) for j in self.jobs]
        return self._decided


def rerun_budget(n: int) -> int:
    """Re-runs allowed to isolate failures in a batch of ``n``: enough for one poison job."""
    return 2 * math.ceil(math.log2(n)) if n > 1 else 0


def _applies_to_all(exc: BaseException, jobs: Sequence[Job], retry: RetryPolicies) -> bool:
    """Whether an escaping exception is a whole-batch verdict that takes no job to dead."""
    if not isinstance(exc, TransientError | Snooze):
        return False
    return all(decide(j, exc, retry.for_job(j)).status is not JobStatus.DEAD for j in jobs)


def _bisect(
    jobs: Sequence[Job], retry: RetryPolicies, clock: Callable[[], float]
) -> Generator[Batch, BaseException | None, BatchResult]:
    """The bisection of :func:`run_batch`, shared by the sync and the async runner.

    Yields each :class:`Batch` to run and is sent back what the run raised (``None``: it
    returned); returns the result. The runner only calls the handler: one classification for
    both kinds of handler.
    """
    outcome: dict[int, tuple[HandlerOutcome | BaseException | None, float]] = {}
    effects: list[RunEffects] = []
    errors: list[BaseException] = []
    budget = rerun_budget(len(jobs))
    runs = 0
    pending: list[Sequence[Job]] = [jobs]
    while pending:
        part = pending.pop()
        runs += 1
        batch = Batch(part)
        t0 = clock()
        error = yield batch
        ms = (clock() - t0) * 1000.0
        if error is None and runs == 1:
            # The usual end: the first run returned, each job has the outcome it set, or
            # succeeded (no bookkeeping per job for a bisection that will not happen).
            return _first_run(jobs, batch, ms, retry)
        decided = [j for j in part if j.id in batch._outcomes]
        for j in decided:
            outcome[j.id] = (batch._outcomes[j.id], ms)
        left = batch.undecided()
        if error is None:
            for j in left:
                outcome[j.id] = (None, ms)
            decided = list(part)
            left = []
        if batch._effects and decided:
            effects.append(RunEffects(tuple(batch._effects), tuple(decided)))
        if not left:
            continue
        assert error is not None
        errors.append(error)
        spent = runs - 1 + len(pending)  # re-runs done plus re-runs already promised
        if len(left) == 1 or spent + 2 > budget or _applies_to_all(error, left, retry):
            for j in left:
                outcome[j.id] = (error, ms)
            continue
        half = len(left) // 2
        # Pushed in reverse so that the first half runs first (claim order).
        pending.append(left[half:])
        pending.append(left[:half])
    result: list[Decided] = []
    for j in jobs:
        cause, ms = outcome[j.id]
        # A success needs no retry policy (decide() returns SUCCEEDED before reading it).
        decision = SUCCEEDED if cause is None else decide(j, cause, retry.for_job(j))
        result.append(Decided(j, decision, cause, ms))
    return BatchResult(result, effects, runs, errors)


def _first_run(jobs: Sequence[Job], batch: Batch, ms: float, retry: RetryPolicies) -> BatchResult:
    """The result of a batch whose first run returned (:func:`_bisect`)."""
    outcomes = batch._outcomes
    effects = [RunEffects(tuple(batch._effects), tuple(jobs))] if batch._effects else []
    # An outcome set is an exception (true), a success None: no outcome but successes, the
    # usual batch, is one pass in C and one Decided per job with nothing to look up.
    if not any(outcomes.values()):
        return BatchResult(None, effects, 1, [], jobs=jobs, duration_ms=ms)
    result: list[Decided] = []
    append = result.append
    for j in jobs:
        cause = outcomes.get(j.id)
        # A success needs no retry policy (decide() returns SUCCEEDED before reading it).
        append(Decided(j, SUCCEEDED if cause is None else decide(j, cause, retry.for_job(j)),
                       cause, ms))  # fmt: skip
    return BatchResult(result, effects, 1, [])


def run_batch(
    handler: Callable[[Batch], object],
    jobs: Sequence[Job],
    retry: RetryPolicies,
    clock: Callable[[], float],
) -> BatchResult:
    """Run ``handler`` on ``jobs``, bisecting the undecided jobs of a run that raises.

    ``clock`` is a monotonic clock in seconds (durations). Returns every job's decision in
    claim order.
    """
    steps = _bisect(jobs, retry, clock)
    batch = next(steps)
    while True:
        error: BaseException | None = None
        try:
            handler(batch)
        except Exception as exc:
            error = exc
        try:
            batch = steps.send(error)
        except StopIteration as done:
            result: BatchResult = done.value
            return result


async def run_batch_async(
    handler: Callable[[Batch], Awaitable[object]] | BatchHandler,
    jobs: Sequence[Job],
    retry: RetryPolicies,
    clock: Callable[[], float],
) -> BatchResult:
    """:func:`run_batch` for an ``async def`` batch handler: each run is awaited."""
    steps = _bisect(jobs, retry, clock)
    batch = next(steps)
    while True:
        error: BaseException | None = None
        try:
            await cast(Awaitable[object], handler(batch))
        except Exception as exc:
            error = exc
        try:
            batch = steps.send(error)
        except StopIteration as done:
            result: BatchResult = done.value
            return result


def is_async_handler(handler: object) -> bool:
    """Whether a handler is an ``async def`` one: a coroutine function, an object whose
    ``__call__`` is one, or a :class:`BatchHandler` wrapping (or overriding with) one."""
    if isinstance(handler, BatchHandler):
        if handler.fn is not None and type(handler).__call__ is BatchHandler.__call__:
            return is_async_handler(handler.fn)
        return inspect.iscoroutinefunction(type(handler).__call__)
    if inspect.iscoroutinefunction(handler):
        return True
    if not callable(handler) or inspect.isfunction(handler):
        return False
    return inspect.iscoroutinefunction(type(handler).__call__)
