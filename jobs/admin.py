"""What an operator does with jobs: inspect, requeue the dead, cancel, read queue figures.

Every function runs in the caller's transaction and validates its filters first.

Requeue moves jobs back into an active status, so it must respect unique keys (at most one
pending, retrying or leased job per key, jobs_unique_active_uq): a job whose key an active job
holds is skipped and reported (:class:`jobs.Requeued`), never a unique violation. The check is
in the statement; a holder committed by a concurrent transaction after the statement's snapshot
makes the index refuse it instead, so the statement runs in a savepoint and is tried again,
with a fresh snapshot that sees the holder.

Each operation is written once, as a generator of steps (:mod:`jobs.steps`) that validates its
input and yields its statements; the sync function and its ``_async`` twin hand it to the sync
or the async driver.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any, LiteralString

import psycopg

from jobs import validate
from jobs.errors import InvalidJob, JobNotFound, JobsError
from jobs.model import Attempt, JobRecord, JobStatus, QueueStats, Requeued
from jobs.queries import query
from jobs.steps import Savepoint, Steps, forms, one
from jobs.validate import INT8_MAX, MAX_ERROR_CODE

MAX_IDS = 1_000_000
# The index a requeue can collide with, and how often a collision is retried (each retry sees
# the holder that caused it, so a second round is rare and a sixth one impossible short of a
# stream of concurrent holders finishing and being replaced).
_UNIQUE_ACTIVE_INDEX = "jobs_unique_active_uq"
_REQUEUE_ROUNDS = 5


def _ids(ids: Iterable[int] | None) -> list[int] | None:
    if ids is None:
        return None
    if isinstance(ids, str | bytes) or not isinstance(ids, Iterable):
        raise InvalidJob("ids", ids, "must be a list of job ids")
    result = []
    for value in ids:
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= INT8_MAX:
            raise InvalidJob("ids", value, f"job ids are integers from 1 to {INT8_MAX}")
        result.append(value)
        if len(result) > MAX_IDS:
            raise InvalidJob("ids", f"<more than {MAX_IDS} ids>", "too many ids in one call")
    return result


def _error_code(value: Any, field: str) -> str | None:
    if value is None:
        return None
    return validate.text(value, field, MAX_ERROR_CODE)


def _statuses(statuses: Iterable[str], allowed: set[JobStatus], field: str) -> list[str]:
    if isinstance(statuses, str | bytes) or not isinstance(statuses, Iterable):
        raise InvalidJob(field, statuses, f"must be a list of statuses from {sorted(allowed)}")
    result = []
    for s in statuses:
        if not isinstance(s, str):
            raise InvalidJob(field, s, f"must be one of {sorted(allowed)}")
        try:
            status = JobStatus(s)
        except ValueError:
            raise InvalidJob(field, s, f"must be one of {sorted(allowed)}") from None
        if status not in allowed:
            raise InvalidJob(field, s, f"must be one of {sorted(allowed)}")
        result.append(str(status))
    return result


def _filters(
    ids: Iterable[int] | None,
    queue: str | None,
    job_type: str | None,
    error_code: str | None,
) -> dict[str, Any]:
    if ids is None and queue is None and job_type is None and error_code is None:
        raise InvalidJob("filter", None, "give ids or at least one of queue, job_type, error_code")
    return {
        "ids": _ids(ids),
        "queue": None if queue is None else validate.queue_name(queue),
        "job_type": None if job_type is None else validate.job_type(job_type),
        "error_code": _error_code(error_code, "error_code"),
    }


def _window(since: datetime | None, until: datetime | None) -> dict[str, Any]:
    after = validate.aware(since, "since")
    before = validate.aware(until, "until")
    if after is not None and before is not None and before <= after:
        raise InvalidJob("until", until, f"must be after since ({after.isoformat()})")
    return {"since": after, "until": before}


def _requeue(
    *,
    ids: Iterable[int] | None = None,
    queue: str | None = None,
    job_type: str | None = None,
    error_code: str | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
    statuses: Sequence[str] = ("dead",),
    now: datetime | None = None,
) -> Steps[Requeued]:
    """Put dead (or cancelled, or expired) jobs back to pending with a fresh set of attempts.

    Select them by ``ids`` or by a filter (queue, job type, last error code, and the time they
    died in ``[since, until)``). Their payload and history are kept. Returns the requeued ids
    (a list); its ``skipped`` holds the selected jobs left as they were because their unique
    key is held by an active job, or by an older job of the same selection (which is requeued).
    An expired job requeued has no lateness limit any more (it runs now, as asked).
    """
    params = _filters(ids, queue, job_type, error_code)
    params["statuses"] = _statuses(
        statuses, {JobStatus.DEAD, JobStatus.CANCELLED, JobStatus.EXPIRED}, "statuses"
    )
    params.update(_window(since, until))
    params["now"] = validate.aware(now, "now")
    # First, so that the caller's transaction is open before the savepoint (on an idle
    # connection, conn.transaction() would begin and commit a transaction of its own).
    # Cancelled and expired jobs have left jobs for job_history (jobs 0021): the selected ones
    # come back first, as they were, and are then requeued like the others.
    if set(params["statuses"]) & {JobStatus.CANCELLED, JobStatus.EXPIRED}:
        yield query("job_history_restore"), params
    locked = [row[0] for row in (yield query("job_requeue_lock"), params)]
    if not locked:
        return Requeued()
    update = {"ids": locked, "statuses": params["statuses"], "now": params["now"]}
    for _ in range(_REQUEUE_ROUNDS):
        try:
            rows = yield Savepoint(one((query("job_requeue"), update)))
        except psycopg.errors.UniqueViolation as exc:
            if exc.diag.constraint_name != _UNIQUE_ACTIVE_INDEX:
                raise
            continue
        return Requeued(
            [row[0] for row in rows if not row[1]], skipped=[row[0] for row in rows if row[1]]
        )
    raise JobsError("the unique keys of the jobs to requeue kept being taken; retry")


def _cancel(
    *,
    ids: Iterable[int] | None = None,
    queue: str | None = None,
    job_type: str | None = None,
    error_code: str | None = None,
    statuses: Sequence[str] = ("pending", "retrying"),
    reason: str | None = None,
    now: datetime | None = None,
) -> Steps[list[int]]:
    """Cancel waiting (or dead, or expired) jobs; a leased job is running and is left alone."""
    params = _filters(ids, queue, job_type, error_code)
    params["statuses"] = _statuses(
        statuses,
        {JobStatus.PENDING, JobStatus.RETRYING, JobStatus.DEAD, JobStatus.EXPIRED},
        "statuses",
    )
    params["reason"] = _error_code(reason, "reason")
    params["now"] = validate.aware(now, "now")
    return [row[0] for row in (yield query("job_cancel"), params)]


def _record(row: tuple[Any, ...]) -> JobRecord:
    values = list(row)
    values[6] = JobStatus(values[6])
    return JobRecord(*values)


def _get_job(job_id: int) -> Steps[JobRecord]:
    """One job by id; raises :class:`jobs.JobNotFound`."""
    _ids([job_id])
    rows = yield query("job_get"), {"id": job_id}
    if not rows:
        raise JobNotFound(job_id)
    return _record(rows[0])


def job_attempts(conn: psycopg.Connection[Any], job_id: int) -> list[Attempt]:
    """A job's execution history, oldest first."""
    _ids([job_id])
    rows = conn.execute(query("job_attempt_list"), {"id": job_id}).fetchall()
    return [Attempt(*row) for row in rows]


def _list_jobs(
    *,
    statuses: Sequence[str] = ("dead",),
    queue: str | None = None,
    job_type: str | None = None,
    error_code: str | None = None,
    limit: int = 100,
    after: int | None = None,
) -> Steps[list[JobRecord]]:
    """One page of jobs in the given statuses (dead by default), oldest id first: at most
    ``limit`` with an id above ``after``. Page through any number with ``after=`` the last id
    of the previous page, until a page comes back short."""
    if after is not None and (
        isinstance(after, bool) or not isinstance(after, int) or not 0 <= after < 2**63
    ):
        raise InvalidJob("after", after, "must be None or a job id from 0")
    params: dict[str, Any] = {
        "statuses": _statuses(statuses, set(JobStatus), "statuses"),
        "queue": None if queue is None else validate.queue_name(queue),
        "job_type": None if job_type is None else validate.job_type(job_type),
        "error_code": _error_code(error_code, "error_code"),
        "limit": limit,
        "after": after,
    }
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= 100_000:
        raise InvalidJob("limit", limit, "must be from 1 to 100000")
    return [_record(row) for row in (yield query("job_list"), params)]


def _queue_stats(*, now: datetime | None = None) -> Steps[list[QueueStats]]:
    """Per queue: ready count, oldest ready age (seconds), leased, retrying, dead, scheduled."""
    params = {"now": validate.aware(now, "now")}
    return [QueueStats(*row) for row in (yield query("job_queue_stats"), params)]


def supersede_steps(
    *,
    job_type: str,
    idempotency_keys: Sequence[str],
    organization_id: Any = None,
    reason: str = "superseded",
    suffix: str,
    now: datetime | None = None,
) -> Steps[list[int]]:
    """Cancel the waiting jobs holding ``idempotency_keys`` and free their keys.

    Each key is renamed with ``suffix`` (the cancelled job stays, for the record), so a
    replacement job can be enqueued under the original key. Leased (running) jobs are not
    touched. Returns the ids cancelled.
    """
    keys = [validate.idempotency_key(k) for k in idempotency_keys]
    if not keys:
        return []
    org = validate.organization_id(organization_id)
    validate.text(suffix, "suffix", MAX_ERROR_CODE)
    params = {
        "job_type": validate.job_type(job_type),
        "keys": keys,
        "organization_id": org,
        "reason": validate.text(reason, "reason", MAX_ERROR_CODE),
        "summary": f"superseded: {reason}",
        "suffix": suffix,
        "now": validate.aware(now, "now"),
    }
    name: LiteralString = (
        "job_supersede_by_keys" if org is not None else "job_supersede_by_keys_no_org"
    )
    return [row[0] for row in (yield query(name), params)]


def active_among_steps(ids: Sequence[int]) -> Steps[dict[int, str]]:
    """Which of the jobs ``ids`` are still active (pending, retrying or leased): ``{id:
    status}``; a job that finished or no longer exists is absent."""
    if not ids:
        return {}
    rows = yield query("job_active_among"), {"ids": list(ids)}
    return {job_id: status for job_id, status in rows}


# Each operation above is written once, as steps (jobs/steps.py); its sync and async forms:
requeue, requeue_async = forms(_requeue, "requeue")
cancel, cancel_async = forms(_cancel, "cancel")
get_job, get_job_async = forms(_get_job, "get_job")
list_jobs, list_jobs_async = forms(_list_jobs, "list_jobs")
queue_stats, queue_stats_async = forms(_queue_stats, "queue_stats")
supersede, supersede_async = forms(supersede_steps, "supersede")
