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
