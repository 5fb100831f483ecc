"""Creating and changing schedules, inside the caller's transaction.

Every function validates its input first, through :class:`scheduler.spec.ScheduleSpec` (where
the fields are declared, once), and raises :class:`scheduler.InvalidSchedule` naming the field;
nothing is written then.

Changing when a schedule fires (rule, zone, policies, quiet hours, jitter), pausing or deleting
it at instant T *supersedes* the occurrences it had enqueued ahead of time whose instant is
after T: their waiting jobs are cancelled and their idempotency keys freed, and the next
occurrence is recomputed from T in the new configuration. Occurrences at or before T are
history. Because the idempotency key of an occurrence is its *local* slot (``2026-06-01T08:00``),
a user who flies west and changes zone never gets the same local day's reminder twice: the
new zone's occurrence for a local day that was already enqueued finds the existing job.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg

import jobs
from jobs import validate as job_validate
from scheduler.errors import InvalidSchedule, ScheduleExists, ScheduleNotFound
from scheduler.model import CatchUp, QuietHours, Schedule, schedule_from_row
from scheduler.planner import next_occurrence
from scheduler.queries import database_now, query
from scheduler.spec import (
    INPUT_ERRORS,
    ScheduleSpec,
    check_key,
    check_source,
    check_subject,
    wrap,
)
from timezones import (
    FoldPolicy,
    GapPolicy,
    Occurrence,
    Rule,
    next_after,
    occurrences,
    rule_to_json,
    tzdb_version,
)

_UNSET: Any = object()


MAX_LIST = 100_000
MAX_PREVIEW = 10_000
_ID_MAX = 2**63 - 1


def _now(conn: psycopg.Connection[Any], now: datetime | None) -> datetime:
    if now is not None:
        return _aware("now", now)
    return database_now(conn)


def _aware(field: str, value: Any) -> datetime:
    if not isinstance(value, datetime):
        raise InvalidSchedule(field, value, "must be an aware datetime")
    if value.tzinfo is None or value.utcoffset() is None:
        raise InvalidSchedule(field, value, "must be timezone-aware")
    try:
        return value.astimezone(UTC)
    except OverflowError:
        raise InvalidSchedule(field, value, "is outside the years 1-9999 in UTC") from None


def _schedule_id(value: Any) -> int:
    """A schedule id is a positive bigint; checked before any statement (and any row lock)."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= _ID_MAX:
        raise InvalidSchedule("schedule_id", value, f"must be an integer from 1 to {_ID_MAX}")
    return value


# The lookups (get_schedule, list_schedules) check their filters with the spec's checks.
def _wrap(field: str, value: Any, fn: Any) -> Any:
    return wrap(field, value, fn)


def _subject(value: Any) -> str | None:
    return check_subject(value)


def _check_policies(rule: Rule, zone: str, gap: str | None, fold: str | None, now: datetime) -> Any:
    """Resolve the first occurrence; this also proves the rule, zone and policies fit."""
    try:
        return next_after(rule, zone, now, gap=gap, fold=fold)
    except INPUT_ERRORS as exc:
        # The rule's JSON form only when it is needed: it costs as much as the check.
        raise InvalidSchedule("rule", rule_to_json(rule), str(exc)) from None


def create_schedule(
    conn: psycopg.Connection[Any],
    *,
    job_type: str,
    rule: Rule | str | Mapping[str, Any],
    zone: str,
    payload: Mapping[str, Any] | None = None,
    queue: str = "default",
    key: str | None = None,
    subject: str | int | None = None,
    organization_id: Any = None,
    jitter: timedelta | float = 0,
    catch_up: CatchUp | str | None = None,
    catch_up_grace: timedelta | float | None = None,
    catch_up_max: int = 100,
    quiet_hours: QuietHours | Mapping[str, Any] | None = None,
    gap: GapPolicy | str | None = None,
    fold: FoldPolicy | str | None = None,
    paused: bool = False,
    source: str = "api",
    now: datetime | None = None,
) -> Schedule:
    """Create a schedule in the caller's transaction; its first occurrence is strictly after now.

    ``catch_up`` defaults to ``latest`` for reminders and ``all`` for named definitions (``key``
    set, no ``subject``). Raises :class:`ScheduleExists` if ``key`` is taken in the organization.
    """
    # The keyword parameters are ScheduleSpec's fields, spelled out for callers and type
    # checkers (tests/unit/scheduler/test_spec.py keeps the two the same).
    fields = {name: value for name, value in locals().items() if name in ScheduleSpec.model_fields}
    at = _now(conn, now)
    params = _prepare_create(ScheduleSpec.validated(fields), at, tzdb_version())
    row = conn.execute(query("schedule_insert"), params).fetchone()
    if row is None:
        raise ScheduleExists(params["key"])
    return get_schedule(conn, row[0])


def create_schedules(
    conn: psycopg.Connection[Any],
    items: Iterable[Mapping[str, Any]],
    *,
    now: datetime | None = None,
) -> list[int]:
    """Create many schedules at once (the keyword arguments of :func:`create_schedule` each).

    Every item is validated before anything is written (an error names ``items[i].field``);
    the rows go to the server in one pipeline. Returns the new ids in order. Raises
    :class:`ScheduleExists` if a key is taken (then nothing of the call is kept only if the
    caller rolls back: it runs in the caller's transaction).
    """
    if isinstance(items, str | bytes | Mapping) or not isinstance(items, Iterable):
        raise InvalidSchedule("items", items, "must be a list of schedule mappings")
    at = _now(conn, now)
    rows: list[dict[str, Any]] = []
    tzdb = tzdb_version()
    for index, item in enumerate(items):
        try:
            spec = ScheduleSpec.validated(item)
            rows.append(_prepare_create(spec, at, tzdb))
        except InvalidSchedule as exc:
            raise InvalidSchedule(f"items[{index}].{exc.field}", exc.value, exc.reason) from None
    if not rows:
        return []
    with conn.cursor() as cur:
        cur.executemany(query("schedule_insert"), rows, returning=True)
        ids: list[int] = []
        index = 0
        while True:
            row = cur.fetchone()
            if row is None:
                raise ScheduleExists(rows[index]["key"])
            ids.append(row[0])
            index += 1
            if not cur.nextset():
                break
    return ids


def _prepare_create(spec: ScheduleSpec, at: datetime, tzdb: str) -> dict[str, Any]:
    first = _check_policies(spec.rule, spec.zone, spec.gap, spec.fold, at)
    params = spec.params()
    params.update(
        cursor_at=at,
        next_run_at=first.at if first else None,
        next_key=first.key if first else None,
        tzdb=tzdb,
        now=at,
    )
    return params


def get_schedule(
    conn: psycopg.Connection[Any],
    schedule_id: int | None = None,
    *,
    key: str | None = None,
    organization_id: Any = None,
    for_update: bool = False,
) -> Schedule:
    """One schedule by id, or by ``key`` within an organization."""
    name = "schedule_get_for_update" if for_update else "schedule_get"
    if schedule_id is not None:
        _schedule_id(schedule_id)
        params = {"id": schedule_id, "key": None, "organization_id": None}
        row = conn.execute(query(name), params).fetchone()
        if row is None:
            raise ScheduleNotFound(f"with id {schedule_id}")
        return schedule_from_row(tuple(row))
    if key is None:
        raise InvalidSchedule("key", None, "give a schedule id or a key")
    check_key(key)
    org = _wrap(
        "organization_id", organization_id, lambda: job_validate.organization_id(organization_id)
    )
    row = conn.execute(query(name), {"id": None, "key": key, "organization_id": org}).fetchone()
    if row is None:
        raise ScheduleNotFound(f"with key {key!r}")
    return schedule_from_row(tuple(row))


def list_schedules(
    conn: psycopg.Connection[Any],
    *,
    organization_id: Any = _UNSET,
    subject: str | int | None = None,
    source: str | None = None,
    limit: int = 1000,
) -> list[Schedule]:
    """Schedules, optionally of one organization, one subject or one source; by id."""
    by_organization = organization_id is not _UNSET
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIST:
        raise InvalidSchedule("limit", limit, f"must be an integer from 1 to {MAX_LIST}")
    if source is not None:
        check_source(source)
    params = {
        "by_organization": by_organization,
        "organization_id": _wrap(
            "organization_id",
            organization_id,
            lambda: job_validate.organization_id(organization_id),
        )
        if by_organization
        else None,
        "subject": None if subject is None else _subject(subject),
        "source": source,
        "limit": limit,
    }
    rows = conn.execute(query("schedule_list"), params).fetchall()
    return [schedule_from_row(tuple(r)) for r in rows]


def _supersede(conn: psycopg.Connection[Any], schedule: Schedule, at: datetime, reason: str) -> int:
    """Cancel the jobs enqueued ahead for occurrences after ``at``; record them; return count."""
    if schedule.last_occurrence_at is None or schedule.last_occurrence_at <= at:
        return 0
    ahead = list(
        occurrences(
            schedule.rule,
            schedule.zone,
            at,
            until=schedule.cursor_at,
            gap=schedule.gap,
            fold=schedule.fold,
        )
    )
    if not ahead:
        return 0
    keys = [occurrence_idempotency_key(schedule.id, o.key) for o in ahead]
    cancelled = jobs.supersede(
        conn,
        job_type=schedule.job_type,
        idempotency_keys=keys,
        organization_id=schedule.organization_id,
        reason=reason,
        suffix=f"~superseded:v{schedule.version}",
        now=at,
    )
    conn.execute(
        query("schedule_skip_record"),
        {
            "ids": [schedule.id] * len(ahead),
            "keys": [o.key for o in ahead],
            "ats": [o.at for o in ahead],
            "kinds": ["superseded"] * len(ahead),
            "reasons": [reason] * len(ahead),
            "now": at,
        },
    )
    return len(cancelled)


def occurrence_idempotency_key(schedule_id: int, occurrence_key: str) -> str:
    """The idempotency key of one occurrence's job: the same in every replica, every time."""
    return f"schedule:{schedule_id}:{occurrence_key}"


def update_schedule(
    conn: psycopg.Connection[Any],
    schedule_id: int,
    *,
    now: datetime | None = None,
    **changes: Any,
) -> Schedule:
    """Change a schedule in the caller's transaction.

    ``changes`` takes the keyword arguments of :func:`create_schedule` (except ``key`` and
    ``organization_id``). A change of timing (rule, zone, gap, fold, quiet_hours, jitter)
    supersedes the occurrences enqueued ahead of ``now`` and recomputes the next one from
    ``now`` in the new configuration.
    """
    _schedule_id(schedule_id)
    allowed = ScheduleSpec.updatable()
    unknown = set(changes) - allowed
    if unknown:
        raise InvalidSchedule(sorted(unknown)[0], changes[sorted(unknown)[0]], "cannot be changed")
    if now is not None:
        _aware("now", now)
    # Each value alone first, before the row lock is taken: a bad one (a rule that cannot
    # fire) is refused without holding up the scheduler. The whole is checked again below.
    settings = ScheduleSpec.settings()
    for name, value in changes.items():
        if not settings[name].with_data:
            settings[name].check(value)
    current = get_schedule(conn, schedule_id, for_update=True)
    return _apply(conn, current, changes, now, pause=None)


def _apply(
    conn: psycopg.Connection[Any],
    current: Schedule,
    changes: Mapping[str, Any],
    now: datetime | None,
    *,
    pause: bool | None,
) -> Schedule:
    at = _now(conn, now)
    before = ScheduleSpec.of(current)
    if "catch_up" in changes and changes["catch_up"] is None:
        # No catch-up policy given: the schedule keeps the one it has.
        changes = {name: value for name, value in changes.items() if name != "catch_up"}
    if pause is not None:
        changes = {**changes, "paused": pause}
    after = before.changed(changes)
    timing = any(name in changes and after.differs(before, name) for name in after.timing())
    superseded = 0
    cursor_at = current.cursor_at
    next_occ_at, next_key = current.next_run_at, current.next_occurrence_key
    if pause is True and not current.paused:
        superseded = _supersede(conn, current, at, "paused")
        cursor_at = at
    elif pause is False and current.paused:
        cursor_at = at  # occurrences during the pause are not caught up
        timing = True
    elif timing:
        superseded = _supersede(conn, current, at, "schedule changed")
        cursor_at = at
    if timing or pause is not None:
        first = _check_policies(after.rule, after.zone, after.gap, after.fold, cursor_at)
        next_occ_at, next_key = (first.at, first.key) if first else (None, None)
    params = after.params()
    params.update(
        id=current.id,
        cursor_at=cursor_at,
        next_run_at=next_occ_at,
        next_key=next_key,
        tzdb=tzdb_version(),
        superseded=superseded,
        version_step=1,
        now=at,
    )
    conn.execute(query("schedule_update"), params)
    return get_schedule(conn, current.id)


def pause(
    conn: psycopg.Connection[Any], schedule_id: int, *, now: datetime | None = None
) -> Schedule:
    """Stop enqueueing; occurrences enqueued ahead of now are superseded."""
    _schedule_id(schedule_id)
    if now is not None:
        _aware("now", now)
    return _apply(conn, get_schedule(conn, schedule_id, for_update=True), {}, now, pause=True)


def resume(
    conn: psycopg.Connection[Any], schedule_id: int, *, now: datetime | None = None
) -> Schedule:
    """Enqueue again from now on; the occurrences during the pause are not caught up."""
    _schedule_id(schedule_id)
    if now is not None:
        _aware("now", now)
    return _apply(conn, get_schedule(conn, schedule_id, for_update=True), {}, now, pause=False)


def delete(conn: psycopg.Connection[Any], schedule_id: int, *, now: datetime | None = None) -> bool:
    """Delete a schedule; its jobs enqueued ahead of now are superseded. False if it was gone."""
    _schedule_id(schedule_id)
    if now is not None:
        _aware("now", now)
    try:
        current = get_schedule(conn, schedule_id, for_update=True)
    except ScheduleNotFound:
        return False
    _supersede(conn, current, _now(conn, now), "deleted")
    conn.execute(query("schedule_delete"), {"id": schedule_id})
    return True


def preview(schedule: Schedule, after: datetime, count: int = 10) -> list[Occurrence]:
    """The schedule's next ``count`` occurrences after ``after`` (pure)."""
    _aware("after", after)
    if isinstance(count, bool) or not isinstance(count, int) or not 0 <= count <= MAX_PREVIEW:
        raise InvalidSchedule("count", count, f"must be an integer from 0 to {MAX_PREVIEW}")
    result: list[Occurrence] = []
    occ = next_occurrence(schedule, after)
    while occ is not None and len(result) < count:
        result.append(occ)
        occ = next_occurrence(schedule, occ.at)
    return result
