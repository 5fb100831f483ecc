# ruff: noqa: E501 - tables of cases read best one case a line
"""Bad input through the API calls that touch the database: typed, field named, nothing written.

Invariant, for every case: the call raises ``InvalidInput`` naming the field (bounded message,
within the deadline of ``tests.bad_inputs``), and afterwards, in the same transaction, the
tables hold exactly what they held before: a fingerprint of every row of ``jobs``,
``schedules`` and ``schedule_skips`` is compared (a call that wrote and then raised, or that
sent a statement the server refused, fails the case). One database for the module, seeded
with a dead job, a pending job and a schedule, so that a requeue, cancel or update with a bad
argument would have something to change.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import psycopg
import pytest

import jobs
import scheduler
from scheduler.devdb import throwaway_database
from tests.bad_inputs import (
    BAD_INSTANTS,
    BAD_INT4,
    NOT_TEXT,
    NOW,
    NUL,
    SURROGATE,
    Case,
    check_accepted,
    check_refused,
)
from tests.unit.test_bad_inputs import SPEC_BAD

_FINGERPRINT = """
SELECT (SELECT md5(coalesce(string_agg(j::text, ',' ORDER BY id), '')) FROM jobs_all j),
       (SELECT md5(coalesce(string_agg(s::text, ',' ORDER BY id), '')) FROM schedules s),
       (SELECT md5(coalesce(string_agg(k::text, ',' ORDER BY id), '')) FROM schedule_skips k)
"""

Conn = psycopg.Connection[Any]
Call = Callable[[Conn], object]


@pytest.fixture(scope="module")
def module_url(server_url: str, template_db: str) -> Iterator[str]:
    with throwaway_database(server_url, f"tockwork_bad_{os.getpid()}", template=template_db) as url:
        yield url


@pytest.fixture(scope="module")
def seeded(module_url: str) -> dict[str, int]:
    """A dead job, a pending job and a schedule, committed."""
    with psycopg.connect(module_url) as conn:
        dead = jobs.enqueue(conn, "seed", {"n": 1}, now=NOW).id
        pending = jobs.enqueue(conn, "seed", {"n": 2}, now=NOW).id
        conn.execute(
            "UPDATE jobs SET status = 'dead', completed_at = %s, last_error_code = 'boom' WHERE id = %s",
            (NOW, dead),
        )
        schedule = scheduler.create_schedule(
            conn,
            job_type="reminder",
            rule="daily@08:00",
            zone="Europe/Paris",
            subject="u1",
            now=NOW,
        ).id
        conn.commit()
    return {"dead": dead, "pending": pending, "schedule": schedule}


@pytest.fixture(scope="module")
def db(module_url: str, seeded: dict[str, int]) -> Iterator[Conn]:
    with psycopg.connect(module_url) as conn:
        yield conn


# Calls on a connection: (id, call(conn), field).
DbCase = tuple[str, Call, str]


def _enqueue_field(field: str, value: Any) -> Call:
    args: dict[str, Any] = {"job_type": "t", "payload": {}, field: value}
    job_type, payload = args.pop("job_type"), args.pop("payload")
    return lambda conn: jobs.enqueue(conn, job_type, payload, **args)


def _enqueue_many_field(field: str, value: Any, as_spec: bool) -> Call:
    item: dict[str, Any] = {"job_type": "t", field: value}
    good: dict[str, Any] = {"job_type": "t", "payload": {"ok": 1}}
    if as_spec:
        return lambda conn: jobs.enqueue_many(conn, [jobs.JobSpec(**good), jobs.JobSpec(**item)])
    return lambda conn: jobs.enqueue_many(conn, [good, item])


def _enqueue_async_field(field: str, value: Any, url: Callable[[], str]) -> Call:
    args: dict[str, Any] = {field: value}
    job_type = args.pop("job_type", "t")
    payload = args.pop("payload", {})

    async def run() -> object:
        async with await psycopg.AsyncConnection.connect(url()) as aconn:
            return await jobs.enqueue_async(aconn, job_type, payload, **args)

    return lambda conn: asyncio.run(run())


ENQUEUE_BAD: dict[str, list[tuple[str, Any]]] = {
    "job_type": [("nul", NUL), ("surrogate", SURROGATE), ("empty", ""), ("long", "t" * 201), ("int", 5), ("none", None)],
    "payload": [*SPEC_BAD["payload"][3:], ("nul-text", "a\x00b"), ("surrogate-text", SURROGATE)],
    "queue": SPEC_BAD["queue"],
    "idempotency_key": [("empty", ""), ("long", "k" * 513), ("nul", NUL), ("surrogate", SURROGATE), ("int", 5), ("list", ["k"])],
    "organization_id": SPEC_BAD["organization_id"],
    "unique_key": [("empty", ""), ("long", "k" * 513), ("nul", NUL), ("surrogate", SURROGATE), ("int", 5), ("list", ["k"])],
    "on_active": [("word", "always"), ("upper", "KEEP"), ("int", 1), ("none", None), ("replace-without-key", "replace")],
    "run_at": BAD_INSTANTS,
    "priority": [("high", 1001), ("low", -1001), *BAD_INT4[:6], ("nan", float("nan"))],
    "max_attempts": [("zero", 0), ("over", 1001), *BAD_INT4[:6]],
    "concurrency_key": [("empty", ""), ("long", "k" * 513), ("nul", NUL), ("surrogate", SURROGATE), ("int", 5), ("list", ["k"])],
    "max_lateness": [("zero", 0), ("negative", -1), ("negative-td", timedelta(seconds=-1)), ("nan", float("nan")), ("inf", float("inf")), ("text", "1h"), ("bool", True), ("over", timedelta(days=367))],
    "now": BAD_INSTANTS,
}  # fmt: skip

_URL: list[str] = []


def _enqueue_cases() -> list[DbCase]:
    cases: list[DbCase] = []
    for field, values in ENQUEUE_BAD.items():
        for name, value in values:
            if field == "now":
                cases.append((f"enqueue-now-{name}", _now_call(value), "now"))
                continue
            if field == "job_type" and value is None:
                continue
            cases.append((f"enqueue-{field}-{name}", _enqueue_field(field, value), field))
            cases.append(
                (
                    f"enqueue_many-{field}-{name}",
                    _enqueue_many_field(field, value, False),
                    f"specs[1].{field}",
                )
            )
            cases.append(
                (
                    f"enqueue_many-spec-{field}-{name}",
                    _enqueue_many_field(field, value, True),
                    f"specs[1].{field}",
                )
            )
            if field in (
                "payload",
                "queue",
                "priority",
                "organization_id",
                "unique_key",
                "on_active",
            ):
                cases.append(
                    (
                        f"enqueue_async-{field}-{name}",
                        _enqueue_async_field(field, value, lambda: _URL[0]),
                        field,
                    )
                )
    cases += [
        ("enqueue_many-not-a-spec", _call(jobs.enqueue_many, [5]), "specs[0]"),
        (
            "enqueue_many-unknown-field",
            lambda conn: jobs.enqueue_many(conn, [{"job_type": "t", "colour": 1}]),
            "specs[0]",
        ),
        # Not a connection, not a list of specs (issue 26: AttributeError, TypeError).
        ("enqueue-conn-text", lambda conn: jobs.enqueue(_NOT_CONN, "t", {}), "conn"),
        ("enqueue-conn-none", lambda conn: jobs.enqueue(_NONE, "t", {}), "conn"),
        ("enqueue-conn-cursor", lambda conn: jobs.enqueue(_any(conn.cursor()), "t", {}), "conn"),
        (
            "enqueue_async-conn-sync",
            lambda conn: asyncio.run(jobs.enqueue_async(_any(conn), "t", {})),
            "conn",
        ),
        (
            "enqueue_many-conn-text",
            lambda conn: jobs.enqueue_many(_NOT_CONN, [{"job_type": "t"}]),
            "conn",
        ),
        ("requeue-conn-text", lambda conn: jobs.requeue(_NOT_CONN, ids=[1]), "conn"),
        (
            "create_schedule-conn-text",
            lambda conn: scheduler.create_schedule(
                _NOT_CONN, job_type="t", rule="daily@08:00", zone="UTC"
            ),
            "conn",
        ),
        ("enqueue_many-specs-int", _call(jobs.enqueue_many, 5), "specs"),
        ("enqueue_many-specs-none", _call(jobs.enqueue_many, None), "specs"),
        ("enqueue_many-specs-text", _call(jobs.enqueue_many, "t"), "specs"),
        ("enqueue_many-specs-mapping", _call(jobs.enqueue_many, {"job_type": "t"}), "specs"),
        (
            "enqueue_many-now",
            _call(jobs.enqueue_many, [{"job_type": "t"}], now="today"),
            "now",
        ),
    ]
    return cases


_NOT_CONN: Any = "not a connection"
_NONE: Any = None


def _any(value: object) -> Any:
    return value


def _now_call(value: Any) -> Call:
    return lambda conn: jobs.enqueue(conn, "t", {}, now=value)


def _admin_cases() -> list[DbCase]:
    ids = [
        ("int8", [2**63]),
        ("zero", [0]),
        ("negative", [-1]),
        ("text", ["1"]),
        ("bool", [True]),
        ("float", [1.5]),
        ("not-a-list", 5),
        ("a-str", "12"),
        ("none-in", [None]),
    ]
    texts = [("nul", NUL), ("surrogate", SURROGATE), ("megabyte", "r" * 1_000_000), ("int", 5)]
    statuses = [
        ("word", ["zombie"]),
        ("not-a-list", "dead"),
        ("int", [5]),
        ("leased", ["leased"]),
        ("unhashable", [[]]),
    ]
    cases: list[DbCase] = []
    for name, value in ids:
        cases.append((f"requeue-ids-{name}", _admin("requeue", ids=value), "ids"))
        cases.append((f"cancel-ids-{name}", _admin("cancel", ids=value), "ids"))
    for name, value in texts:
        cases.append((f"cancel-reason-{name}", _admin("cancel", ids=[1], reason=value), "reason"))
        cases.append(
            (f"requeue-error_code-{name}", _admin("requeue", error_code=value), "error_code")
        )
        cases.append(
            (f"cancel-error_code-{name}", _admin("cancel", error_code=value), "error_code")
        )
        cases.append(
            (f"list_jobs-error_code-{name}", _admin("list_jobs", error_code=value), "error_code")
        )
        cases.append((f"requeue-job_type-{name}", _admin("requeue", job_type=value), "job_type"))
        cases.append((f"requeue-queue-{name}", _admin("requeue", queue=value), "queue"))
    for name, value in statuses:
        cases.append(
            (f"requeue-statuses-{name}", _admin("requeue", ids=[1], statuses=value), "statuses")
        )
        cases.append(
            (f"cancel-statuses-{name}", _admin("cancel", ids=[1], statuses=value), "statuses")
        )
        if name != "leased":  # list_jobs lists any status
            cases.append(
                (f"list_jobs-statuses-{name}", _admin("list_jobs", statuses=value), "statuses")
            )
    for name, value in BAD_INSTANTS:
        cases.append(
            (f"requeue-since-{name}", _admin("requeue", queue="default", since=value), "since")
        )
        cases.append(
            (f"requeue-until-{name}", _admin("requeue", queue="default", until=value), "until")
        )
        cases.append((f"requeue-now-{name}", _admin("requeue", ids=[1], now=value), "now"))
        cases.append((f"cancel-now-{name}", _admin("cancel", ids=[1], now=value), "now"))
        cases.append((f"queue_stats-now-{name}", _admin("queue_stats", now=value), "now"))
    for name, value in [
        ("zero", 0),
        ("negative", -1),
        ("huge", 2**63),
        ("float", 2.5),
        ("text", "10"),
        ("bool", True),
    ]:
        cases.append((f"list_jobs-limit-{name}", _admin("list_jobs", limit=value), "limit"))
    for name, value in [
        ("int8", 2**63),
        ("zero", 0),
        ("text", "abc"),
        ("none", None),
        ("float", 1.0),
    ]:
        cases.append((f"get_job-{name}", _call(jobs.get_job, value), "ids"))
        cases.append((f"job_attempts-{name}", _call(jobs.job_attempts, value), "ids"))
    cases += [
        (
            "requeue-window-backwards",
            _admin("requeue", queue="default", since=NOW, until=NOW - timedelta(days=30)),
            "until",
        ),
        ("requeue-window-empty", _admin("requeue", queue="default", since=NOW, until=NOW), "until"),
        ("requeue-no-filter", _admin("requeue"), "filter"),
        ("cancel-no-filter", _admin("cancel"), "filter"),
    ]
    return cases


def _admin(name: str, **kwargs: Any) -> Call:
    return _call(getattr(jobs, name), **kwargs)


def _call(fn: Callable[..., object], *args: Any, **kwargs: Any) -> Call:
    return lambda conn: fn(conn, *args, **kwargs)


def _on_seed(fn: Callable[..., object], **kwargs: Any) -> Call:
    """``fn(conn, <the seeded schedule's id>, **kwargs)``."""
    return lambda conn: fn(conn, _SEED[0], **kwargs)


def _schedule_cases() -> list[DbCase]:
    base = {"job_type": "reminder", "rule": "daily@08:00", "zone": "UTC", "subject": "u2"}
    cases: list[DbCase] = []
    for field, values in SPEC_BAD.items():
        for name, value in values:
            item = {**base, field: value}
            cases.append((f"create_schedule-{field}-{name}", _create(item), field))
            cases.append(
                (
                    f"create_schedules-{field}-{name}",
                    _create_many([base | {"subject": "u3"}, item]),
                    f"items[1].{field}",
                )
            )
            if field in scheduler.ScheduleSpec.updatable():
                cases.append((f"update_schedule-{field}-{name}", _update(field, value), field))
    ids = [
        ("text", "abc"),
        ("zero", 0),
        ("negative", -5),
        ("int8", 2**63),
        ("float", 1.5),
        ("bool", True),
        ("none", None),
        ("list", [1]),
    ]
    for name, value in ids:
        cases.append(
            (
                f"update_schedule-id-{name}",
                _call(scheduler.update_schedule, value, jitter=5),
                "schedule_id",
            )
        )
        cases.append((f"pause-id-{name}", _call(scheduler.pause, value), "schedule_id"))
        cases.append((f"resume-id-{name}", _call(scheduler.resume, value), "schedule_id"))
        cases.append((f"delete-id-{name}", _call(scheduler.delete, value), "schedule_id"))
        if value is not None:
            cases.append(
                (f"get_schedule-id-{name}", _call(scheduler.get_schedule, value), "schedule_id")
            )
    for name, value in BAD_INSTANTS:
        cases.append((f"create_schedule-now-{name}", _create(base, now=value), "now"))
        cases.append(
            (
                f"update_schedule-now-{name}",
                _on_seed(scheduler.update_schedule, jitter=5, now=value),
                "now",
            )
        )
        cases.append((f"pause-now-{name}", _on_seed(scheduler.pause, now=value), "now"))
    for name, value in [("nul", NUL), ("surrogate", SURROGATE), ("long", "k" * 201), *NOT_TEXT]:
        cases.append((f"get_schedule-key-{name}", _call(scheduler.get_schedule, key=value), "key"))
    for name, value in [("zero", 0), ("huge", 2**63), ("text", "5"), ("bool", False)]:
        cases.append(
            (f"list_schedules-limit-{name}", _call(scheduler.list_schedules, limit=value), "limit")
        )
    cases += [
        (
            "list_schedules-source",
            lambda conn: scheduler.list_schedules(conn, source="cli"),
            "source",
        ),
        (
            "list_schedules-subject",
            lambda conn: scheduler.list_schedules(conn, subject=NUL),
            "subject",
        ),
        (
            "list_schedules-organization",
            lambda conn: scheduler.list_schedules(conn, organization_id="x"),
            "organization_id",
        ),
        ("create_schedules-not-a-list", _call(scheduler.create_schedules, 5), "items"),
        (
            "create_schedules-item-int",
            _call(scheduler.create_schedules, [5]),
            "items[0]",
        ),
        (
            "update_schedule-unknown",
            lambda conn: scheduler.update_schedule(conn, _SEED[0], colour=1),
            "colour",
        ),
        (
            "update_schedule-key",
            lambda conn: scheduler.update_schedule(conn, _SEED[0], key="k"),
            "key",
        ),
        # A once: rule in the past can never fire: a new schedule with one is refused (issue 26).
        (
            "create_schedule-once-past",
            _create({**base, "rule": "once:2001-01-01T00:00"}, now=NOW),
            "rule",
        ),
        (
            "create_schedule-once-just-past",
            _create({**base, "rule": "once:2026-03-01T11:59"}, now=NOW),
            "rule",
        ),
        (
            "create_schedules-once-past",
            _call(
                scheduler.create_schedules,
                [base, {**base, "rule": "once:2001-01-01T00:00"}],
                now=NOW,
            ),
            "items[1].rule",
        ),
        (
            "update_schedule-interval-zero",
            lambda conn: scheduler.update_schedule(
                conn, _SEED[0], rule="rrule:FREQ=DAILY;INTERVAL=0"
            ),
            "rule",
        ),
    ]
    return cases


_SEED: list[int] = []


def _create(item: dict[str, Any], **kwargs: Any) -> Call:
    return lambda conn: scheduler.create_schedule(conn, **item, **kwargs)


def _create_many(items: list[dict[str, Any]]) -> Call:
    return lambda conn: scheduler.create_schedules(conn, items)


def _update(field: str, value: Any) -> Call:
    return lambda conn: scheduler.update_schedule(conn, _SEED[0], **{field: value})


def _ensure(**kwargs: Any) -> Call:
    from jobs import partitions

    return lambda conn: partitions.ensure_partitions(conn, partitions.ATTEMPTS, **kwargs)


def _drop(keep: Any) -> Call:
    from jobs import partitions

    return lambda conn: partitions.drop_partitions(conn, partitions.ATTEMPTS, keep=keep, now=NOW)


def _partition_cases() -> list[DbCase]:
    """The history's day partitions (jobs.partitions): refused before any DDL is sent."""
    from jobs import partitions

    aheads = [("negative", -1), ("too-far", 367), ("text", "7"), ("bool", True), ("float", 1.5)]
    keeps = [("negative", timedelta(days=-1)), ("int", 3), ("none", None)]
    nows = [("naive", NOW.replace(tzinfo=None)), ("text", "2026-01-01")]
    return [
        *[
            (f"partitions-ahead-{n}", _ensure(ahead_days=v, now=NOW), "ahead_days")
            for n, v in aheads
        ],
        *[(f"partitions-keep-{n}", _drop(v), "keep") for n, v in keeps],
        *[(f"partitions-now-{n}", _ensure(now=v), "now") for n, v in nows],
        ("partitions-prepare-in-transaction", partitions.prepare, "conn"),
    ]


DB_CASES: list[DbCase] = [
    *_enqueue_cases(), *_admin_cases(), *_schedule_cases(), *_partition_cases()
]  # fmt: skip


def test_the_table_is_large(capsys: pytest.CaptureFixture[str]) -> None:
    ids = [c[0] for c in DB_CASES]
    assert len(set(ids)) == len(ids), "case ids must be unique"
    assert len(DB_CASES) >= 1000
    with capsys.disabled():  # shown in every run, -q included
        print(f"\n{len(DB_CASES)} generated bad inputs through the database API")


@pytest.mark.parametrize("index", range(len(DB_CASES)), ids=[c[0] for c in DB_CASES])
def test_bad_input_is_refused_and_nothing_is_written(
    index: int, db: Conn, module_url: str, seeded: dict[str, int]
) -> None:
    name, call, field = DB_CASES[index]
    _URL[:] = [module_url]
    _SEED[:] = [seeded["schedule"]]
    before = db.execute(_FINGERPRINT).fetchone()
    try:
        check_refused(Case(name, lambda: call(db), field))
        after = db.execute(_FINGERPRINT).fetchone()  # fails if a statement broke the transaction
        assert after == before, "a row was written or changed"
    finally:
        db.rollback()


def _missing(conn: Conn) -> object:
    with pytest.raises(scheduler.ScheduleNotFound):
        scheduler.get_schedule(conn, 2**63 - 1)
    return None


@pytest.mark.parametrize(
    ("name", "call"),
    [
        ("payload-backslash-u0000", lambda conn: jobs.enqueue(conn, "t", {"a": "\\u0000"})),
        (
            "key-unicode",
            lambda conn: jobs.enqueue(conn, "t", idempotency_key="caf\u00e9\U0001f600"),
        ),
        (
            "many-key-unicode",
            lambda conn: jobs.enqueue_many(conn, [{"job_type": "t", "idempotency_key": "\u00e9"}]),
        ),
        (
            "bounds",
            lambda conn: jobs.enqueue(conn, "t", queue="q" * 63, priority=1000, max_attempts=1000),
        ),
        ("requeue-max-id", lambda conn: jobs.requeue(conn, ids=[2**63 - 1])),
        (
            "requeue-window",
            lambda conn: jobs.requeue(
                conn, queue="default", since=NOW - timedelta(days=30), until=NOW
            ),
        ),
        ("cancel-reason-200", lambda conn: jobs.cancel(conn, ids=[2**63 - 1], reason="r" * 200)),
        (
            "create-edges",
            lambda conn: scheduler.create_schedule(
                conn,
                job_type="r",
                rule="weekly:Monday@08:00",
                zone="UTC",
                subject=7,
                jitter=86_400,
                catch_up_max=1_000_000,
                quiet_hours={"start": "22:00", "end": "07:00"},
                paused=False,
            ),
        ),
        (
            "create-leap-rrule",
            lambda conn: scheduler.create_schedule(
                conn,
                job_type="r",
                rule="rrule:FREQ=YEARLY;BYMONTH=2;BYMONTHDAY=29",
                zone="UTC",
                subject="leap",
            ),
        ),
        ("get-max-id-missing", _missing),
        (
            "create-once-past-allowed",
            lambda conn: scheduler.create_schedule(
                conn, job_type="r", rule="once:2001-01-01T00:00", zone="UTC", allow_past=True
            ),
        ),
        (
            "create-once-future",
            lambda conn: scheduler.create_schedule(
                conn, job_type="r", rule="once:2026-03-01T12:01", zone="UTC", now=NOW
            ),
        ),
    ],
)
def test_valid_edge_input_is_accepted(name: str, call: Call, db: Conn) -> None:
    try:
        check_accepted(lambda: call(db))
    finally:
        db.rollback()


def test_the_fingerprint_sees_a_write_and_an_update(db: Conn, seeded: dict[str, int]) -> None:
    """The check above can fail: an insert, or an update of one column, changes it."""
    try:
        before = db.execute(_FINGERPRINT).fetchone()
        jobs.enqueue(db, "t", {})
        assert db.execute(_FINGERPRINT).fetchone() != before
        db.rollback()
        before = db.execute(_FINGERPRINT).fetchone()
        db.execute("UPDATE schedules SET jitter_seconds = 7 WHERE id = %s", (seeded["schedule"],))
        assert db.execute(_FINGERPRINT).fetchone() != before
    finally:
        db.rollback()
