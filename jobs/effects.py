"""Effect-side deduplication: make a handler's effect happen once under at-least-once runs.

A job can run twice (a crash after the effect, before the outcome was written). A handler that
must not repeat an effect records it with :func:`record_once` *in the same transaction* as the
effect's own database write, or, for an external call, before making the call:

    with conn.transaction():
        if jobs.effects.record_once(conn, jobs.effects.effect_key(job, "push")):
            conn.execute("INSERT INTO notifications ...")   # happens once

The key derives from the job's idempotency key when it has one (so a requeued or re-enqueued
copy of the same logical job is recognised too), else from its id.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

import psycopg

from jobs import validate
from jobs.errors import InvalidJob
from jobs.model import Job
from jobs.queries import query


def effect_key(job: Job, effect: str) -> str:
    """A stable key for ``effect`` of ``job``."""
    if not effect or ":" in effect:
        raise InvalidJob("effect", effect, "must be a non-empty name without ':'")
    if job.idempotency_key is not None:
        org = str(job.organization_id) if job.organization_id else "-"
        return f"{effect}:{job.job_type}:{org}:{job.idempotency_key}"
    return f"{effect}:job:{job.id}"


def record_once(
    conn: psycopg.Connection[Any],
    key: str,
    *,
    job_id: int | None = None,
    detail: Any = None,
    now: datetime | None = None,
) -> bool:
    """Record effect ``key``; True the first time, False if it was already recorded.

    Runs in the caller's transaction: if that transaction rolls back, the record goes too.
    """
    if not isinstance(key, str) or not 1 <= len(key) <= 600:
        raise InvalidJob("key", key, "must be a string of 1-600 characters")
    row = conn.execute(
        query("job_effect_record"),
        {
            "effect_key": key,
            "job_id": job_id,
            "detail": None if detail is None else json.dumps(detail),
            "now": validate.aware(now, "now"),
        },
    ).fetchone()
    return row is not None
