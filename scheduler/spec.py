"""The fields a user sets on a schedule, declared once: :class:`ScheduleSpec`.

Each field of the model is a type and one :class:`Setting`, which says everything else about it:
how the input is checked and normalised (the check raises :class:`InvalidSchedule` naming the
field, the same messages as the rest of the API), the SQL parameters it is written as, the
attribute of :class:`scheduler.Schedule` it is read back from, whether ``update_schedule`` may
change it, whether a TOML definition may set it, and whether changing it changes when the
schedule fires (which supersedes what was enqueued ahead). Everything that used to list the
fields again derives from the model: ``create_schedule`` / ``create_schedules`` validate
through it, ``update_schedule``'s allowed fields and merging come from it, the SQL parameters
are :meth:`ScheduleSpec.params`, and :class:`scheduler.definitions.Definition` extends it.

What a check accepts is exactly what the schedules API accepted before the model existed: the
checks are plain validators (pydantic's own coercion never runs), so ``jitter="5"`` is refused
and ``subject=42`` becomes ``"42"`` as before.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, time, timedelta
from functools import cache
from typing import TYPE_CHECKING, Annotated, Any, Self, TypeVar
from uuid import UUID

from pydantic import BaseModel, ConfigDict, Field, GetCoreSchemaHandler, ValidationError
from pydantic_core import CoreSchema, ErrorDetails, core_schema

import jobs
from jobs.internal import validate as job_validate
from scheduler.errors import InvalidSchedule
from scheduler.model import CatchUp, Overlap, QuietAction, QuietHours, Schedule
from timezones import (
    FoldPolicy,
    GapPolicy,
    Rule,
    TimezoneError,
    get_zone,
    parse_rule,
    rule_to_json,
)
from timezones.inputs import text_problem

_T = TypeVar("_T")
MAX_JITTER_SECONDS = 86_400
MAX_KEY = 200
# catch_up_max and catch_up_grace are int4 columns; these bounds are far below theirs.
MAX_CATCH_UP = 1_000_000
MAX_GRACE_SECONDS = 10 * 366 * 86_400
MAX_RUNS = 1_000_000_000  # max_runs is an int4 column
# A reminder's jobs must start within this of their run_at unless the schedule says otherwise:
# a reminder an hour late is noise (the 08:00 pill at 14:00); the push channels' default TTL.
DEFAULT_REMINDER_LATENESS = timedelta(hours=1)
_HHMM = re.compile(r"([01][0-9]|2[0-3]):([0-5][0-9])(?::00)?")
_HHMM_SECONDS = re.compile(r"([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9]")
# What a check translates into InvalidSchedule: the errors of the functions it calls.
INPUT_ERRORS = (TimezoneError, jobs.InvalidJob, ValueError, TypeError)


def wrap(field: str, value: Any, fn: Callable[[], _T]) -> _T:
    """``fn()``, its input errors re-raised as :class:`InvalidSchedule` naming ``field``."""
    try:
        return fn()
    except INPUT_ERRORS as exc:
        raise InvalidSchedule(field, value, str(exc)) from None


@dataclass(frozen=True)
class Setting:
    """What a :class:`ScheduleSpec` field is besides its type (see the module docstring).

    ``check(value)`` (or ``check(value, data)`` with ``with_data``, ``data`` holding the fields
    checked before it) returns the normalised value or raises :class:`InvalidSchedule`.
    ``sql(value)`` gives the field's SQL parameters (default ``{name: value}``); ``compare``
    maps a value to what equality is judged on (default the value); ``attr`` names the
    :class:`Schedule` attribute that holds it (default the field's name).
    """

    check: Callable[..., Any]
    sql: Callable[[Any], dict[str, Any]] | None = None
    compare: Callable[[Any], Any] | None = None
    attr: str | None = None
    update: bool = True  # update_schedule may change it
    definition: bool = True  # a definition (TOML) may set it
    timing: bool = False  # a change supersedes the occurrences enqueued ahead
    with_data: bool = False

    def __get_pydantic_core_schema__(
        self, source: type[Any], handler: GetCoreSchemaHandler
    ) -> CoreSchema:
        # A plain validator: the check alone decides, pydantic coerces nothing.
        if self.with_data:
            check = self.check
            return core_schema.with_info_plain_validator_function(
                lambda value, info: check(value, info.data)
            )
        return core_schema.no_info_plain_validator_function(self.check)


def check_job_type(value: Any) -> str:
    return wrap("job_type", value, lambda: job_validate.job_type(value))


def check_rule(value: Any) -> Rule:
    return wrap("rule", value, lambda: parse_rule(value))


def check_zone(value: Any) -> str:
    if not isinstance(value, str):
        raise InvalidSchedule("zone", value, "must be an IANA zone name such as 'Europe/Paris'")
    wrap("zone", value, lambda: get_zone(value))
    return value


def check_payload(value: Any) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise InvalidSchedule("payload", value, "must be a JSON object (a mapping)")
    result = dict(value)
    wrap("payload", value, lambda: job_validate.payload(result))
    return result


def check_queue(value: Any) -> str:
    return wrap("queue", value, lambda: job_validate.queue_name(value))


def _text(field: str, value: Any) -> str:
    if not isinstance(value, str) or not 1 <= len(value) <= MAX_KEY:
        raise InvalidSchedule(field, value, f"must be a string of 1-{MAX_KEY} characters")
    problem = text_problem(value)
    if problem is not None:
        raise InvalidSchedule(field, value, problem)
    return value


def check_key(value: Any) -> str | None:
    if value is None:
        return None
    return _text("key", value)


def check_subject(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        # An integer id becomes its text; a huge one is refused before str() is asked for it.
        if not -(10**MAX_KEY) < value < 10**MAX_KEY:
            raise InvalidSchedule("subject", value, f"must be a string of 1-{MAX_KEY} characters")
        value = str(value)
    return _text("subject", value)


def check_organization_id(value: Any) -> UUID | None:
    return wrap("organization_id", value, lambda: job_validate.organization_id(value))


def check_jitter(value: Any) -> int:
    delay = wrap("jitter", value, lambda: job_validate.delay(value, "jitter"))
    seconds = int(delay.total_seconds())
    if seconds > MAX_JITTER_SECONDS:
        raise InvalidSchedule("jitter", value, "must be at most one day")
    return seconds


def check_catch_up(value: Any, data: Mapping[str, Any]) -> CatchUp:
    if value is None:
        # Named definitions (a key, no subject) catch up on everything, reminders the latest.
        named = data.get("key") is not None and data.get("subject") is None
        return CatchUp.ALL if named else CatchUp.LATEST
    try:
        return CatchUp(value)
    except (ValueError, TypeError):
        raise InvalidSchedule("catch_up", value, "must be 'skip', 'latest' or 'all'") from None


def check_max_lateness(value: Any, data: Mapping[str, Any]) -> int | None:
    """Whole seconds (at least one), or None. Unset (None): a reminder (a subject, no key)
    gets :data:`DEFAULT_REMINDER_LATENESS`, a named definition no limit."""
    if value is None:
        reminder = data.get("subject") is not None and data.get("key") is None
        return int(DEFAULT_REMINDER_LATENESS.total_seconds()) if reminder else None
    late = wrap("max_lateness", value, lambda: job_validate.max_lateness(value))
    assert late is not None
    seconds = int(late.total_seconds())
    if seconds < 1:
        raise InvalidSchedule("max_lateness", value, "must be at least one second")
    return seconds


def check_grace(value: Any) -> int | None:
    if value is None:
        return None
    delay = wrap(
        "catch_up_grace",
        value,
        lambda: job_validate.delay(value, "catch_up_grace", MAX_GRACE_SECONDS),
    )
    return int(delay.total_seconds())


def check_catch_up_max(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_CATCH_UP:
        raise InvalidSchedule("catch_up_max", value, f"must be an integer from 1 to {MAX_CATCH_UP}")
    return value


def _hhmm(field: str, value: Any) -> time:
    """A local time of day, to the minute: ``time(22, 0)``, ``"HH:MM"`` or ``"HH:MM:00"``.

    Quiet hours are wall-clock times in the schedule's zone, stored to the minute: an offset
    (``"22:00+05:00"``, a ``time`` with a ``tzinfo``) or seconds (``"22:00:30"``) would be
    dropped silently, so they are refused."""
    if isinstance(value, time):
        if value.tzinfo is not None:
            raise InvalidSchedule(field, value, "must be a local time, without a zone or offset")
        if value.second or value.microsecond:
            raise InvalidSchedule(field, value, "must be a whole minute such as '22:00'")
        return value
    if isinstance(value, str) and (match := _HHMM.fullmatch(value)) is not None:
        return time(int(match[1]), int(match[2]))
    if isinstance(value, str) and _HHMM_SECONDS.fullmatch(value) is not None:
        raise InvalidSchedule(field, value, "must be a whole minute such as '22:00' (no seconds)")
    raise InvalidSchedule(field, value, "must be a local time such as '22:00'")


def check_quiet_hours(value: Any) -> QuietHours | None:
    if value is None:
        return value
    if isinstance(value, QuietHours):
        # Checked like the mapping form: a QuietHours built by hand may hold anything.
        value = {"start": value.start, "end": value.end, "action": value.action}
    if not isinstance(value, Mapping):
        raise InvalidSchedule("quiet_hours", value, "must be None or {'start','end','action'}")
    unknown = set(value) - {"start", "end", "action"}
    if unknown:
        raise InvalidSchedule("quiet_hours", value, f"unknown keys {sorted(unknown)}")
    if "start" not in value or "end" not in value:
        raise InvalidSchedule("quiet_hours", value, "needs 'start' and 'end'")
    start = _hhmm("quiet_hours.start", value["start"])
    end = _hhmm("quiet_hours.end", value["end"])
    action = value.get("action", "defer")
    try:
        quiet_action = QuietAction(action)
    except (ValueError, TypeError):
        raise InvalidSchedule("quiet_hours.action", action, "must be 'defer' or 'skip'") from None
    if start == end:
        raise InvalidSchedule("quiet_hours", value, "start and end must differ")
    return QuietHours(start, end, quiet_action)


def check_paused(value: Any) -> bool:
    if type(value) is not bool:  # "no" is truthy: only True and False say what they mean
        raise InvalidSchedule("paused", value, "must be True or False")
    return value


def check_gap(value: Any) -> str | None:
    return None if value is None else str(wrap("gap", value, lambda: GapPolicy(value)))


def check_fold(value: Any) -> str | None:
    return None if value is None else str(wrap("fold", value, lambda: FoldPolicy(value)))


def check_source(value: Any) -> str:
    if not isinstance(value, str) or value not in ("api", "definitions"):
        raise InvalidSchedule("source", value, "must be 'api' or 'definitions'")
    return str(value)


def check_overlap(value: Any, data: Mapping[str, Any]) -> Overlap:
    if value is None:
        # Named definitions (a key, no subject) skip an occurrence while the previous runs;
        # reminders are independent of each other.
        named = data.get("key") is not None and data.get("subject") is None
        return Overlap.SKIP if named else Overlap.ALLOW
    try:
        return Overlap(value)
    except (ValueError, TypeError):
        raise InvalidSchedule(
            "overlap", value, "must be 'skip', 'buffer_one', 'allow' or 'cancel_previous'"
        ) from None


def check_instant(field: str, value: Any) -> datetime | None:
    """None, or an aware instant (a datetime with an offset, or its ISO 8601 text), in UTC."""
    if value is None:
        return None
    given = value
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            raise InvalidSchedule(
                field, given, "must be an ISO 8601 instant such as 2026-12-01T08:00Z"
            ) from None
    if not isinstance(value, datetime):
        raise InvalidSchedule(field, given, "must be an aware datetime")
    if value.tzinfo is None or value.utcoffset() is None:
        raise InvalidSchedule(field, given, "must be timezone-aware (an offset or Z)")
    try:
        return value.astimezone(UTC)
    except OverflowError:
        raise InvalidSchedule(field, given, "is outside the years 1-9999 in UTC") from None


def check_start_at(value: Any) -> datetime | None:
    return check_instant("start_at", value)


def check_end_at(value: Any, data: Mapping[str, Any]) -> datetime | None:
    end = check_instant("end_at", value)
    start = data.get("start_at")
    if end is not None and start is not None and end <= start:
        raise InvalidSchedule(
            "end_at", value, f"must be after start_at ({start.isoformat(timespec='seconds')})"
        )
    return end


def check_max_runs(value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_RUNS:
        raise InvalidSchedule(
            "max_runs", value, f"must be None or an integer from 1 to {MAX_RUNS:,}"
        )
    return value


def _rule_sql(rule: Rule) -> dict[str, Any]:
    return {"rule": json.dumps(rule_to_json(rule))}


def _payload_sql(payload: dict[str, Any]) -> dict[str, Any]:
    return {"payload": job_validate.payload(payload)}


def _quiet_sql(quiet: QuietHours | None) -> dict[str, Any]:
    return {
        "quiet_start": quiet.start if quiet else None,
        "quiet_end": quiet.end if quiet else None,
        "quiet_action": str(quiet.action) if quiet else None,
    }


class ScheduleSpec(BaseModel):
    """What a user sets on a schedule: the fields of :func:`scheduler.create_schedule`, checked.

    :meth:`validated` raises :class:`InvalidSchedule` naming the field of bad input (building
    with keywords raises pydantic's ``ValidationError``, whose cause is that error); nothing is
    written. Values are normalised: ``rule`` is a parsed rule, ``jitter`` and
    ``catch_up_grace`` are whole seconds, ``catch_up`` is resolved (``None`` means ``all`` for
    a named definition, a ``key`` without a ``subject``, and ``latest`` otherwise).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    job_type: Annotated[str, Setting(check_job_type)]
    rule: Annotated[Rule, Setting(check_rule, sql=_rule_sql, compare=rule_to_json, timing=True)]
    zone: Annotated[str, Setting(check_zone, timing=True)]
    payload: Annotated[dict[str, Any], Setting(check_payload, sql=_payload_sql)] = Field(
        default_factory=dict
    )
    queue: Annotated[str, Setting(check_queue)] = "default"
    key: Annotated[str | None, Setting(check_key, update=False)] = None
    subject: Annotated[str | None, Setting(check_subject, definition=False)] = None
    organization_id: Annotated[
        UUID | None, Setting(check_organization_id, update=False, definition=False)
    ] = None
    jitter: Annotated[int, Setting(check_jitter, attr="jitter_seconds", timing=True)] = 0
    catch_up: Annotated[
        CatchUp, Setting(check_catch_up, sql=lambda v: {"catch_up": str(v)}, with_data=True)
    ] = Field(None, validate_default=True)
    catch_up_grace: Annotated[
        int | None,
        Setting(check_grace, sql=lambda v: {"grace": v}, attr="catch_up_grace_seconds"),
    ] = None
    catch_up_max: Annotated[int, Setting(check_catch_up_max)] = 100
    quiet_hours: Annotated[
        QuietHours | None,
        Setting(check_quiet_hours, sql=_quiet_sql, definition=False, timing=True),
    ] = None
    gap: Annotated[str | None, Setting(check_gap, timing=True)] = None
    fold: Annotated[str | None, Setting(check_fold, timing=True)] = None
    max_lateness: Annotated[
        int | None,
        Setting(
            check_max_lateness,
            sql=lambda v: {"max_lateness": v},
            attr="max_lateness_seconds",
            with_data=True,
        ),
    ] = Field(None, validate_default=True)
    paused: Annotated[bool, Setting(check_paused, update=False, definition=False)] = False
    source: Annotated[str, Setting(check_source, update=False, definition=False)] = "api"
    # Issue 24: the overlap policy and the lifetime (docs/scheduling.md).
    overlap: Annotated[
        Overlap, Setting(check_overlap, sql=lambda v: {"overlap": str(v)}, with_data=True)
    ] = Field(None, validate_default=True)
    start_at: Annotated[datetime | None, Setting(check_start_at, timing=True)] = None
    end_at: Annotated[datetime | None, Setting(check_end_at, timing=True, with_data=True)] = None
    max_runs: Annotated[int | None, Setting(check_max_runs)] = None

    if TYPE_CHECKING:
        # Keywords take what the checks accept (rule text, catch-up names...), not only the
        # normalised types that type checkers would read off the fields. Not defined at run
        # time: pydantic would then route every validation through a Python __init__.
        def __init__(self, /, **data: Any) -> None: ...

    @classmethod
    def validated(cls, data: Mapping[str, Any]) -> Self:
        """Check ``data`` (the fields by name); raise :class:`InvalidSchedule` naming the field."""
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            raise invalid(exc) from None

    @classmethod
    def settings(cls) -> dict[str, Setting]:
        """Each field's :class:`Setting`, in declaration order."""
        return _settings(cls)

    @classmethod
    def updatable(cls) -> frozenset[str]:
        """The fields :func:`scheduler.update_schedule` may change."""
        return frozenset(name for name, s in _settings(cls).items() if s.update)

    @classmethod
    def timing(cls) -> frozenset[str]:
        """The fields whose change changes when the schedule fires."""
        return frozenset(name for name, s in _settings(cls).items() if s.timing)

    @classmethod
    def of(cls, schedule: Schedule) -> Self:
        """The fields of a stored schedule (they were checked when it was written)."""
        return cls.model_construct(
            **{name: getattr(schedule, s.attr or name) for name, s in _settings(cls).items()}
        )

    def fields(self) -> dict[str, Any]:
        """The field values by name (the input of :meth:`validated` that gives this spec)."""
        return {name: getattr(self, name) for name in _settings(type(self))}

    def changed(self, changes: Mapping[str, Any]) -> Self:
        """A copy with ``changes`` applied, checked as a whole."""
        return self.validated({**self.fields(), **changes})

    def params(self) -> dict[str, Any]:
        """The SQL parameters the fields are written as (by the schedule insert and update)."""
        values = self.__dict__
        result: dict[str, Any] = {}
        for name, setting in _settings(type(self)).items():
            if setting.sql is None:
                result[name] = values[name]
            else:
                result.update(setting.sql(values[name]))
        return result

    def differs(self, other: ScheduleSpec, name: str) -> bool:
        """Whether the two specs hold different values of field ``name``."""
        compare = _settings(type(self))[name].compare
        mine, theirs = getattr(self, name), getattr(other, name)
        if compare is None:
            return bool(mine != theirs)
        return bool(compare(mine) != compare(theirs))


@cache
def _settings(cls: type[ScheduleSpec]) -> dict[str, Setting]:
    result: dict[str, Setting] = {}
    for name, info in cls.model_fields.items():
        found = [m for m in info.metadata if isinstance(m, Setting)]
        if len(found) != 1:
            raise TypeError(f"{cls.__name__}.{name} needs exactly one Setting")
        result[name] = found[0]
    return result


# Which error a caller sees when several fields are wrong: a misspelt field first, then a
# missing one, then the first wrong value in declaration order.
_RANK = {"extra_forbidden": 0, "missing": 1}


def first_error(exc: ValidationError) -> ErrorDetails:
    """The error to report of those pydantic collected."""
    return min(exc.errors(), key=lambda e: _RANK.get(e["type"], 2))


def invalid(exc: ValidationError) -> InvalidSchedule:
    """The :class:`InvalidSchedule` for a failed :class:`ScheduleSpec` validation."""
    error = first_error(exc)
    cause = error.get("ctx", {}).get("error")
    if isinstance(cause, InvalidSchedule):
        return cause
    name = ".".join(str(p) for p in error["loc"])
    if error["type"] == "missing":
        return InvalidSchedule(name, None, "is required")
    if error["type"] == "extra_forbidden":
        return InvalidSchedule(name, error["input"], "is not a schedule field")
    return InvalidSchedule(name or "schedule", error["input"], error["msg"])
