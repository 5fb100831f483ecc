"""The schedule's fields are declared once (ScheduleSpec) and everything else derives from it.

Pure: no database. What a bad input writes (nothing) is checked against PostgreSQL in
tests/integration/scheduler/test_schedules.py.
"""

from __future__ import annotations

import inspect
import re
from datetime import UTC, datetime, time, timedelta
from pathlib import Path
from typing import Annotated, Any
from uuid import UUID

import pytest

import scheduler
from scheduler import CatchUp, InvalidSchedule, QuietAction, QuietHours
from scheduler.definitions import Definition, parse_definitions
from scheduler.spec import ScheduleSpec, Setting
from timezones import DailyRule

SQL_DIR = Path(scheduler.__file__).parent / "sql"
BASE = {"job_type": "r", "rule": "daily@08:00", "zone": "UTC"}


def spec(**fields: Any) -> ScheduleSpec:
    return ScheduleSpec.validated({**BASE, **fields})


def schedule_statement(verb: str) -> str:
    """The named query (whatever its name) that starts with ``verb`` on the schedules table."""
    found = []
    for path in sorted(SQL_DIR.glob("*.sql")):
        for block in re.split(r"^-- name: .*$", path.read_text(encoding="utf-8"), flags=re.M):
            body = "\n".join(line for line in block.splitlines() if not line.startswith("--"))
            if body.strip().startswith(verb):
                found.append(body)
    assert len(found) == 1, f"expected one query starting with {verb!r}, found {len(found)}"
    return found[0]


def placeholders(statement: str) -> set[str]:
    return set(re.findall(r"%\((\w+)\)s", statement))


def test_create_schedule_keywords_mirror_the_spec() -> None:
    """create_schedule spells the fields out for type checkers: same names, order, defaults."""
    params = inspect.signature(scheduler.create_schedule).parameters
    fields = [name for name in params if name not in ("conn", "now", "allow_past")]
    assert fields == list(ScheduleSpec.model_fields)
    for name in fields:
        default = params[name].default
        if default is inspect.Parameter.empty:
            assert ScheduleSpec.model_fields[name].is_required(), name
            continue
        # Passing the keyword's default gives what leaving the field out gives.
        given, omitted = spec(**{name: default}), spec()
        assert given.params() == omitted.params(), name


def test_the_derived_field_sets() -> None:
    settings = ScheduleSpec.settings()
    assert list(settings) == list(ScheduleSpec.model_fields)
    assert ScheduleSpec.updatable() == {n for n, s in settings.items() if s.update}
    assert ScheduleSpec.timing() == {n for n, s in settings.items() if s.timing}
    # What update_schedule takes, what a definition sets and syncs: as before the model.
    assert ScheduleSpec.updatable() == {
        "job_type", "rule", "zone", "payload", "queue", "subject", "jitter", "catch_up",
        "catch_up_grace", "catch_up_max", "quiet_hours", "gap", "fold",
        "overlap", "start_at", "end_at", "max_runs", "max_lateness",
    }  # fmt: skip
    assert ScheduleSpec.timing() == {
        "rule", "zone", "gap", "fold", "quiet_hours", "jitter", "start_at", "end_at",
    }  # fmt: skip
    assert Definition.model_fields.keys() == ScheduleSpec.model_fields.keys()
    assert {n for n, s in Definition.settings().items() if s.definition} == {
        "key", "rule", "zone", "job_type", "queue", "payload", "jitter", "catch_up",
        "catch_up_grace", "catch_up_max", "gap", "fold", "overlap", "start_at", "end_at",
        "max_runs", "max_lateness",
    }  # fmt: skip
    assert Definition.synced() == Definition.updatable() - {"subject", "quiet_hours"}


def test_the_sql_parameters_are_the_queries_placeholders() -> None:
    written = set(spec().params())
    insert = placeholders(schedule_statement("INSERT INTO schedules"))
    computed = {"cursor_at", "next_run_at", "next_key", "tzdb", "now", "finished_at"}
    assert written | computed == insert
    update = placeholders(schedule_statement("UPDATE schedules\nSET subject"))
    pause = {"pause_note", "paused_until"}
    assert update <= written | computed | pause | {"id", "superseded", "version_step"}
    assert {"grace", "quiet_start", "quiet_end", "quiet_action"} <= written


def check_colour(value: Any) -> str:
    if value not in ("red", "blue"):
        raise InvalidSchedule("colour", value, "must be 'red' or 'blue'")
    result: str = value
    return result


class Extended(ScheduleSpec):
    colour: Annotated[str, Setting(check_colour, timing=True)] = "red"
    secret: Annotated[str, Setting(check_colour, update=False, definition=False)] = "red"


class ExtendedDefinition(Definition, Extended):
    pass


def test_a_new_field_shows_up_in_every_derived_place() -> None:
    assert "colour" in Extended.updatable() and "secret" not in Extended.updatable()
    assert "colour" in Extended.timing()
    made = Extended.validated({**BASE, "colour": "blue"})
    assert made.params()["colour"] == "blue"
    assert made.changed({"colour": "red"}).differs(made, "colour")
    with pytest.raises(InvalidSchedule) as info:
        Extended.validated({**BASE, "colour": "green"})
    assert info.value.field == "colour"
    assert "colour" in ExtendedDefinition.synced()
    d = ExtendedDefinition.model_validate({"key": "k", "rule": "daily@08:00", "job_type": "t"})
    assert (d.colour, d.queue) == ("red", "maintenance")
    with pytest.raises(ValueError, match="Extra inputs"):
        ExtendedDefinition.model_validate(
            {"key": "k", "rule": "daily@08:00", "job_type": "t", "secret": "blue"}
        )


BAD: list[tuple[dict[str, Any], str]] = [
    ({"job_type": ""}, "job_type"),
    ({"job_type": " padded "}, "job_type"),
    ({"job_type": 5}, "job_type"),
    ({"rule": "daily@25:00"}, "rule"),
    ({"rule": 5}, "rule"),
    ({"rule": {"kind": "fortnightly"}}, "rule"),
    ({"zone": "America/Chicgo"}, "zone"),
    ({"zone": "+05:00"}, "zone"),
    ({"zone": 5}, "zone"),
    ({"payload": [1, 2]}, "payload"),
    ({"payload": {"x": object()}}, "payload"),
    ({"payload": {"x": "nul \u0000"}}, "payload"),
    ({"queue": "Bad Queue"}, "queue"),
    ({"queue": ""}, "queue"),
    ({"key": ""}, "key"),
    ({"key": "k" * 201}, "key"),
    ({"key": 5}, "key"),
    ({"subject": ""}, "subject"),
    ({"subject": True}, "subject"),
    ({"subject": 1.5}, "subject"),
    ({"organization_id": "not-a-uuid"}, "organization_id"),
    ({"organization_id": 5}, "organization_id"),
    ({"jitter": -5}, "jitter"),
    ({"jitter": "5"}, "jitter"),
    ({"jitter": 86_401}, "jitter"),
    ({"jitter": True}, "jitter"),
    ({"max_lateness": -1}, "max_lateness"),
    ({"max_lateness": 0}, "max_lateness"),
    ({"max_lateness": 0.5}, "max_lateness"),
    ({"max_lateness": "60"}, "max_lateness"),
    ({"max_lateness": float("inf")}, "max_lateness"),
    ({"max_lateness": timedelta(days=400)}, "max_lateness"),
    ({"catch_up": "sometimes"}, "catch_up"),
    ({"catch_up_grace": -1}, "catch_up_grace"),
    ({"catch_up_grace": "60"}, "catch_up_grace"),
    ({"catch_up_max": 0}, "catch_up_max"),
    ({"catch_up_max": True}, "catch_up_max"),
    ({"catch_up_max": "5"}, "catch_up_max"),
    ({"catch_up_max": 5.0}, "catch_up_max"),
    ({"overlap": "sometimes"}, "overlap"),
    ({"overlap": 1}, "overlap"),
    ({"start_at": "tomorrow"}, "start_at"),
    ({"start_at": "2026-06-01T08:00"}, "start_at"),  # naive: no offset
    ({"start_at": 5}, "start_at"),
    ({"end_at": datetime(2026, 6, 1, 8, tzinfo=UTC).replace(tzinfo=None)}, "end_at"),
    ({"end_at": "2026-06-01T00:00Z", "start_at": "2026-06-02T00:00Z"}, "end_at"),
    ({"end_at": "2026-06-01T00:00Z", "start_at": "2026-06-01T00:00Z"}, "end_at"),
    ({"max_runs": 0}, "max_runs"),
    ({"max_runs": -1}, "max_runs"),
    ({"max_runs": True}, "max_runs"),
    ({"max_runs": "3"}, "max_runs"),
    ({"quiet_hours": "22:00-07:00"}, "quiet_hours"),
    ({"quiet_hours": {"start": "22:00"}}, "quiet_hours"),
    ({"quiet_hours": {"start": "22:00", "end": "07:00", "colour": 1}}, "quiet_hours"),
    ({"quiet_hours": {"start": "22:00", "end": "22:00"}}, "quiet_hours"),
    ({"quiet_hours": {"start": "10pm", "end": "07:00"}}, "quiet_hours.start"),
    ({"quiet_hours": {"start": "22:00", "end": "7am"}}, "quiet_hours.end"),
    ({"quiet_hours": {"start": "22:00", "end": "07:00", "action": "maybe"}}, "quiet_hours.action"),
    ({"gap": "later"}, "gap"),
    ({"fold": "third"}, "fold"),
    ({"source": "cli"}, "source"),
    ({"bogus": 1}, "bogus"),
]
# ``paused`` takes any value (its truth), so it has no bad input.
NO_BAD_INPUT = {"paused"}


def test_the_table_covers_every_field() -> None:
    covered = {field.split(".")[0] for _, field in BAD}
    assert covered >= set(ScheduleSpec.model_fields) - NO_BAD_INPUT


@pytest.mark.parametrize(("fields", "field"), BAD)
def test_bad_input_names_the_field(fields: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidSchedule) as info:
        spec(**fields)
    assert info.value.field == field
    assert info.value.value == next(iter(fields.values())) or field.startswith("quiet_hours.")


@pytest.mark.parametrize("missing", ["job_type", "rule", "zone"])
def test_missing_required_fields(missing: str) -> None:
    with pytest.raises(InvalidSchedule) as info:
        ScheduleSpec.validated({k: v for k, v in BASE.items() if k != missing})
    assert (info.value.field, info.value.reason) == (missing, "is required")


def test_messages_are_those_of_the_api() -> None:
    with pytest.raises(InvalidSchedule) as info:
        spec(zone=5)
    assert str(info.value) == "invalid zone 5: must be an IANA zone name such as 'Europe/Paris'"
    with pytest.raises(InvalidSchedule) as info:
        spec(jitter=timedelta(days=2))
    assert info.value.reason == "must be at most one day"
    with pytest.raises(InvalidSchedule) as info:
        spec(bogus=1)
    assert str(info.value) == "invalid bogus 1: is not a schedule field"
    # A misspelt field is reported before a wrong value.
    with pytest.raises(InvalidSchedule) as info:
        spec(zone="Mars/Base", bogus=1)
    assert info.value.field == "bogus"


def test_values_are_normalised() -> None:
    s = spec(
        subject=42, jitter=timedelta(minutes=2), catch_up_grace=90.7, gap="skip",
        quiet_hours={"start": time(22, 0), "end": "07:00:00"},
        organization_id="6f1c2d58-6f39-4b43-8d0b-1d1a0f7d2a11", payload=None,
    )  # fmt: skip
    assert (s.subject, s.jitter, s.catch_up_grace, s.gap, s.payload) == ("42", 120, 90, "skip", {})
    assert s.quiet_hours == QuietHours(time(22, 0), time(7, 0), QuietAction.DEFER)
    assert s.organization_id == UUID("6f1c2d58-6f39-4b43-8d0b-1d1a0f7d2a11")
    assert isinstance(s.rule, DailyRule)
    params = s.params()
    assert params["rule"] == '{"version": 1, "at": "08:00", "kind": "daily"}'
    assert (params["quiet_start"], params["quiet_action"]) == (time(22, 0), "defer")
    assert (params["grace"], params["catch_up"], params["payload"]) == (90, "latest", "{}")


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({}, CatchUp.LATEST),
        ({"key": "k"}, CatchUp.ALL),
        ({"key": "k", "subject": "u"}, CatchUp.LATEST),
        ({"key": "k", "catch_up": None}, CatchUp.ALL),
        ({"key": "k", "catch_up": "skip"}, CatchUp.SKIP),
    ],
)
def test_catch_up_defaults_by_kind(fields: dict[str, Any], expected: CatchUp) -> None:
    assert spec(**fields).catch_up is expected


def test_changed_checks_the_whole_and_compares_stored_forms() -> None:
    s = spec(rule="daily@08:00")
    same = s.changed({"rule": {"kind": "daily", "at": "08:00"}})
    assert not same.differs(s, "rule")  # the same rule, written another way
    assert s.changed({"rule": "daily@09:00"}).differs(s, "rule")
    with pytest.raises(InvalidSchedule) as info:
        s.changed({"quiet_hours": {"start": "22:00", "end": "7am"}})
    assert info.value.field == "quiet_hours.end"


DEF = {"key": "x", "rule": "daily@08:00", "job_type": "t"}


@pytest.mark.parametrize(
    ("item", "field"),
    [
        ({"rule": "daily@08:00", "job_type": "t"}, "schedule[0].key"),
        ({**DEF, "key": ""}, "schedule[0].key"),
        ({"key": "x", "rule": "daily@08:00"}, "schedule[0].job_type"),
        ({**DEF, "bogus": 1}, "schedule[0].bogus"),
        ({**DEF, "subject": "u"}, "schedule[0].subject"),
        ({**DEF, "quiet_hours": {"start": "22:00", "end": "07:00"}}, "schedule[0].quiet_hours"),
        ({**DEF, "paused": True}, "schedule[0].paused"),
        ({**DEF, "rule": "cron:61 * * * *"}, "x.rule"),
        ({**DEF, "zone": "America/Chicgo"}, "x.zone"),
        ({**DEF, "jitter": -1}, "x.jitter"),
        ({**DEF, "key": "", "zone": "America/Chicgo"}, "schedule[0].key"),
    ],
)
def test_definition_errors_name_the_entry(item: dict[str, Any], field: str) -> None:
    """Shape errors name the position; a refused value in a keyed entry names the key."""
    with pytest.raises(InvalidSchedule) as info:
        parse_definitions([item])
    assert info.value.field == field


def test_definitions_take_the_spec_values_and_their_own_defaults() -> None:
    (d,) = parse_definitions([{**DEF, "jitter": 30.9, "payload": {"b": 1, "a": 2}}])
    assert (d.zone, d.queue, d.catch_up, d.jitter, d.key) == ("UTC", "maintenance", "all", 30, "x")
    assert isinstance(d, ScheduleSpec) and isinstance(d.rule, DailyRule)
    with pytest.raises(InvalidSchedule) as info:
        parse_definitions([DEF, DEF])
    assert info.value.field == "schedule[1].key"
