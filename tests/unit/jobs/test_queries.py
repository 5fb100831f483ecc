"""The named-query loader."""

from __future__ import annotations

import pytest

from jobs.queries import load, parse_named


def test_every_query_is_loaded_by_name() -> None:
    queries = load("jobs")
    assert {"enqueue", "claim", "complete", "heartbeat", "reap", "release"} <= set(queries)
    assert queries["claim"].lstrip().startswith("-- Lease") or "SKIP LOCKED" in queries["claim"]
    assert all(q.strip() for q in queries.values())


def test_blocks_split_at_name_lines() -> None:
    parsed = parse_named("-- name: a\nSELECT 1;\n-- name: b\nSELECT 2;\n")
    assert parsed == {"a": "SELECT 1;", "b": "SELECT 2;"}


def test_duplicate_names_are_an_error() -> None:
    with pytest.raises(ValueError, match="twice"):
        parse_named("-- name: a\nSELECT 1;\n-- name: a\nSELECT 2;\n")
