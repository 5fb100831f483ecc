"""The storage seam of the worker: a typed protocol and its PostgreSQL implementation.

Every method is one short statement in its own transaction (the connection is in autocommit
mode): a claim commits before any handler runs, and outcomes are written afterwards, guarded by
the fencing token the claim handed out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol

import psycopg

from jobs.model import Job
from jobs.queries import query
from jobs.retry import Decision


@dataclass(frozen=True, slots=True)
class Finished:
    """One finished attempt, ready to be written."""

    job: Job
    decision: Decision
    started_at: datetime
    duration_ms: float


class JobStore(Protocol):
    def claim(
        self, wanted: Mapping[str, int], worker: str, lease: timedelta, now: datetime | None
    ) -> list[Job]:
        """Lease up to ``wanted[queue]`` ready jobs of each queue.

        Eligible: status pending or retrying and run_at <= now, in order of priority (highest
        first), then run_at, then id. Each claimed row becomes leased with attempts + 1,
        locked_by = worker, locked_until = now + lease and a new fencing token.
        """
        ...

    def complete(
        self, finished: Sequence[Finished], worker: str, now: datetime | None
    ) -> dict[int, str]:
        """Write outcomes; returns ``{job id: outcome}`` with 'fenced' for lost leases.

        A job changes only while it is still leased under the same token. Every attempt gets a
        job_attempts row either way.
        """
        ...

    def complete_and_claim(
        self,
        finished: Sequence[Finished],
        wanted: Mapping[str, int],
        worker: str,
        lease: timedelta,
        now: datetime | None,
    ) -> tuple[dict[int, str], list[Job]]:
        """:meth:`complete` then :meth:`claim`, committed together."""
        ...

    def next_due(self, queues: Sequence[str], now: datetime | None) -> float | None:
        """Seconds until the earliest waiting (future) job of ``queues`` is ready; None if none."""
        ...

    def heartbeat(
        self, leases: Sequence[tuple[int, int]], lease: timedelta, now: datetime | None
    ) -> set[int]:
        """Extend leases still held (``(id, token)`` pairs); returns the ids extended."""
        ...

    def reap(self, limit: int, now: datetime | None) -> list[tuple[int, str, str]]:
        """Recover up to ``limit`` expired leases: ``(id, queue, new status)``."""
        ...

    def release(
        self, leases: Sequence[tuple[int, int]], worker: str, now: datetime | None
    ) -> list[int]:
        """Give leases back (shutdown): the jobs are ready again; returns the ids released."""
        ...


def _job(row: tuple[Any, ...]) -> Job:
    (
        job_id,
        organization_id,
        queue,
        job_type,
        payload,
        idempotency_key,
        priority,
        run_at,
        attempts,
        max_attempts,
        lease_token,
        _locked_at,
        created_at,
    ) = row
    return Job(
        id=job_id,
        queue=queue,
        job_type=job_type,
        payload=payload,
        attempt=attempts,
        max_attempts=max_attempts,
        idempotency_key=idempotency_key,
        organization_id=organization_id,
        priority=priority,
        run_at=run_at,
        created_at=created_at,
        lease_token=lease_token,
    )


class PgJobStore:
    """:class:`JobStore` on one psycopg connection in autocommit mode."""

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self.conn = conn

    @staticmethod
    def _claim_params(
        wanted: Mapping[str, int], worker: str, lease: timedelta, now: datetime | None
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
        }

    @staticmethod
    def _claimed(rows: Sequence[tuple[Any, ...]]) -> list[Job]:
        # RETURNING has no order: hand jobs out in claim order.
        claimed = [_job(row) for row in rows]
        claimed.sort(key=lambda j: (-j.priority, j.run_at, j.id))
        return claimed

    @staticmethod
    def _complete_params(
        finished: Sequence[Finished], worker: str, now: datetime | None
    ) -> dict[str, Any]:
        return {
            "ids": [f.job.id for f in finished],
            "tokens": [f.job.lease_token for f in finished],
            "attempts": [f.job.attempt for f in finished],
            "queues": [f.job.queue for f in finished],
            "job_types": [f.job.job_type for f in finished],
            "statuses": [str(f.decision.status) for f in finished],
            "outcomes": [f.decision.outcome for f in finished],
            "delays": [f.decision.delay for f in finished],
            "attempt_deltas": [f.decision.attempt_delta for f in finished],
            "codes": [f.decision.code for f in finished],
            "summaries": [f.decision.summary for f in finished],
            "started": [f.started_at for f in finished],
            "durations": [f.duration_ms for f in finished],
            "worker": worker,
            "now": now,
        }

    def claim(
        self, wanted: Mapping[str, int], worker: str, lease: timedelta, now: datetime | None
    ) -> list[Job]:
        params = self._claim_params(wanted, worker, lease, now)
        if params is None:
            return []
        return self._claimed(self.conn.execute(query("job_claim"), params).fetchall())

    def complete(
        self, finished: Sequence[Finished], worker: str, now: datetime | None
    ) -> dict[int, str]:
        if not finished:
            return {}
        params = self._complete_params(finished, worker, now)
        rows = self.conn.execute(query("job_complete"), params).fetchall()
        return {job_id: outcome for job_id, outcome in rows}

    def complete_and_claim(
        self,
        finished: Sequence[Finished],
        wanted: Mapping[str, int],
        worker: str,
        lease: timedelta,
        now: datetime | None,
    ) -> tuple[dict[int, str], list[Job]]:
        claim_params = self._claim_params(wanted, worker, lease, now)
        if not finished:
            return {}, self.claim(wanted, worker, lease, now)
        if claim_params is None:
            return self.complete(finished, worker, now), []
        with self.conn.transaction(), self.conn.pipeline():
            done = self.conn.execute(
                query("job_complete"), self._complete_params(finished, worker, now)
            )
            got = self.conn.execute(query("job_claim"), claim_params)
            written_rows = done.fetchall()
            claimed_rows = got.fetchall()
        return {i: o for i, o in written_rows}, self._claimed(claimed_rows)

    def next_due(self, queues: Sequence[str], now: datetime | None) -> float | None:
        row = self.conn.execute(
            query("job_next_due"), {"queues": list(queues), "now": now}
        ).fetchone()
        return None if row is None or row[0] is None else float(row[0])

    def heartbeat(
        self, leases: Sequence[tuple[int, int]], lease: timedelta, now: datetime | None
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
            },
        ).fetchall()
        return {row[0] for row in rows}

    def reap(self, limit: int, now: datetime | None) -> list[tuple[int, str, str]]:
        rows = self.conn.execute(query("job_reap"), {"limit": limit, "now": now}).fetchall()
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
