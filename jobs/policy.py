"""Queue claim policies: fairness across organizations and per-key concurrency, per queue.

A policy is a row of job_queue_policies, written in the caller's transaction and read by every
worker's claim (so all workers agree, whichever options they were started with; a running
worker sees a change at its next claim: setting or clearing a policy notifies the workers at
commit, and they re-read at least every ``jobs.store.POLICY_REFRESH`` seconds anyway):

- ``fair``: a claim of n jobs in the queue takes them round robin across the organizations that
  have ready work (``organization_id``; jobs without one count as one organization), so a flood
  from one organization delays another's ready job by at most a claim cycle or two.
- ``concurrency_per_key``: at most K leased jobs per ``concurrency_key`` (set at enqueue) in the
  queue; jobs without a key are not limited. Race-free across workers (jobs/store.py).

The SQL is in jobs/sql/job_queue_policy.sql and job.sql (``job_claim_fair``).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import psycopg

from jobs import validate
from jobs.errors import InvalidJob
from jobs.model import QueuePolicy
from jobs.queries import query

MAX_CONCURRENCY_PER_KEY = 100_000


def _concurrency(value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidJob("concurrency_per_key", value, "must be None or an integer")
    if not 1 <= value <= MAX_CONCURRENCY_PER_KEY:
        raise InvalidJob(
            "concurrency_per_key", value, f"must be from 1 to {MAX_CONCURRENCY_PER_KEY}"
        )
    return value


def set_queue_policy(
    conn: psycopg.Connection[Any],
    queue: str,
    *,
    fair: bool = False,
    concurrency_per_key: int | None = None,
    now: datetime | None = None,
) -> QueuePolicy:
    """Set how ``queue`` is claimed (replacing its policy), in the caller's transaction.

    Raises :class:`jobs.InvalidJob` naming the field for bad input, before anything is written.
    """
    if not isinstance(fair, bool):
        raise InvalidJob("fair", fair, "must be True or False")
    policy = QueuePolicy(
        queue=validate.queue_name(queue),
        fair=fair,
        concurrency_per_key=_concurrency(concurrency_per_key),
    )
    conn.execute(
        query("job_queue_policy_set"),
        {
            "queue": policy.queue,
            "fair": policy.fair,
            "concurrency_per_key": policy.concurrency_per_key,
            "now": validate.aware(now, "now"),
        },
    )
    return policy


def clear_queue_policy(conn: psycopg.Connection[Any], queue: str) -> bool:
    """Remove ``queue``'s policy (plain claims again); whether it had one."""
    rows = conn.execute(
        query("job_queue_policy_clear"), {"queue": validate.queue_name(queue)}
    ).fetchall()
    return bool(rows)


def queue_policies(conn: psycopg.Connection[Any]) -> list[QueuePolicy]:
    """Every queue's policy, by queue name."""
    rows = conn.execute(query("job_queue_policy_list")).fetchall()
    return [QueuePolicy(queue=q, fair=f, concurrency_per_key=k) for q, f, k in rows]
