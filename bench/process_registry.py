"""What the registry of processes costs a worker (issue 26): drains with and without it, one run.

``python -m bench.process_registry [--jobs 20000] [--rounds 5]`` drains ``--jobs`` no-op jobs
with a ``jobs.Worker`` that keeps its row in the registry (``registered``, the default: one
upsert per heartbeat) and with the same worker unregistered, alternating rounds on one
throwaway database (``tockwork_bench_registry_<pid>``, migrated, dropped at the end); then the
same with a heartbeat every 20 ms (fifty upserts a second: a stress far above the default of
lease / 3 = 10 s). Prints jobs/s for each, the ratio registered / unregistered, and how many
registry upserts each registered drain made (one per heartbeat, never per job: the claim path
holds no registry statement).
"""

from __future__ import annotations

import argparse
import os
import time
from datetime import timedelta
from typing import Any

import psycopg

import jobs
from jobs.processes import ProcessFacts
from scheduler import devdb
from scheduler.devdb import database_url


class _Counted(jobs.Worker):
    """A worker that counts its registry heartbeats (each builds its facts once)."""

    beats = 0

    def _process_facts(self) -> ProcessFacts:
        type(self).beats += 1
        return super()._process_facts()


class _Unregistered(jobs.Worker):
    registered = False


def _drain(url: str, n: int, cls: type[jobs.Worker], heartbeat: timedelta | None) -> float:
    with psycopg.connect(url) as conn:
        jobs.enqueue_many(conn, [jobs.JobSpec("noop", {"i": i}) for i in range(n)])
        conn.commit()
    extra: dict[str, Any] = {} if heartbeat is None else {"heartbeat": heartbeat}
    worker = cls(url, {"noop": lambda _job: None}, {"default": 8}, listen=False, **extra)
    start = time.perf_counter()
    stats = worker.run_until_idle()
    spent = time.perf_counter() - start
    assert stats.outcomes.get("succeeded") == n, stats
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("TRUNCATE jobs, job_history")
        conn.execute("DELETE FROM job_attempts")
    return spent


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--jobs", type=int, default=20_000, help="no-op jobs per drain")
    parser.add_argument("--rounds", type=int, default=5, help="alternating rounds per mode")
    args = parser.parse_args(argv)
    name = f"tockwork_bench_registry_{os.getpid()}"
    with devdb.throwaway_database(database_url(), name, components=("jobs",)) as url:
        _drain(url, min(args.jobs, 1000), _Unregistered, None)  # warm-up
        modes: list[tuple[str, type[jobs.Worker], timedelta | None]] = [
            ("unregistered", _Unregistered, None),
            ("registered (heartbeat lease/3)", _Counted, None),
            ("unregistered, heartbeat 20 ms", _Unregistered, timedelta(milliseconds=20)),
            ("registered, heartbeat 20 ms", _Counted, timedelta(milliseconds=20)),
        ]
        spent = dict.fromkeys((m[0] for m in modes), 0.0)
        beats = dict.fromkeys(spent, 0)
        for _ in range(args.rounds):
            for label, cls, heartbeat in modes:
                _Counted.beats = 0
                spent[label] += _drain(url, args.jobs, cls, heartbeat)
                beats[label] += _Counted.beats if cls is _Counted else 0
    total = args.jobs * args.rounds
    print(f"drain of {args.jobs:,} no-op jobs by one worker (8 threads), {args.rounds} rounds each")
    print(f"  {'mode':<32} {'jobs/s':>10} {'upserts/drain':>14}")
    for label in spent:
        per = beats[label] / args.rounds
        print(f"  {label:<32} {total / spent[label]:>10,.0f} {per:>14.1f}")
    for plain, registered in ((modes[0][0], modes[1][0]), (modes[2][0], modes[3][0])):
        ratio = spent[plain] / spent[registered]
        print(f"  registered / unregistered ({registered}): {ratio:.3f}")


if __name__ == "__main__":
    main()
