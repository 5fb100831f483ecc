"""Global rate limits: 4 worker processes against one 1,000/s limit, and what a claim costs.

``python -m bench.rate_limits [--seconds 60] [--rate 1000] [--workers 4]``

1. **Held rate.** A queue gets a limit of ``--rate`` starts per second (jobs.limits) and a
   backlog larger than the run can drain; ``--workers`` processes each run
   ``jobs.Worker(url, {"noop": noop}, {"bench": 8})`` (the library's defaults otherwise) for
   ``--seconds``, then get SIGTERM. Starts are read back from the attempt rows' ``started_at``
   (stamped as each handler starts). Prints the achieved rate over the whole seconds after
   the first start (target: within 2% of the limit) and the busiest one-second windows, aligned
   and sliding (target: none above the limit by more than 5%, the issue's; claims never exceed
   the limit in a second, so what is left is the spread of starts behind claims, and a quiet
   machine stays under 3.5%).
2. **Claim cost.** The claim statement alone (``PgJobStore.claim`` of 10 jobs on one
   connection), alternating in rounds: no limit row; limits on other queues and job types
   only; a limit on the claimed queue and one on the job type (rates far above what the loop
   reaches, so the limits never hold a job back and the figure is the bookkeeping). Prints the
   median microseconds per claim of each, and the ratios to "no limit".

Uses ``DATABASE_URL`` or the embedded server; creates and drops its own database. Exits 1 when
a target is missed.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import time
from collections import Counter
from datetime import timedelta

import psycopg

import jobs
from jobs import JobSpec, RateLimit
from jobs.limits import clear_limit, set_limit
from jobs.store import PgJobStore
from scheduler.devdb import database_url, throwaway_database

QUEUE = "bench"
LEASE = timedelta(seconds=30)


def _child(url: str) -> None:
    """One worker process: run until SIGTERM."""

    def noop(job: jobs.Job) -> None:
        return None

    worker = jobs.Worker(url, {"noop": noop}, {QUEUE: 8})
    print("ready", flush=True)  # imported: the parent starts the clock when all are
    worker.run()  # until SIGTERM


def _fill(url: str, n: int, queue: str = QUEUE) -> None:
    with psycopg.connect(url) as conn:
        for start in range(0, n, 5000):
            specs = [
                JobSpec("noop", {"i": i}, queue=queue) for i in range(start, min(n, start + 5000))
            ]
            jobs.enqueue_many(conn, specs)
            conn.commit()


def held_rate(url: str, seconds: float, rate: int, workers: int) -> dict[str, float]:
    _fill(url, int(rate * seconds * 1.3) + 2000)
    with psycopg.connect(url) as conn:
        set_limit(conn, RateLimit(queue=QUEUE, per_second=rate))
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "bench.rate_limits", "--child", url],
            env=env,
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(workers)
    ]
    try:
        for p in procs:
            assert p.stdout is not None and p.stdout.readline().strip() == "ready"
        time.sleep(seconds)  # the run's length: a benchmark, not a test
    finally:
        for p in procs:
            p.send_signal(signal.SIGTERM)
        for p in procs:
            p.wait(60)
    with psycopg.connect(url) as conn:
        starts = [
            row[0]
            for row in conn.execute(
                "SELECT extract(epoch FROM started_at)::float8 FROM job_attempts "
                "WHERE queue = %s AND outcome = 'succeeded' ORDER BY started_at",
                (QUEUE,),
            )
        ]
    first = starts[0]
    whole = int(starts[-1] - first)  # whole seconds after the first start
    aligned = Counter(int(t - first) for t in starts if t - first < whole)
    # Sliding: the most starts in any [t, t + 1 s) that begins at a start.
    busiest, j = 0, 0
    for i, t in enumerate(starts):
        while j < len(starts) and starts[j] < t + 1.0:
            j += 1
        if starts[j - 1] - first < whole:
            busiest = max(busiest, j - i)
    return {
        "starts": len(starts),
        "seconds": whole,
        "achieved": sum(aligned.values()) / whole,
        "max_aligned": max(aligned.values()),
        "min_aligned": min(aligned.values()),
        "max_sliding": busiest,
    }


def claim_cost(url: str, rounds: int, claims: int) -> dict[str, float]:
    modes = ("none", "others", "limited")
    _fill(url, len(modes) * rounds * claims * 10 + 100, queue="micro")
    times: dict[str, list[float]] = {m: [] for m in modes}
    with psycopg.connect(url, autocommit=True) as conn:
        store = PgJobStore(conn)
        for _ in range(rounds):
            for mode in modes:
                with conn.transaction():
                    for q in ("micro", "elsewhere"):
                        clear_limit(conn, queue=q)
                    for t in ("noop", "other_type"):
                        clear_limit(conn, job_type=t)
                    if mode == "others":
                        set_limit(conn, RateLimit(queue="elsewhere", per_second=10))
                        set_limit(conn, RateLimit(job_type="other_type", per_second=10))
                    if mode == "limited":
                        set_limit(conn, RateLimit(queue="micro", per_second=1_000_000))
                        set_limit(conn, RateLimit(job_type="noop", per_second=1_000_000))
                for _ in range(claims):
                    t0 = time.perf_counter()
                    got = store.claim({"micro": 10}, "bench", LEASE, None, job_types=["noop"])
                    times[mode].append(time.perf_counter() - t0)
                    assert len(got) == 10, (mode, len(got))
    return {m: statistics.median(v) * 1e6 for m, v in times.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0, help="length of the held run")
    parser.add_argument("--rate", type=int, default=1000, help="the limit, starts per second")
    parser.add_argument("--workers", type=int, default=4, help="worker processes")
    parser.add_argument("--rounds", type=int, default=5, help="claim-cost rounds")
    parser.add_argument("--claims", type=int, default=200, help="claims per mode and round")
    parser.add_argument("--child", metavar="URL", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        _child(args.child)
        return 0
    name = f"tockwork_bench_limits_{os.getpid()}"
    with throwaway_database(database_url(), name, components=("jobs",)) as url:
        held = held_rate(url, args.seconds, args.rate, args.workers)
        cost = claim_cost(url, args.rounds, args.claims)
    rate = args.rate
    ok_rate = abs(held["achieved"] - rate) <= 0.02 * rate
    ok_window = held["max_sliding"] <= 1.05 * rate
    quiet_window = held["max_sliding"] <= 1.035 * rate
    print(f"held rate, {args.workers} worker processes, limit {rate}/s, {held['seconds']} s:")
    print(f"  achieved           {held['achieved']:10.1f} starts/s  ({held['achieved'] / rate:.3f}"
          f" of the limit; target within 2%: {'ok' if ok_rate else 'MISSED'})")  # fmt: skip
    print(f"  busiest second     {held['max_aligned']:10d} aligned, {held['max_sliding']} sliding"
          f" ({held['max_sliding'] / rate:.3f}; target <= 1.05: "
          f"{'ok' if ok_window else 'MISSED'}; quiet machine <= 1.035: "
          f"{'ok' if quiet_window else 'over'})")  # fmt: skip
    print(f"  quietest second    {held['min_aligned']:10d} aligned")
    print("claim of 10 jobs, median per claim:")
    for mode, label in (("none", "no limit row"), ("others", "limits elsewhere only"),
                        ("limited", "queue + job type limited")):  # fmt: skip
        print(f"  {label:<26} {cost[mode]:8.1f} us  ({cost[mode] / cost['none']:.2f}x)")
    return 0 if ok_rate and ok_window else 1


if __name__ == "__main__":
    sys.exit(main())
