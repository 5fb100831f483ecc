"""Effect-side deduplication: make a handler's effect happen once under at-least-once runs.

A job can run twice (a crash after the effect, before the outcome was written). A handler that
must not repeat an effect records it with :func:`record_once` *in the same transaction* as the
effect's own database write, or, for an external call, before making the call:

    with conn.transaction():
        if jobs.effects.record_once(conn, jobs.effects.effect_key(job, "push")):
            conn.execute("INSERT INTO notifications ...")   # happens once

The key derives from the job's idempotency key when it has one (so a requeued or re-enqueued
copy of the same logical job is recognised too), else from its id.

A batch handler does the same for a whole batch in two round trips, whatever its size. For an
external call (a push provider), check before sending and record after the provider answered:

    keys = {job.id: effect_key(job, "push") for job in batch.jobs}
    done = jobs.effects.recorded(conn, keys.values())          # check-before-send
    results = provider.send_many([j for j in batch.jobs if keys[j.id] not in done])
    with conn.transaction():                                   # record-after-send
        jobs.effects.record_many(conn, [keys[r.job.id] for r in results if r.ok], ...)

The record of an external call commits on its own, right after the call, and not in the
worker's completion transaction: the call happened even if this worker has lost its lease, and
a record that rolled back with a fenced outcome would let the next run send again. (A crash
between the call and the record can still repeat it: no external call is exactly-once without
the provider's help, such as an idempotency key.) For a database effect, :func:`record_many` in
the effect's own transaction dedupes it exactly, like :func:`record_once`.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Sequence
from datetime import datetime
from typing import Any

import psycopg

from jobs import validate
from jobs.errors import InvalidJob
from jobs.model import Job
from jobs.queries import query
from jobs.steps import Steps, on, on_async


def effect_key(job: Job, effect: str) -> str:
    """A stable key for ``effect`` of ``job``."""
    if not effect or ":" in effect:
        raise InvalidJob("effect", effect, "must be a non-empty name without ':'")
    if job.idempotency_key is not None:
        org = str(job.organization_id) if job.organization_id else "-"
        return f"{effect}:{job.job_type}:{org}:{job.idempotency_key}"
    return f"{effect}:job:{job.id}"


def _checked(key: str) -> str:
    if not isinstance(key, str) or not 1 <= len(key) <= 600:
        raise InvalidJob("key", key, "must be a string of 1-600 characters")
    return key


def recorded(conn: psycopg.Connection[Any], keys: Collection[str]) -> set[str]:
    """Which of ``keys`` are already recorded: one statement for the whole collection.

    Check-before-send: a handler skips the external calls whose effect is recorded. It reads
    committed records (and the caller's own, in its transaction); use :func:`record_many` for
    the record itself.
    """
    return on(conn, recorded_steps(keys))


async def recorded_async(conn: psycopg.AsyncConnection[Any], keys: Collection[str]) -> set[str]:
    """:func:`recorded` on an ``AsyncConnection`` (for async handlers)."""
    return await on_async(conn, recorded_steps(keys))


def recorded_steps(keys: Collection[str]) -> Steps[set[str]]:
    """:func:`recorded` as steps (:mod:`jobs.steps`), for the sync and the async form."""
    wanted = sorted({_checked(k) for k in keys})
    if not wanted:
        return set()
    return {row[0] for row in (yield query("job_effect_recorded"), {"keys": wanted})}


def record_many(
    conn: psycopg.Connection[Any],
    keys: Sequence[str],
    *,
    job_ids: Sequence[int | None] | None = None,
    now: datetime | None = None,
) -> set[str]:
    """Record effects ``keys`` in one statement; return those recorded now (new).

    ``job_ids``, when given, is parallel to ``keys`` (the job each effect belongs to). A key
    given twice is recorded once (with the first job id). Runs in the caller's transaction: if
    that transaction rolls back, the records go too.
    """
    return on(conn, record_many_steps(keys, job_ids=job_ids, now=now))


async def record_many_async(
    conn: psycopg.AsyncConnection[Any],
    keys: Sequence[str],
    *,
    job_ids: Sequence[int | None] | None = None,
    now: datetime | None = None,
) -> set[str]:
    """:func:`record_many` on an ``AsyncConnection`` (for async handlers)."""
    return await on_async(conn, record_many_steps(keys, job_ids=job_ids, now=now))


def record_many_steps(
    keys: Sequence[str],
    *,
    job_ids: Sequence[int | None] | None = None,
    now: datetime | None = None,
) -> Steps[set[str]]:
    """:func:`record_many` as steps (:mod:`jobs.steps`), for the sync and the async form."""
    params = record_many_params(keys, job_ids=job_ids, now=now)
    if not params["keys"]:
        return set()
    return {row[0] for row in (yield query("job_effect_record_many"), params)}


def record_many_params(
    keys: Sequence[str],
    *,
    job_ids: Sequence[int | None] | None = None,
    now: datetime | None = None,
) -> dict[str, Any]:
    """The checked parameters of :func:`record_many`'s insert (``keys``, ``job_ids``, ``now``:
    distinct keys in sorted order, each with its first job id), for a statement that includes
    jobs' ``job_effect_insert_checked`` fragment (the scheduler's delivery record)."""
    if job_ids is not None and len(job_ids) != len(keys):
        raise InvalidJob("job_ids", len(job_ids), f"must have one id per key ({len(keys)})")
    ids = list(job_ids) if job_ids is not None else [None] * len(keys)
    first: dict[str, int | None] = {}
    for key, job_id in zip(keys, ids, strict=True):
        first.setdefault(_checked(key), job_id)
    ordered = sorted(first)
    return {
        "keys": ordered,
        "job_ids": [first[k] for k in ordered],
        "now": validate.aware(now, "now"),
    }


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
    _checked(key)
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
