"""Recurrence rules: frozen pydantic models discriminated by ``kind``.

Three spellings of one rule, all parsed by :func:`parse_rule`:

* the model itself (``DailyRule(at=time(8, 0))``);
* the JSON form ``{"kind": "daily", "at": "08:00"}``; persisted with ``"version": 1`` by
  :func:`rule_to_json` (the scheduler stores it in a jsonb column and reads it back unchanged);
* the compact text form ``daily@08:00`` (``str(rule)`` gives it back): ``weekdays@08:00``,
  ``weekly:mon,wed,fri@18:30``, ``monthly:15@09:00``, ``monthly:last@09:00``,
  ``once:2026-12-24T18:00``, ``cron:30 2 * * *``, ``cron+anchored:*/15 2 * * *``,
  ``rrule:FREQ=WEEKLY;BYDAY=MO`` (optionally ``rrule:DTSTART=2026-01-05T08:00;FREQ=...``),
  ``every:15m`` (optionally ``every:15m@2026-01-01T00:00:00Z``).

Rules hold local wall times only; the zone is given separately. Two kinds appear, under the
persisted field name ``at`` and a descriptive alias (docs/time-zones.md, "Glossary"):

* a **time of day** (``datetime.time``): ``DailyRule.at``, read it as ``rule.time_of_day``;
* a **local wall time** (naive ``datetime``): ``OnceRule.at``, read it as ``rule.wall_time``.

``IntervalRule.anchor`` is the one instant (aware, UTC) a rule holds.
Invalid rules fail here, at parse time, with :class:`InvalidRule` naming the field and value.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from datetime import UTC, datetime, time
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    TypeAdapter,
    ValidationError,
    field_serializer,
    field_validator,
    model_validator,
)

from timezones.cron import parse_cron
from timezones.errors import InvalidInput, InvalidRule, shown
from timezones.inputs import MAX_RULE_TEXT, check_text
from timezones.policy import CronWildcard
from timezones.rrule_plan import compile_rrule

__all__ = [
    "RULE_VERSION",
    "CronRule",
    "DailyRule",
    "IntervalRule",
    "MonthlyRule",
    "OnceRule",
    "RRuleRule",
    "Rule",
    "WeekdaysRule",
    "WeeklyRule",
    "parse_rule",
    "rule_to_json",
]

RULE_VERSION = 1
Weekday = Literal["mon", "tue", "wed", "thu", "fri", "sat", "sun"]
WEEKDAYS: tuple[Weekday, ...] = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
# ASCII digits and fullmatch: ``\d`` matches other scripts' digits ("٣") and ``$`` matches
# before a final newline.
_TIME_RE = re.compile(r"([01][0-9]|2[0-3]):([0-5][0-9])(?::([0-5][0-9]))?")
_LOCAL_RE = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}(?::[0-9]{2})?")
_EVERY_RE = re.compile(r"([1-9][0-9]{0,8})([smh])")
_DAY_RE = re.compile(r"[0-9]{1,2}")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600}
# An interval rule fires at most this far apart (ten years): its instants stay representable.
MAX_INTERVAL_SECONDS = 10 * 366 * 86400
_DAY_NAMES = {
    name: day
    for day, full in zip(
        ("mon", "tue", "wed", "thu", "fri", "sat", "sun"),
        ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"),
        strict=True,
    )
    for name in (day, full)
}
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _parse_time(value: object) -> time:
    if isinstance(value, time):
        if value.tzinfo is not None:
            raise ValueError("a wall-clock time must not carry a zone")
        if value.microsecond:
            raise ValueError("sub-second times are not supported")
        return value
    if not isinstance(value, str) or (match := _TIME_RE.fullmatch(value)) is None:
        raise ValueError("expected a local time HH:MM (00:00-23:59)")
    return time(int(match[1]), int(match[2]), int(match[3] or 0))


def _format_time(value: time) -> str:
    return value.strftime("%H:%M:%S" if value.second else "%H:%M")


def _parse_local(value: object) -> datetime:
    if isinstance(value, datetime):
        if value.tzinfo is not None:
            raise ValueError("a local date-time must be naive (the zone is given separately)")
        return value.replace(microsecond=0)
    if not isinstance(value, str) or not _LOCAL_RE.fullmatch(value):
        raise ValueError("expected a local date-time YYYY-MM-DDTHH:MM[:SS] without offset")
    return datetime.fromisoformat(value)  # a ValueError for 2026-02-30 is pydantic's to report


def _format_local(value: datetime) -> str:
    return value.isoformat(timespec="seconds" if value.second else "minutes")


class _Rule(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    # The compiled slot source (timezones.slots), built on first use by timezones.engine.
    _plan: Any = PrivateAttr(default=None)

    def __str__(self) -> str:
        return self.compact()

    def compact(self) -> str:
        raise NotImplementedError


class _AtRule(_Rule):
    at: time  # the time of day; persisted as "at"

    @property
    def time_of_day(self) -> time:
        """The local time of day the rule fires at (the field ``at``)."""
        return self.at

    @field_validator("at", mode="before")
    @classmethod
    def _check_at(cls, value: object) -> time:
        return _parse_time(value)

    @field_serializer("at")
    def _dump_at(self, value: time) -> str:
        return _format_time(value)


class DailyRule(_AtRule):
    """Every local date at ``at``."""

    kind: Literal["daily"] = "daily"

    def compact(self) -> str:
        return f"daily@{_format_time(self.at)}"


class WeekdaysRule(_AtRule):
    """Monday to Friday at ``at``."""

    kind: Literal["weekdays"] = "weekdays"

    def compact(self) -> str:
        return f"weekdays@{_format_time(self.at)}"


class WeeklyRule(_AtRule):
    """The listed days of the week at ``at``."""

    kind: Literal["weekly"] = "weekly"
    days: tuple[Weekday, ...]

    @field_validator("days", mode="before")
    @classmethod
    def _check_days(cls, value: object) -> tuple[str, ...]:
        items = value.split(",") if isinstance(value, str) else value
        if not isinstance(items, list | tuple) or not items or len(items) > 7 * 4:
            raise ValueError("expected a non-empty list of days (mon..sun)")
        days = set()
        for item in items:
            # Exactly a three-letter or a full English day name: "monkey" is not Monday.
            day = _DAY_NAMES.get(item.strip().lower()) if isinstance(item, str) else None
            if day is None:
                raise ValueError(
                    f"unknown day {shown(item)} (use mon, tue, wed, thu, fri, sat, sun, or the "
                    "full English name)"
                )
            days.add(day)
        return tuple(d for d in WEEKDAYS if d in days)

    def compact(self) -> str:
        return f"weekly:{','.join(self.days)}@{_format_time(self.at)}"


class MonthlyRule(_AtRule):
    """Day ``day`` (1..31, or ``last``) of every month at ``at``; the 31st only in long months."""

    kind: Literal["monthly"] = "monthly"
    day: Annotated[int, Field(strict=True, ge=1, le=31)] | Literal["last"]

    def compact(self) -> str:
        return f"monthly:{self.day}@{_format_time(self.at)}"


class OnceRule(_Rule):
    """A single local date-time."""

    kind: Literal["once"] = "once"
    at: datetime  # a naive local wall time; persisted as "at"

    @property
    def wall_time(self) -> datetime:
        """The naive local date-time the rule fires at (the field ``at``)."""
        return self.at

    @field_validator("at", mode="before")
    @classmethod
    def _check_at(cls, value: object) -> datetime:
        return _parse_local(value)

    @field_serializer("at")
    def _dump_at(self, value: datetime) -> str:
        return _format_local(value)

    def compact(self) -> str:
        return f"once:{_format_local(self.at)}"


class RRuleRule(_Rule):
    """An RFC 5545 RRULE expanded on a naive local DTSTART (default 2000-01-01T00:00)."""

    kind: Literal["rrule"] = "rrule"
    rrule: str
    dtstart: datetime | None = None

    @field_validator("dtstart", mode="before")
    @classmethod
    def _check_dtstart(cls, value: object) -> datetime | None:
        return None if value is None else _parse_local(value)

    @field_validator("rrule", mode="before")
    @classmethod
    def _check_rrule(cls, value: object) -> str:
        if not isinstance(value, str) or not value.strip():
            raise ValueError("expected an RRULE such as FREQ=DAILY;BYHOUR=8;BYMINUTE=0")
        text = value.strip()
        text = text.removeprefix("RRULE:").removeprefix("rrule:")
        if "\n" in text or "DTSTART" in text.upper():
            raise ValueError("give DTSTART in the dtstart field, not inside the RRULE")
        return text.upper()

    @model_validator(mode="after")
    def _check_expands(self) -> RRuleRule:
        try:
            compile_rrule(self.rrule, self.dtstart)
        except InvalidInput as exc:
            raise ValueError(f"invalid RRULE {shown(self.rrule)}: {exc.reason}") from None
        return self

    @field_serializer("dtstart")
    def _dump_dtstart(self, value: datetime | None) -> str | None:
        return None if value is None else _format_local(value)

    def compact(self) -> str:
        if self.dtstart is None:
            return f"rrule:{self.rrule}"
        return f"rrule:DTSTART={_format_local(self.dtstart)};{self.rrule}"


class CronRule(_Rule):
    """A 5-field Vixie cron expression (DOM/DOW ORed when both restricted; 0 and 7 = Sunday)."""

    kind: Literal["cron"] = "cron"
    expr: str
    wildcard: CronWildcard = CronWildcard.WALL_CLOCK

    @field_validator("expr", mode="before")
    @classmethod
    def _check_expr(cls, value: object) -> str:
        if not isinstance(value, str):
            raise ValueError("expected a 5-field cron expression")
        # Parsed as given (it refuses non-ASCII white space before splitting), kept normalised.
        parse_cron(value)  # raises InvalidRule (a ValueError) naming the field
        return " ".join(value.split())

    def compact(self) -> str:
        if self.wildcard == CronWildcard.ANCHORED:
            return f"cron+anchored:{self.expr}"
        return f"cron:{self.expr}"


class IntervalRule(_Rule):
    """Every ``every`` (``90s``, ``15m``, ``2h``) of elapsed time from ``anchor`` (UTC)."""

    kind: Literal["interval"] = "interval"
    every: str
    anchor: datetime = _EPOCH

    @field_validator("every", mode="before")
    @classmethod
    def _check_every(cls, value: object) -> str:
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            value = f"{value}s" if value <= MAX_INTERVAL_SECONDS else ""
        text = value.strip() if isinstance(value, str) else ""
        match = _EVERY_RE.fullmatch(text)
        if match is None or int(match[1]) * _UNIT_SECONDS[match[2]] > MAX_INTERVAL_SECONDS:
            raise ValueError(
                "expected a positive duration of at most ten years such as 90s, 15m or 2h"
            )
        return text

    @field_validator("anchor", mode="before")
    @classmethod
    def _check_anchor(cls, value: object) -> datetime:
        if isinstance(value, str):
            try:
                value = datetime.fromisoformat(value)
            except ValueError:
                raise ValueError("expected an ISO 8601 instant with offset") from None
        if not isinstance(value, datetime) or value.tzinfo is None or value.utcoffset() is None:
            raise ValueError("expected an aware instant (with Z or an offset)")
        try:
            return value.astimezone(UTC).replace(microsecond=0)
        except OverflowError:
            raise ValueError("the instant is outside the years 1-9999 in UTC") from None

    @field_serializer("anchor")
    def _dump_anchor(self, value: datetime) -> str:
        return value.strftime("%Y-%m-%dT%H:%M:%SZ")

    @property
    def seconds(self) -> int:
        match = _EVERY_RE.fullmatch(self.every)
        assert match is not None
        return int(match[1]) * _UNIT_SECONDS[match[2]]

    def compact(self) -> str:
        if self.anchor == _EPOCH:
            return f"every:{self.every}"
        return f"every:{self.every}@{self._dump_anchor(self.anchor)}"


Rule = Annotated[
    DailyRule
    | WeekdaysRule
    | WeeklyRule
    | MonthlyRule
    | OnceRule
    | RRuleRule
    | CronRule
    | IntervalRule,
    Field(discriminator="kind"),
]
_ADAPTER: TypeAdapter[Rule] = TypeAdapter(Rule)
_RULE_TYPES = (
    DailyRule,
    WeekdaysRule,
    WeeklyRule,
    MonthlyRule,
    OnceRule,
    RRuleRule,
    CronRule,
    IntervalRule,
)


def _invalid(exc: ValidationError, source: object) -> InvalidRule:
    """The rule as a whole is the field; the reason lists each failing part and its value."""
    parts = []
    for error in exc.errors(include_url=False):
        loc = ".".join(str(x) for x in error["loc"] if x not in _KINDS) or "rule"
        message = str(error["msg"]).removeprefix("Value error, ")
        parts.append(f"{loc}: {message} (got {shown(error.get('input'))})")
    return InvalidRule("rule", source, f"{shown(source)} is not a valid rule: " + "; ".join(parts))


_KINDS = {"daily", "weekdays", "weekly", "monthly", "once", "rrule", "cron", "interval"}


def _from_mapping(data: Mapping[str, Any], source: object) -> Rule:
    payload = dict(data)
    for name, value in payload.items():
        if not isinstance(name, str):
            raise InvalidRule("rule", source, f"field names are text, got {shown(name)}")
        if isinstance(value, str):
            check_text(name, value, MAX_RULE_TEXT, InvalidRule)
    version = payload.pop("version", RULE_VERSION)
    if type(version) is not int or version != RULE_VERSION:
        raise InvalidRule(
            "version", version, f"unsupported rule version {shown(version)} (expected 1)"
        )
    kind = payload.get("kind")
    if not isinstance(kind, str) or kind not in _KINDS:
        allowed = ", ".join(sorted(_KINDS))
        raise InvalidRule("kind", kind, f"unknown rule kind {shown(kind)} (use one of {allowed})")
    try:
        return _ADAPTER.validate_python(payload)
    except ValidationError as exc:
        raise _invalid(exc, source) from None


def _from_text(text: str) -> Rule:
    stripped = text.strip()
    if stripped.startswith("{"):
        try:
            data = json.loads(stripped)
        except json.JSONDecodeError as exc:
            raise InvalidRule("rule", text, f"invalid JSON {shown(text)}: {exc.msg}") from None
        if not isinstance(data, dict):
            raise InvalidRule("rule", text, f"expected a JSON object, got {shown(text)}")
        return _from_mapping(data, text)
    head, sep, body = stripped.partition(":")
    head_kind, at_sep, at = stripped.partition("@")
    payload: dict[str, Any]
    if head_kind in ("daily", "weekdays") and at_sep:
        payload = {"kind": head_kind, "at": at}
    elif not sep:
        raise InvalidRule(
            "rule",
            text,
            f"cannot parse {shown(text)} (examples: daily@08:00, weekly:mon,fri@18:30, "
            "monthly:last@09:00, once:2026-12-24T18:00, cron:30 2 * * *, every:15m)",
        )
    elif head == "weekly":
        days, _, at = body.rpartition("@")
        payload = {"kind": "weekly", "days": days, "at": at}
    elif head == "monthly":
        day, _, at = body.rpartition("@")
        payload = {"kind": "monthly", "day": "last" if day == "last" else _int(day, text), "at": at}
    elif head == "once":
        payload = {"kind": "once", "at": body}
    elif head in ("cron", "cron+anchored", "cron+wall_clock"):
        wildcard = head.partition("+")[2] or CronWildcard.WALL_CLOCK.value
        payload = {"kind": "cron", "expr": body, "wildcard": wildcard}
    elif head == "rrule":
        payload = {"kind": "rrule", "rrule": body}
        first, semi, rest = body.partition(";")
        if first.upper().startswith("DTSTART="):
            payload = {"kind": "rrule", "rrule": rest if semi else "", "dtstart": first[8:]}
    elif head == "every":
        every, at_sep2, anchor = body.partition("@")
        payload = {"kind": "interval", "every": every}
        if at_sep2:
            payload["anchor"] = anchor
    else:
        raise InvalidRule("kind", head, f"unknown rule kind {shown(head)} in {shown(text)}")
    return _from_mapping(payload, text)


def _int(value: str, text: str) -> int | str:
    # ASCII digits only: str.isdigit() is true for "٣" and "²" too.
    return int(value) if _DAY_RE.fullmatch(value) else value


def parse_rule(value: str | Mapping[str, Any] | _Rule) -> Rule:
    """Parse the compact text form, JSON text, a mapping (JSON form) or return a model as is."""
    if isinstance(value, _RULE_TYPES):
        return value
    if isinstance(value, str):
        return _from_text(check_text("rule", value, MAX_RULE_TEXT, InvalidRule))
    if isinstance(value, Mapping):
        return _from_mapping(value, dict(value))
    raise InvalidRule("rule", value, f"expected text or a mapping, got {shown(value)}")


def rule_to_json(rule: Rule) -> dict[str, Any]:
    """The persisted JSON form: ``{"version": 1, "kind": ..., ...}`` (parse_rule reads it)."""
    data: dict[str, Any] = {"version": RULE_VERSION}
    data.update(rule.model_dump(mode="json"))
    return data
