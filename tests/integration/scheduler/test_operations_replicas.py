"""Schedule operations under three scheduler replicas as processes (issue 24).

One run of three replica processes (tests/integration/scheduler/replica.py) on a shared
simulated clock covers, at once: an every-minute maintenance job that takes 2.5 minutes under
``overlap="skip"`` (the test process is its worker, on the same clock), a schedule with
``max_runs`` that every replica races for, and a schedule paused until a time; one replica is
SIGKILLed half way. Then a backfill over a half-run window is run as a ``tockwork`` process,
SIGKILLed after its first committed batch and run again, while the replicas tick (marked
``slow``: about 20 s, mostly starting processes; ``make test-slow``).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest

import scheduler
from jobs.retry import SUCCEEDED
from jobs.store import Finished, PgJobStore
from tests.integration.scheduler.replica import SimClock
from tests.processes import ROOT, start_tockwork

ORIGIN = datetime(2026, 6, 1, 0, 0, tzinfo=UTC)
SIM_MINUTES = 30
SPEED = 360.0  # simulated seconds per real second: 30 simulated minutes in 5 real seconds
LEASE = timedelta(hours=1)
RUN_FOR = timedelta(minutes=2, seconds=30)


def start_replica(db_url: str, go: Path, end: datetime, n: int, tmp: Path) -> Any:
    argv = [
        sys.executable, "-m", "tests.integration.scheduler.replica", "--url", db_url,
        "--origin", ORIGIN.isoformat(), "--real-origin", "0", "--go", str(go),
        "--speed", str(SPEED), "--end", end.isoformat(), "--lookahead", "120",
        "--pause", "0.005", "--name", f"replica-{n}",
    ]  # fmt: skip
    with open(tmp / f"replica-{n}.err", "wb") as err:
        return subprocess.Popen(
            argv,
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": ROOT},
            stdout=subprocess.DEVNULL,
            stderr=err,
        )


def test_three_replicas_overlap_skip_max_runs_and_pause_until(
    conn: psycopg.Connection[Any], db_url: str, tmp_path: Path
) -> None:
    long = scheduler.create_schedule(
        conn, job_type="long", rule="every:1m", zone="UTC", key="long", queue="long", now=ORIGIN
    )
    limited = scheduler.create_schedule(
        conn, job_type="limited", rule="every:1m", zone="UTC", subject="u", max_runs=7,
        now=ORIGIN,
    )  # fmt: skip
    paused = scheduler.create_schedule(
        conn, job_type="paused", rule="every:1m", zone="UTC", subject="v", now=ORIGIN
    )
    until = ORIGIN + timedelta(minutes=10, seconds=30)
    scheduler.pause(conn, paused.id, note="maintenance window", until=until, now=ORIGIN)
    conn.commit()
    assert long.overlap is scheduler.Overlap.SKIP

    end = ORIGIN + timedelta(minutes=SIM_MINUTES)
    go = tmp_path / "go"
    replicas = [start_replica(db_url, go, end, n, tmp_path) for n in range(3)]
    # The clock starts once every replica has imported and waits for the go file.
    deadline = time.monotonic() + 60
    while len(list(tmp_path.glob("go.ready.*"))) < len(replicas):
        assert time.monotonic() < deadline, "the replicas did not start"
        time.sleep(0.01)
    real_origin = time.time() + 0.05
    go.write_text(repr(real_origin))
    clock = SimClock(ORIGIN, real_origin, SPEED, end)
    worker = psycopg.connect(db_url, autocommit=True)
    store = PgJobStore(worker)
    running: list[tuple[Any, datetime]] = []
    most_active = 0
    killed = False
    try:
        # The worker of the long job, on the replicas' clock: each run takes RUN_FOR. Before
        # it ends a run, it counts the long job's active jobs: a job enqueued beside a running
        # one would still be waiting (only this worker claims them).
        while any(r.poll() is None for r in replicas):
            now = clock.now()
            active = worker.execute(
                "SELECT count(*) FROM jobs_all WHERE job_type = 'long'"
                " AND status IN ('pending', 'leased', 'retrying')"
            ).fetchone()
            most_active = max(most_active, active[0] if active else 0)
            for job, started in list(running):
                if now - started >= RUN_FOR:
                    store.complete([Finished(job, SUCCEEDED, started, 1.0)], "w", now)
                    running.remove((job, started))
            for job in store.claim({"long": 5}, "w", LEASE, now):
                running.append((job, now))
            assert len(running) <= 1, "two runs of the long job at once"
            if not killed and now >= ORIGIN + timedelta(minutes=SIM_MINUTES // 2):
                replicas[0].send_signal(signal.SIGKILL)  # mid-run, whatever it was doing
                killed = True
            time.sleep(0.005)
    finally:
        for r in replicas:
            if r.poll() is None:
                r.kill()
            r.wait()
        worker.close()
    errors = {n: (tmp_path / f"replica-{n}.err").read_text()[-2000:] for n in range(3)}
    assert [r.returncode for r in replicas[1:]] == [0, 0], errors

    # overlap=skip: never two of the long job's jobs active at once, each occurrence decided once.
    assert most_active == 1
    rows = conn.execute(
        "SELECT payload->'tockwork_schedule'->>'occurrence' FROM jobs_all WHERE job_type = 'long'"
    ).fetchall()
    s = scheduler.get_schedule(conn, long.id)
    skipped = [
        r[0]
        for r in conn.execute(
            "SELECT occurrence_key FROM schedule_skips WHERE schedule_id = %s AND kind = 'overlap'",
            (long.id,),
        ).fetchall()
    ]
    enqueued = [r[0] for r in rows]
    assert len(skipped) == s.overlap_skipped_count > 0
    assert not set(skipped) & set(enqueued) and len(set(enqueued)) == len(enqueued)
    decided = s.enqueued_count + s.overlap_skipped_count + s.missed_count
    assert decided == SIM_MINUTES  # 00:01 ... 00:30, each once
    # Each run takes 2.5 minutes: at most one start every 3 minutes.
    assert len(enqueued) <= SIM_MINUTES // 3 + 1

    # max_runs: three replicas raced; exactly seven jobs, the schedule finished and kept.
    done_limited = scheduler.get_schedule(conn, limited.id)
    count = conn.execute("SELECT count(*) FROM jobs_all WHERE job_type = 'limited'").fetchone()
    assert count is not None and count[0] == 7
    assert done_limited.finished and done_limited.remaining_runs == 0

    # Paused until 00:10:30: nothing before it, not caught up; every minute after it.
    keys = [
        r[0]
        for r in conn.execute(
            "SELECT (payload->'tockwork_schedule'->>'at')::timestamptz FROM jobs_all "
            "WHERE job_type = 'paused' ORDER BY 1"
        ).fetchall()
    ]
    assert keys[0] == ORIGIN + timedelta(minutes=11)
    assert len(keys) == len(set(keys)) and keys[-1] >= end
    resumed = scheduler.get_schedule(conn, paused.id)
    assert not resumed.paused and resumed.pause_note is None


@pytest.mark.slow
def test_backfill_under_replicas_survives_sigkill(
    conn: psycopg.Connection[Any], db_url: str, tmp_path: Path
) -> None:
    """A backfill of 600 minutes of which the first 200 already ran, as a process killed after
    its first committed batch and run again, while three replicas tick the same schedule:
    every occurrence of the window has exactly one job."""
    now = datetime.now(UTC).replace(second=0, microsecond=0)
    start = now - timedelta(minutes=600)
    s = scheduler.create_schedule(
        conn, job_type="b", rule="every:1m", zone="UTC", key="b", queue="bq", now=start,
        overlap="allow",
    )  # fmt: skip
    half = scheduler.backfill(
        conn, s.id, start=start, end=start + timedelta(minutes=200), batch=10_000
    )
    conn.commit()
    assert half.count("created") == 200
    replicas = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "scheduler.cli",
                "scheduler",
                "--database-url",
                db_url,
                "--interval",
                "0.05",
                "--name",
                f"r{n}",
            ],
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": ROOT},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for n in range(3)
    ]
    argv = ["schedules", "backfill", "b", "--start", start.isoformat(), "--end", now.isoformat(),
            "--batch", "25"]  # fmt: skip
    try:
        first = start_tockwork(db_url, *argv)
        assert first.stdout is not None
        line = first.stdout.readline()  # the first batch is committed when it is printed
        assert line.startswith(b"batch 1"), line
        first.send_signal(signal.SIGKILL)
        first.communicate()
        second = start_tockwork(db_url, *argv)
        out, err = second.communicate(timeout=120)
        assert second.returncode == 0, err.decode()
    finally:
        for r in replicas:
            r.send_signal(signal.SIGTERM)
        for r in replicas:
            try:
                r.wait(timeout=30)
            except subprocess.TimeoutExpired:
                r.kill()
                r.wait()
    assert out.splitlines()[-1].startswith(b"b: enqueued "), out
    rows = conn.execute(
        "SELECT (payload->'tockwork_schedule'->>'at')::timestamptz, count(*) FROM jobs_all "
        "WHERE job_type = 'b' AND (payload->'tockwork_schedule'->>'at')::timestamptz < %s "
        "GROUP BY 1 ORDER BY 1",
        (now,),
    ).fetchall()
    assert [r[1] for r in rows] == [1] * 600  # nothing doubled
    assert rows[0][0] == start and rows[-1][0] == now - timedelta(minutes=1)  # nothing missed
