"""Global rate limits: at most N job starts per second (and M per minute) of a queue or a job
type, across every worker on every host, enforced by the claim statement itself.

A limit is a row of ``job_rate_limits`` holding a token bucket per window. The claim
(``job_claim`` in ``jobs/sql/job.sql``) locks the rows that apply to it, refills them by the
time elapsed since they were last spent (``now`` as a parameter, so tests pin it), starts at
most the whole tokens they hold and takes away what it started, in the one statement. So any
number of workers share a limit without a leader, and a limit set, changed or cleared here is
read by every running worker at its next claim (a worker claims at least once per poll
interval, one second by default, while it has free threads). While no limit exists at all, a
worker's store claims with the lighter ``job_claim_unlimited``; setting or clearing a limit
notifies every worker at commit ('~policies' on ``tockwork_jobs``), whose store then re-reads
whether one exists before its next claim (and at least every ``jobs.store.POLICY_REFRESH``
seconds should a notification be lost), so the first limit of a database applies at once.

The invariants:

* A job held back by a limit stays pending (or retrying) as it was: no attempt is used, and it
  starts, in its queue's order, when tokens are back.
* Each window's bucket holds at most 5% of its limit, at least one token (the burst), and a
  claim starts at most ``per_second`` minus what the claims of the last second took (the row
  keeps them): no one-second window sees more than ``per_second`` claimed, any minute at most
  ``per_minute`` plus its burst. A limit on a job type counts its starts in every queue. The
  arithmetic is ``job_rate_limit_burst``, ``job_rate_limit_refill`` (inlined into every
  statement that reads a bucket) and ``job_rate_limit_window`` (jobs/sql/schema.sql).
* A limit is read only by claims that may take its jobs: a queue limit by claims of that queue,
  a job type limit by workers that have a handler for the job type (a worker without one does
  not claim jobs of a limited job type). With no limit row, a claim locks nothing more.
* ``pause_on_rate_limited`` (the default): a handler of the limit's queue or job type that
  raises :class:`jobs.RateLimited` pauses the whole limit until its retry delay has passed (a
  provider's 429 applies to every sender), in the transaction that records the outcome.

"Unknown" names: a limit's queue must be a valid queue name (what a job's queue may be), a job
type a valid job type. A limit may name a queue or job type that no job has used yet (limits
are set before the traffic comes); it then holds back nothing until such jobs exist.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

import psycopg

from jobs import validate
from jobs.errors import InvalidJob
from jobs.queries import query

MAX_PER_SECOND = 1_000_000
MAX_PER_MINUTE = 60 * MAX_PER_SECOND

Scope = Literal["queue", "job_type"]
Source = Literal["api", "definitions"]


def _rate(value: Any, field: str, maximum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidJob(field, value, f"must be an integer from 1 to {maximum:,}")
    if value == 0:
        raise InvalidJob(field, value, "must be at least 1 (to lift a limit, clear it)")
    if not 1 <= value <= maximum:
        raise InvalidJob(field, value, f"must be from 1 to {maximum:,}")
    return value


def target(queue: Any = None, job_type: Any = None) -> tuple[Scope, str]:
    """``(scope, name)`` of exactly one of ``queue`` and ``job_type``, checked."""
    if (queue is None) == (job_type is None):
        shown = {"queue": queue, "job_type": job_type}
        raise InvalidJob("queue", shown, "give exactly one of queue and job_type")
    if queue is not None:
        return "queue", validate.queue_name(queue, "queue")
    return "job_type", validate.job_type(job_type)


@dataclass(frozen=True, slots=True, kw_only=True)
class RateLimit:
    """A limit on the starts of one queue's jobs or of one job type's (in every queue).

    Give exactly one of ``queue`` and ``job_type``; ``per_second`` (1 to 1,000,000) is
    required, ``per_minute`` optional (both windows apply). Checked when built:
    :class:`jobs.InvalidJob` names the field and the value.
    """

    queue: str | None = None
    job_type: str | None = None
    per_second: int
    per_minute: int | None = None
    pause_on_rate_limited: bool = True

    def __post_init__(self) -> None:
        target(self.queue, self.job_type)
        _rate(self.per_second, "per_second", MAX_PER_SECOND)
        if self.per_minute is not None:
            _rate(self.per_minute, "per_minute", MAX_PER_MINUTE)
        if not isinstance(self.pause_on_rate_limited, bool):
            raise InvalidJob(
                "pause_on_rate_limited", self.pause_on_rate_limited, "must be True or False"
            )

    @property
    def scope(self) -> Scope:
        return "queue" if self.queue is not None else "job_type"

    @property
    def name(self) -> str:
        name = self.queue if self.queue is not None else self.job_type
        assert name is not None
        return name


@dataclass(frozen=True, slots=True)
class LimitState:
    """A limit as stored, with its buckets as of the time it was read."""

    limit: RateLimit
    source: Source
    paused_until: datetime | None  # None: not paused
    second_tokens: float
    minute_tokens: float | None
    updated_at: datetime


@dataclass
class LimitSync:
    """What :func:`sync_limits` did, by ``scope:name``."""

    set: list[str] = field(default_factory=list)
    cleared: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)


def set_limit(
    conn: psycopg.Connection[Any],
    limit: RateLimit,
    *,
    now: datetime | None = None,
    source: Source = "api",
) -> RateLimit:
    """Create or replace ``limit`` (in the caller's transaction); its buckets start full.

    Running workers apply it at their next claim (they are notified at commit). A pause in
    force stays.
    """
    if not isinstance(limit, RateLimit):
        raise InvalidJob("limit", limit, "must be a jobs.RateLimit")
    if source not in ("api", "definitions"):
        raise InvalidJob("source", source, "must be 'api' or 'definitions'")
    conn.execute(
        query("job_rate_limit_set"),
        {
            "scope": limit.scope,
            "name": limit.name,
            "per_second": limit.per_second,
            "per_minute": limit.per_minute,
            "pause_on_rate_limited": limit.pause_on_rate_limited,
            "source": source,
            "now": now,
        },
    )
    return limit


def list_limits(
    conn: psycopg.Connection[Any], *, now: datetime | None = None, source: Source | None = None
) -> list[LimitState]:
    """Every limit (or those of ``source``), by scope and name."""
    rows = conn.execute(query("job_rate_limit_list"), {"now": now, "source": source}).fetchall()
    out = []
    for scope, name, ps, pm, pause, src, paused, second, minute, updated in rows:
        limit = RateLimit(
            queue=name if scope == "queue" else None,
            job_type=name if scope == "job_type" else None,
            per_second=ps,
            per_minute=pm,
            pause_on_rate_limited=pause,
        )
        out.append(LimitState(limit, src, paused, float(second), minute, updated))
    return out


def clear_limit(
    conn: psycopg.Connection[Any], *, queue: str | None = None, job_type: str | None = None
) -> bool:
    """Remove the limit of ``queue`` or of ``job_type`` (exactly one); False if there was none."""
    scope, name = target(queue, job_type)
    rows = conn.execute(query("job_rate_limit_clear"), {"scope": scope, "name": name}).fetchall()
    return bool(rows)


def sync_limits(
    conn: psycopg.Connection[Any], limits: Iterable[RateLimit], *, now: datetime | None = None
) -> LimitSync:
    """Make the limits a definitions file declares match ``limits`` (caller's transaction).

    Sets the new and changed ones (source 'definitions'), clears those a previous sync set that
    ``limits`` no longer names; limits set through the API or the CLI are left alone unless
    ``limits`` names them (then the file's take over).
    """
    wanted: dict[tuple[str, str], RateLimit] = {}
    for limit in limits:
        if not isinstance(limit, RateLimit):
            raise InvalidJob("limits", limit, "must be jobs.RateLimit values")
        key: tuple[str, str] = (limit.scope, limit.name)
        if key in wanted:
            raise InvalidJob("limits", f"{limit.scope}:{limit.name}", "is declared twice")
        wanted[key] = limit
    existing: dict[tuple[str, str], LimitState] = {
        (s.limit.scope, s.limit.name): s for s in list_limits(conn, now=now)
    }
    result = LimitSync()
    # In (scope, name) order, the order in which claims lock the rows: a sync never holds one
    # row a claim needs while waiting for another that claim holds (no deadlock).
    for key in sorted(wanted.keys() | existing.keys()):
        declared, have = wanted.get(key), existing.get(key)
        if declared is None:
            if have is not None and have.source == "definitions":
                clear_limit(conn, **{key[0]: key[1]})
                result.cleared.append(":".join(key))
        elif have is not None and have.limit == declared and have.source == "definitions":
            result.unchanged.append(":".join(key))
        else:
            set_limit(conn, declared, now=now, source="definitions")
            result.set.append(":".join(key))
    return result
