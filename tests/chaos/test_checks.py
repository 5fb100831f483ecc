"""The chaos suite's checks can fail: each defect they look for, planted, is reported.

A small healthy state is built the way a run leaves it (schedule occurrences enqueued by a real
tick, an order with its job, event and projected job, every job succeeded with one run and one
effect): :func:`check` finds nothing. Then each defect in turn, inside a transaction that is
rolled back, must produce the failure that names it. Runs in the default suite (about 2 s).
"""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest

import jobs
from scheduler import Scheduler
from tests.chaos.harness import check, create_schedules, create_tables, percentiles
from tests.chaos.producer import place_order
from timezones import FrozenClock

T0 = datetime(2026, 3, 29, 0, 30, tzinfo=UTC)
STOP = T0 + timedelta(seconds=30)

DEFECTS = [
    ("a lost occurrence", "DELETE FROM jobs WHERE id = (SELECT min(id) FROM jobs"
     " WHERE job_type = 'chaos.tick')", "missing"),
    ("an occurrence that should not exist", "UPDATE jobs SET payload = jsonb_set(payload,"
     " '{tockwork_schedule,occurrence}', '\"2026-03-29T00:30:01Z\"') WHERE id = (SELECT min(id)"
     " FROM jobs WHERE job_type = 'chaos.tick')", "extra"),
    ("a schedule that missed", "UPDATE schedules SET missed_count = 1", "missed 1"),
    ("a scheduler that stopped early", "UPDATE schedules SET next_run_at = next_run_at"
     " - interval '1 hour'", "behind the stop"),
    ("an order without its job", "DELETE FROM jobs WHERE job_type = 'chaos.order'",
     "orders without a job"),
    ("an order without its event", "DELETE FROM outbox_events", "events do not match"),
    ("an event never projected", "UPDATE outbox_events SET processed_at = NULL",
     "not processed"),
    ("a job left leased", "UPDATE jobs SET status = 'leased', locked_until = now()"
     " WHERE id = (SELECT min(id) FROM jobs)", "still leased"),
    ("an effect made twice", "INSERT INTO chaos_effects (job_id, effect_key, via)"
     " SELECT job_id, effect_key, via FROM chaos_effects LIMIT 1", "more than once"),
    ("an effect never made", "DELETE FROM chaos_effects WHERE job_id = (SELECT min(job_id)"
     " FROM chaos_effects)", "without their effect"),
    ("a job dead without having run", "UPDATE jobs SET status = 'dead' WHERE id = (SELECT"
     " min(id) FROM jobs); DELETE FROM chaos_runs WHERE job_id = (SELECT min(id) FROM jobs)",
     "dead without having run"),
]  # fmt: skip


def healthy_state(db_url: str) -> None:
    with psycopg.connect(db_url, autocommit=True) as conn:
        create_tables(conn)
        with conn.transaction():
            create_schedules(conn, 6, random.Random(1), now=T0)
    replica = Scheduler(db_url, clock=FrozenClock(STOP), lookahead=timedelta(seconds=2))
    try:
        replica.tick()
    finally:
        replica.close()
    with psycopg.connect(db_url, autocommit=True) as conn:
        order = place_order(conn, None)
        jobs.enqueue(conn, "chaos.projected", {"order": order}, idempotency_key=f"p:{order}")
        for statement in (
            "UPDATE outbox_events SET processed_at = now()",
            "UPDATE jobs SET status = 'succeeded', completed_at = now()",
            "INSERT INTO chaos_runs (job_id, attempt, job_type) SELECT id, 1, job_type FROM jobs",
            "INSERT INTO chaos_effects (job_id, effect_key, via)"
            " SELECT id, 'k' || id, 'completion' FROM jobs",
        ):
            conn.execute(statement)


def run_check(conn: psycopg.Connection[Any], logs: list[str]) -> list[str]:
    failures, _figures = check(conn, stopped_at=STOP, logs=logs)
    return failures


@pytest.fixture
def healthy(db_url: str) -> str:
    healthy_state(db_url)
    return db_url


def test_a_healthy_state_passes_and_every_planted_defect_is_named(
    healthy: str, tmp_path: Path
) -> None:
    log = tmp_path / "worker-0.err"
    log.write_text('{"message": "worker started"}\n')
    with psycopg.connect(healthy) as conn:
        assert run_check(conn, [str(log)]) == []
        ticks = conn.execute("SELECT count(*) FROM jobs WHERE job_type = 'chaos.tick'").fetchone()
        assert ticks is not None and ticks[0] > 20  # the tick enqueued 30 s of occurrences
        for name, statement, expected in DEFECTS:
            with conn.transaction(force_rollback=True):
                for part in statement.split(";"):
                    conn.execute(part)
                failures = run_check(conn, [str(log)])
            assert any(expected in f for f in failures), (name, failures)
        assert run_check(conn, [str(log)]) == []  # every defect was rolled back

    log.write_text("Traceback (most recent call last):\n  File ...\nValueError: x\n")
    with psycopg.connect(healthy) as conn:
        assert any("tracebacks" in f for f in run_check(conn, [str(log)]))


def test_percentiles() -> None:
    assert percentiles([]) == "-"
    assert percentiles([i / 1000 for i in range(1, 101)]) == "50 ms/99 ms (n=100)"
