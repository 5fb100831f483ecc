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
``replaced=False``. A job has either an idempotency key or a unique key (an insert names one
arbiter index).

Every operation is written once, as a generator of steps (:mod:`jobs.steps`: statements, a
COPY, a savepoint whose unique violation the generator catches): ``_enqueue_steps`` for one
job, ``_columns_steps`` for a batch. The sync and async functions validate, then hand the
same generator to the sync or the async driver; nothing else differs between them.

A batch travels as a :class:`JobColumns`: validated jobs as parallel lists, one per column
(what ``enqueue_many`` builds from its specs and the scheduler builds from its occurrences).
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from itertools import repeat
from typing import Any, LiteralString
from uuid import UUID

import psycopg
from psycopg.adapt import Dumper
from psycopg.postgres import types as pg_types
from psycopg.pq import Format, TransactionStatus

from jobs import tracing, validate
from jobs.errors import InvalidJob, JobsError
from jobs.model import Enqueued, JobSpec, OnActive
from jobs.queries import query, variant
from jobs.steps import (
    Copy,
    Savepoint,
    Steps,
    async_connection,
    forms,
    on,
    on_async,
    one,
    sync_connection,
)
from jobs.validate import DEFAULT_MAX_ATTEMPTS, key_is_plain

# If the job holding a key is deleted between our insert and our lookup (retention, a person),
# the insert is simply tried again.
_CONFLICT_ROUNDS = 5


@dataclass(slots=True)
class JobColumns:
    """Validated jobs as parallel columns: item ``i`` of every list is job ``i``.

    What :func:`enqueue_columns` inserts, for input validated already (nothing is checked
    again): ``organization_ids`` (UUID or None), ``queues``, ``job_types``, ``payloads`` (JSON
    text), ``idempotency_keys`` (or None), ``priorities``, ``run_ats`` (aware, or None: the
    database clock) and ``max_attempts``. Four columns are optional, None meaning that no job
    sets one: ``concurrency_keys``, ``unique_keys`` and ``on_active`` (given with
    ``unique_keys``), and ``max_latenesses`` (positive timedeltas: each job's expires_at is its
    run_at plus its lateness). Build it with :meth:`append`, one job a call (the columns a
    caller does not name take :class:`jobs.JobSpec`'s defaults), or from whole lists by keyword.
    """

    organization_ids: list[UUID | None] = field(default_factory=list)
    queues: list[str] = field(default_factory=list)
    job_types: list[str] = field(default_factory=list)
    payloads: list[str] = field(default_factory=list)
    idempotency_keys: list[str | None] = field(default_factory=list)
    priorities: list[int] = field(default_factory=list)
    run_ats: list[datetime | None] = field(default_factory=list)
    max_attempts: list[int] = field(default_factory=list)
    concurrency_keys: list[str | None] | None = None
    unique_keys: list[str | None] | None = None
    on_active: list[OnActive] | None = None
    max_latenesses: list[timedelta | None] | None = None

    def __len__(self) -> int:
        return len(self.queues)

    def append(
        self,
        job_type: str,
        payload: str,
        *,
        queue: str = "default",
        idempotency_key: str | None = None,
        organization_id: UUID | None = None,
        run_at: datetime | None = None,
        priority: int = 0,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        concurrency_key: str | None = None,
        unique_key: str | None = None,
        on_active: OnActive = "keep",
        max_lateness: timedelta | None = None,
    ) -> None:
        """Add one job (``payload`` is JSON text); an optional column appears with its first
        value (the jobs before it get None, or ``"keep"``)."""
        n = len(self.queues)
        self.organization_ids.append(organization_id)
        self.queues.append(queue)
        self.job_types.append(job_type)
        self.payloads.append(payload)
        self.idempotency_keys.append(idempotency_key)
        self.priorities.append(priority)
        self.run_ats.append(run_at)
        self.max_attempts.append(max_attempts)
        if concurrency_key is not None or self.concurrency_keys is not None:
            if self.concurrency_keys is None:
                self.concurrency_keys = [None] * n
            self.concurrency_keys.append(concurrency_key)
        if unique_key is not None or on_active != "keep" or self.unique_keys is not None:
            if self.unique_keys is None or self.on_active is None:
                self.unique_keys, self.on_active = [None] * n, ["keep"] * n
            self.unique_keys.append(unique_key)
            self.on_active.append(on_active)
        if max_lateness is not None or self.max_latenesses is not None:
            if self.max_latenesses is None:
                self.max_latenesses = [None] * n
            self.max_latenesses.append(max_lateness)

    def subset(self, rows: Iterable[int]) -> JobColumns:
        """The jobs at positions ``rows``, in that order."""
        rows = list(rows)

        def take(values: list[Any] | None) -> list[Any] | None:
            return None if values is None else [values[i] for i in rows]

        return JobColumns(
            [self.organization_ids[i] for i in rows],
            [self.queues[i] for i in rows],
            [self.job_types[i] for i in rows],
            [self.payloads[i] for i in rows],
            [self.idempotency_keys[i] for i in rows],
            [self.priorities[i] for i in rows],
            [self.run_ats[i] for i in rows],
            [self.max_attempts[i] for i in rows],
            take(self.concurrency_keys),
            take(self.unique_keys),
            take(self.on_active),
            take(self.max_latenesses),
        )

    def params(self) -> dict[str, Any]:
        """Every column, by the name the unnest statements use (the optional ones filled)."""
        n = len(self.queues)
        return {
            "organization_ids": self.organization_ids,
            "queues": self.queues,
            "job_types": self.job_types,
            "payloads": self.payloads,
            "idempotency_keys": self.idempotency_keys,
            "priorities": self.priorities,
            "run_ats": self.run_ats,
            "max_attempts": self.max_attempts,
            "concurrency_keys": _or_none(self.concurrency_keys, n),
            "unique_keys": _or_none(self.unique_keys, n),
            "on_active": ["keep"] * n if self.on_active is None else self.on_active,
            "max_latenesses": self.max_latenesses,  # None: a NULL array, padded by unnest
        }


def _or_none(values: list[Any] | None, n: int) -> list[Any]:
    return [None] * n if values is None else values


# Job types and queue names that passed their validator (a bounded few: an application has a
# handful), so that the common enqueue checks them with a set lookup instead of a pattern.
_JOB_TYPES: set[str] = set()
_QUEUES: set[str] = set()
_SEEN_MAX = 1024


def _seen(value: Any, seen: set[str], check: Callable[[Any], str]) -> str:
    """``value`` checked by ``check``, by a set lookup once it passed (``seen``, bounded)."""
    if type(value) is str and value in seen:
        return value
    checked = check(value)
    if type(checked) is str and len(seen) < _SEEN_MAX:
        seen.add(checked)
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
    max_lateness: Any = None,
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
        and max_lateness is None
        and type(on_active) is str
        and on_active == "keep"
    ):
        # The common call (job_enqueue_defaults): every optional field at its default, which
        # its validator would return as given; the three the caller sets are checked in the
        # same order, a job type or queue seen valid already by a set lookup.
        return {
            "job_type": _seen(job_type, _JOB_TYPES, validate.job_type),
            "payload": validate.payload({} if payload is None else payload),
            "queue": _seen(queue, _QUEUES, validate.queue_name),
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
            "max_lateness": None,
        }
    params: dict[str, Any] = {
        "job_type": validate.job_type(job_type),
        "payload": validate.payload({} if payload is None else payload),
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
        "max_lateness": validate.max_lateness(max_lateness),
    }
    params["on_active"] = validate.on_active(on_active, params["unique_key"])
    validate.keys(params["idempotency_key"], params["unique_key"])
    return params


def _enqueue_steps(params: Mapping[str, Any]) -> Steps[Enqueued]:
    """One job: insert (one statement in the common case), else return the holder of its
    idempotency key; a job with a unique key goes through :func:`_unique_steps`."""
    if params["unique_key"] is not None:
        return (yield from _unique_steps(params))
    for _ in range(_CONFLICT_ROUNDS):
        rows = yield _insert_query(params), params
        if rows:
            if params["idempotency_key"] is None:
                return Enqueued(id=rows[0][0], created=True)
            # The key may be held by a finished job (see _settle_keys_steps).
            held = yield query("job_history_settle_key"), {**params, "id": rows[0][0]}
            if held:
                return Enqueued(id=held[0][0], created=False)
            return Enqueued(id=rows[0][0], created=True)
        rows = yield _lookup_query(params), params
        if rows:
            return Enqueued(id=rows[0][0], created=False)
    raise JobsError(f"idempotency key {params['idempotency_key']!r} kept changing hands")


def _settle_keys_steps(
    ids: Sequence[int | None],
    organization_ids: Sequence[Any],
    job_types: Sequence[str | None],
    keys: Sequence[str | None],
) -> Steps[dict[int, int]]:
    """After keyed rows were inserted (``ids``; None for a row that was not), in a statement of
    its own: the rows whose key a finished job holds in ``job_history`` are deleted again, and
    ``{index: holder id}`` comes back for each key held there (index from 0).

    The unique index of ``jobs`` no longer sees the keys of finished jobs, and an insert that
    waited on a completion moving its key's holder to ``job_history`` goes on once the
    completion commits; only a later statement (a newer snapshot under READ COMMITTED) sees
    the holder there, so the check cannot be part of the insert."""
    rows = yield (
        query("job_history_settle_keys"),
        {"ids": list(ids), "organization_ids": list(organization_ids),
         "job_types": list(job_types), "idempotency_keys": list(keys)},
    )  # fmt: skip
    return {int(ordinal) - 1: holder for ordinal, holder in rows}


def _lookup_query(params: Mapping[str, Any]) -> LiteralString:
    return query("job_find_by_key" if params["organization_id"] else "job_find_by_key_no_org")


def _unique_steps(params: Mapping[str, Any]) -> Steps[Enqueued]:
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
        and params["max_lateness"] is None
        and params["trace_parent"] is None
    ):
        return query("job_enqueue_defaults")
    return query("job_enqueue")


def _enqueue(
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
    max_lateness: timedelta | float | None = None,
) -> Steps[Enqueued]:
    """Insert a job in the caller's transaction and return its id.

    ``payload`` is any JSON-serialisable value (``None`` means ``{}``). ``run_at`` (aware) delays
    the job; ``now`` pins the clock (tests), else the database clock is used.
    ``concurrency_key`` is what a queue's per-key limit counts (:func:`jobs.set_queue_policy`).
    ``unique_key``
    makes the job unique while it is pending, retrying or leased; when an active job holds the
    key, ``on_active="keep"`` returns it and ``"replace"`` gives it this payload, run_at,
    priority, max_attempts and expiry if it is waiting (see the module doc).
    ``max_lateness`` (a positive timedelta or seconds) is how late the job may start: a worker
    that claims it after ``run_at + max_lateness`` does not run it but ends it ``expired``
    (requeued like a dead letter; docs/jobs.md, "Expiry"). Raises
    :class:`jobs.InvalidJob` naming the field for bad input, before anything is written.
    """
    params = _params(
        job_type, payload, queue, idempotency_key, organization_id, run_at, priority,
        max_attempts, now, unique_key, on_active, concurrency_key, max_lateness,
    )  # fmt: skip
    return (yield from _enqueue_steps(params))


enqueue, enqueue_async = forms(_enqueue, "enqueue")


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
    return enqueue_columns(conn, _build_columns(specs), now=validate.aware(now, "now"))


async def enqueue_many_async(
    conn: psycopg.AsyncConnection[Any],
    specs: Iterable[JobSpec | Mapping[str, Any]],
    *,
    now: datetime | None = None,
) -> list[Enqueued]:
    """:func:`enqueue_many` on an ``AsyncConnection``, in the caller's transaction: the same
    idempotency rules and the same path (see :func:`enqueue_columns`)."""
    columns = _build_columns(specs)
    return await enqueue_columns_async(conn, columns, now=validate.aware(now, "now"))


def enqueue_columns(
    conn: psycopg.Connection[Any],
    columns: JobColumns | Mapping[str, list[Any]],
    *,
    now: datetime | None = None,
) -> list[Enqueued]:
    """The insert behind :func:`enqueue_many`, for input validated already (no checks here).

    ``columns`` is a :class:`JobColumns` (or a mapping of its fields' names to lists). A batch
    with a unique key goes through ``INSERT ... SELECT FROM unnest``, never COPY, which has no
    ON CONFLICT. The scheduler uses it for occurrences of schedules it validated when they
    were created; anything else should call :func:`enqueue_many`.

    A batch goes in with one binary COPY. A batch with idempotency keys is copied inside a
    savepoint when no key repeats within it: if a key is taken already (or by a concurrent
    transaction that commits while we wait on it), the COPY fails on jobs_idempotency_uq, the
    savepoint rolls it back, and the batch goes through ``INSERT ... ON CONFLICT DO NOTHING``,
    whose lookup then returns the holder of each taken key.
    """
    typed = _typed(columns)  # the columns first: their errors name what the caller gave
    conn = sync_connection(conn)
    return on(conn, _columns_steps(typed, now, _in_transaction(conn)))


async def enqueue_columns_async(
    conn: psycopg.AsyncConnection[Any],
    columns: JobColumns | Mapping[str, list[Any]],
    *,
    now: datetime | None = None,
) -> list[Enqueued]:
    """:func:`enqueue_columns` on an ``AsyncConnection`` (input validated already)."""
    typed = _typed(columns)  # the columns first: their errors name what the caller gave
    conn = async_connection(conn)
    return await on_async(conn, _columns_steps(typed, now, _in_transaction(conn)))


def _typed(columns: JobColumns | Mapping[str, list[Any]]) -> JobColumns:
    if isinstance(columns, JobColumns):
        return columns
    try:
        return JobColumns(**columns)
    except TypeError as exc:  # a name that is not a column
        raise InvalidJob("columns", sorted(columns), str(exc)) from None


def _spec(item: JobSpec | Mapping[str, Any], index: int) -> JobSpec:
    if isinstance(item, JobSpec):
        return item
    if isinstance(item, Mapping):
        try:
            return JobSpec(**item)
        except TypeError as exc:
            raise InvalidJob(f"specs[{index}]", dict(item), str(exc)) from None
    raise InvalidJob(f"specs[{index}]", item, "must be a jobs.JobSpec or a mapping")


_PRIORITY_LOW, _PRIORITY_HIGH = validate.PRIORITY_RANGE


def _build_columns(specs: Iterable[JobSpec | Mapping[str, Any]]) -> JobColumns:
    """Validate ``specs`` into a :class:`JobColumns` (pure; shared by :func:`enqueue_many`
    and :func:`enqueue_many_async`)."""
    if isinstance(specs, str | bytes | Mapping) or not isinstance(specs, Iterable):
        # A JobSpec or a mapping alone would be read as its fields or keys; 5 raised TypeError.
        raise InvalidJob("specs", specs, "must be a list of jobs.JobSpec or mappings")
    # The checks of jobs.validate, in its order, with a fast path for the common values: a
    # queue or job type is checked once per call, not once per spec, and a value that fails
    # the fast test goes to the validator, which accepts it or raises its own message.
    ckeys: list[str | None] = []
    uniques: list[str | None] = []
    actives: list[OnActive] = []
    lates: list[timedelta | None] = []
    columns = JobColumns(
        concurrency_keys=ckeys, unique_keys=uniques, on_active=actives, max_latenesses=lates
    )
    organization_ids = columns.organization_ids.append
    queues = columns.queues.append
    job_types = columns.job_types.append
    payloads = columns.payloads.append
    keys = columns.idempotency_keys.append
    priorities = columns.priorities.append
    run_ats = columns.run_ats.append
    attempts = columns.max_attempts.append
    concurrency_keys = ckeys.append
    unique_keys = uniques.append
    on_actives = actives.append
    latenesses = lates.append
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
            lateness = spec.max_lateness
            if lateness is not None:
                lateness = validate.max_lateness(lateness)
        except InvalidJob as exc:
            field = f"specs[{index}].{exc.field}"
            raise InvalidJob(field, exc.value, exc.reason) from None
        organization_ids(org)
        queues(queue)
        job_types(job_type)
        payloads(payload)
        keys(key)
        priorities(priority)
        run_ats(run_at)
        attempts(max_attempts)
        concurrency_keys(ckey)
        unique_keys(unique)
        on_actives(on_active)
        latenesses(lateness)
    if lates.count(None) == len(lates):
        columns.max_latenesses = None  # no job has one: no column to send
    return columns


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
_COPY_TRACE_TYPES = ("text", "text")  # traced: trace_parent, trace_state
_COPY_EXPIRY_TYPES = ("timestamptz",)  # expiring: expires_at

Trace = tuple[str | None, str | None]


class _JsonbTextBinaryDumper(Dumper):
    """JSON text in jsonb's binary format: a version byte, then the text.

    psycopg's own jsonb dumper would encode the text again, as a JSON string.
    """

    format = Format.BINARY
    oid = _JSONB_OID

    def dump(self, obj: Any) -> bytes:
        text: str = obj
        return b"\x01" + text.encode()


def _in_transaction(conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any]) -> bool:
    """Whether the next statement runs inside a transaction (the caller's, or one psycopg opens
    for it): its NOTIFY is then delivered at commit, so the wake can go before the rows."""
    return not conn.autocommit or conn.info.transaction_status != TransactionStatus.IDLE


def _columns_steps(columns: JobColumns, now: datetime | None, early: bool) -> Steps[list[Enqueued]]:
    """A batch (see :func:`enqueue_columns`). ``early``: the caller's transaction (or one
    psycopg opens) is open at the first statement, so the queues are woken by it."""
    n = len(columns)
    if not n:
        return []
    # The first statement, so that the caller's transaction (if any) is open before the
    # savepoint: conn.transaction() on an idle connection would begin and commit a transaction
    # of its own.
    rows = yield query("job_allocate_ids"), {"now": now, "n": n, **_wake_params(columns, early)}
    db_now: datetime = rows[0][0]
    ids: list[int] = rows[0][1]
    run_ats: list[datetime] = [db_now if at is None else at for at in columns.run_ats]
    trace = tracing.capture()  # one context for the batch: the span it was enqueued in
    if columns.unique_keys is not None and columns.unique_keys.count(None) != n:
        return (yield from _insert_unique_steps(ids, columns, run_ats, db_now, trace))
    defaults = _all_defaults(columns, n, now) and trace[0] is None
    copy = _copy(ids, columns, run_ats, db_now, defaults=defaults, trace=trace)
    if columns.idempotency_keys.count(None) == n:
        yield copy
    elif _repeats_a_key(columns) or not (yield from _copied_unless_taken(copy)):
        return (yield from _insert_steps(ids, columns, run_ats, db_now, trace))
    else:
        keyed = [i for i, key in enumerate(columns.idempotency_keys) if key is not None]
        held = yield from _settle_keys_steps(
            [ids[i] for i in keyed],
            [columns.organization_ids[i] for i in keyed],
            [columns.job_types[i] for i in keyed],
            [columns.idempotency_keys[i] for i in keyed],
        )
        if held:
            results = [Enqueued(job_id, True) for job_id in ids]
            for index, holder in held.items():
                results[keyed[index]] = Enqueued(holder, False)
            if not early:
                yield from _wake_steps(
                    [q for q, r in zip(columns.queues, results, strict=True) if r.created],
                    [at for at, r in zip(run_ats, results, strict=True) if r.created],
                    db_now,
                )
            return results
    if not early:
        yield from _wake_steps(columns.queues, run_ats, db_now)
    return [Enqueued(job_id, True) for job_id in ids]


def existing_by_keys_steps(
    organization_ids: list[Any], job_types: list[str], idempotency_keys: list[str]
) -> Steps[dict[int, int]]:
    """The jobs that already hold some of a batch of idempotency keys (parallel lists, checked
    by the caller): ``{index: job id}``, index from 0. A job keeps its key whatever its status."""
    if not idempotency_keys:
        return {}
    params = {
        "organization_ids": organization_ids,
        "job_types": job_types,
        "idempotency_keys": idempotency_keys,
    }
    return {
        int(ordinal) - 1: job_id
        for ordinal, job_id in (yield query("job_find_many_by_key"), params)
    }


def _copied_unless_taken(copy: Copy) -> Steps[bool]:
    """``copy`` in a savepoint: False when it failed on an idempotency key taken already (it
    is rolled back; the caller falls back to the INSERT, outside this handler)."""
    try:
        yield Savepoint(one(copy))
    except psycopg.errors.UniqueViolation as exc:
        if exc.diag.constraint_name != _KEY_CONSTRAINT:
            raise
        return False
    return True


def _repeats_a_key(columns: JobColumns) -> bool:
    seen: set[tuple[Any, str, str]] = set()
    for org, job_type, key in zip(
        columns.organization_ids, columns.job_types, columns.idempotency_keys, strict=True
    ):
        if key is not None:
            scoped = (org, job_type, key)
            if scoped in seen:
                return True
            seen.add(scoped)
    return False


def _copy(
    ids: list[int],
    columns: JobColumns,
    run_ats: list[datetime],
    db_now: datetime,
    *,
    defaults: bool,
    trace: Trace,
) -> Copy:
    """COPY the batch: only the columns that differ from the table's defaults when every spec
    leaves the others at them (the cheapest rows to format and to parse), else all of them in
    binary format (no text formatting of timestamps), with the trace context when traced.
    The rows are iterators built in C (zip, map): no Python code runs per row."""
    if defaults:
        return Copy(
            query("job_copy_defaults"),
            zip(
                ids,
                columns.queues,
                columns.job_types,
                columns.payloads,
                columns.idempotency_keys,
                strict=True,
            ),
        )
    n = len(ids)
    traced = trace[0] is not None
    tail = (db_now, *trace) if traced else (db_now,)
    rows = zip(
        ids,
        columns.organization_ids,
        columns.queues,
        columns.job_types,
        columns.payloads,
        columns.idempotency_keys,
        columns.priorities,
        run_ats,
        columns.max_attempts,
        repeat(None, n) if columns.concurrency_keys is None else columns.concurrency_keys,
        strict=True,
    )
    lates = columns.max_latenesses
    full = map(operator.add, rows, repeat(tail, n))
    types: tuple[str, ...] = _COPY_TYPES + _COPY_TRACE_TYPES if traced else _COPY_TYPES
    if lates is not None:  # expires_at = run_at + max_lateness, last
        expires = [
            (None,) if late is None else (at + late,)
            for at, late in zip(run_ats, lates, strict=True)
        ]
        full = map(operator.add, full, expires)
        types += _COPY_EXPIRY_TYPES
    return Copy(
        variant("job_copy", traced=traced, expiring=lates is not None),
        full,
        types,
        _JsonbTextBinaryDumper,
    )


def _all_defaults(columns: JobColumns, n: int, now: datetime | None) -> bool:
    """Whether the database would fill every other column as we would: run_at and created_at
    with its clock (now() of this transaction, as job_allocate_ids read it), priority 0, the
    default max_attempts, no organization, no concurrency key."""
    return (
        now is None
        and columns.run_ats.count(None) == n
        and columns.organization_ids.count(None) == n
        and (columns.concurrency_keys is None or columns.concurrency_keys.count(None) == n)
        and (columns.max_latenesses is None or columns.max_latenesses.count(None) == n)
        and columns.priorities.count(0) == n
        and columns.max_attempts.count(DEFAULT_MAX_ATTEMPTS) == n
    )


def _wake_params(columns: JobColumns, early: bool) -> dict[str, list[Any]]:
    """The wake sent with ``job_allocate_ids`` (one round trip fewer per batch): each queue
    once, in a fixed order, with its earliest ``run_at`` (None: the database clock). Empty
    unless ``early``; then a batch whose keys all name existing jobs wakes its queues anyway (a
    wake-up is a hint, never the truth: the claim finds nothing new)."""
    if not early:
        return {"wake": [], "wake_ats": []}
    first: dict[str, datetime | None] = {}
    # A row with a unique key wakes its queue itself (_many_unique_steps), and only when it
    # was inserted or made a waiting job ready: a replaced job keeps its own queue.
    uniques = _or_none(columns.unique_keys, len(columns))
    for q, at, unique in zip(columns.queues, columns.run_ats, uniques, strict=True):
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


def _wake_steps(queues: list[str], run_ats: list[datetime], db_now: datetime) -> Steps[None]:
    """Notify the queues that received a job ready now (once per queue, in a fixed order)."""
    ready = sorted({q for q, at in zip(queues, run_ats, strict=True) if at <= db_now})
    if ready:
        yield query("job_wake_queues"), {"queues": ready}


def _insert_steps(
    ids: list[int],
    columns: JobColumns,
    run_ats: list[datetime],
    db_now: datetime,
    trace: Trace,
) -> Steps[list[Enqueued]]:
    """Insert what is free (``INSERT ... ON CONFLICT DO NOTHING``), then look up the holders of
    the keys that were taken."""
    params = {
        **columns.params(),
        "ids": ids,
        "run_ats": run_ats,
        "created_at": db_now,
        "trace_parent": trace[0],
        "trace_state": trace[1],
    }
    created = {row[0] for row in (yield query("job_enqueue_many"), params)}
    results: list[Enqueued | None] = [
        Enqueued(job_id, True) if job_id in created else None for job_id in ids
    ]
    keyed = [i for i, key in enumerate(columns.idempotency_keys) if key is not None]
    if keyed:
        # The keys finished jobs hold (job_history): a row inserted under one is deleted again,
        # a row that hit one in jobs finds its holder there if it moved meanwhile.
        held = yield from _settle_keys_steps(
            [ids[i] if ids[i] in created else None for i in keyed],
            [columns.organization_ids[i] for i in keyed],
            [columns.job_types[i] for i in keyed],
            [columns.idempotency_keys[i] for i in keyed],
        )
        for index, holder in held.items():
            created.discard(ids[keyed[index]])
            results[keyed[index]] = Enqueued(id=holder, created=False)
    missing = [i for i, r in enumerate(results) if r is None]
    if missing:
        holders = yield (
            query("job_find_many_by_key"),
            {
                "organization_ids": [columns.organization_ids[i] for i in missing],
                "job_types": [columns.job_types[i] for i in missing],
                "idempotency_keys": [columns.idempotency_keys[i] for i in missing],
            },
        )
        for ordinal, job_id in holders:
            results[missing[ordinal - 1]] = Enqueued(id=job_id, created=False)
    queues = columns.queues
    yield from _wake_steps(
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


def _split_unique(columns: JobColumns) -> tuple[list[int], list[int], dict[int, int]]:
    """The rows without a unique key; the first row of each (organization, type, key), which
    goes to the database, sorted by key; and every later row of a key, mapped to that first
    one (it gets the first one's job, as a repeated idempotency key does)."""
    orgs, job_types = columns.organization_ids, columns.job_types
    uniques = _or_none(columns.unique_keys, len(columns))
    plain: list[int] = []
    leaders: list[int] = []
    follows: dict[int, int] = {}
    first: dict[tuple[Any, str, str], int] = {}
    for i, (org, job_type, unique) in enumerate(zip(orgs, job_types, uniques, strict=True)):
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
    leaders.sort(key=lambda i: (job_types[i], uniques[i], "" if orgs[i] is None else str(orgs[i])))
    return plain, leaders, follows


def _insert_unique_steps(
    ids: list[int],
    columns: JobColumns,
    run_ats: list[datetime],
    db_now: datetime,
    trace: Trace,
) -> Steps[list[Enqueued]]:
    """A batch with unique keys: its rows without one through :func:`_insert_steps`
    (idempotency keys as always), the others through :func:`_many_unique_steps`; a row that
    repeats a key in the batch gets the job of the key's first row."""
    plain, leaders, follows = _split_unique(columns)
    results: list[Enqueued | None] = [None] * len(ids)
    if plain:
        done = yield from _insert_steps(
            [ids[i] for i in plain],
            columns.subset(plain),
            [run_ats[i] for i in plain],
            db_now,
            trace,
        )
        for i, r in zip(plain, done, strict=True):
            results[i] = r
    yield from _many_unique_steps(ids, columns, run_ats, db_now, leaders, results, trace)
    for i, leader in follows.items():
        first = results[leader]
        assert first is not None
        results[i] = Enqueued(first.id, False)
    found = [r for r in results if r is not None]
    assert len(found) == len(results)
    return found


def _many_unique_steps(
    ids: list[int],
    columns: JobColumns,
    run_ats: list[datetime],
    db_now: datetime,
    leaders: list[int],
    results: list[Enqueued | None],
    trace: Trace,
) -> Steps[None]:
    """The rows of a batch that lead their unique key, as :func:`_unique_steps` does for one
    job but one statement per step for all of them: insert, replace the waiting holders of the
    ``replace`` rows, look up the active holders of the others; the rows whose holder finished
    in between go round again. Fills ``results`` and wakes the queues of what was inserted or
    made ready by a replace."""

    def rows_of(rows: list[int]) -> dict[str, Any]:
        params = columns.subset(rows).params()
        params["ids"] = [ids[i] for i in rows]
        params["run_ats"] = [run_ats[i] for i in rows]
        return params

    queues = columns.queues
    on_active = ["keep"] * len(ids) if columns.on_active is None else columns.on_active
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
        replacing = [i for i in missing if on_active[i] == "replace"]
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
    yield from _wake_steps(woken, woken_at, db_now)
