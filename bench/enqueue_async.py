"""enqueue_many_async beside enqueue_many, in the same run, on the same database.

``python -m bench.enqueue_async [--n 50000] [--batch 1000]`` creates a throwaway database
(``tockwork_bench_async_<pid>`` on the server of ``scheduler.devdb.database_url()``, migrated,
dropped at the end) and enqueues ``n`` jobs in batches of ``batch``, one committed transaction
per batch, alternating a sync batch (``jobs.enqueue_many`` on a ``Connection``) and an async
batch (``jobs.enqueue_many_async`` on an ``AsyncConnection``) so that both see the same table
size and the same machine load. Two kinds of batch: plain specs (the narrow COPY) and specs
with idempotency keys (the COPY inside a savepoint). Prints jobs/s of each and the ratio
async/sync; the async API is meant to be of the same speed class (a ratio near 1).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time

import psycopg

import jobs
from scheduler import devdb
from scheduler.devdb import database_url


def _specs(kind: str, batch: int, base: int) -> list[jobs.JobSpec]:
    if kind == "keys":
        return [
            jobs.JobSpec("noop", {"i": base + i}, idempotency_key=f"k:{base + i}")
            for i in range(batch)
        ]
    return [jobs.JobSpec("noop", {"i": base + i}) for i in range(batch)]


async def _run(url: str, kind: str, n: int, batch: int) -> tuple[float, float]:
    sync_time = async_time = 0.0
    rounds = max(1, n // batch)
    with psycopg.connect(url) as conn:
        async with await psycopg.AsyncConnection.connect(url) as aconn:
            jobs.enqueue_many(conn, _specs(kind, 100, -1_000_000))  # warm up both
            conn.commit()
            await jobs.enqueue_many_async(aconn, _specs(kind, 100, -2_000_000))
            await aconn.commit()
            for r in range(rounds):
                specs = _specs(kind, batch, 2 * r * batch)
                start = time.perf_counter()
                jobs.enqueue_many(conn, specs)
                conn.commit()
                sync_time += time.perf_counter() - start
                specs = _specs(kind, batch, (2 * r + 1) * batch)
                start = time.perf_counter()
                await jobs.enqueue_many_async(aconn, specs)
                await aconn.commit()
                async_time += time.perf_counter() - start
    total = rounds * batch
    return total / sync_time, total / async_time


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--n", type=int, default=50_000, help="jobs per API and kind")
    parser.add_argument("--batch", type=int, default=1000)
    args = parser.parse_args(argv)
    name = f"tockwork_bench_async_{os.getpid()}"
    with devdb.throwaway_database(database_url(), name, components=("jobs",)) as url:
        print(f"enqueue_many vs enqueue_many_async: {args.n} jobs each, batches of {args.batch}")
        for kind in ("plain", "keys"):
            with psycopg.connect(url, autocommit=True) as c:
                c.execute("TRUNCATE jobs, job_attempts RESTART IDENTITY")
                c.execute("VACUUM ANALYZE jobs")
            sync_rate, async_rate = asyncio.run(_run(url, kind, args.n, args.batch))
            print(
                f"  {kind:<6} sync {sync_rate:>10,.0f} jobs/s   async {async_rate:>10,.0f} jobs/s"
                f"   async/sync {async_rate / sync_rate:.2f}"
            )


if __name__ == "__main__":
    main()
