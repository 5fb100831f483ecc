"""Creating and changing schedules, inside the caller's transaction.

Every function validates its input first (zone, rule, policies, quiet hours) and raises
:class:`scheduler.InvalidSchedule` naming the field; nothing is written then.

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
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime, time, timedelta
from typing import Any

import psycopg

import jobs
from jobs import validate as job_validate
from scheduler.errors import InvalidSchedule, ScheduleExists, ScheduleNotFound
from scheduler.model import (
    CatchUp,
    QuietAction,
    QuietHours,
    Schedule,
    schedule_from_row,
)
from scheduler.planner import next_occurrence
from scheduler.queries import query
from timezones import (
    FoldPolicy,
    GapPolicy,
    Occurrence,
    Rule,
    TimezoneError,
    get_zone,
    next_after,
    occurrences,
    parse_rule,
    rule_to_json,
    tzdb_version,
)

_UNSET: Any = object()

# Each of these fields changes when the schedule fires: changing one supersedes what was
# enqueued ahead of time.
_TIMING = ("rule", "zone", "gap", "fold", "quiet_hours", "jitter")


def _now(conn: psycopg.Connection[Any], now: datetime | None) -> datetime:
    if now is not None:
        if now.tzinfo is None or now.utcoffset() is None:
            raise InvalidSchedule("now", now, "must be timezone-aware")
        return now.astimezone(UTC)
    row = conn.execute(query("pg_now")).fetchone()
    assert row is not None
    value: datetime = row[0]
    return value


def _wrap(field: str, value: Any, fn: Any) -> Any:
    try:
        return fn()
    except (TimezoneError, jobs.InvalidJob, ValueError, TypeError) as exc:
        raise InvalidSchedule(field, value, str(exc)) from None


def _rule(value: Any) -> Rule:
    rule: Rule = _wrap("rule", value, lambda: parse_rule(value))
    return rule


def _zone(value: Any) -> str:
    if not isinstance(value, str):
        raise InvalidSchedule("zone", value, "must be an IANA zone name such as 'Europe/Paris'")
    _wrap("zone", value, lambda: get_zone(value))
    return value


def _gap(value: Any) -> str | None:
    if value is None:
        return None
    return str(_wrap("gap", value, lambda: GapPolicy(value)))


def _fold(value: Any) -> str | None:
    if value is None:
        return None
    return str(_wrap("fold", value, lambda: FoldPolicy(value)))


def _jitter(value: Any) -> int:
    delay = _wrap("jitter", value, lambda: job_validate.delay(value, "jitter"))
    seconds = int(delay.total_seconds())
    if seconds > 86_400:
        raise InvalidSchedule("jitter", value, "must be at most one day")
    return seconds


def _catch_up(value: Any, default: CatchUp) -> CatchUp:
    if value is None:
        return default
    try:
        return CatchUp(value)
    except ValueError:
        raise InvalidSchedule("catch_up", value, "must be 'skip', 'latest' or 'all'") from None


def _grace(value: Any) -> int | None:
    if value is None:
        return None
    delay = _wrap("catch_up_grace", value, lambda: job_validate.delay(value, "catch_up_grace"))
    return int(delay.total_seconds())


def _parse_hhmm(field: str, value: Any) -> time:
    if isinstance(value, time):
        return value.replace(tzinfo=None, second=0, microsecond=0)
    try:
        return time.fromisoformat(str(value))
    except ValueError:
        raise InvalidSchedule(field, value, "must be a local time such as '22:00'") from None


def _quiet(value: Any) -> QuietHours | None:
    if value is None or isinstance(value, QuietHours):
        return value
    if isinstance(value, Mapping):
        unknown = set(value) - {"start", "end", "action"}
        if unknown:
            raise InvalidSchedule("quiet_hours", value, f"unknown keys {sorted(unknown)}")
        if "start" not in value or "end" not in value:
            raise InvalidSchedule("quiet_hours", value, "needs 'start' and 'end'")
        start = _parse_hhmm("quiet_hours.start", value["start"])
        end = _parse_hhmm("quiet_hours.end", value["end"])
        action = value.get("action", "defer")
        try:
            quiet_action = QuietAction(action)
        except ValueError:
            raise InvalidSchedule(
                "quiet_hours.action", action, "must be 'defer' or 'skip'"
            ) from None
        if start == end:
            raise InvalidSchedule("quiet_hours", value, "start and end must differ")
        return QuietHours(start, end, quiet_action)
    raise InvalidSchedule("quiet_hours", value, "must be None or {'start','end','action'}")


def _payload(value: Any) -> str:
    if value is None:
        value = {}
    if not isinstance(value, Mapping):
        raise InvalidSchedule("payload", value, "must be a JSON object (a mapping)")
    return str(_wrap("payload", value, lambda: job_validate.payload(dict(value))))


def _key(value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not 1 <= len(value) <= 200:
        raise InvalidSchedule("key", value, "must be a string of 1-200 characters")
    return value


def _subject(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if not isinstance(value, str) or not 1 <= len(value) <= 200:
        raise InvalidSchedule("subject", value, "must be a string of 1-200 characters")
    return value


def _check_policies(rule: Rule, zone: str, gap: str | None, fold: str | None, now: datetime) -> Any:
    """Resolve the first occurrence; this also proves the rule, zone and policies fit."""
    return _wrap(
        "rule", rule_to_json(rule), lambda: next_after(rule, zone, now, gap=gap, fold=fold)
    )


def _params(
    *,
    job_type: Any,
    rule: Rule,
    zone: str,
    payload: Any,
    queue: Any,
    key: Any,
    subject: Any,
    organization_id: Any,
    jitter: Any,
    catch_up: CatchUp,
    grace: Any,
    catch_up_max: Any,
    quiet: QuietHours | None,
    gap: str | None,
    fold: str | None,
    paused: bool,
) -> dict[str, Any]:
    if isinstance(catch_up_max, bool) or not isinstance(catch_up_max, int) or catch_up_max < 1:
        raise InvalidSchedule("catch_up_max", catch_up_max, "must be a positive integer")
    return {
        "job_type": _wrap("job_type", job_type, lambda: job_validate.job_type(job_type)),
        "queue": _wrap("queue", queue, lambda: job_validate.queue_name(queue)),
        "organization_id": _wrap(
            "organization_id",
            organization_id,
            lambda: job_validate.organization_id(organization_id),
        ),
        "key": _key(key),
        "subject": _subject(subject),
        "payload": _payload(payload),
        "rule": json.dumps(rule_to_json(rule)),
        "zone": zone,
        "gap": gap,
        "fold": fold,
        "jitter": _jitter(jitter),
        "catch_up": str(catch_up),
        "grace": _grace(grace),
        "catch_up_max": catch_up_max,
        "quiet_start": quiet.start if quiet else None,
        "quiet_end": quiet.end if quiet else None,
        "quiet_action": str(quiet.action) if quiet else None,
        "paused": bool(paused),
    }


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
    item = {
        "job_type": job_type, "rule": rule, "zone": zone, "payload": payload, "queue": queue,
        "key": key, "subject": subject, "organization_id": organization_id, "jitter": jitter,
        "catch_up": catch_up, "catch_up_grace": catch_up_grace, "catch_up_max": catch_up_max,
        "quiet_hours": quiet_hours, "gap": gap, "fold": fold, "paused": paused, "source": source,
    }  # fmt: skip
    params = _prepare_create(item, _now(conn, now), tzdb_version())
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
    at = _now(conn, now)
    rows: list[dict[str, Any]] = []
    tzdb = tzdb_version()
    for index, item in enumerate(items):
        try:
            rows.append(_prepare_create(dict(item), at, tzdb))
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


def _prepare_create(item: dict[str, Any], at: datetime, tzdb: str) -> dict[str, Any]:
    known = {
        "job_type", "rule", "zone", "payload", "queue", "key", "subject", "organization_id",
        "jitter", "catch_up", "catch_up_grace", "catch_up_max", "quiet_hours", "gap", "fold",
        "paused", "source",
    }  # fmt: skip
    for name, value in item.items():
        if name not in known:
            raise InvalidSchedule(name, value, "is not a schedule field")
    for name in ("job_type", "rule", "zone"):
        if name not in item:
            raise InvalidSchedule(name, None, "is required")
    parsed = _rule(item["rule"])
    zone_name = _zone(item["zone"])
    gap_p, fold_p = _gap(item.get("gap")), _fold(item.get("fold"))
    key, subject = item.get("key"), item.get("subject")
    default_catch_up = CatchUp.ALL if key is not None and subject is None else CatchUp.LATEST
    params = _params(
        job_type=item["job_type"], rule=parsed, zone=zone_name, payload=item.get("payload"),
        queue=item.get("queue", "default"), key=key, subject=subject,
        organization_id=item.get("organization_id"), jitter=item.get("jitter", 0),
        catch_up=_catch_up(item.get("catch_up"), default_catch_up),
        grace=item.get("catch_up_grace"), catch_up_max=item.get("catch_up_max", 100),
        quiet=_quiet(item.get("quiet_hours")), gap=gap_p, fold=fold_p,
        paused=item.get("paused", False),
    )  # fmt: skip
    source = item.get("source", "api")
    if source not in ("api", "definitions"):
        raise InvalidSchedule("source", source, "must be 'api' or 'definitions'")
    first = _check_policies(parsed, zone_name, gap_p, fold_p, at)
    params.update(
        cursor_at=at,
        next_run_at=first.at if first else None,
        next_key=first.key if first else None,
        tzdb=tzdb,
        source=source,
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
        params = {"id": schedule_id, "key": None, "organization_id": None}
        row = conn.execute(query(name), params).fetchone()
        if row is None:
            raise ScheduleNotFound(f"with id {schedule_id}")
        return schedule_from_row(tuple(row))
    if key is None:
        raise InvalidSchedule("key", None, "give a schedule id or a key")
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
    params = {
        "by_organization": by_organization,
        "organization_id": job_validate.organization_id(organization_id)
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
    allowed = {
        "job_type", "rule", "zone", "payload", "queue", "subject", "jitter", "catch_up",
        "catch_up_grace", "catch_up_max", "quiet_hours", "gap", "fold",
    }  # fmt: skip
    unknown = set(changes) - allowed
    if unknown:
        raise InvalidSchedule(sorted(unknown)[0], changes[sorted(unknown)[0]], "cannot be changed")
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
    rule = _rule(changes["rule"]) if "rule" in changes else current.rule
    zone = _zone(changes["zone"]) if "zone" in changes else current.zone
    gap = _gap(changes["gap"]) if "gap" in changes else current.gap
    fold = _fold(changes["fold"]) if "fold" in changes else current.fold
    quiet = _quiet(changes["quiet_hours"]) if "quiet_hours" in changes else current.quiet_hours
    catch_up = _catch_up(changes.get("catch_up"), current.catch_up)
    params = _params(
        job_type=changes.get("job_type", current.job_type),
        rule=rule,
        zone=zone,
        payload=changes.get("payload", current.payload),
        queue=changes.get("queue", current.queue),
        key=current.key,
        subject=changes.get("subject", current.subject),
        organization_id=current.organization_id,
        jitter=changes.get("jitter", current.jitter_seconds),
        catch_up=catch_up,
        grace=changes.get("catch_up_grace", current.catch_up_grace_seconds),
        catch_up_max=changes.get("catch_up_max", current.catch_up_max),
        quiet=quiet,
        gap=gap,
        fold=fold,
        paused=current.paused if pause is None else pause,
    )
    timing = any(
        name in changes
        and (
            (name == "rule" and rule_to_json(rule) != current.rule_json)
            or (name == "zone" and zone != current.zone)
            or (name == "gap" and gap != current.gap)
            or (name == "fold" and fold != current.fold)
            or (name == "quiet_hours" and quiet != current.quiet_hours)
            or (name == "jitter" and params["jitter"] != current.jitter_seconds)
        )
        for name in _TIMING
    )
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
        first = _check_policies(rule, zone, gap, fold, cursor_at)
        next_occ_at, next_key = (first.at, first.key) if first else (None, None)
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
    return _apply(conn, get_schedule(conn, schedule_id, for_update=True), {}, now, pause=True)


def resume(
    conn: psycopg.Connection[Any], schedule_id: int, *, now: datetime | None = None
) -> Schedule:
    """Enqueue again from now on; the occurrences during the pause are not caught up."""
    return _apply(conn, get_schedule(conn, schedule_id, for_update=True), {}, now, pause=False)


def delete(conn: psycopg.Connection[Any], schedule_id: int, *, now: datetime | None = None) -> bool:
    """Delete a schedule; its jobs enqueued ahead of now are superseded. False if it was gone."""
    try:
        current = get_schedule(conn, schedule_id, for_update=True)
    except ScheduleNotFound:
        return False
    _supersede(conn, current, _now(conn, now), "deleted")
    conn.execute(query("schedule_delete"), {"id": schedule_id})
    return True


def preview(schedule: Schedule, after: datetime, count: int = 10) -> list[Occurrence]:
    """The schedule's next ``count`` occurrences after ``after`` (pure)."""
    result: list[Occurrence] = []
    occ = next_occurrence(schedule, after)
    while occ is not None and len(result) < count:
        result.append(occ)
        occ = next_occurrence(schedule, occ.at)
    return result
