"""Transactional enqueue: a job exists exactly when the caller's transaction commits.

All three functions run their statements on the caller's connection, inside whatever
transaction it has open, and never commit, roll back or use session state (no session advisory
locks, no required prepared statements), so they work through PgBouncer in transaction mode.

Idempotency: (organization_id, job_type, idempotency_key) names at most one job; an absent
organization counts as one organization. The insert uses ``ON CONFLICT DO NOTHING``; when it
inserts nothing, a second statement (with a fresh snapshot under READ COMMITTED) returns the job
that holds the key, including one committed by a concurrent transaction a moment ago, so
concurrent enqueuers of one key all get the same id and none sees an error.

Unique while active: (organization_id, job_type, unique_key) names at most one job that is
pending, retrying or leased (the partial unique index jobs_unique_active_uq); once that job
succeeds, goes dead or is cancelled, the key is free again. The insert uses ``ON CONFLICT DO
NOTHING`` on that index (never a lookup then an insert, so 16 concurrent enqueuers of one key
make one job); on a conflict, ``on_active="keep"`` returns the active job, and
``on_active="replace"`` gives the waiting job this call's payload, run_at, priority and
max_attempts. A leased job is running: it is kept as it is (its handler has read its payload
already; a second active job would break what the key promises), and the result says
``replaced=False``. One algorithm (``_unique_steps``, ``_many_unique_steps``: generators of
statements) serves the sync and async functions. A job has either an idempotency key or a
unique key (an insert names one arbiter index).
"""

from __future__ import annotations

from collections.abc import Generator, Iterable, Mapping
from datetime import datetime
from typing import Any, LiteralString
from uuid import UUID

import psycopg
from psycopg.adapt import Dumper
from psycopg.postgres import types as pg_types
from psycopg.pq import Format, TransactionStatus

from jobs import tracing, validate
from jobs.errors import InvalidJob, JobsError
from jobs.model import Enqueued, JobSpec, OnActive
from jobs.queries import query
from jobs.steps import Rows, Statement, run, run_async
from jobs.validate import DEFAULT_MAX_ATTEMPTS, key_is_plain

# If the job holding a key is deleted between our insert and our lookup (retention, a person),
# the insert is simply tried again.
_CONFLICT_ROUNDS = 5


# Job types and queue names that passed their validator (a bounded few: an application has a
# handful), so that the common enqueue checks them with a set lookup instead of a pattern.
_JOB_TYPES: set[str] = set()
_QUEUES: set[str] = set()
_SEEN_MAX = 1024


def _job_type(value: Any) -> str:
    if type(value) is str and value in _JOB_TYPES:
        return value
    checked = validate.job_type(value)
    if type(checked) is str and len(_JOB_TYPES) < _SEEN_MAX:
        _JOB_TYPES.add(checked)
    return checked


def _queue(value: Any) -> str:
    if type(value) is str and value in _QUEUES:
        return value
    checked = validate.queue_name(value)
    if type(checked) is str and len(_QUEUES) < _SEEN_MAX:
        _QUEUES.add(checked)
    return checked


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
    unique_key: Any = None,
    on_active: Any = "keep",
    concurrency_key: Any = None,
) -> dict[str, Any]:
    trace_parent, trace_state = tracing.capture()  # (None, None) unless a span is recording
    if (
        idempotency_key is None
        and organization_id is None
        and run_at is None
        and now is None
        and type(priority) is int
        and priority == 0
        and max_attempts is None
        and unique_key is None
        and concurrency_key is None
        and type(on_active) is str
        and on_active == "keep"
    ):
        # The common call (job_enqueue_defaults): every optional field at its default, which
        # its validator would return as given; the three the caller sets are checked in the
        # same order, a job type or queue seen valid already by a set lookup.
        return {
            "job_type": _job_type(job_type),
            "payload": validate.payload(payload),
            "queue": _queue(queue),
            "idempotency_key": None,
            "organization_id": None,
            "run_at": None,
            "priority": 0,
            "max_attempts": DEFAULT_MAX_ATTEMPTS,
            "now": None,
            "trace_parent": trace_parent,
            "trace_state": trace_state,
            "unique_key": None,
            "concurrency_key": None,
            "on_active": on_active,
        }
    params: dict[str, Any] = {
        "job_type": validate.job_type(job_type),
        "payload": validate.payload(payload),
        "queue": validate.queue_name(queue),
        "idempotency_key": validate.idempotency_key(idempotency_key),
        "organization_id": validate.organization_id(organization_id),
        "run_at": validate.aware(run_at, "run_at"),
        "priority": validate.priority(priority),
        "max_attempts": validate.max_attempts(max_attempts),
        "now": validate.aware(now, "now"),
        "trace_parent": trace_parent,
        "trace_state": trace_state,
        "unique_key": validate.unique_key(unique_key),
        "concurrency_key": validate.concurrency_key(concurrency_key),
    }
    params["on_active"] = validate.on_active(on_active, params["unique_key"])
    validate.keys(params["idempotency_key"], params["unique_key"])
    return params


# A statement to run (named query text, parameters); the generator is sent its rows.
_Statement = Statement
_Rows = Rows


def _unique_steps(params: Mapping[str, Any]) -> Generator[_Statement, _Rows, Enqueued]:
    """One job with a unique key: insert, else replace the waiting holder, else return the
    active holder. Each statement has a fresh snapshot (READ COMMITTED): a holder inserted by a
    concurrent transaction was waited for by the insert and is visible to the next statement;
    a holder that finished in between frees the key, and the insert is tried again."""
    replace = params["on_active"] == "replace"
    for _ in range(_CONFLICT_ROUNDS):
        rows = yield query("job_enqueue_unique"), params
        if rows:
            return Enqueued(id=rows[0][0], created=True)
        if replace:
            rows = yield query("job_replace_by_unique_key"), params
            if rows:
                return Enqueued(id=rows[0][0], created=False, replaced=True)
        rows = yield query("job_find_active_by_unique_key"), params
        if rows:
            return Enqueued(id=rows[0][0], created=False)
    raise JobsError(f"unique key {params['unique_key']!r} kept changing hands; retry")


def _insert_query(params: Mapping[str, Any]) -> LiteralString:
    """The insert of a job without a unique key: ``job_enqueue_defaults`` (three parameters, no
    ON CONFLICT) when every other field is what the table's defaults would write, as
    ``_all_defaults`` decides for a batch; else ``job_enqueue``."""
    if (
        params["idempotency_key"] is None
        and params["organization_id"] is None
        and params["run_at"] is None
        and params["now"] is None
        and params["priority"] == 0
        and params["max_attempts"] == DEFAULT_MAX_ATTEMPTS
        and params["concurrency_key"] is None
        and params["trace_parent"] is None
    ):
        return query("job_enqueue_defaults")
    return query("job_enqueue")


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
    concurrency_key: str | None = None,
    unique_key: str | None = None,
    on_active: OnActive = "keep",
) -> Enqueued:
    """Insert a job in the caller's transaction and return its id.

    ``payload`` is any JSON-serialisable value (``None`` means ``{}``). ``run_at`` (aware) delays
    the job; ``now`` pins the clock (tests), else the database clock is used.
    ``concurrency_key`` is what a queue's per-key limit counts (:func:`jobs.set_queue_policy`).
    ``unique_key``
    makes the job unique while it is pending, retrying or leased; when an active job holds the
    key, ``on_active="keep"`` returns it and ``"replace"`` gives it this payload, run_at,
    priority and max_attempts if it is waiting (see the module doc). Raises
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
        unique_key,
        on_active,
        concurrency_key,
    )
    with conn.cursor() as cur:
        if params["unique_key"] is not None:
            return run(cur, _unique_steps(params))
        for _ in range(_CONFLICT_ROUNDS):
            cur.execute(_insert_query(params), params)
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
    concurrency_key: str | None = None,
    unique_key: str | None = None,
    on_active: OnActive = "keep",
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
        unique_key,
        on_active,
        concurrency_key,
    )
    async with conn.cursor() as cur:
        if params["unique_key"] is not None:
            return await run_async(cur, _unique_steps(params))
        for _ in range(_CONFLICT_ROUNDS):
            await cur.execute(_insert_query(params), params)
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


_COLUMNS = (
    "organization_ids",
    "queues",
    "job_types",
    "payloads",
    "idempotency_keys",
    "priorities",
    "run_ats",
    "max_attempts",
    "concurrency_keys",
    "unique_keys",
    "on_active",
)
_PRIORITY_LOW, _PRIORITY_HIGH = validate.PRIORITY_RANGE


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
    columns = _build_columns(specs)
    return enqueue_columns(conn, columns, now=validate.aware(now, "now"))


def _build_columns(specs: Iterable[JobSpec | Mapping[str, Any]]) -> dict[str, list[Any]]:
    """Validate ``specs`` into the parallel columns of :func:`enqueue_columns` (pure; shared by
    :func:`enqueue_many` and :func:`enqueue_many_async`)."""
    # The checks of jobs.validate, in its order, with a fast path for the common values: a
    # queue or job type is checked once per call, not once per spec, and a value that fails
    # the fast test goes to the validator, which accepts it or raises its own message.
    columns: dict[str, list[Any]] = {name: [] for name in _COLUMNS}
    organization_ids = columns["organization_ids"]
    queues = columns["queues"]
    job_types = columns["job_types"]
    payloads = columns["payloads"]
    keys = columns["idempotency_keys"]
    priorities = columns["priorities"]
    run_ats = columns["run_ats"]
    attempts = columns["max_attempts"]
    concurrency_keys = columns["concurrency_keys"]
    unique_keys = columns["unique_keys"]
    on_actives = columns["on_active"]
    known_types: set[str] = set()
    known_queues: set[str] = set()
    known_orgs: dict[str, UUID] = {}
    max_key = validate.MAX_IDEMPOTENCY_KEY
    max_limit = validate.MAX_ATTEMPTS_LIMIT
    for index, item in enumerate(specs):
        spec = item if type(item) is JobSpec else _spec(item, index)
        try:
            job_type = spec.job_type
            if type(job_type) is not str or job_type not in known_types:
                job_type = validate.job_type(job_type)
                if type(job_type) is str:
                    known_types.add(job_type)
            payload = validate.payload(spec.payload)
            queue = spec.queue
            if type(queue) is not str or queue not in known_queues:
                queue = validate.queue_name(queue)
                if type(queue) is str:
                    known_queues.add(queue)
            key = spec.idempotency_key
            if key is not None and (
                type(key) is not str or not 0 < len(key) <= max_key or not key_is_plain(key)
            ):
                key = validate.idempotency_key(key)
            org: Any = spec.organization_id
            if org is not None and type(org) is not UUID:
                if type(org) is str and org in known_orgs:
                    org = known_orgs[org]
                else:
                    given = org
                    org = validate.organization_id(org)
                    if type(given) is str:
                        known_orgs[given] = org
            run_at = spec.run_at
            if run_at is not None:
                run_at = validate.aware(run_at, "run_at")
            priority = spec.priority
            if type(priority) is not int or not _PRIORITY_LOW <= priority <= _PRIORITY_HIGH:
                priority = validate.priority(priority)
            max_attempts = spec.max_attempts
            if max_attempts is None:
                max_attempts = DEFAULT_MAX_ATTEMPTS
            elif type(max_attempts) is not int or not 1 <= max_attempts <= max_limit:
                max_attempts = validate.max_attempts(max_attempts)
            ckey = spec.concurrency_key
            if ckey is not None:
                ckey = validate.concurrency_key(ckey)
            unique = spec.unique_key
            on_active: Any = spec.on_active
            if unique is not None or on_active != "keep":
                unique = validate.unique_key(unique)
                on_active = validate.on_active(on_active, unique)
                validate.keys(key, unique)
        except InvalidJob as exc:
            field = f"specs[{index}].{exc.field}"
            raise InvalidJob(field, exc.value, exc.reason) from None
        organization_ids.append(org)
        queues.append(queue)
        job_types.append(job_type)
        payloads.append(payload)
        keys.append(key)
        priorities.append(priority)
        run_ats.append(run_at)
        attempts.append(max_attempts)
        concurrency_keys.append(ckey)
        unique_keys.append(unique)
        on_actives.append(on_active)
    return columns


def enqueue_columns(
    conn: psycopg.Connection[Any],
    columns: Mapping[str, list[Any]],
    *,
    now: datetime | None = None,
) -> list[Enqueued]:
    """The insert behind :func:`enqueue_many`, for input validated already (no checks here).

    ``columns`` holds parallel lists: ``organization_ids`` (UUID or None), ``queues``,
    ``job_types``, ``payloads`` (JSON text), ``idempotency_keys``,
    ``priorities``, ``run_ats`` (aware or None) and ``max_attempts``, and optionally
    ``concurrency_keys`` (None each: no key) and ``unique_keys`` and ``on_active`` (a batch with
    a unique key goes through ``INSERT ... SELECT FROM unnest``, never COPY, which has no ON
    CONFLICT). The scheduler uses it for
    occurrences of schedules it validated when they were created; anything else should call
    :func:`enqueue_many`.

    A batch goes in with one binary COPY. A batch with idempotency keys is copied inside a
    savepoint when no key repeats within it: if a key is taken already (or by a concurrent
    transaction that commits while we wait on it), the COPY fails on jobs_idempotency_uq, the
    savepoint rolls it back, and the batch goes through ``INSERT ... ON CONFLICT DO NOTHING``,
    whose lookup then returns the holder of each taken key.
    """
    n = len(columns["queues"])
    if not n:
        return []
    columns = _with_concurrency_keys(columns, n)
    with conn.cursor() as cur:
        # First, so that the caller's transaction (if any) is open before the savepoint:
        # conn.transaction() on an idle connection would begin and commit a transaction of
        # its own.
        early = _in_transaction(conn)
        params = {"now": now, "n": n, **_wake_params(columns, early)}
        row = cur.execute(query("job_allocate_ids"), params).fetchone()
        assert row is not None
        db_now: datetime = row[0]
        ids: list[int] = row[1]
        run_ats = [db_now if at is None else at for at in columns["run_ats"]]
        trace = tracing.capture()  # one context for the batch: the span it was enqueued in
        if _has_unique_keys(columns, n):
            return _insert_unique(cur, ids, columns, run_ats, db_now, trace)
        keys = columns["idempotency_keys"]
        defaults = _all_defaults(columns, n, now) and trace[0] is None
        if keys.count(None) == n:
            _copy(cur, ids, columns, run_ats, db_now, defaults=defaults, trace=trace)
            if not early:
                _wake(cur, columns["queues"], run_ats, db_now)
            return [Enqueued(job_id, True) for job_id in ids]
        if not _repeats_a_key(columns):
            try:
                with conn.transaction():
                    _copy(cur, ids, columns, run_ats, db_now, defaults=defaults, trace=trace)
            except psycopg.errors.UniqueViolation as exc:
                if exc.diag.constraint_name != _KEY_CONSTRAINT:
                    raise
            else:
                if not early:
                    _wake(cur, columns["queues"], run_ats, db_now)
                return [Enqueued(job_id, True) for job_id in ids]
        return _insert(cur, ids, columns, run_ats, db_now, trace)


def _with_concurrency_keys(columns: Mapping[str, list[Any]], n: int) -> Mapping[str, list[Any]]:
    """``columns`` with a ``concurrency_keys`` column (the scheduler's may have none)."""
    if "concurrency_keys" in columns:
        return columns
    return {**columns, "concurrency_keys": [None] * n}


_KEY_CONSTRAINT = "jobs_idempotency_uq"
_JSONB_OID = pg_types["jsonb"].oid
# COPY's binary format carries no types: the order of job_copy's columns.
_COPY_TYPES = (
    "int8",
    "uuid",
    "text",
    "text",
    "jsonb",
    "text",
    "int4",
    "timestamptz",
    "int4",
    "text",
    "timestamptz",
)
_COPY_TYPES_TRACED = (*_COPY_TYPES, "text", "text")  # job_copy_traced: trace_parent, trace_state


class _JsonbTextBinaryDumper(Dumper):
    """JSON text in jsonb's binary format: a version byte, then the text.

    psycopg's own jsonb dumper would encode the text again, as a JSON string.
    """

    format = Format.BINARY
    oid = _JSONB_OID

    def dump(self, obj: Any) -> bytes:
        text: str = obj
        return b"\x01" + text.encode()


def _repeats_a_key(columns: Mapping[str, list[Any]]) -> bool:
    seen: set[tuple[Any, str, str]] = set()
    for org, job_type, key in zip(
        columns["organization_ids"], columns["job_types"], columns["idempotency_keys"], strict=True
    ):
        if key is not None:
            scoped = (org, job_type, key)
            if scoped in seen:
                return True
            seen.add(scoped)
    return False


def _copy(
    cur: psycopg.Cursor[Any],
    ids: list[int],
    columns: Mapping[str, list[Any]],
    run_ats: list[datetime],
    db_now: datetime,
    *,
    defaults: bool,
    trace: tuple[str | None, str | None] = (None, None),
) -> None:
    """COPY the batch: only the columns that differ from the table's defaults when every spec
    leaves the others at them (the cheapest rows to format and to parse), else all of them in
    binary format (no text formatting of timestamps), with the trace context when traced."""
    if defaults:
        with cur.copy(query("job_copy_defaults")) as copy:
            write_row = copy.write_row
            for item in zip(
                ids,
                columns["queues"],
                columns["job_types"],
                columns["payloads"],
                columns["idempotency_keys"],
                strict=True,
            ):
                write_row(item)
        return
    cur.adapters.register_dumper(None, _JsonbTextBinaryDumper)
    tail = (db_now,) if trace[0] is None else (db_now, *trace)
    with cur.copy(query("job_copy" if trace[0] is None else "job_copy_traced")) as copy:
        copy.set_types(_COPY_TYPES if trace[0] is None else _COPY_TYPES_TRACED)
        write_row = copy.write_row
        for item in zip(
            ids,
            columns["organization_ids"],
            columns["queues"],
            columns["job_types"],
            columns["payloads"],
            columns["idempotency_keys"],
            columns["priorities"],
            run_ats,
            columns["max_attempts"],
            columns["concurrency_keys"],
            strict=True,
        ):
            write_row((*item, *tail))


def _all_defaults(columns: Mapping[str, list[Any]], n: int, now: datetime | None) -> bool:
    """Whether the database would fill every other column as we would: run_at and created_at
    with its clock (now() of this transaction, as job_allocate_ids read it), priority 0, the
    default max_attempts, no organization, no concurrency key."""
    return (
        now is None
        and columns["run_ats"].count(None) == n
        and columns["organization_ids"].count(None) == n
        and columns["concurrency_keys"].count(None) == n
        and columns["priorities"].count(0) == n
        and columns["max_attempts"].count(DEFAULT_MAX_ATTEMPTS) == n
    )


def _in_transaction(conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any]) -> bool:
    """Whether the next statement runs inside a transaction (the caller's, or one psycopg opens
    for it): its NOTIFY is then delivered at commit, so the wake can go before the rows."""
    return not conn.autocommit or conn.info.transaction_status != TransactionStatus.IDLE


def _wake_params(columns: Mapping[str, list[Any]], early: bool) -> dict[str, list[Any]]:
    """The wake sent with ``job_allocate_ids`` (one round trip fewer per batch): each queue
    once, in a fixed order, with its earliest ``run_at`` (None: the database clock). Empty
    unless ``early``; then a batch whose keys all name existing jobs wakes its queues anyway (a
    wake-up is a hint, never the truth: the claim finds nothing new)."""
    if not early:
        return {"wake": [], "wake_ats": []}
    first: dict[str, datetime | None] = {}
    # A row with a unique key wakes its queue itself (_many_unique_steps), and only when it
    # was inserted or made a waiting job ready: a replaced job keeps its own queue.
    uniques = columns.get("unique_keys") or [None] * len(columns["queues"])
    for q, at, unique in zip(columns["queues"], columns["run_ats"], uniques, strict=True):
        if unique is not None:
            continue
        if q not in first:
            first[q] = at
        else:
            seen = first[q]
            if seen is not None and (at is None or at < seen):
                first[q] = at
    ordered = sorted(first)
    return {"wake": ordered, "wake_ats": [first[q] for q in ordered]}


def _wake(
    cur: psycopg.Cursor[Any], queues: list[str], run_ats: list[datetime], db_now: datetime
) -> None:
    """Notify the queues that received a job ready now (once per queue, in a fixed order)."""
    ready = sorted({q for q, at in zip(queues, run_ats, strict=True) if at <= db_now})
    if ready:
        cur.execute(query("job_wake_queues"), {"queues": ready})


def _insert(
    cur: psycopg.Cursor[Any],
    ids: list[int],
    columns: Mapping[str, list[Any]],
    run_ats: list[datetime],
    db_now: datetime,
    trace: tuple[str | None, str | None],
) -> list[Enqueued]:
    params = {
        **columns,
        "ids": ids,
        "run_ats": run_ats,
        "created_at": db_now,
        "trace_parent": trace[0],
        "trace_state": trace[1],
    }
    cur.execute(query("job_enqueue_many"), params)
    created = {row[0] for row in cur.fetchall()}
    results: list[Enqueued | None] = [
        Enqueued(job_id, True) if job_id in created else None for job_id in ids
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
    queues = columns["queues"]
    _wake(
        cur,
        [queues[i] for i, job_id in enumerate(ids) if job_id in created],
        [run_ats[i] for i, job_id in enumerate(ids) if job_id in created],
        db_now,
    )
    found = [r for r in results if r is not None]
    if len(found) != len(results):
        # The job holding a key was deleted between the two statements (retention or a
        # person, at this very moment): nothing is guessed; the caller retries the batch.
        raise JobsError("a job holding an idempotency key vanished during enqueue_many; retry")
    return found


def _has_unique_keys(columns: Mapping[str, list[Any]], n: int) -> bool:
    # The scheduler's columns (enqueue_columns) may not have the column at all.
    uniques = columns.get("unique_keys")
    return uniques is not None and uniques.count(None) != n


def _subset(columns: Mapping[str, list[Any]], rows: list[int]) -> dict[str, list[Any]]:
    return {name: [values[i] for i in rows] for name, values in columns.items()}


def _split_unique(
    columns: Mapping[str, list[Any]],
) -> tuple[list[int], list[int], dict[int, int]]:
    """The rows without a unique key; the first row of each (organization, type, key), which
    goes to the database, sorted by key; and every later row of a key, mapped to that first
    one (it gets the first one's job, as a repeated idempotency key does)."""
    plain: list[int] = []
    leaders: list[int] = []
    follows: dict[int, int] = {}
    first: dict[tuple[Any, str, str], int] = {}
    for i, (org, job_type, unique) in enumerate(
        zip(columns["organization_ids"], columns["job_types"], columns["unique_keys"], strict=True)
    ):
        if unique is None:
            plain.append(i)
            continue
        scoped = (org, job_type, unique)
        if scoped in first:
            follows[i] = first[scoped]
        else:
            first[scoped] = i
            leaders.append(i)
    # In one order of keys in every process: concurrent batches then wait on each other's
    # keys in that order and cannot deadlock (which one wins within a batch is decided above).
    orgs, job_types, uniques = (
        columns["organization_ids"],
        columns["job_types"],
        columns["unique_keys"],
    )
    leaders.sort(key=lambda i: (job_types[i], uniques[i], "" if orgs[i] is None else str(orgs[i])))
    return plain, leaders, follows


def _many_unique_steps(
    ids: list[int],
    columns: Mapping[str, list[Any]],
    run_ats: list[datetime],
    db_now: datetime,
    leaders: list[int],
    results: list[Enqueued | None],
    trace: tuple[str | None, str | None] = (None, None),
) -> Generator[_Statement, _Rows, None]:
    """The rows of a batch that lead their unique key, as :func:`_unique_steps` does for one
    job but one statement per step for all of them: insert, replace the waiting holders of the
    ``replace`` rows, look up the active holders of the others; the rows whose holder finished
    in between go round again. Fills ``results`` and wakes the queues of what was inserted or
    made ready by a replace."""

    def rows_of(rows: list[int]) -> dict[str, Any]:
        params = _subset(columns, rows)
        params["ids"] = [ids[i] for i in rows]
        params["run_ats"] = [run_ats[i] for i in rows]
        return params

    queues = columns["queues"]
    woken: list[str] = []
    woken_at: list[datetime] = []
    todo = leaders
    for _ in range(_CONFLICT_ROUNDS):
        if not todo:
            break
        inserted = yield (
            query("job_enqueue_many_unique"),
            {
                **rows_of(todo),
                "created_at": db_now,
                "trace_parent": trace[0],
                "trace_state": trace[1],
            },
        )
        created = {row[0] for row in inserted}
        missing: list[int] = []
        for i in todo:
            if ids[i] in created:
                results[i] = Enqueued(ids[i], True)
                woken.append(queues[i])
                woken_at.append(run_ats[i])
            else:
                missing.append(i)
        replacing = [i for i in missing if columns["on_active"][i] == "replace"]
        if replacing:
            replaced = yield query("job_replace_many_by_unique_key"), rows_of(replacing)
            for ordinal, job_id, queue, run_at in replaced:
                results[replacing[ordinal - 1]] = Enqueued(job_id, False, replaced=True)
                woken.append(queue)
                woken_at.append(run_at)
        looking = [i for i in missing if results[i] is None]
        if looking:
            holders = yield query("job_find_many_active_by_unique_key"), rows_of(looking)
            for ordinal, job_id in holders:
                results[looking[ordinal - 1]] = Enqueued(job_id, False)
        todo = [i for i in looking if results[i] is None]
    if todo:
        raise JobsError("an active job holding a unique key kept changing hands; retry the batch")
    ready = _ready_queues(woken, woken_at, db_now)
    if ready:
        yield query("job_wake_queues"), {"queues": ready}


def _unique_results(results: list[Enqueued | None], follows: Mapping[int, int]) -> list[Enqueued]:
    for i, leader in follows.items():
        first = results[leader]
        assert first is not None
        results[i] = Enqueued(first.id, False)
    found = [r for r in results if r is not None]
    assert len(found) == len(results)
    return found


def _insert_unique(
    cur: psycopg.Cursor[Any],
    ids: list[int],
    columns: Mapping[str, list[Any]],
    run_ats: list[datetime],
    db_now: datetime,
    trace: tuple[str | None, str | None],
) -> list[Enqueued]:
    """A batch with unique keys: its rows without one through :func:`_insert` (idempotency keys
    as always), the others through :func:`_many_unique_steps`."""
    plain, leaders, follows = _split_unique(columns)
    results: list[Enqueued | None] = [None] * len(ids)
    if plain:
        done = _insert(
            cur,
            [ids[i] for i in plain],
            _subset(columns, plain),
            [run_ats[i] for i in plain],
            db_now,
            trace,
        )
        for i, r in zip(plain, done, strict=True):
            results[i] = r
    run(cur, _many_unique_steps(ids, columns, run_ats, db_now, leaders, results, trace))
    return _unique_results(results, follows)


# On an AsyncConnection: the same validation (_build_columns), the same decisions
# (_all_defaults, _repeats_a_key), the same named queries and COPY formats; only the I/O awaits.


async def enqueue_many_async(
    conn: psycopg.AsyncConnection[Any],
    specs: Iterable[JobSpec | Mapping[str, Any]],
    *,
    now: datetime | None = None,
) -> list[Enqueued]:
    """:func:`enqueue_many` on an ``AsyncConnection``, in the caller's transaction.

    The same idempotency rules and the same path: one binary COPY (through
    ``AsyncCursor.copy``), inside a savepoint when the batch has idempotency keys, falling back
    to ``INSERT ... ON CONFLICT DO NOTHING`` when a key is taken.
    """
    columns = _build_columns(specs)
    return await enqueue_columns_async(conn, columns, now=validate.aware(now, "now"))


async def enqueue_columns_async(
    conn: psycopg.AsyncConnection[Any],
    columns: Mapping[str, list[Any]],
    *,
    now: datetime | None = None,
) -> list[Enqueued]:
    """:func:`enqueue_columns` on an ``AsyncConnection`` (input validated already)."""
    n = len(columns["queues"])
    if not n:
        return []
    columns = _with_concurrency_keys(columns, n)
    async with conn.cursor() as cur:
        # First, so that the caller's transaction is open before the savepoint (see
        # enqueue_columns).
        early = _in_transaction(conn)
        params = {"now": now, "n": n, **_wake_params(columns, early)}
        await cur.execute(query("job_allocate_ids"), params)
        row = await cur.fetchone()
        assert row is not None
        db_now: datetime = row[0]
        ids: list[int] = row[1]
        run_ats = [db_now if at is None else at for at in columns["run_ats"]]
        trace = tracing.capture()
        if _has_unique_keys(columns, n):
            return await _insert_unique_async(cur, ids, columns, run_ats, db_now, trace)
        keys = columns["idempotency_keys"]
        defaults = _all_defaults(columns, n, now) and trace[0] is None
        if keys.count(None) == n:
            await _copy_async(cur, ids, columns, run_ats, db_now, defaults=defaults, trace=trace)
            if not early:
                await _wake_async(cur, columns["queues"], run_ats, db_now)
            return [Enqueued(job_id, True) for job_id in ids]
        if not _repeats_a_key(columns):
            try:
                async with conn.transaction():
                    await _copy_async(
                        cur, ids, columns, run_ats, db_now, defaults=defaults, trace=trace
                    )
            except psycopg.errors.UniqueViolation as exc:
                if exc.diag.constraint_name != _KEY_CONSTRAINT:
                    raise
            else:
                if not early:
                    await _wake_async(cur, columns["queues"], run_ats, db_now)
                return [Enqueued(job_id, True) for job_id in ids]
        return await _insert_async(cur, ids, columns, run_ats, db_now, trace)


async def _copy_async(
    cur: psycopg.AsyncCursor[Any],
    ids: list[int],
    columns: Mapping[str, list[Any]],
    run_ats: list[datetime],
    db_now: datetime,
    *,
    defaults: bool,
    trace: tuple[str | None, str | None] = (None, None),
) -> None:
    """:func:`_copy` on an async cursor: the same formats."""
    if defaults:
        async with cur.copy(query("job_copy_defaults")) as copy:
            for item in zip(
                ids,
                columns["queues"],
                columns["job_types"],
                columns["payloads"],
                columns["idempotency_keys"],
                strict=True,
            ):
                await copy.write_row(item)
        return
    cur.adapters.register_dumper(None, _JsonbTextBinaryDumper)
    tail = (db_now,) if trace[0] is None else (db_now, *trace)
    async with cur.copy(query("job_copy" if trace[0] is None else "job_copy_traced")) as copy:
        copy.set_types(_COPY_TYPES if trace[0] is None else _COPY_TYPES_TRACED)
        for item in zip(
            ids,
            columns["organization_ids"],
            columns["queues"],
            columns["job_types"],
            columns["payloads"],
            columns["idempotency_keys"],
            columns["priorities"],
            run_ats,
            columns["max_attempts"],
            columns["concurrency_keys"],
            strict=True,
        ):
            await copy.write_row((*item, *tail))


def _ready_queues(queues: list[str], run_ats: list[datetime], db_now: datetime) -> list[str]:
    return sorted({q for q, at in zip(queues, run_ats, strict=True) if at <= db_now})


async def _wake_async(
    cur: psycopg.AsyncCursor[Any], queues: list[str], run_ats: list[datetime], db_now: datetime
) -> None:
    ready = _ready_queues(queues, run_ats, db_now)
    if ready:
        await cur.execute(query("job_wake_queues"), {"queues": ready})


async def _insert_async(
    cur: psycopg.AsyncCursor[Any],
    ids: list[int],
    columns: Mapping[str, list[Any]],
    run_ats: list[datetime],
    db_now: datetime,
    trace: tuple[str | None, str | None],
) -> list[Enqueued]:
    """:func:`_insert` on an async cursor: insert what is free, then look up the holders."""
    params = {**columns, "ids": ids, "run_ats": run_ats, "created_at": db_now}
    params.update(trace_parent=trace[0], trace_state=trace[1])
    await cur.execute(query("job_enqueue_many"), params)
    created = {row[0] for row in await cur.fetchall()}
    results: list[Enqueued | None] = [
        Enqueued(job_id, True) if job_id in created else None for job_id in ids
    ]
    missing = [i for i, r in enumerate(results) if r is None]
    if missing:
        await cur.execute(
            query("job_find_many_by_key"),
            {
                "organization_ids": [columns["organization_ids"][i] for i in missing],
                "job_types": [columns["job_types"][i] for i in missing],
                "idempotency_keys": [columns["idempotency_keys"][i] for i in missing],
            },
        )
        for ordinal, job_id in await cur.fetchall():
            results[missing[ordinal - 1]] = Enqueued(id=job_id, created=False)
    queues = columns["queues"]
    await _wake_async(
        cur,
        [queues[i] for i, job_id in enumerate(ids) if job_id in created],
        [run_ats[i] for i, job_id in enumerate(ids) if job_id in created],
        db_now,
    )
    found = [r for r in results if r is not None]
    if len(found) != len(results):
        raise JobsError("a job holding an idempotency key vanished during enqueue_many; retry")
    return found


async def _insert_unique_async(
    cur: psycopg.AsyncCursor[Any],
    ids: list[int],
    columns: Mapping[str, list[Any]],
    run_ats: list[datetime],
    db_now: datetime,
    trace: tuple[str | None, str | None],
) -> list[Enqueued]:
    """:func:`_insert_unique` on an async cursor."""
    plain, leaders, follows = _split_unique(columns)
    results: list[Enqueued | None] = [None] * len(ids)
    if plain:
        done = await _insert_async(
            cur,
            [ids[i] for i in plain],
            _subset(columns, plain),
            [run_ats[i] for i in plain],
            db_now,
            trace,
        )
        for i, r in zip(plain, done, strict=True):
            results[i] = r
    await run_async(
        cur, _many_unique_steps(ids, columns, run_ats, db_now, leaders, results, trace)
    )
    return _unique_results(results, follows)
