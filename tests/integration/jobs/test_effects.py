"""Effect-side deduplication: a re-run after a crash does not repeat the effect."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest

import jobs
from jobs import effects
from jobs.model import Job

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def job(job_id: int, key: str | None) -> Job:
    return Job(job_id, "q", "send_push", {}, 1, 10, key, None, 0, T0, T0, 1)


def test_record_once_is_true_once_and_rolls_back_with_the_transaction(
    conn: psycopg.Connection[Any],
) -> None:
    key = effects.effect_key(job(42, None), "push")
    assert key == "push:job:42"
    with conn.transaction(force_rollback=True):
        assert effects.record_once(conn, key, job_id=42)
    # The rolled-back record is gone: the effect may (must) still happen.
    assert effects.record_once(conn, key, job_id=42, detail={"provider": "sim"})
    assert not effects.record_once(conn, key, job_id=42)
    conn.commit()
    assert conn.execute("SELECT count(*) FROM job_effects").fetchone() == (1,)


def test_effect_key_follows_the_idempotency_key_across_copies() -> None:
    assert effects.effect_key(job(1, "r:42:2026-10-27"), "push") == effects.effect_key(
        job(2, "r:42:2026-10-27"), "push"
    )
    assert effects.effect_key(job(1, None), "push") != effects.effect_key(job(2, None), "push")


def test_bad_effect_names_are_refused() -> None:
    with pytest.raises(jobs.InvalidJob) as info:
        effects.effect_key(job(1, None), "a:b")
    assert info.value.field == "effect"


def test_recorded_and_record_many_work_on_a_batch_in_one_statement_each(
    conn: psycopg.Connection[Any],
) -> None:
    keys = [effects.effect_key(job(i, None), "push") for i in range(1, 501)]
    assert effects.recorded(conn, keys) == set()
    # Record-after-send for the first 300: all are new.
    assert effects.record_many(conn, keys[:300], job_ids=list(range(1, 301))) == set(keys[:300])
    conn.commit()
    # Check-before-send for the whole batch: exactly the recorded ones come back.
    assert effects.recorded(conn, keys) == set(keys[:300])
    # Recording the whole batch again returns only the 200 not recorded before.
    assert effects.record_many(conn, keys, job_ids=list(range(1, 501))) == set(keys[300:])
    conn.commit()
    rows = conn.execute("SELECT effect_key, job_id FROM job_effects").fetchall()
    assert len(rows) == 500
    assert dict(rows)[keys[41]] == 42


def test_record_many_dedupes_within_the_call_and_rolls_back_with_the_transaction(
    conn: psycopg.Connection[Any],
) -> None:
    with conn.transaction(force_rollback=True):
        assert effects.record_many(conn, ["b", "a", "b"], job_ids=[2, 1, 3]) == {"a", "b"}
        assert effects.recorded(conn, ["a", "b", "c"]) == {"a", "b"}  # in the caller's transaction
    # The rolled-back records are gone.
    assert effects.recorded(conn, ["a", "b"]) == set()
    assert effects.record_many(conn, ["b", "a", "b"], job_ids=[2, 1, 3]) == {"a", "b"}
    assert conn.execute("SELECT job_id FROM job_effects WHERE effect_key = 'b'").fetchone() == (2,)
    # Without job ids, and with nothing to do (no statement needed).
    assert effects.record_many(conn, ["c", "a"], now=T0) == {"c"}
    assert conn.execute(
        "SELECT job_id, recorded_at FROM job_effects WHERE effect_key = 'c'"
    ).fetchone() == (None, T0)
    assert effects.record_many(conn, []) == set()
    assert effects.recorded(conn, []) == set()
    # record_once and record_many share the table: either sees the other's records.
    assert not effects.record_once(conn, "a")
    assert effects.record_once(conn, "d")
    assert effects.recorded(conn, ["d"]) == {"d"}


def test_record_many_refuses_bad_keys_and_mismatched_job_ids(
    conn: psycopg.Connection[Any],
) -> None:
    with pytest.raises(jobs.InvalidJob) as info:
        effects.record_many(conn, ["ok", ""])
    assert info.value.field == "key"
    with pytest.raises(jobs.InvalidJob):
        effects.recorded(conn, ["x" * 601])
    with pytest.raises(jobs.InvalidJob) as info:
        effects.record_many(conn, ["a", "b"], job_ids=[1])
    assert info.value.field == "job_ids"
    with pytest.raises(jobs.InvalidJob) as info:
        effects.record_many(conn, ["a"], now=datetime(2026, 1, 1))
    assert info.value.field == "now"
    assert conn.execute("SELECT count(*) FROM job_effects").fetchone() == (0,)
