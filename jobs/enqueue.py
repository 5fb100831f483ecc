"""Transactional enqueue: a job exists exactly when the caller's transaction commits.

All three functions run their statements on the caller's connection, inside whatever
transaction it has open, and never commit, roll back or use session state (no session advisory
locks, no required prepared statements), so they work through PgBouncer in transaction mode.

Idempotency: (organization_id, job_type, idempotency_key) names at most one job; an absent
organization counts as one organization. The insert uses ``ON CONFLICT DO NOTHING``; when it
inserts nothing, a second statement (with a fresh snapshot under READ COMMITTED) returns the job
that holds the key, including one committed by a concurrent transaction a moment ago, so
concurrent enqueuers of one key all get the same id and none sees an error.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any, LiteralString

import psycopg

from jobs import validate
from jobs.errors import InvalidJob, JobsError
from jobs.model import Enqueued, JobSpec
from jobs.queries import query

# If the job holding a key is deleted between our insert and our lookup (retention, a person),
# the insert is simply tried again.
_CONFLICT_ROUNDS = 5


def _params(
    job_type: Any,
    payload: Any,
    queue: Any,
    idempotency_key: Any,
    organization_id: Any,
    run_at: Any,
    priority: Any,
    max_attempts: Any,
    now: Any,
) -> dict[str, Any]:
    return {
        "job_type": validate.job_type(job_type),
        "payload": validate.payload(payload),
        "queue": validate.queue_name(queue),
        "idempotency_key": validate.idempotency_key(idempotency_key),
        "organization_id": validate.organization_id(organization_id),
        "run_at": validate.aware(run_at, "run_at"),
        "priority": validate.priority(priority),
        "max_attempts": validate.max_attempts(max_attempts),
        "now": validate.aware(now, "now"),
    }


def _lookup_query(params: Mapping[str, Any]) -> LiteralString:
    return query("job_find_by_key" if params["organization_id"] else "job_find_by_key_no_org")


def enqueue(
    conn: psycopg.Connection[Any],
    job_type: str,
    payload: Any = None,
    *,
    queue: str = "default",
    idempotency_key: str | None = None,
    organization_id: Any = None,
    run_at: datetime | None = None,
    priority: int = 0,
    max_attempts: int | None = None,
    now: datetime | None = None,
) -> Enqueued:
    """Insert a job in the caller's transaction and return its id.

    ``payload`` is any JSON-serialisable value (``None`` means ``{}``). ``run_at`` (aware) delays
    the job; ``now`` pins the clock (tests), else the database clock is used. Raises
    :class:`jobs.InvalidJob` naming the field for bad input, before anything is written.
    """
    params = _params(
        job_type,
        {} if payload is None else payload,
        queue,
        idempotency_key,
        organization_id,
        run_at,
        priority,
        max_attempts,
        now,
    )
    with conn.cursor() as cur:
        for _ in range(_CONFLICT_ROUNDS):
            cur.execute(query("job_enqueue"), params)
            row = cur.fetchone()
            if row is not None:
                return Enqueued(id=row[0], created=True)
            cur.execute(_lookup_query(params), params)
            row = cur.fetchone()
            if row is not None:
                return Enqueued(id=row[0], created=False)
    raise RuntimeError(f"idempotency key {params['idempotency_key']!r} kept changing hands")


async def enqueue_async(
    conn: psycopg.AsyncConnection[Any],
    job_type: str,
    payload: Any = None,
    *,
    queue: str = "default",
    idempotency_key: str | None = None,
    organization_id: Any = None,
    run_at: datetime | None = None,
    priority: int = 0,
    max_attempts: int | None = None,
    now: datetime | None = None,
) -> Enqueued:
    """:func:`enqueue` on an ``AsyncConnection``; the same rules apply."""
    params = _params(
        job_type,
        {} if payload is None else payload,
        queue,
        idempotency_key,
        organization_id,
        run_at,
        priority,
        max_attempts,
        now,
    )
    async with conn.cursor() as cur:
        for _ in range(_CONFLICT_ROUNDS):
            await cur.execute(query("job_enqueue"), params)
            row = await cur.fetchone()
            if row is not None:
                return Enqueued(id=row[0], created=True)
            await cur.execute(_lookup_query(params), params)
            row = await cur.fetchone()
            if row is not None:
                return Enqueued(id=row[0], created=False)
    raise RuntimeError(f"idempotency key {params['idempotency_key']!r} kept changing hands")


def _spec(item: JobSpec | Mapping[str, Any], index: int) -> JobSpec:
    if isinstance(item, JobSpec):
        return item
    if isinstance(item, Mapping):
        try:
            return JobSpec(**item)
        except TypeError as exc:
            raise InvalidJob(f"specs[{index}]", dict(item), str(exc)) from None
    raise InvalidJob(f"specs[{index}]", item, "must be a jobs.JobSpec or a mapping")


def enqueue_many(
    conn: psycopg.Connection[Any],
    specs: Iterable[JobSpec | Mapping[str, Any]],
    *,
    now: datetime | None = None,
) -> list[Enqueued]:
    """Insert many jobs in one statement, in the caller's transaction.

    Returns one :class:`Enqueued` per spec, in order, with the idempotency rules of
    :func:`enqueue` (a key repeated inside the batch names one job). Every spec is validated
    before anything is written; an error names the spec's index and the field.
    """
    columns: dict[str, list[Any]] = {
        "organization_ids": [],
        "queues": [],
        "job_types": [],
        "payloads": [],
        "idempotency_keys": [],
        "priorities": [],
        "run_ats": [],
        "max_attempts": [],
    }
    for index, item in enumerate(specs):
        spec = _spec(item, index)
        try:
            p = _params(
                spec.job_type,
                spec.payload,
                spec.queue,
                spec.idempotency_key,
                spec.organization_id,
                spec.run_at,
                spec.priority,
                spec.max_attempts,
                None,
            )
        except InvalidJob as exc:
            field = f"specs[{index}].{exc.field}"
            raise InvalidJob(field, exc.value, exc.reason) from None
        columns["organization_ids"].append(p["organization_id"])
        columns["queues"].append(p["queue"])
        columns["job_types"].append(p["job_type"])
        columns["payloads"].append(p["payload"])
        columns["idempotency_keys"].append(p["idempotency_key"])
        columns["priorities"].append(p["priority"])
        columns["run_ats"].append(p["run_at"])
        columns["max_attempts"].append(p["max_attempts"])
    return enqueue_columns(conn, columns, now=validate.aware(now, "now"))


def enqueue_columns(
    conn: psycopg.Connection[Any],
    columns: Mapping[str, list[Any]],
    *,
    now: datetime | None = None,
) -> list[Enqueued]:
    """The insert behind :func:`enqueue_many`, for input validated already (no checks here).

    ``columns`` holds parallel lists: ``organization_ids``, ``queues``, ``job_types``,
    ``payloads`` (JSON text), ``idempotency_keys``, ``priorities``, ``run_ats`` (aware or
    None) and ``max_attempts``. The scheduler uses it for occurrences of schedules it validated
    when they were created; anything else should call :func:`enqueue_many`.
    """
    if not columns["queues"]:
        return []
    if all(key is None for key in columns["idempotency_keys"]):
        return _copy_columns(conn, columns, now)
    params: dict[str, Any] = {**columns, "now": now}
    with conn.cursor() as cur:
        cur.execute(query("job_enqueue_many"), params)
        results: list[Enqueued | None] = [
            Enqueued(id=job_id, created=True) if created else None
            for _ord, job_id, created, _notified in cur.fetchall()
        ]
        missing = [i for i, r in enumerate(results) if r is None]
        if missing:
            cur.execute(
                query("job_find_many_by_key"),
                {
                    "organization_ids": [columns["organization_ids"][i] for i in missing],
                    "job_types": [columns["job_types"][i] for i in missing],
                    "idempotency_keys": [columns["idempotency_keys"][i] for i in missing],
                },
            )
            for ordinal, job_id in cur.fetchall():
                results[missing[ordinal - 1]] = Enqueued(id=job_id, created=False)
    found = [r for r in results if r is not None]
    if len(found) != len(results):
        # The job holding a key was deleted between the two statements (retention or a
        # person, at this very moment): nothing is guessed; the caller retries the batch.
        raise JobsError("a job holding an idempotency key vanished during enqueue_many; retry")
    return found


def _copy_columns(
    conn: psycopg.Connection[Any], columns: Mapping[str, list[Any]], now: datetime | None
) -> list[Enqueued]:
    """A batch without idempotency keys cannot conflict: COPY it, with ids drawn up front."""
    n = len(columns["queues"])
    with conn.cursor() as cur:
        row = cur.execute(query("job_allocate_ids"), {"now": now, "n": n}).fetchone()
        assert row is not None
        db_now: datetime = row[0]
        ids: list[int] = row[1]
        run_ats = [at or db_now for at in columns["run_ats"]]
        with cur.copy(query("job_copy")) as copy:
            for item in zip(
                ids,
                columns["organization_ids"],
                columns["queues"],
                columns["job_types"],
                columns["payloads"],
                columns["priorities"],
                run_ats,
                columns["max_attempts"],
                strict=True,
            ):
                copy.write_row((*item, db_now))
        ready = sorted(
            {q for q, at in zip(columns["queues"], run_ats, strict=True) if at <= db_now}
        )
        if ready:
            cur.execute(query("job_wake_queues"), {"queues": ready})
    return [Enqueued(id=job_id, created=True) for job_id in ids]
