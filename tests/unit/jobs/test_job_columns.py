"""jobs.JobColumns, the typed batch of enqueue_columns: appended jobs take JobSpec's defaults,
an optional column appears with its first value (the jobs before it get the default), and a
subset keeps every column parallel."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any, cast

import pytest

import jobs
import jobs.internal
from jobs.internal import DEFAULT_MAX_ATTEMPTS, JobColumns


def test_append_fills_the_defaults_and_leaves_the_optional_columns_out() -> None:
    columns = JobColumns()
    columns.append("send", "{}")
    at = datetime(2026, 3, 8, 7, 0, tzinfo=UTC)
    org = uuid.uuid4()
    columns.append(
        "send", '{"n":1}', queue="q", idempotency_key="k", organization_id=org, run_at=at,
        priority=3, max_attempts=2,
    )  # fmt: skip
    assert len(columns) == 2
    assert columns == JobColumns(
        organization_ids=[None, org],
        queues=["default", "q"],
        job_types=["send", "send"],
        payloads=["{}", '{"n":1}'],
        idempotency_keys=[None, "k"],
        priorities=[0, 3],
        run_ats=[None, at],
        max_attempts=[DEFAULT_MAX_ATTEMPTS, 2],
    )
    assert (columns.concurrency_keys, columns.unique_keys, columns.on_active) == (None,) * 3
    params = columns.params()
    assert params["concurrency_keys"] == [None, None]
    assert params["unique_keys"] == [None, None]
    assert params["on_active"] == ["keep", "keep"]


def test_an_optional_column_appears_with_its_first_value() -> None:
    columns = JobColumns()
    columns.append("send", "{}")
    columns.append("send", "{}", concurrency_key="user-1")
    columns.append("send", "{}", unique_key="u", on_active="replace")
    columns.append("send", "{}")
    assert columns.concurrency_keys == [None, "user-1", None, None]
    assert columns.unique_keys == [None, None, "u", None]
    assert columns.on_active == ["keep", "keep", "replace", "keep"]


def test_subset_takes_the_rows_in_the_order_given() -> None:
    columns = JobColumns()
    for n in range(3):
        columns.append(f"t{n}", f'{{"n":{n}}}', concurrency_key=f"c{n}")
    picked = columns.subset([2, 0])
    assert picked.job_types == ["t2", "t0"]
    assert picked.payloads == ['{"n":2}', '{"n":0}']
    assert picked.concurrency_keys == ["c2", "c0"]
    assert picked.unique_keys is None
    assert len(picked) == 2


def test_it_is_what_the_scheduler_builds_its_batches_with() -> None:
    assert jobs.internal.JobColumns is JobColumns
    assert "JobColumns" not in jobs.__all__  # for the scheduler: jobs.internal


def test_a_mapping_with_a_name_that_is_not_a_column_is_refused_before_any_statement() -> None:
    with pytest.raises(jobs.InvalidJob) as caught:
        jobs.internal.enqueue_columns(cast(Any, None), {"queues": ["q"], "payload": ["{}"]})
    assert caught.value.field == "columns"
    assert caught.value.value == ["payload", "queues"]
