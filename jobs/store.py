"""The storage seam of the worker: a typed protocol and its PostgreSQL implementation.

Every method is one short statement in its own transaction (the connection is in autocommit
mode): a claim commits before any handler runs, and outcomes are written afterwards, guarded by
the fencing token the claim handed out. The one exception is a completion with database
effects (:mod:`jobs.batch`): lock the leases of the jobs that have effects, run the effects
under savepoints, write the outcomes, claim, commit, all in one transaction.

Each write is atomic, so when its reply is lost with the connection it committed whole or not
at all, and :meth:`JobStore.lost_reply` tells which: a claim stamps its rows with the caller's
claim id, and an outcome leaves its attempt row.

Which claim: one statement, ``job_claim`` in jobs/sql/job.sql, composed from fragments into a
variant per (fair, limited, skip scan) (:func:`jobs.queries.variant`). A queue with a policy
(:mod:`jobs.policy`, the job_queue_policies table every worker reads) is claimed by a fair
variant, in the same transaction as the plain queues' claim; while no rate limit exists the
variants without the buckets are used (lighter); from PostgreSQL 18 on, the skip-scan ones.
Which queues have a policy, and whether any rate limit exists, is read in one statement
(``job_queue_policy_refresh``) and cached: re-read before the next claim when the worker's
listener hears that a policy or a limit changed (:meth:`PgJobStore.policies_changed`; setting
or clearing one notifies at commit), and at least every ``policy_refresh`` seconds in case a
notification was lost (LISTEN is only a wake-up). The claim reads the policy and the buckets
itself, so the cache only picks the statement.

Per-key limits: the claim first locks the queue's policy row in a statement of its own
(``job_queue_policy_lock``), so under READ COMMITTED the claim's snapshot is taken after every
other claimer of that queue committed and the leases it counts per key are all there: two
workers claiming at the same instant cannot lease K + 1 jobs of one key. The count is of leased
rows, so every end of a lease (complete, retry, reap, release) frees the slot with no
bookkeeping of its own.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import MISSING, dataclass, field, fields, make_dataclass, replace
from datetime import datetime, timedelta
from operator import attrgetter
from typing import Any, LiteralString, Protocol, cast
from uuid import UUID, uuid4

import psycopg
from psycopg import pq

from jobs import arrays
from jobs.batch import COMPLETION_EFFECT, RunEffects
from jobs.errors import EffectLeftTransactionInError
from jobs.model import Job, JobStatus
from jobs.outcomes import TransientError
from jobs.queries import query, variant
from jobs.retry import SUCCEEDED, Decision, RetryPolicy, decide, summarize

RATE_LIMITED = "rate_limited"
"""The outcome of an attempt whose handler raised :class:`jobs.RateLimited`."""

UNSTARTED_EXPIRY_LIMIT = 5
"""Expiries in a row of leases never reported started whose attempt the reaper gives back; the
next one uses its attempt (code 'crash_loop'), so a job that kills its worker before the mark
is sent cannot loop forever (docs/jobs.md, "Leases")."""

_NIL = UUID(int=0)  # the organization of jobs without one, in the fair claims

POLICY_REFRESH = 0.5
"""Seconds a store trusts its list of the queues that have a policy (job_queue_policies) and
whether a rate limit exists, when no notification said they changed: the fallback for lost
notifications, so a change applies within a second even then."""

EffectFailed = Callable[[Sequence[Job], Exception], Sequence[Decision]]
"""What becomes of the jobs whose completion effect raised: one decision per job."""


@dataclass(slots=True)
class Finished:
    """One finished attempt, ready to be written.

    Not frozen (nothing changes one once built; :func:`dataclasses.replace` makes another):
    one per job of every batch, and a frozen dataclass's constructor costs three times a
    plain one's."""

    job: Job
    decision: Decision
    started_at: datetime
    duration_ms: float


class JobStore(Protocol):
    def claim(
        self,
        wanted: Mapping[str, int],
        worker: str,
        lease: timedelta,
        now: datetime | None,
        *,
        claim: UUID | None = None,
        started: Sequence[tuple[int, int]] = (),
        job_types: Sequence[str] | None = None,
    ) -> list[Job]:
        """Lease up to ``wanted[queue]`` ready jobs of each queue.

        Eligible: status pending or retrying and run_at <= now, in order of priority (highest
        first), then run_at, then id. Each claimed row becomes leased with attempts + 1,
        locked_by = worker, locked_until = now + lease, a new fencing token and claim_id =
        ``claim`` (the caller's id for this claim, so :meth:`lost_reply` can find its rows).

        ``started`` (``(id, token)`` pairs): leases whose jobs the caller's threads have
        started, marked so in the same transaction (see :meth:`reap`).

        Rate limits (:mod:`jobs.limits`) hold jobs back in the same statement: at most the
        whole tokens of a queue's limit start from it, at most those of a job type's limit
        across the queues, and the tokens are spent as the rows are leased. ``job_types``:
        the job types the caller handles (its limits are read; a limited job type outside
        them is not claimed); None: every job type.
        """
        ...

    def complete(
        self, finished: Sequence[Finished], worker: str, now: datetime | None
    ) -> dict[int, str]:
        """Write outcomes; returns ``{job id: outcome}`` with 'fenced' for lost leases.

        A job changes only while it is still leased under the same token. Every attempt gets a
        job_attempts row either way. An attempt whose outcome is 'rate_limited' pauses the
        rate limits of its queue and job type that opt in (:mod:`jobs.limits`) until now + its
        retry delay, in the same transaction.
        """
        ...

    def complete_and_claim(
        self,
        finished: Sequence[Finished],
        wanted: Mapping[str, int],
        worker: str,
        lease: timedelta,
        now: datetime | None,
        *,
        effects: Sequence[RunEffects] = (),
        effect_failed: EffectFailed | None = None,
        claim: UUID | None = None,
        started: Sequence[tuple[int, int]] = (),
        job_types: Sequence[str] | None = None,
    ) -> tuple[dict[int, str], list[Job]]:
        """:meth:`complete` then :meth:`claim` (under ``claim``, marking ``started``, for
        ``job_types``), committed together.

        ``effects`` run first, in the same transaction: the rows of their jobs whose decision
        is succeeded are locked where the lease token still matches (one statement), then each
        :class:`jobs.batch.RunEffects` runs under its own savepoint with its jobs so held; the
        effects of jobs that lost their lease never run. An effect that raises is rolled back
        to its savepoint and its jobs get ``effect_failed``'s decisions instead (by default a
        transient retry with code 'completion_effect').
        """
        ...

    def lost_reply(
        self, finished: Sequence[Finished], claim: UUID | None, worker: str
    ) -> tuple[dict[int, str], list[Job]]:
        """What a :meth:`complete_and_claim` whose reply was lost had committed (a read).

        Returns the outcomes ``worker`` wrote for ``finished`` (``{job id: outcome}``, 'fenced'
        included: the attempt rows that write left) and the jobs still leased under ``claim``,
        as :meth:`claim` would have returned them. Both empty: nothing of it committed (or it
        claimed nothing and wrote nothing), so running it again is safe.
        """
        ...

    def next_due(
        self,
        queues: Sequence[str],
        now: datetime | None,
        *,
        job_types: Sequence[str] | None = None,
    ) -> float | None:
        """Seconds until the earliest waiting (future) job of ``queues`` is ready, or until a
        rate limit that holds back ready jobs of theirs (of ``job_types``'s limits, None:
        all) has refilled enough for a claim; None if nothing waits."""
        ...

    def heartbeat(
        self,
        leases: Sequence[tuple[int, int]],
        lease: timedelta,
        now: datetime | None,
        *,
        started: Sequence[int] = (),
    ) -> set[int]:
        """Extend leases still held (``(id, token)`` pairs); returns the ids extended.

        The leases of the ids in ``started`` (among ``leases``) are also marked started.
        """
        ...

    def reap(self, limit: int, now: datetime | None) -> list[tuple[int, str, str]]:
        """Recover up to ``limit`` expired leases: ``(id, queue, new status)``.

        A lease never marked started (:meth:`claim`'s ``started``) gets its attempt back: the
        job is pending (or retrying) again as if never claimed. After
        :data:`UNSTARTED_EXPIRY_LIMIT` such expiries in a row, one uses its attempt ('crash_loop').
        """
        ...

    def release(
        self, leases: Sequence[tuple[int, int]], worker: str, now: datetime | None
    ) -> list[int]:
        """Give leases back (shutdown): the jobs are ready again; returns the ids released."""
        ...

    def release_unstarted(self, leases: Sequence[tuple[int, int]]) -> list[int]:
        """Give back leases of jobs that never started (claimed ahead, worker stopping).

        The jobs are ready again as if never claimed: the attempt the claim counted is given
        back and no attempt row is written. Returns the ids released.
        """
        ...


def default_effect_failed(jobs: Sequence[Job], exc: Exception) -> list[Decision]:
    """A transient retry with code 'completion_effect' under the default retry policy."""
    return effect_failure_decisions(jobs, exc, lambda _job: RetryPolicy())


def effect_failure_decisions(
    jobs: Sequence[Job], exc: Exception, policy: Callable[[Job], RetryPolicy]
) -> list[Decision]:
    """The decisions for jobs whose completion effect raised ``exc``: transient retries."""
    error = TransientError(f"completion effect failed: {summarize(exc)}", code=COMPLETION_EFFECT)
    return [decide(j, error, policy(j)) for j in jobs]


# A claimed row is built as a _WritableJob, then takes Job's class. Job is frozen, and a frozen
# dataclass's __init__ writes each field through object.__setattr__: 1.3 us for Job's 15
# fields, the costliest part of a claimed job in the dispatcher thread. This twin has the
# same fields as slots in the same order (and no __dict__), so its plain __init__ stores them
# directly (0.15 us) and CPython lets the object change class to Job (an incompatible layout
# would raise TypeError at the first claim): from then on it is an ordinary frozen Job.
_WritableJob: Any = make_dataclass(
    "_WritableJob",
    [
        (f.name, f.type) if f.default is MISSING else (f.name, f.type, field(default=f.default))
        for f in fields(Job)
    ],
    slots=True,
    eq=False,
    repr=False,
    match_args=False,
)


def _job(row: tuple[Any, ...]) -> Job:
    """A claimed row as a :class:`Job`: the claim statements (job_claim*, job_claim_lookup)
    return its columns in the order of Job's fields, so the row is Job's positional arguments
    (a keyword call per job cost a quarter more; tests/unit/jobs/test_queries.py checks the
    order)."""
    job = _WritableJob(*row)
    job.__class__ = Job
    return cast(Job, job)


_WITH_EFFECTS = frozenset({JobStatus.SUCCEEDED, JobStatus.EXPIRED})
_RUN_AT_ID = attrgetter("run_at", "id")
_PRIORITY = attrgetter("priority")


def _written(finished: Sequence[Finished], fenced: Sequence[tuple[Any, ...]]) -> dict[int, str]:
    """The outcomes job_complete wrote, from the fenced ids it returned: every other attempt
    was written with its decision's outcome."""
    if not fenced:
        return {f.job.id: f.decision.outcome for f in finished}
    lost = {row[0] for row in fenced}
    return {f.job.id: "fenced" if f.job.id in lost else f.decision.outcome for f in finished}


class PgJobStore:
    """:class:`JobStore` on one psycopg connection in autocommit mode."""

    def __init__(
        self, conn: psycopg.Connection[Any], *, policy_refresh: float | None = None
    ) -> None:
        self.conn = conn
        arrays.register(conn)  # the completion's array parameters (_complete_params)
        self.policy_refresh = POLICY_REFRESH if policy_refresh is None else policy_refresh
        # Whether the server's planner skip-scans the ready indexes past their priority column
        # (PostgreSQL 18): it picks the single-scan claim statements (*_skip_scan); before 18,
        # the claims read ready jobs one priority at a time. Tests set it to run both.
        self.skip_scan = conn.info.server_version >= 180000
        # The queues claimed by a fair variant of job_claim (those with a policy).
        self._policies: set[str] = set()
        self._policies_read = -float("inf")
        # Bumped by policies_changed (from the listener's thread); the refresh records the value
        # it saw before reading, so a change notified while a read is under way (its snapshot
        # may predate the change) is read again.
        self._changes = 0
        self._changes_read = 0
        # Whether any rate limit exists (job_rate_limits): without one, plain queues are
        # claimed by the unlimited variants, lighter statements. Read with the policies.
        self._limited = True
        # queue -> where this store's next fair claim starts its round of organizations: after
        # the last one it served, so one store's claims go round every organization in turn
        # (and stores start at random places, so they do not all serve the same ones).
        self._fair_start: dict[str, UUID] = {}

    def policies_changed(self) -> None:
        """A queue policy or a rate limit was set or cleared: re-read them before the next
        claim. Safe to call from another thread (the worker's listener)."""
        self._changes += 1

    def _refresh_policies(self) -> None:
        """Re-read which queues have a policy and whether a limit exists, when told they
        changed or when the last read is older than policy_refresh (one statement of its own,
        outside any claim transaction: never inside a pipeline)."""
        changes = self._changes
        if (
            changes == self._changes_read
            and time.monotonic() - self._policies_read < self.policy_refresh
        ):
            return
        row = self.conn.execute(query("job_queue_policy_refresh")).fetchone()
        assert row is not None
        self._policies, self._limited = set(row[0]), bool(row[1])
        self._policies_read = time.monotonic()
        self._changes_read = changes

    def _policy_queues(self, params: Mapping[str, Any] | None) -> bool:
        """Whether a claim with these parameters goes (in part) through a fair variant."""
        if params is None:
            return False
        self._refresh_policies()
        return any(q in self._policies for q in params["queues"])

    def _claim(self, *, fair: bool) -> LiteralString:
        """The variant of job_claim (jobs/sql/job.sql, one template) for a queue with a policy
        or without, under the rate limits and the server as read at the last refresh."""
        return variant("job_claim", fair=fair, limited=self._limited, skip_scan=self.skip_scan)

    def _execute_claims(self, params: dict[str, Any]) -> list[psycopg.Cursor[Any]]:
        """Send the claim statements for ``params`` (inside the caller's transaction and
        pipeline when there are several); fetch every returned cursor for the claimed rows.

        Claimed rows come back in binary (as from job_claim_lookup): their timestamps, integers
        and UUIDs cost both sides less than their text forms (reading 500 rows of Job's
        columns: 0.3-0.4 us a row less of the client's CPU, about 0.1 of the server's)."""
        policies = self._policies
        wanted = list(zip(params["queues"], params["limits"], strict=True))
        fair = [(q, n) for q, n in wanted if q in policies]
        if not fair:
            return [self.conn.execute(self._claim(fair=False), params, binary=True)]
        plain = [(q, n) for q, n in wanted if q not in policies]
        cursors = []
        # Always, not only for the queues this store knows to be limited: a limit set since
        # the last refresh is then held from this claim on (the lock reads the table). First,
        # before any rate-limit bucket is locked (by the plain claim or a pause): every claimer
        # takes the policy rows, then the buckets, so a worker with plain and fair queues and
        # one with fair queues only never wait on each other in a cycle.
        self._lock_policies(params)
        if plain:
            cursors.append(
                self.conn.execute(
                    self._claim(fair=False),
                    {**params, "queues": [q for q, _ in plain], "limits": [n for _, n in plain]},
                    binary=True,
                )
            )
        # Generic plans for the per-key claims below (job_claim_fair_generic_plan says why).
        self.conn.execute(query("job_claim_fair_generic_plan"))
        # One statement per queue with a policy: each starts its round at its own place.
        for queue, n in fair:
            start = self._fair_start.get(queue) or self._fair_start.setdefault(queue, uuid4())
            cursors.append(
                self.conn.execute(
                    self._claim(fair=True),
                    {**params, "queues": [queue], "limits": [n], "start": start},
                    binary=True,
                )
            )
        return cursors

    def _lock_policies(self, params: Mapping[str, Any] | None) -> None:
        """Take the per-key limit rows of the claim's queues that have a policy (a statement of
        its own: see job_queue_policy_lock). Repeating it in one transaction is harmless."""
        if params is None:
            return
        fair = [q for q in params["queues"] if q in self._policies]
        if fair:
            self.conn.execute(query("job_queue_policy_lock"), {"queues": fair})

    def _advance(self, rows: Sequence[tuple[Any, ...]]) -> None:
        """Move each fair queue's start past the last organization these claimed rows served,
        in the order of the round (after the start, then wrapping around)."""
        if not self._fair_start:
            return
        last: dict[str, tuple[bool, UUID]] = {}
        for row in rows:
            queue = row[1]  # the row is in Job's field order (_job)
            start = self._fair_start.get(queue)
            if start is None:
                continue
            org: UUID = row[7] or _NIL
            place = (org <= start, org)
            if queue not in last or place > last[queue]:
                last[queue] = place
        for queue, (_, org) in last.items():
            self._fair_start[queue] = org

    @staticmethod
    def _claim_params(
        wanted: Mapping[str, int],
        worker: str,
        lease: timedelta,
        now: datetime | None,
        claim: UUID | None,
        job_types: Sequence[str] | None = None,
    ) -> dict[str, Any] | None:
        queues = [q for q, n in wanted.items() if n > 0]
        if not queues:
            return None
        return {
            "queues": queues,
            "limits": [wanted[q] for q in queues],
            "worker": worker,
            "lease": lease,
            "now": now,
            "claim": claim,
            "job_types": None if job_types is None else list(job_types),
        }

    @staticmethod
    def _pause_params(
        finished: Sequence[Finished], claim_params: Mapping[str, Any] | None, now: datetime | None
    ) -> dict[str, Any] | None:
        """The rate limits a RateLimited outcome pauses (job_rate_limit_pause), or None."""
        limited = [f for f in finished if f.decision.outcome == RATE_LIMITED]
        if not limited:
            return None
        return {
            "pause_queues": [f.job.queue for f in limited],
            "pause_types": [f.job.job_type for f in limited],
            "delays": [f.decision.delay for f in limited],
            "queues": list(claim_params["queues"]) if claim_params else [],
            "job_types": claim_params["job_types"] if claim_params else [],
            "now": now,
        }

    @staticmethod
    def _claimed(rows: Sequence[tuple[Any, ...]]) -> list[Job]:
        # RETURNING has no order: hand jobs out in claim order.
        claimed = [_job(row) for row in rows]
        # (-priority, run_at, id) as two stable sorts on C-level keys: no tuple per job.
        claimed.sort(key=_RUN_AT_ID)
        claimed.sort(key=_PRIORITY, reverse=True)
        return claimed

    @staticmethod
    def _complete_params(
        finished: Sequence[Finished], worker: str, now: datetime | None
    ) -> dict[str, Any]:
        jobs = [f.job for f in finished]
        decisions = [f.decision for f in finished]
        started = [f.started_at for f in finished]
        # When every attempt succeeded (the usual batch), the columns of failures are all NULL
        # (delay, error code, summary; attempt delta 0): each is sent as one NULL array, which
        # unnest pads with NULLs, rather than as a list psycopg would scan and encode element
        # by element (a quarter of the parameters' encoding time). job_complete reads a NULL
        # attempt delta as 0, and NULL statuses and outcomes (both, in that case only) as
        # 'succeeded'. (count() compares by identity first: SUCCEEDED is shared, so this is
        # one pass in C for a quiet batch.)
        quiet = decisions.count(SUCCEEDED) == len(decisions)
        names: dict[str, bytes] = {}  # the few queue, type, status and outcome names, encoded
        return {
            # Encoded by jobs.arrays (registered on the connection): psycopg's own list
            # dumping was the costliest part of a fast job's completion in the dispatcher.
            "ids": arrays.int8_array([j.id for j in jobs]),
            "tokens": arrays.int8_array([j.lease_token for j in jobs]),
            "attempts": arrays.int4_array([j.attempt for j in jobs]),
            "queues": arrays.text_array([j.queue for j in jobs], names),
            "job_types": arrays.text_array([j.job_type for j in jobs], names),
            "statuses": None if quiet else arrays.text_array([d.status for d in decisions], names),
            "outcomes": None if quiet else arrays.text_array([d.outcome for d in decisions], names),
            "delays": None if quiet else [d.delay for d in decisions],
            "attempt_deltas": None if quiet else [d.attempt_delta for d in decisions],
            "codes": None if quiet else [d.code for d in decisions],
            "summaries": None if quiet else [d.summary for d in decisions],
            "started": arrays.timestamptz_array(started) or started,
            "durations": arrays.float8_array([f.duration_ms for f in finished]),
            "worker": worker,
            "now": now,
        }

    def claim(
        self,
        wanted: Mapping[str, int],
        worker: str,
        lease: timedelta,
        now: datetime | None,
        *,
        claim: UUID | None = None,
        started: Sequence[tuple[int, int]] = (),
        job_types: Sequence[str] | None = None,
    ) -> list[Job]:
        params = self._claim_params(wanted, worker, lease, now, claim, job_types)
        if params is None:
            self._mark_started(started)
            return []
        with_policy = self._policy_queues(params)
        if not started and not with_policy:
            cur = self.conn.execute(self._claim(fair=False), params, binary=True)
            return self._claimed(cur.fetchall())
        with self.conn.transaction(), self.conn.pipeline():
            if started:
                self.conn.execute(query("job_mark_started"), self._started_params(started))
            got = self._execute_claims(params)
            rows = [row for cur in got for row in cur.fetchall()]
        self._advance(rows)
        return self._claimed(rows)

    @staticmethod
    def _started_params(started: Sequence[tuple[int, int]]) -> dict[str, Any]:
        return {"ids": [i for i, _ in started], "tokens": [t for _, t in started]}

    def _mark_started(self, started: Sequence[tuple[int, int]]) -> None:
        if started:
            self.conn.execute(query("job_mark_started"), self._started_params(started))

    def complete(
        self, finished: Sequence[Finished], worker: str, now: datetime | None
    ) -> dict[int, str]:
        if not finished:
            return {}
        params = self._complete_params(finished, worker, now)
        pause = self._pause_params(finished, None, now)
        if pause is None:
            rows = self.conn.execute(query("job_complete"), params).fetchall()
        else:
            with self.conn.transaction(), self.conn.pipeline():
                self.conn.execute(query("job_rate_limit_pause"), pause)
                rows = self.conn.execute(query("job_complete"), params).fetchall()
        return _written(finished, rows)

    def complete_and_claim(
        self,
        finished: Sequence[Finished],
        wanted: Mapping[str, int],
        worker: str,
        lease: timedelta,
        now: datetime | None,
        *,
        effects: Sequence[RunEffects] = (),
        effect_failed: EffectFailed | None = None,
        claim: UUID | None = None,
        started: Sequence[tuple[int, int]] = (),
        job_types: Sequence[str] | None = None,
    ) -> tuple[dict[int, str], list[Job]]:
        claim_params = self._claim_params(wanted, worker, lease, now, claim, job_types)
        self._policy_queues(claim_params)  # refreshed here: never inside the pipeline
        if effects and finished:
            # Effects run for succeeded jobs (in_completion) and expired ones (on_expired).
            succeeded = {f.job.id for f in finished if f.decision.status in _WITH_EFFECTS}
            runs = [e for e in effects if any(j.id in succeeded for j in e.jobs)]
            if runs:
                return self._complete_with_effects(
                    finished, runs, succeeded, claim_params, worker, now, effect_failed, started
                )
        if not finished:
            return {}, self.claim(
                wanted, worker, lease, now, claim=claim, started=started, job_types=job_types
            )
        if claim_params is None and not started:
            return self.complete(finished, worker, now), []
        pause = self._pause_params(finished, claim_params, now)
        with self.conn.transaction(), self.conn.pipeline():
            if started:
                self.conn.execute(query("job_mark_started"), self._started_params(started))
            if pause is not None:  # before the claim: it takes the claim's locks first
                self._lock_policies(claim_params)  # policy rows before buckets
                self.conn.execute(query("job_rate_limit_pause"), pause)
            done = self.conn.execute(
                query("job_complete"), self._complete_params(finished, worker, now)
            )
            got = self._execute_claims(claim_params) if claim_params else []
            written_rows = done.fetchall()
            claimed_rows = [row for cur in got for row in cur.fetchall()]
        self._advance(claimed_rows)
        return _written(finished, written_rows), self._claimed(claimed_rows)

    def _complete_with_effects(
        self,
        finished: Sequence[Finished],
        runs: Sequence[RunEffects],
        succeeded: set[int],
        claim_params: dict[str, Any] | None,
        worker: str,
        now: datetime | None,
        effect_failed: EffectFailed | None,
        started: Sequence[tuple[int, int]],
    ) -> tuple[dict[int, str], list[Job]]:
        conn = self.conn
        candidates = {j.id: j for e in runs for j in e.jobs if j.id in succeeded}
        replaced: dict[int, Decision] = {}
        with conn.transaction():
            held = {
                row[0]
                for row in conn.execute(
                    query("job_lock_leased"),
                    {
                        "ids": list(candidates),
                        "tokens": [j.lease_token for j in candidates.values()],
                    },
                ).fetchall()
            }
            for run in runs:
                mine = [j for j in run.jobs if j.id in held]
                if not mine:
                    continue
                try:
                    with conn.transaction():  # a savepoint
                        for fn in run.fns:
                            fn(conn, mine)
                        if conn.info.transaction_status is pq.TransactionStatus.INERROR:
                            raise EffectLeftTransactionInError(
                                "a completion effect caught a database error and went on"
                            )
                except Exception as exc:
                    if conn.broken or conn.closed:
                        raise
                    decisions = (effect_failed or default_effect_failed)(mine, exc)
                    replaced.update(zip((j.id for j in mine), decisions, strict=True))
            if replaced:
                finished = [
                    replace(f, decision=replaced[f.job.id]) if f.job.id in replaced else f
                    for f in finished
                ]
            pause = self._pause_params(finished, claim_params, now)
            with conn.pipeline():
                if started:
                    conn.execute(query("job_mark_started"), self._started_params(started))
                if pause is not None:
                    self._lock_policies(claim_params)  # policy rows before buckets
                    conn.execute(query("job_rate_limit_pause"), pause)
                done = conn.execute(
                    query("job_complete"), self._complete_params(finished, worker, now)
                )
                got = self._execute_claims(claim_params) if claim_params else []
                written_rows = done.fetchall()
                claimed_rows = [row for cur in got for row in cur.fetchall()]
        self._advance(claimed_rows)
        return _written(finished, written_rows), self._claimed(claimed_rows)

    def lost_reply(
        self, finished: Sequence[Finished], claim: UUID | None, worker: str
    ) -> tuple[dict[int, str], list[Job]]:
        if not finished and claim is None:
            return {}, []
        with self.conn.pipeline():
            written = (
                self.conn.execute(
                    query("job_attempt_written"),
                    {
                        "ids": [f.job.id for f in finished],
                        "attempts": [f.job.attempt for f in finished],
                        "started": [f.started_at for f in finished],
                        "worker": worker,
                    },
                )
                if finished
                else None
            )
            leased = (
                self.conn.execute(query("job_claim_lookup"), {"claim": claim}, binary=True)
                if claim is not None
                else None
            )
            written_rows = written.fetchall() if written is not None else []
            leased_rows = leased.fetchall() if leased is not None else []
        return {i: o for i, o in written_rows}, self._claimed(leased_rows)

    def next_due(
        self,
        queues: Sequence[str],
        now: datetime | None,
        *,
        job_types: Sequence[str] | None = None,
    ) -> float | None:
        params = {
            "queues": list(queues),
            "now": now,
            "job_types": None if job_types is None else list(job_types),
        }
        # Without any rate limit (as read at the last refresh, as the claim reads it), no
        # limit's refill can be the wake-up: the idle poll is the one probe, not two (the
        # second was planned anew at each poll). The probe is never prepared: a plan cached
        # while the queue was empty (an idle worker's, five polls in) scans the whole table
        # once a backlog arrives, until the table is analyzed again (seen for a minute after a
        # herd was enqueued: 12-38 ms a poll); planned at each poll (0.2 ms, once a second at
        # most) it probes the ready index whatever the statistics say.
        self._refresh_policies()
        if not self._limited:
            row = self.conn.execute(query("job_next_due"), params, prepare=False).fetchone()
            return None if row is None or row[0] is None else float(row[0])
        with self.conn.pipeline():
            due = self.conn.execute(query("job_next_due"), params, prepare=False)
            refill = self.conn.execute(query("job_rate_limit_next_token"), params)
            rows = [due.fetchone(), refill.fetchone()]
        waits = [float(r[0]) for r in rows if r is not None and r[0] is not None]
        return min(waits) if waits else None

    def heartbeat(
        self,
        leases: Sequence[tuple[int, int]],
        lease: timedelta,
        now: datetime | None,
        *,
        started: Sequence[int] = (),
    ) -> set[int]:
        if not leases:
            return set()
        rows = self.conn.execute(
            query("job_heartbeat"),
            {
                "ids": [i for i, _ in leases],
                "tokens": [t for _, t in leases],
                "lease": lease,
                "now": now,
                "started": list(started),
            },
        ).fetchall()
        return {row[0] for row in rows}

    def reap(self, limit: int, now: datetime | None) -> list[tuple[int, str, str]]:
        rows = self.conn.execute(
            query("job_reap"),
            {"limit": limit, "now": now, "unstarted_limit": UNSTARTED_EXPIRY_LIMIT},
        ).fetchall()
        return [(job_id, queue, status) for job_id, queue, status in rows]

    def release(
        self, leases: Sequence[tuple[int, int]], worker: str, now: datetime | None
    ) -> list[int]:
        if not leases:
            return []
        rows = self.conn.execute(
            query("job_release"),
            {
                "ids": [i for i, _ in leases],
                "tokens": [t for _, t in leases],
                "worker": worker,
                "now": now,
            },
        ).fetchall()
        return [row[0] for row in rows]

    def release_unstarted(self, leases: Sequence[tuple[int, int]]) -> list[int]:
        if not leases:
            return []
        rows = self.conn.execute(
            query("job_release_unstarted"),
            {"ids": [i for i, _ in leases], "tokens": [t for _, t in leases]},
        ).fetchall()
        return [row[0] for row in rows]
