"""What a unique key costs at enqueue, beside a plain job and an idempotency key, in one run.

``python -m bench.unique_enqueue [--n 5000] [--batches 40] [--batch 1000]`` creates a
throwaway database (``tockwork_bench_unique_<pid>``, migrated, dropped at the end) and, in
alternating rounds so that every kind sees the same table size and machine load:

- one job per transaction (``jobs.enqueue`` + commit): plain, with an idempotency key, with a
  fresh unique key, and with a unique key an active job holds (``keep``: the insert conflicts,
  then a lookup) and the same with ``replace`` (the conflict, then an update of the waiting job);
- ``jobs.enqueue_many`` in batches: plain (the narrow COPY), idempotency keys (COPY in a
  savepoint), unique keys (``INSERT ... SELECT FROM unnest ... ON CONFLICT``, which must take
  them: COPY has no ON CONFLICT), and unique keys all held (``replace``).

Prints jobs/s of each and the ratio to the plain baseline of the same run. A second database
without the index (``jobs_unique_active_uq`` dropped) takes plain batches alternating with the
first: what the index costs the jobs that do not use it.
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable

import psycopg

import jobs
from scheduler import devdb
from scheduler.devdb import database_url

Conn = psycopg.Connection[tuple[object, ...]]


def _single(kind: str, i: int) -> Callable[[Conn], object]:
    def plain(c: Conn) -> object:
        return jobs.enqueue(c, "noop", {"i": i})

    def idempotent(c: Conn) -> object:
        return jobs.enqueue(c, "noop", {"i": i}, idempotency_key=f"i:{i}")

    def unique(c: Conn) -> object:
        return jobs.enqueue(c, "noop", {"i": i}, unique_key=f"u:{i}")

    def held_keep(c: Conn) -> object:
        return jobs.enqueue(c, "noop", {"i": i}, unique_key="held")

    def held_replace(c: Conn) -> object:
        return jobs.enqueue(c, "noop", {"i": i}, unique_key="held", on_active="replace")

    return {
        "plain": plain,
        "idempotency key": idempotent,
        "unique key": unique,
        "held, keep": held_keep,
        "held, replace": held_replace,
    }[kind]


def _batch(kind: str, base: int, size: int) -> list[jobs.JobSpec]:
    if kind == "idempotency keys":
        return [
            jobs.JobSpec("noop", {"i": i}, idempotency_key=f"bi:{i}")
            for i in range(base, base + size)
        ]
    if kind == "unique keys":
        return [
            jobs.JobSpec("noop", {"i": i}, unique_key=f"bu:{i}") for i in range(base, base + size)
        ]
    if kind == "held, replace":
        return [
            jobs.JobSpec("noop", {"i": i}, unique_key=f"held:{i % size}", on_active="replace")
            for i in range(base, base + size)
        ]
    return [jobs.JobSpec("noop", {"i": i}) for i in range(base, base + size)]


SINGLE = ("plain", "idempotency key", "unique key", "held, keep", "held, replace")
BATCH = ("plain", "idempotency keys", "unique keys", "held, replace")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--n", type=int, default=5000, help="single enqueues per kind")
    parser.add_argument("--batches", type=int, default=40, help="batches per kind")
    parser.add_argument("--batch", type=int, default=1000)
    args = parser.parse_args(argv)
    name = f"tockwork_bench_unique_{os.getpid()}"
    with (
        devdb.throwaway_database(database_url(), name, components=("jobs",)) as url,
        devdb.throwaway_database(database_url(), name + "_bare", components=("jobs",)) as bare,
    ):
        with psycopg.connect(bare, autocommit=True) as c:
            c.execute("DROP INDEX jobs_unique_active_uq")
        with psycopg.connect(url) as conn, psycopg.connect(bare) as bare_conn:
            jobs.enqueue(conn, "noop", unique_key="held")
            jobs.enqueue_many(conn, _batch("held, replace", 0, args.batch))
            conn.commit()
            single = dict.fromkeys(SINGLE, 0.0)
            rounds = 10
            per_round = max(1, args.n // rounds)
            for r in range(rounds):
                for kind in SINGLE:
                    start = time.perf_counter()
                    for i in range(r * per_round, (r + 1) * per_round):
                        _single(kind, i)(conn)
                        conn.commit()
                    single[kind] += time.perf_counter() - start
            many = dict.fromkeys((*BATCH, "plain, no index"), 0.0)
            for r in range(args.batches):
                for kind in (*BATCH, "plain, no index"):
                    c = bare_conn if kind == "plain, no index" else conn
                    specs = _batch(kind, (r + 1) * args.batch, args.batch)
                    start = time.perf_counter()
                    jobs.enqueue_many(c, specs)
                    c.commit()
                    many[kind] += time.perf_counter() - start
        done = rounds * per_round
        print(f"enqueue, 1 job per transaction ({done} each, alternating rounds)")
        for kind, spent in single.items():
            rate = done / spent
            print(f"  {kind:<16} {rate:>9,.0f} jobs/s   vs plain {single['plain'] / spent:.2f}")
        total = args.batches * args.batch
        print(f"enqueue_many, batches of {args.batch} ({total} each, alternating)")
        for kind, spent in many.items():
            rate = total / spent
            print(f"  {kind:<16} {rate:>9,.0f} jobs/s   vs plain {many['plain'] / spent:.2f}")


if __name__ == "__main__":
    main()
