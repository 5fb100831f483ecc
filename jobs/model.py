"""Values the jobs component hands out: jobs, enqueue results, specs and statuses."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any, Literal
from uuid import UUID

# What an enqueue with a unique key does when an active job holds the key (docs/jobs.md).
OnActive = Literal["keep", "replace"]


class JobStatus(StrEnum):
    """The job state machine (docs/jobs.md has the diagram).

    pending -> leased -> succeeded | retrying | dead | cancelled | pending (snoozed);
    retrying -> leased; dead/cancelled/expired -> pending (requeue); leased -> retrying | dead
    (lease expired, recovered by the reaper); leased -> expired (claimed after its
    ``expires_at``: not run, see ``max_lateness``).
    """

    PENDING = "pending"
    LEASED = "leased"
    RETRYING = "retrying"
    SUCCEEDED = "succeeded"
    DEAD = "dead"
    CANCELLED = "cancelled"
    EXPIRED = "expired"


@dataclass(frozen=True, slots=True)
class Enqueued:
    """The result of an enqueue: the job's id, and whether this call created it.

    ``created`` is False when a job with the same (organization, job type, idempotency key)
    already existed, or an active job held the same unique key; ``id`` is then that job's id.
    ``replaced`` is True when that active job was waiting and took this enqueue's payload and
    run_at (``on_active="replace"``); a running (leased) job is never replaced.
    """

    id: int
    created: bool
    replaced: bool = False


@dataclass(frozen=True, slots=True)
class JobSpec:
    """One job to insert with :func:`jobs.enqueue_many`.

    ``unique_key`` and ``on_active`` are those of :func:`jobs.enqueue` (unique while active);
    so is ``max_lateness`` (a timedelta or seconds: the job must start within it of its
    ``run_at``, or it ends ``expired`` without running).
    """

    job_type: str
    payload: Any = field(default_factory=dict)
    queue: str = "default"
    idempotency_key: str | None = None
    organization_id: UUID | str | None = None
    run_at: datetime | None = None
    priority: int = 0
    max_attempts: int | None = None
    concurrency_key: str | None = None
    unique_key: str | None = None
    on_active: OnActive = "keep"
    max_lateness: timedelta | float | None = None


@dataclass(frozen=True, slots=True)
class QueuePolicy:
    """How a queue is claimed (:func:`jobs.set_queue_policy`): round robin across
    organizations (``fair``) and at most ``concurrency_per_key`` leased jobs per
    ``concurrency_key`` (None: no limit)."""

    queue: str
    fair: bool = False
    concurrency_per_key: int | None = None


class Requeued(list[int]):
    """What :func:`jobs.requeue` did: the list of the ids it put back to pending (in id order,
    as it always returned), and ``skipped``, the ids it left as they were because an active job
    holds their unique key (or an older job of the same selection took it)."""

    __slots__ = ("skipped",)

    def __init__(self, ids: Iterable[int] = (), skipped: Iterable[int] = ()) -> None:
        super().__init__(ids)
        self.skipped: tuple[int, ...] = tuple(skipped)

    def __repr__(self) -> str:
        return f"Requeued({list(self)!r}, skipped={list(self.skipped)!r})"


@dataclass(frozen=True, slots=True)
class Job:
    """A job as a handler sees it: leased to this worker for one attempt."""

    id: int
    queue: str
    job_type: str
    payload: Any
    attempt: int
    max_attempts: int
    idempotency_key: str | None
    organization_id: UUID | None
    priority: int
    run_at: datetime
    created_at: datetime
    lease_token: int
    # The W3C trace context of the enqueue, when it ran inside a recording OpenTelemetry span
    # (jobs/tracing.py): every attempt's execution span links to it.
    trace_parent: str | None = None
    trace_state: str | None = None
    # The instant after which the job must not start (its enqueue's max_lateness), or None.
    expires_at: datetime | None = None

    @property
    def leased_before(self) -> bool:
        """Whether the job may have run before this lease: a retry, a rescue, a requeue, or a
        rate-limited or snoozed run (those two give their attempt back, so ``attempt`` can be
        1 again). A job's first claim on a server timeline gets the timeline's floor as its
        fencing token (``job_lease_token_floor``: the low 32 bits zero), and every end of a
        lease adds one; after a failover a job's first claim on the new timeline reads as a
        first, so ``attempt > 1`` is checked too."""
        return self.attempt > 1 or self.lease_token & 0xFFFF_FFFF != 0


@dataclass(frozen=True, slots=True)
class JobRecord:
    """A job row as an operator sees it (``tockwork jobs show``)."""

    id: int
    organization_id: UUID | None
    queue: str
    job_type: str
    payload: Any
    idempotency_key: str | None
    status: JobStatus
    priority: int
    run_at: datetime
    attempts: int
    max_attempts: int
    locked_by: str | None
    locked_until: datetime | None
    lease_token: int
    last_error_code: str | None
    last_error_summary: str | None
    completed_at: datetime | None
    created_at: datetime
    # Unique while active (jobs.enqueue's unique_key) and the per-key concurrency key.
    unique_key: str | None = None
    concurrency_key: str | None = None
    expires_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class Attempt:
    """One row of a job's execution history."""

    attempt: int
    worker: str | None
    started_at: datetime | None
    finished_at: datetime
    outcome: str
    error_code: str | None
    error_summary: str | None
    duration_ms: float | None


@dataclass(frozen=True, slots=True)
class QueueStats:
    """Per-queue figures from :func:`jobs.queue_stats`."""

    queue: str
    ready: int
    oldest_ready_age: float
    leased: int
    retrying: int
    dead: int
    scheduled: int
