"""Creating and changing schedules, inside the caller's transaction.

Every function validates its input first, through :class:`scheduler.spec.ScheduleSpec` (where
the fields are declared, once), and raises :class:`scheduler.InvalidSchedule` naming the field;
nothing is written then, and the database clock is not read before. Each operation is written
once, as steps (:mod:`jobs.steps`: a generator of statements), which the function and its
``_async`` form run on their connection, so the two cannot differ.

Changing when a schedule fires (rule, zone, policies, quiet hours, jitter), pausing or deleting
it at instant T *supersedes* the occurrences it had enqueued ahead of time whose instant is
after T: their waiting jobs are cancelled and their idempotency keys freed, and the next
occurrence is recomputed from T in the new configuration. Occurrences at or before T are
history. Because the idempotency key of an occurrence is its *local* slot (``2026-06-01T08:00``),
a user who flies west and changes zone never gets the same local day's reminder twice: the
new zone's occurrence for a local day that was already enqueued finds the existing job.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from jobs.internal import Many, Steps, forms, supersede_steps
from jobs.internal import validate as job_validate
from scheduler.errors import InvalidSchedule, ScheduleExists, ScheduleNotFound
from scheduler.model import CatchUp, Overlap, QuietHours, Schedule, schedule_from_row
from scheduler.occurrence_job import occurrence_idempotency_key
from scheduler.planner import next_occurrence
from scheduler.queries import database_now_steps, query
from scheduler.spec import (
    INPUT_ERRORS,
    ScheduleSpec,
    check_instant,
    check_key,
    check_source,
    check_subject,
    wrap,
)
from timezones import (
    FoldPolicy,
    GapPolicy,
    Occurrence,
    OnceRule,
    Rule,
    next_after,
    occurrences,
    rule_to_json,
    tzdb_version,
)
from timezones.inputs import text_problem

_UNSET: Any = object()


MAX_LIST = 100_000
MAX_PREVIEW = 10_000
_ID_MAX = 2**63 - 1
# The smallest step of a timestamptz: a cursor this far before start_at keeps an occurrence at it.
_TICK = timedelta(microseconds=1)
MAX_NOTE = 500


def _aware(field: str, value: Any) -> datetime:
    """An aware datetime given to the API (``now``, ``until``...), in UTC."""
    if not isinstance(value, datetime):
        raise InvalidSchedule(field, value, "must be an aware datetime")
    instant = check_instant(field, value)
    assert instant is not None
    return instant


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


def _create(
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
    max_lateness: timedelta | float | None = None,
    paused: bool = False,
    source: str = "api",
    overlap: Overlap | str | None = None,
    start_at: datetime | str | None = None,
    end_at: datetime | str | None = None,
    max_runs: int | None = None,
    now: datetime | None = None,
    allow_past: bool = False,
) -> Steps[Schedule]:
    """Create a schedule in the caller's transaction; its first occurrence is strictly after now.

    ``catch_up`` defaults to ``latest`` for reminders and ``all`` for named definitions (``key``
    set, no ``subject``). ``max_lateness`` (a timedelta or seconds) is how late each occurrence's
    job may start after its run_at: later, it is not run but ends ``expired`` (recorded as a
    skip of kind ``expired``); it defaults to an hour for reminders (``subject`` set, no
    ``key``) and to no limit for named definitions (docs/scheduling.md, "Late work expires").
    Raises :class:`ScheduleExists` if ``key`` is taken in the organization.
    A ``once:`` rule at or before ``now`` can never fire: it is refused (``InvalidSchedule``
    naming ``rule``) unless ``allow_past=True``, which creates the schedule finished (no next
    run).

    ``overlap`` (default ``skip`` for named definitions, ``allow`` for reminders) says what an
    occurrence does while the previous one's job is still active (:class:`Overlap`).
    ``start_at`` and ``end_at`` bound the occurrences (none before the start, none after the
    end); ``max_runs`` ends the schedule after that many enqueued occurrences. A schedule that
    runs out of occurrences is kept, marked finished (``Schedule.finished_at``).
    """
    # The keyword parameters are ScheduleSpec's fields, spelled out for callers and type
    # checkers (tests/unit/scheduler/test_spec.py keeps the two the same).
    fields = {name: value for name, value in locals().items() if name in ScheduleSpec.model_fields}
    return (yield from _create_steps(fields, now, _allow_past(allow_past)))


def _allow_past(value: Any) -> bool:
    if type(value) is not bool:
        raise InvalidSchedule("allow_past", value, "must be True or False")
    return value


def _create_steps(
    fields: Mapping[str, Any], now: datetime | None, allow_past: bool = False
) -> Steps[Schedule]:
    """create_schedule(_async): the input checked, then the clock read, then the insert."""
    spec = ScheduleSpec.validated(fields)
    at = yield from database_now_steps(_checked_now(now))
    params = _prepare_create(spec, at, tzdb_version(), allow_past)
    rows = yield query("schedule_insert"), params
    return (yield from _get_steps(_inserted(_first(rows), params)))


def _checked_now(now: datetime | None) -> datetime | None:
    """A given ``now`` in UTC (refused if naive), for :func:`database_now_steps`."""
    return None if now is None else _aware("now", now)


def _first(rows: Sequence[Any]) -> Any:
    """A statement's one row, or None."""
    return rows[0] if rows else None


def _create_many(
    items: Iterable[Mapping[str, Any]],
    *,
    now: datetime | None = None,
    allow_past: bool = False,
) -> Steps[list[int]]:
    """Create many schedules at once (the keyword arguments of :func:`create_schedule` each).

    Every item is validated before anything is written (an error names ``items[i].field``;
    ``allow_past`` applies to every item, as in :func:`create_schedule`);
    the rows go to the server in one pipeline. Returns the new ids in order. Raises
    :class:`ScheduleExists` if a key is taken (then nothing of the call is kept only if the
    caller rolls back: it runs in the caller's transaction).
    """
    rows = yield from _create_many_steps(items, now, _allow_past(allow_past))
    if not rows:
        return []
    return _inserted_ids(rows, (yield Many(query("schedule_insert"), rows)))


def _inserted_ids(rows: Sequence[Mapping[str, Any]], returned: Sequence[Any]) -> list[int]:
    """The ids ``schedule_insert`` returned, one result set per row (pure): a set without a
    row is a key already taken (the insert does nothing on conflict)."""
    for params, row in zip(rows, returned, strict=True):
        if row is None:
            raise ScheduleExists(params["key"])
    return [row[0] for row in returned]


def _inserted(row: Any, params: Mapping[str, Any]) -> int:
    """The id ``schedule_insert`` returned for one schedule, or ScheduleExists (pure)."""
    if row is None:
        raise ScheduleExists(params["key"])
    schedule_id: int = row[0]
    return schedule_id


def _found(row: Any, missing: str) -> Schedule:
    """A ``schedule_get`` row as a Schedule, or ScheduleNotFound saying what was asked (pure)."""
    if row is None:
        raise ScheduleNotFound(missing)
    return schedule_from_row(tuple(row))


def _check_items(items: Any) -> None:
    if isinstance(items, str | bytes | Mapping) or not isinstance(items, Iterable):
        raise InvalidSchedule("items", items, "must be a list of schedule mappings")


def _create_many_steps(
    items: Iterable[Mapping[str, Any]], now: datetime | None, allow_past: bool = False
) -> Steps[list[dict[str, Any]]]:
    """create_schedules(_async) up to their insert: every item checked, then the clock read,
    then each item's first occurrence; the insert's parameters, one mapping per item."""
    _check_items(items)
    specs: list[ScheduleSpec] = []
    for index, item in enumerate(items):
        with _naming_item(index):
            specs.append(ScheduleSpec.validated(item))
    at = yield from database_now_steps(_checked_now(now))
    tzdb = tzdb_version()
    rows: list[dict[str, Any]] = []
    for index, spec in enumerate(specs):
        with _naming_item(index):
            rows.append(_prepare_create(spec, at, tzdb, allow_past))
    return rows


@contextmanager
def _naming_item(index: int) -> Iterator[None]:
    """An InvalidSchedule of item ``index`` names it: ``items[3].zone``."""
    try:
        yield
    except InvalidSchedule as exc:
        raise InvalidSchedule(f"items[{index}].{exc.field}", exc.value, exc.reason) from None


def _start_cursor(spec: ScheduleSpec, at: datetime) -> datetime:
    """Where a schedule's cursor starts: now, or just before ``start_at`` when that is later
    (occurrences are strictly after the cursor, so one at ``start_at`` itself is kept)."""
    if spec.start_at is not None and spec.start_at - _TICK > at:
        return spec.start_at - _TICK
    return at


def _first_after(spec: ScheduleSpec, cursor: datetime, enqueued: int = 0) -> Any:
    """The next occurrence after ``cursor`` within the lifetime (``end_at``, ``max_runs``), or
    None: the rule, zone and policies proved to fit on the way."""
    first = _check_policies(spec.rule, spec.zone, spec.gap, spec.fold, cursor)
    if first is not None and spec.end_at is not None and first.at > spec.end_at:
        return None
    if spec.max_runs is not None and enqueued >= spec.max_runs:
        return None
    return first


def _prepare_create(
    spec: ScheduleSpec, at: datetime, tzdb: str, allow_past: bool = False
) -> dict[str, Any]:
    if spec.end_at is not None and spec.end_at <= at and not allow_past:
        raise InvalidSchedule(
            "end_at",
            spec.end_at.isoformat(),
            f"is in the past (now is {at.isoformat(timespec='seconds')}): the schedule could "
            "never fire; pass allow_past=True to create it finished",
        )
    cursor = _start_cursor(spec, at)
    first = _first_after(spec, cursor)
    if first is None and isinstance(spec.rule, OnceRule) and not allow_past:
        # Issue 26: accepted, it was a schedule that could never fire, created without a word.
        raise InvalidSchedule(
            "rule",
            str(spec.rule),
            f"is in the past in {spec.zone} (now is {at.isoformat(timespec='seconds')}): it can "
            "never fire; pass allow_past=True to create it finished",
        )
    params = spec.params()
    params.update(
        cursor_at=cursor,
        next_run_at=first.at if first else None,
        next_key=first.key if first else None,
        finished_at=None if first else at,
        tzdb=tzdb,
        now=at,
    )
    return params


def _get(
    schedule_id: int | None = None,
    *,
    key: str | None = None,
    organization_id: Any = None,
    for_update: bool = False,
) -> Steps[Schedule]:
    """One schedule by id, or by ``key`` within an organization."""
    return (yield from _get_steps(schedule_id, key, organization_id, for_update))


def _get_steps(
    schedule_id: int | None,
    key: str | None = None,
    organization_id: Any = None,
    for_update: bool = False,
) -> Steps[Schedule]:
    name, params, missing = _get_query(schedule_id, key, organization_id, for_update)
    rows = yield query(name), params
    return _found(_first(rows), missing)


def _get_query(
    schedule_id: int | None, key: str | None, organization_id: Any, for_update: bool
) -> tuple[str, dict[str, Any], str]:
    """get_schedule's query name, parameters, and what to say when no row comes back."""
    name = "schedule_get_for_update" if for_update else "schedule_get"
    if schedule_id is not None:
        _schedule_id(schedule_id)
        return (
            name,
            {"id": schedule_id, "key": None, "organization_id": None},
            (f"with id {schedule_id}"),
        )
    if key is None:
        raise InvalidSchedule("key", None, "give a schedule id or a key")
    check_key(key)
    org = _wrap(
        "organization_id", organization_id, lambda: job_validate.organization_id(organization_id)
    )
    return name, {"id": None, "key": key, "organization_id": org}, f"with key {key!r}"


def _list(
    *,
    organization_id: Any = _UNSET,
    subject: str | int | None = None,
    source: str | None = None,
    limit: int = 1000,
    after: int | None = None,
) -> Steps[list[Schedule]]:
    """One page of schedules in id order, optionally of one organization, one subject or one
    source: at most ``limit`` (up to 100,000) with an id above ``after``. Page through any
    number with ``after=`` the last id of the previous page, until a page comes back short."""
    return (yield from _list_steps(organization_id, subject, source, limit, after))


def _list_steps(
    organization_id: Any,
    subject: str | int | None,
    source: str | None,
    limit: int,
    after: int | None = None,
) -> Steps[list[Schedule]]:
    params = _list_params(organization_id, subject, source, limit, after)
    rows = yield query("schedule_list"), params
    return [schedule_from_row(tuple(r)) for r in rows]


def _after(value: Any) -> int | None:
    """A page's ``after=`` cursor: None (the first page) or an id (0 included)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= _ID_MAX:
        raise InvalidSchedule("after", value, f"must be None or an integer from 0 to {_ID_MAX}")
    return value


def _list_params(
    organization_id: Any,
    subject: str | int | None,
    source: str | None,
    limit: int,
    after: int | None = None,
) -> dict[str, Any]:
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
        "after": _after(after),
    }
    return params


def _supersede_steps(schedule: Schedule, at: datetime, reason: str) -> Steps[int]:
    """Cancel the jobs enqueued ahead for occurrences after ``at``; record them; return count."""
    ahead = _ahead(schedule, at)
    if not ahead:
        return 0
    cancelled = yield from supersede_steps(**_supersede_args(schedule, ahead, at, reason))
    yield query("schedule_skip_record"), _skip_params(schedule, ahead, at, reason)
    return len(cancelled)


def _ahead(schedule: Schedule, at: datetime) -> list[Occurrence]:
    """The occurrences the schedule has enqueued ahead of ``at`` (pure)."""
    if schedule.last_occurrence_at is None or schedule.last_occurrence_at <= at:
        return []
    return list(
        occurrences(
            schedule.rule,
            schedule.zone,
            at,
            until=schedule.cursor_at,
            gap=schedule.gap,
            fold=schedule.fold,
        )
    )


def _supersede_args(
    schedule: Schedule, ahead: list[Occurrence], at: datetime, reason: str
) -> dict[str, Any]:
    return {
        "job_type": schedule.job_type,
        "idempotency_keys": [occurrence_idempotency_key(schedule.id, o.key) for o in ahead],
        "organization_id": schedule.organization_id,
        "reason": reason,
        "suffix": f"~superseded:v{schedule.version}",
        "now": at,
    }


def _skip_params(
    schedule: Schedule, ahead: list[Occurrence], at: datetime, reason: str
) -> dict[str, Any]:
    return {
        "ids": [schedule.id] * len(ahead),
        "keys": [o.key for o in ahead],
        "ats": [o.at for o in ahead],
        "kinds": ["superseded"] * len(ahead),
        "reasons": [reason] * len(ahead),
        "now": at,
    }


def _update(schedule_id: int, *, now: datetime | None = None, **changes: Any) -> Steps[Schedule]:
    """Change a schedule in the caller's transaction.

    ``changes`` takes the keyword arguments of :func:`create_schedule` (except ``key`` and
    ``organization_id``). A change of timing (rule, zone, gap, fold, quiet_hours, jitter)
    supersedes the occurrences enqueued ahead of ``now`` and recomputes the next one from
    ``now`` in the new configuration.
    """
    return (yield from _change_steps(schedule_id, changes, now, pause=None))


def _check_changes(schedule_id: Any, changes: Mapping[str, Any], now: datetime | None) -> None:
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


@dataclass(frozen=True, slots=True)
class _Pause:
    """A pause or a resume: ``paused`` with its note and end (None: until resumed)."""

    paused: bool
    note: str | None = None
    until: datetime | None = None
    actor: str | None = None


def _change_steps(
    schedule_id: Any, changes: Mapping[str, Any], now: datetime | None, *, pause: _Pause | None
) -> Steps[Schedule]:
    """update_schedule, pause and resume (and their async forms): the input checked, the row
    locked, the clock read, the jobs ahead superseded if the timing changed, the row written."""
    _check_changes(schedule_id, changes, now)
    current = yield from _get_steps(schedule_id, for_update=True)
    at = yield from database_now_steps(_checked_now(now))
    if pause is not None and pause.until is not None and pause.until <= at:
        raise InvalidSchedule(
            "until",
            pause.until.isoformat(),
            f"must be after now ({at.isoformat(timespec='seconds')})",
        )
    after, recompute, reset, reason = _plan(current, changes, pause)
    superseded = (yield from _supersede_steps(current, at, reason)) if reason is not None else 0
    yield (
        query("schedule_update"),
        _update_params(current, after, at, reset, recompute, superseded, pause),
    )
    if pause is not None and pause.actor is not None:
        yield query("dashboard_audit_insert"), _audit_params(current.id, pause, at)
    return (yield from _get_steps(current.id))


def _audit_params(schedule_id: int, pause: _Pause, at: datetime) -> dict[str, Any]:
    selection: dict[str, Any] = {"schedule_id": schedule_id}
    if pause.note is not None:
        selection["note"] = pause.note
    if pause.until is not None:
        selection["until"] = pause.until.isoformat()
    return {
        "actor": pause.actor,
        "action": "pause" if pause.paused else "resume",
        "filter": json.dumps(selection),
        "affected": 1,
        "now": at,
    }


def _plan(
    current: Schedule, changes: Mapping[str, Any], pause: _Pause | None
) -> tuple[ScheduleSpec, bool, bool, str | None]:
    """What a change does (pure): the new spec, whether the next occurrence is recomputed,
    whether the cursor moves to now, and the reason to supersede the jobs ahead (or None)."""
    before = ScheduleSpec.of(current)
    if "catch_up" in changes and changes["catch_up"] is None:
        # No catch-up policy given: the schedule keeps the one it has.
        changes = {name: value for name, value in changes.items() if name != "catch_up"}
    if "overlap" in changes and changes["overlap"] is None:
        changes = {name: value for name, value in changes.items() if name != "overlap"}
    if pause is not None:
        changes = {**changes, "paused": pause.paused}
    after = before.changed(changes)
    timing = any(name in changes and after.differs(before, name) for name in after.timing())
    if pause is not None and pause.paused:
        # A new pause supersedes what was enqueued ahead; pausing again moves the end.
        return after, True, True, None if current.paused else "paused"
    if pause is not None and current.paused:
        return after, True, True, None  # occurrences during the pause are not caught up
    if timing:
        return after, True, True, "schedule changed"
    runs = "max_runs" in changes and after.differs(before, "max_runs")
    return after, pause is not None or runs, False, None


def _update_params(
    current: Schedule,
    after: ScheduleSpec,
    at: datetime,
    reset: bool,
    recompute: bool,
    superseded: int,
    pause: _Pause | None = None,
) -> dict[str, Any]:
    cursor_at = at if reset else current.cursor_at
    if pause is not None and pause.paused and pause.until is not None:
        # Paused until a time: the occurrences up to it are not enqueued, nor caught up.
        cursor_at = pause.until
    if reset:
        cursor_at = max(cursor_at, _start_cursor(after, cursor_at))
    next_occ_at, next_key = current.next_run_at, current.next_occurrence_key
    if recompute:
        first = _first_after(after, cursor_at, current.enqueued_count)
        next_occ_at, next_key = (first.at, first.key) if first else (None, None)
    note, until = current.pause_note, current.paused_until
    if pause is not None:
        note, until = (pause.note, pause.until) if pause.paused else (None, None)
    params = after.params()
    params.update(
        id=current.id,
        cursor_at=cursor_at,
        next_run_at=next_occ_at,
        next_key=next_key,
        tzdb=tzdb_version(),
        superseded=superseded,
        version_step=1,
        pause_note=note,
        paused_until=until,
        finished_at=None if next_occ_at is not None else (current.finished_at or at),
        now=at,
    )
    return params


def _note(value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or len(value) > MAX_NOTE:
        raise InvalidSchedule("note", value, f"must be a string of at most {MAX_NOTE} characters")
    problem = text_problem(value)
    if problem is not None:
        raise InvalidSchedule("note", value, problem)
    return value


def _actor(value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not 1 <= len(value) <= 200 or text_problem(value):
        raise InvalidSchedule("actor", value, "must be a string of 1-200 characters")
    return value


def _pause(
    schedule_id: int,
    *,
    note: str | None = None,
    until: datetime | None = None,
    actor: str | None = None,
    now: datetime | None = None,
) -> Steps[Schedule]:
    """Stop enqueueing; occurrences enqueued ahead of now are superseded.

    ``note`` (at most 500 characters) says why, read back as ``Schedule.pause_note``; ``until``
    (after now) ends the pause by itself: the schedule's next occurrence is the first after it,
    and the occurrences during the pause are not caught up (``Schedule.paused_until``). With
    ``actor``, the pause is recorded in the audit trail (``dashboard_audit``) in the same
    transaction. Pausing a paused schedule replaces its note and end.
    """
    pause = _Pause(
        True, _note(note), None if until is None else _aware("until", until), _actor(actor)
    )
    return (yield from _change_steps(schedule_id, {}, now, pause=pause))


def _resume(
    schedule_id: int, *, actor: str | None = None, now: datetime | None = None
) -> Steps[Schedule]:
    """Enqueue again from now on; the occurrences during the pause are not caught up. With
    ``actor``, recorded in the audit trail."""
    return (
        yield from _change_steps(schedule_id, {}, now, pause=_Pause(False, actor=_actor(actor)))
    )


def _delete(schedule_id: int, *, now: datetime | None = None) -> Steps[bool]:
    """Delete a schedule; its jobs enqueued ahead of now are superseded. False if it was gone."""
    return (yield from _delete_steps(schedule_id, now))


def _delete_steps(schedule_id: Any, now: datetime | None) -> Steps[bool]:
    _check_changes(schedule_id, {}, now)
    try:
        current = yield from _get_steps(schedule_id, for_update=True)
    except ScheduleNotFound:
        return False
    at = yield from database_now_steps(_checked_now(now))
    yield from _supersede_steps(current, at, "deleted")
    yield query("schedule_delete"), {"id": schedule_id}
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


# Each operation above is written once, as steps (jobs/steps.py); its forms on a psycopg
# Connection and on an AsyncConnection (FastAPI and other asyncio services), in the caller's
# transaction:
create_schedule, create_schedule_async = forms(_create, "create_schedule")
create_schedules, create_schedules_async = forms(_create_many, "create_schedules")
get_schedule, get_schedule_async = forms(_get, "get_schedule")
list_schedules, list_schedules_async = forms(_list, "list_schedules")
update_schedule, update_schedule_async = forms(_update, "update_schedule")
pause, pause_async = forms(_pause, "pause")
resume, resume_async = forms(_resume, "resume")
delete, delete_async = forms(_delete, "delete")
