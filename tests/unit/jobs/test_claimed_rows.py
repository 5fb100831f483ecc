"""A claimed row becomes a Job through jobs.store's writable twin of Job: the result must be a
Job in every respect (type, equality, hash, frozen, replace, pickle) and equal to the one Job's
own constructor builds from the same row, including the defaulted trailing fields."""

from __future__ import annotations

import dataclasses
import pickle
import uuid
from datetime import UTC, datetime
from typing import Any

import pytest

from jobs.model import Job
from jobs.store import _job, _WritableJob

AT = datetime(2026, 3, 7, 8, 0, tzinfo=UTC)
ROW = (
    7, "reminders", "reminder", {"subject": "user-1"}, 2, 10, "key", uuid.UUID(int=5), 3, AT,
    AT, 41, "00-trace-01", "state", AT,
)  # fmt: skip


def test_the_twin_has_jobs_fields_in_jobs_order() -> None:
    assert [f.name for f in dataclasses.fields(_WritableJob)] == [
        f.name for f in dataclasses.fields(Job)
    ]
    assert _WritableJob.__slots__ == Job.__slots__
    assert not hasattr(_WritableJob(*ROW), "__dict__")


@pytest.mark.parametrize("row", [ROW, ROW[:12]], ids=["every column", "defaults"])
def test_a_row_becomes_the_job_jobs_constructor_builds(row: tuple[Any, ...]) -> None:
    job = _job(row)
    expected = Job(*row)
    assert type(job) is Job
    assert job == expected and expected == job
    assert repr(job) == repr(expected)
    assert dataclasses.astuple(job) == dataclasses.astuple(expected)
    assert pickle.loads(pickle.dumps(job)) == expected
    assert dataclasses.replace(job, attempt=3) == dataclasses.replace(expected, attempt=3)


def test_the_job_is_frozen() -> None:
    job = _job(ROW)
    with pytest.raises(dataclasses.FrozenInstanceError):
        job.attempt = 3  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        del job.payload
    assert job.attempt == 2


def test_jobs_hash_is_kept() -> None:
    hashable = (7, "q", "t", None, 1, 10, None, None, 0, AT, AT, 1)
    assert hash(_job(hashable)) == hash(Job(*hashable))
