"""The named-query loader: one loader, every package's files, read-only, names defined once."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from jobs.model import Job
from jobs.queries import load, parse_named, query_files


def test_every_query_is_loaded_by_name() -> None:
    queries = load("jobs")
    assert {"job_enqueue", "job_claim", "job_complete", "job_heartbeat", "job_reap",
            "job_release"} <= set(queries)  # fmt: skip
    assert (
        queries["job_claim"].lstrip().startswith("-- Lease")
        or "SKIP LOCKED" in queries["job_claim"]
    )
    assert all(q.strip() for q in queries.values())


def test_the_loader_reads_every_query_file_of_a_package_but_the_schema() -> None:
    files = {f.name for f in query_files("jobs")}
    assert {"job.sql", "job_attempt.sql", "job_effect.sql", "outbox_event.sql"} <= files
    assert "schema.sql" not in files
    assert "outbox_event_claim" in load("jobs")  # from outbox_event.sql
    assert "schedule_due_lock" in load("scheduler")  # from scheduler/sql/schedule.sql
    assert "schedule_due_lock" not in load("jobs")


def test_loaded_queries_are_read_only() -> None:
    queries = load("jobs")
    with pytest.raises(TypeError):
        queries["job_claim"] = "SELECT 1"  # type: ignore[index]
    assert load("jobs") is queries  # loaded once


def test_blocks_split_at_name_lines() -> None:
    parsed = parse_named("-- name: a\nSELECT 1;\n-- name: b\nSELECT 2;\n")
    assert parsed == {"a": "SELECT 1;", "b": "SELECT 2;"}


def test_duplicate_names_are_an_error() -> None:
    with pytest.raises(ValueError, match="twice"):
        parse_named("-- name: a\nSELECT 1;\n-- name: a\nSELECT 2;\n")


def test_a_name_in_two_files_of_a_package_is_an_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "twofiles_pkg"
    (root / "sql").mkdir(parents=True)
    (root / "__init__.py").write_text("")
    (root / "sql" / "a.sql").write_text("-- name: thing_get\nSELECT 1;\n")
    (root / "sql" / "b.sql").write_text("-- name: thing_get\nSELECT 2;\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ValueError, match=r"'thing_get' is defined in both a\.sql and b\.sql"):
        load("twofiles_pkg")


@pytest.mark.parametrize(
    "name",
    [
        "job_claim",
        "job_claim_unlimited",
        "job_claim_unlimited_skip_scan",
        "job_claim_fair",
        "job_claim_lookup",
    ],
)
def test_a_claim_returns_the_columns_of_job_in_its_field_order(name: str) -> None:
    """jobs.store._job builds a Job from a claimed row positionally: the statement's columns
    must be Job's fields in order (the column is 'attempts' where the field is 'attempt')."""
    text = load("jobs")[name]
    if "RETURNING" in text:  # the claims: the rows they updated
        listed = text.rsplit("RETURNING", 1)[1].split(";", 1)[0]
    else:  # job_claim_lookup: the rows still leased under a claim id
        found = re.search(r"^SELECT\s+(.*?)\s+FROM jobs\b", text, re.S | re.M)
        assert found is not None, f"{name}: no column list found"
        listed = found.group(1)
    columns = [c.strip().removeprefix("j.") for c in listed.split(",")]
    fields = [f.name for f in dataclasses.fields(Job)]
    assert columns == ["attempts" if f == "attempt" else f for f in fields]
