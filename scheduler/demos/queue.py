"""``make demo-queue``: the queue end to end on a fresh database, with live progress and a report.

Enqueues a few thousand sample jobs on isolated queues (push notifications with transient
provider failures and some rejected tokens, slow reports, critical alerts), runs a worker with a
concurrency limit per queue until every job is finished, and prints what happened: outcomes per
queue, retries, the dead letters and how to requeue them, and the effect-side deduplication
check (no push delivered twice).
"""

from __future__ import annotations

import random
import sys
import threading
import time
from datetime import timedelta
from typing import Any

import psycopg

import jobs
from jobs import Job, JobSpec
from scheduler.cli.common import demo_url, redact
from scheduler.devdb import NotAScratchDatabase, scratch_database
from scheduler.migrations import COMPONENTS

# The demo's own database on the server of DATABASE_URL (or the embedded one): created by the
# demo and marked so (scheduler.devdb.scratch_database); a database of this name that a demo
# did not make is never dropped.
DEMO_DB = "tockwork_demo_scratch"
QUEUES = {"critical_alerts": 4, "notifications": 8, "reports": 1}


def _fresh_database(server_url: str) -> str:
    url = scratch_database(server_url, DEMO_DB, components=COMPONENTS)
    with psycopg.connect(url) as conn:
        conn.execute(
            "CREATE TABLE deliveries (job_id bigint, user_id int, at timestamptz DEFAULT now())"
        )
        conn.commit()
    return url


class Handlers:
    """Sample handlers. The push provider fails transiently on 15% of first attempts."""

    def __init__(self, url: str, seed: int = 7) -> None:
        self.url = url
        self.rng = random.Random(seed)
        self.lock = threading.Lock()
        # The pages answered "rate limited" once: a RateLimited outcome uses no attempt
        # (RetryPolicy.rate_limited_for), so job.attempt stays 1 on the retry and cannot say
        # whether this job was limited before.
        self.limited: set[int] = set()
        self.local = threading.local()

    def _conn(self) -> psycopg.Connection[Any]:
        conn: psycopg.Connection[Any] | None = getattr(self.local, "conn", None)
        if conn is None or conn.closed:
            conn = psycopg.connect(self.url)
            self.local.conn = conn
        return conn

    def send_push(self, job: Job) -> None:
        user = job.payload["user_id"]
        if job.payload.get("token") == "revoked":
            raise jobs.PermanentError(f"device token of user {user} rejected", code="bad_token")
        with self.lock:
            flaky = self.rng.random() < 0.15
        if flaky and job.attempt == 1:
            raise jobs.TransientError("push provider timed out", code="provider_timeout")
        conn = self._conn()
        with conn.transaction():
            # Effect-side deduplication: the delivery and its record commit together.
            if jobs.effects.record_once(conn, jobs.effects.effect_key(job, "push"), job_id=job.id):
                conn.execute(
                    "INSERT INTO deliveries (job_id, user_id) VALUES (%s, %s)", (job.id, user)
                )

    def build_report(self, job: Job) -> None:
        time.sleep(0.004)

    def page_oncall(self, job: Job) -> None:
        if job.payload.get("rate_limited"):
            with self.lock:
                first = job.id not in self.limited
                self.limited.add(job.id)
            if first:
                raise jobs.RateLimited(0.3, "pager API said Retry-After: 0.3")

    def mapping(self) -> dict[str, jobs.Handler]:
        return {
            "send_push": self.send_push,
            "build_report": self.build_report,
            "page_oncall": self.page_oncall,
        }


def _specs() -> list[JobSpec]:
    specs = [
        JobSpec(
            "send_push",
            {"user_id": i, "token": "revoked" if i % 97 == 0 else "ok"},
            queue="notifications",
            idempotency_key=f"push:{i}:2026-11-30",
        )
        for i in range(2500)
    ]
    specs += [JobSpec("build_report", {"report": i}, queue="reports") for i in range(300)]
    specs += [
        JobSpec(
            "page_oncall",
            {"alert": i, "rate_limited": i % 10 == 0},
            queue="critical_alerts",
            priority=10,
        )
        for i in range(200)
    ]
    return specs


def _progress(conn: psycopg.Connection[Any]) -> tuple[str, int]:
    stats = {s.queue: s for s in jobs.queue_stats(conn)}
    parts = []
    for q in QUEUES:
        s = stats.get(q)
        waiting = (s.ready + s.scheduled) if s else 0
        parts.append(f"{q} {waiting:>4}/{s.leased if s else 0:<2}")
    row = conn.execute(
        "SELECT count(*) FROM jobs WHERE status IN ('pending', 'leased', 'retrying')"
    ).fetchone()
    return " | ".join(parts), int(row[0]) if row else 0


def main() -> int:
    started = time.perf_counter()
    server = demo_url()
    print(
        f"tockwork demo: 3,000 jobs on 3 queues, in a scratch database {DEMO_DB} (created by "
        f"this demo, dropped by its next run) on {redact(server)}"
    )
    try:
        url = _fresh_database(server)
    except NotAScratchDatabase as exc:
        print(f"tockwork demo: refused: {exc}", file=sys.stderr)
        return 1
    handlers = Handlers(url)
    with psycopg.connect(url, autocommit=True) as conn:
        specs = _specs()
        t0 = time.perf_counter()
        with conn.transaction():
            jobs.enqueue_many(conn, specs)
            # Enqueue the same pushes again: idempotency keys make this a no-op.
            again = jobs.enqueue_many(conn, specs[:500])
        print(
            f"enqueued {len(specs)} jobs in one transaction in {time.perf_counter() - t0:.2f}s; "
            f"re-enqueueing 500 of them created {sum(r.created for r in again)} new jobs"
        )
        policy = jobs.RetryPolicy(base=timedelta(milliseconds=200), cap=timedelta(seconds=2))
        worker = jobs.Worker(
            url,
            handlers.mapping(),
            QUEUES,
            name="demo-worker",
            retry=jobs.RetryPolicies(default=policy),
            poll_interval=timedelta(milliseconds=200),
        )
        runner = threading.Thread(target=worker.run, kwargs={"install_signal_handlers": False})
        runner.start()
        try:
            while True:
                line, unfinished = _progress(conn)
                print(f"  [{time.perf_counter() - started:5.1f}s] waiting/running: {line}")
                if unfinished == 0:
                    break
                time.sleep(0.5)
        finally:
            worker.stop()
            runner.join()
        elapsed = time.perf_counter() - started
        _report(conn, url, worker, elapsed)
    return 0


def _report(conn: psycopg.Connection[Any], url: str, worker: jobs.Worker, elapsed: float) -> None:
    rows = conn.execute(
        "SELECT queue, status, count(*) FROM jobs_all GROUP BY 1, 2 ORDER BY 1, 2"
    ).fetchall()
    print("\nfinal status by queue:")
    for queue, status, n in rows:
        print(f"  {queue:<16} {status:<10} {n:>6}")
    retried = conn.execute(
        "SELECT outcome, error_code, count(*) FROM job_attempts"
        " WHERE outcome <> 'succeeded' GROUP BY 1, 2 ORDER BY 3 DESC"
    ).fetchall()
    print("\nattempts that did not succeed:")
    for outcome, code, n in retried:
        print(f"  {outcome:<14} {code or '-':<20} {n:>6}")
    dup = conn.execute(
        "SELECT count(*) FROM (SELECT user_id FROM deliveries GROUP BY 1 HAVING count(*) > 1) d"
    ).fetchone()
    delivered = conn.execute("SELECT count(*) FROM deliveries").fetchone()
    print(
        f"\npushes delivered: {delivered[0] if delivered else 0}, "
        f"users notified twice: {dup[0] if dup else 0}"
    )
    dead = jobs.list_jobs(conn, limit=3)
    total_dead = conn.execute("SELECT count(*) FROM jobs WHERE status = 'dead'").fetchone()
    print(f"dead letters kept for a person: {total_dead[0] if total_dead else 0}, e.g.:")
    for r in dead:
        print(
            f"  job {r.id} {r.job_type} attempts={r.attempts} {r.last_error_code}: "
            f"{r.last_error_summary}"
        )
    print(f"  inspect: .venv/bin/tockwork jobs dead --database-url '{url}'")
    first = dead[0].id if dead else 1
    print(f"           .venv/bin/tockwork jobs show {first} --database-url '{url}'")
    print(
        f"  requeue: .venv/bin/tockwork jobs requeue --error-code bad_token --database-url '{url}'"
    )
    s = worker.stats
    print(
        f"\nworker: claimed {s.claimed}, outcomes {s.outcomes}, "
        f"claim time {s.claim_seconds:.2f}s, write time {s.write_seconds:.2f}s"
    )
    print(f"done in {elapsed:.1f}s")


if __name__ == "__main__":
    sys.exit(main())
