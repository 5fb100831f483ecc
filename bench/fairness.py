"""Fairness across organizations: a flood from one organization against ten that trickle.

``python -m bench.fairness [--flood 200000] [--orgs 10] [--rate 10] [--workers 2]``

For each mode (fairness off, then on: ``jobs.set_queue_policy(conn, "default", fair=True)``),
in a fresh database of its own on the server of ``scheduler.devdb.database_url()``: one
organization's ``--flood`` no-op jobs are enqueued first (``enqueue_many``, all ready at once),
then ``--workers`` worker processes (``jobs.Worker(url, {"noop": ...}, {"default": 8})``,
``--prefetch`` if given) drain the queue; once they run, ``--orgs`` other organizations each
enqueue ``--rate`` jobs a second, one per transaction. When the flood is drained (or after
``--seconds``) the trickle stops and the rest is drained. Printed, off beside on: the
trickling organizations' wait (the attempt's start minus the job's run_at) p50/p99/max, and the
flood's drain rate (flood jobs done per second while the flood lasted). ``--flood 20000`` is
a quick run. First, the claim statement's cost, plain against fair, by the shape of a 200,000-job
backlog (one organization; 10,000 organizations), one statement rolled back per round.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import threading
import time
from dataclasses import dataclass
from datetime import timedelta
from multiprocessing.synchronize import Event as MpEvent
from uuid import UUID, uuid4

import psycopg

import jobs
from jobs.queries import query
from scheduler.devdb import database_url, throwaway_database

CTX = multiprocessing.get_context("spawn")
FLOOD = UUID(int=0xF100D << 64)
BATCH = 5_000


def _noop(job: jobs.Job) -> None:
    return None


def _worker(url: str, go: MpEvent, prefetch: int | None) -> None:
    go.wait()
    jobs.Worker(url, {"noop": _noop}, {"default": 8}, prefetch=prefetch).run_until_idle()


def _trickle(url: str, orgs: list[UUID], rate: float, stop: threading.Event) -> int:
    """Enqueue ``rate`` jobs a second for each organization, one per transaction, round robin,
    on a schedule (a late start is not made up by a burst)."""
    sent = 0
    gap = 1.0 / (rate * len(orgs))
    with psycopg.connect(url) as conn:
        next_at = time.monotonic()
        while not stop.is_set():
            jobs.enqueue(conn, "noop", {"t": sent}, organization_id=orgs[sent % len(orgs)])
            conn.commit()
            sent += 1
            next_at += gap
            pause = next_at - time.monotonic()
            if pause > 0:
                stop.wait(pause)
            else:
                next_at = time.monotonic()
    return sent


def _percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


@dataclass
class Result:
    fair: bool
    flood_seconds: float
    flood_done: int
    trickled: int
    waits: list[float]

    @property
    def rate(self) -> float:
        return self.flood_done / self.flood_seconds if self.flood_seconds else 0.0


def _run(url: str, args: argparse.Namespace, fair: bool) -> Result:
    orgs = [UUID(int=(i + 1) << 96) for i in range(args.orgs)]
    with psycopg.connect(url) as conn:
        if fair:
            jobs.set_queue_policy(conn, "default", fair=True)
        for start in range(0, args.flood, BATCH):
            specs = [
                jobs.JobSpec("noop", {"i": i}, organization_id=FLOOD)
                for i in range(start, min(start + BATCH, args.flood))
            ]
            jobs.enqueue_many(conn, specs)
            conn.commit()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE jobs")
    go = CTX.Event()
    workers = [
        CTX.Process(target=_worker, args=(url, go, args.prefetch)) for _ in range(args.workers)
    ]
    for p in workers:
        p.start()
    stop = threading.Event()
    trickled: list[int] = []
    trickle = threading.Thread(
        target=lambda: trickled.append(_trickle(url, orgs, args.rate, stop)), daemon=True
    )
    go.set()
    left = args.flood
    with psycopg.connect(url, autocommit=True) as watch:
        # The trickle starts once the workers run (their start-up is not a wait fairness
        # could shorten).
        while watch.execute("SELECT NOT EXISTS (SELECT FROM job_attempts)").fetchone() == (True,):
            time.sleep(0.05)  # a bench's progress poll, not a test's wait
        began = time.monotonic()
        trickle.start()
        while left and time.monotonic() - began < args.seconds:
            time.sleep(0.2)  # a bench's progress poll, not a test's wait
            row = watch.execute(
                "SELECT count(*) FROM jobs_all WHERE organization_id = %s"
                " AND status IN ('pending', 'retrying', 'leased')",
                (FLOOD,),
            ).fetchone()
            assert row is not None
            left = row[0]
        flood_seconds = time.monotonic() - began
        stop.set()
        trickle.join()
        for p in workers:
            p.join()
        # What the workers left when they found the queue idle, with no trickle to wait for.
        jobs.Worker(url, {"noop": _noop}, {"default": 8}).run_until_idle()
        done = watch.execute(
            "SELECT count(*) FROM jobs_all WHERE organization_id = %s AND status = 'succeeded'",
            (FLOOD,),
        ).fetchone()
        waits = watch.execute(
            "SELECT extract(epoch FROM a.started_at - j.run_at)::float8"
            " FROM jobs_all AS j JOIN job_attempts AS a ON a.job_id = j.id AND a.attempt = 1"
            " WHERE j.organization_id <> %s",
            (FLOOD,),
        ).fetchall()
    assert done is not None
    return Result(fair, flood_seconds, done[0], trickled[0], [w for (w,) in waits])


def _line(result: Result) -> str:
    w = result.waits
    return (
        f"fairness {'on ' if result.fair else 'off'}: trickle wait p50 "
        f"{_percentile(w, 0.5) * 1000:9.1f} ms  p99 {_percentile(w, 0.99) * 1000:9.1f} ms  "
        f"max {max(w, default=float('nan')) * 1000:9.1f} ms  ({len(w)} of {result.trickled} "
        f"trickled jobs)  flood drain {result.rate:8.0f} jobs/s "
        f"({result.flood_done} in {result.flood_seconds:.1f} s)"
    )


# The claim's cost by the shape of the backlog: one statement, rolled back, so every round
# sees the same rows.
SHAPES = {
    "1 organization x 200,000 jobs": "SELECT %(org)s::uuid FROM generate_series(1, 200000)",
    "10,000 organizations x 20 jobs": (
        "SELECT md5(mod(g, 10000)::text)::uuid FROM generate_series(1, 200000) AS g"
    ),
}


def _claim_cost(url: str, rounds: int) -> None:
    lease = timedelta(seconds=30)
    with psycopg.connect(url, autocommit=True) as conn:
        for shape, rows in SHAPES.items():
            conn.execute("TRUNCATE jobs, job_history")
            conn.execute(
                "INSERT INTO jobs (organization_id, job_type) SELECT o, 'noop' FROM ("  # noqa: S608
                + rows
                + ") AS t(o)",
                {"org": FLOOD},
            )
            conn.execute("VACUUM ANALYZE jobs")
            for n in (10, 100):
                # The fair claim the store would send on this server (jobs/store.py).
                fair_claim = (
                    "job_claim_fair_skip_scan"
                    if conn.info.server_version >= 180000
                    else "job_claim_fair"
                )
                best: dict[str, list[float]] = {"job_claim": [], fair_claim: []}
                for _ in range(rounds):
                    for name, times in best.items():
                        params = {
                            "queues": ["default"], "limits": [n], "worker": "bench",
                            "lease": lease, "now": None, "claim": None, "start": uuid4(),
                            "job_types": None,
                        }  # fmt: skip
                        try:
                            with conn.transaction():
                                began = time.perf_counter()
                                got = conn.execute(query(name), params, prepare=True).fetchall()
                                times.append(time.perf_counter() - began)
                                assert len(got) == n
                                raise psycopg.Rollback
                        except psycopg.Rollback:
                            pass
                plain = statistics.median(best["job_claim"]) * 1000
                fair = statistics.median(best[fair_claim]) * 1000
                print(
                    f"claim of {n:3d}, {shape}: plain {plain:6.2f} ms  fair {fair:6.2f} ms  "
                    f"fair/plain {fair / plain:.2f}",
                    flush=True,
                )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--flood", type=int, default=200_000, help="the flooding org's jobs")
    parser.add_argument("--orgs", type=int, default=10, help="trickling organizations")
    parser.add_argument("--rate", type=float, default=10.0, help="jobs/s of each trickling org")
    parser.add_argument("--workers", type=int, default=2, help="worker processes")
    parser.add_argument(
        "--prefetch", type=int, default=None, help="workers' prefetch (default: theirs)"
    )
    parser.add_argument("--seconds", type=float, default=300.0, help="cap on a mode's flood")
    parser.add_argument(
        "--claim-rounds", type=int, default=30, help="claim cost: rounds (0: skip the phase)"
    )
    args = parser.parse_args()
    if args.claim_rounds:
        name = f"tockwork_bench_fair_{os.getpid()}_cost"
        with throwaway_database(database_url(), name, components=("jobs",)) as url:
            _claim_cost(url, args.claim_rounds)
    results: dict[bool, Result] = {}
    for fair in (False, True):
        name = f"tockwork_bench_fair_{os.getpid()}_{int(fair)}"
        with throwaway_database(database_url(), name, components=("jobs",)) as url:
            results[fair] = _run(url, args, fair)
        print(_line(results[fair]), flush=True)
    off, on = results[False], results[True]
    p99_off, p99_on = _percentile(off.waits, 0.99), _percentile(on.waits, 0.99)
    print(
        f"p99 wait on/off: {p99_on / p99_off:.4f} ({p99_off / p99_on:.0f}x shorter)  "
        f"drain rate on/off: {on.rate / off.rate:.2f}  "
        f"(median wait on {statistics.median(on.waits) * 1000:.1f} ms)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
