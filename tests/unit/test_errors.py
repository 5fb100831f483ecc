"""One root for bad input across the packages: ``InvalidInput`` with ``field`` and ``value``."""

from __future__ import annotations

import pytest

import jobs
import scheduler
import timezones
from jobs.retry import RetryPolicy
from timezones.errors import InvalidInput, TockworkError, shown


def test_every_package_shares_the_roots() -> None:
    assert jobs.InvalidInput is scheduler.InvalidInput is timezones.InvalidInput
    inputs: tuple[type[Exception], ...] = (
        jobs.InvalidJob,
        scheduler.InvalidSchedule,
        timezones.InvalidRule,
    )
    for cls in inputs:
        assert issubclass(cls, InvalidInput)
        assert issubclass(cls, ValueError)
    roots: tuple[type[Exception], ...] = (
        jobs.JobsError,
        scheduler.SchedulerError,
        timezones.TimezoneError,
    )
    for cls in roots:
        assert issubclass(cls, TockworkError)
    assert not issubclass(jobs.MigrationError, InvalidInput)


def test_input_errors_name_field_and_value() -> None:
    with pytest.raises(InvalidInput) as info:
        RetryPolicy(jitter=2.0)
    assert (info.value.field, info.value.value) == ("jitter", 2.0)
    assert str(info.value) == "invalid jitter 2.0: must be from 0 to 1"
    with pytest.raises(InvalidInput) as info:
        timezones.get_zone("America/Chicgo")
    assert info.value.field == "zone"


def test_messages_embedding_a_value_are_bounded() -> None:
    error = jobs.InvalidJob("queue", "q" * 1_000_000, "too long")
    assert len(str(error)) < 250
    assert shown("x" * 10) == repr("x" * 10)
