"""The schedule operations are steps: input checked before the first statement, the clock next.

The sync and async functions run the same generator, so what it yields first is what both do
first (no database here: the generators are driven by hand).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from jobs.steps import Steps
from scheduler import InvalidSchedule
from scheduler import schedules as s
from scheduler.queries import query

GOOD: dict[str, Any] = {"job_type": "reminder", "rule": "daily@08:00", "zone": "Europe/Paris"}
NOW = datetime(2026, 6, 1, tzinfo=UTC)


def first_statement(steps: Steps[Any]) -> str:
    step = next(steps)
    assert isinstance(step, tuple), step  # a statement, not a COPY or a savepoint
    return step[0]


@pytest.mark.parametrize(
    "steps",
    [
        lambda: s._create_steps({**GOOD, "zone": "Europe/Nowhere"}, None),
        lambda: s._create_steps(GOOD, datetime(2026, 6, 1)),
        lambda: s._create_many_steps([GOOD, {**GOOD, "rule": "daily@25:00"}], None),
        lambda: s._change_steps(0, {}, None, pause=s._Pause(True)),
        lambda: s._change_steps(1, {"zone": "Europe/Nowhere"}, None, pause=None),
        lambda: s._change_steps(1, {"key": "k"}, None, pause=None),
        lambda: s._delete_steps(1, datetime(2026, 6, 1)),
    ],
)
def test_bad_input_is_refused_before_any_statement(steps: Any) -> None:
    with pytest.raises(InvalidSchedule):
        first_statement(steps())


def test_a_create_reads_the_clock_first_unless_given() -> None:
    assert first_statement(s._create_steps(GOOD, None)) == query("pg_now")
    assert first_statement(s._create_many_steps([GOOD], None)) == query("pg_now")
    assert first_statement(s._create_steps(GOOD, NOW)) == query("schedule_insert")


def test_a_change_locks_the_row_before_it_reads_the_clock() -> None:
    assert first_statement(s._change_steps(1, {}, None, pause=s._Pause(True))) == query(
        "schedule_get_for_update"
    )
    assert first_statement(s._delete_steps(1, None)) == query("schedule_get_for_update")
