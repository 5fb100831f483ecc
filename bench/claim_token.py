"""The claim's cost with the fencing token across timelines, against the claim before it.

``python -m bench.claim_token [--rounds 200] [--jobs 200000]``

Issue 25 made every claim set ``lease_token = greatest(lease_token + 1, timeline << 32)``, the
timeline read once per statement (``job_lease_token_floor`` in jobs/sql/job.sql, an InitPlan
over ``pg_walfile_name(pg_current_wal_lsn())``) instead of ``lease_token + 1``. This bench runs
both statements (the plain ``job_claim`` of the store, and the same text with the old token
expression: the baseline), alternated round by round in one process on one backlog, each
claim rolled back so every round sees the same rows, and prints the median of each and their
ratio for claims of 1, 10 and 100 jobs (each statement first in every other round). Target:
the ratio within noise of 1.00.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from datetime import timedelta
from uuid import uuid4

import psycopg

from jobs.queries import query
from scheduler.devdb import database_url, throwaway_database

NEW = "greatest(j.lease_token + 1, (SELECT ('x' || left(pg_walfile_name(pg_current_wal_lsn()), 8))::bit(32)::bigint << 32))"  # noqa: E501
OLD = "j.lease_token + 1"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=200, help="claims of each statement")
    parser.add_argument("--jobs", type=int, default=200_000, help="the backlog")
    args = parser.parse_args()
    name = f"tockwork_bench_claim_token_{os.getpid()}"
    with (
        throwaway_database(database_url(), name, components=("jobs",)) as url,
        psycopg.connect(url, autocommit=True) as conn,
    ):
        # The plain claim the store sends on this server (jobs/store.py).
        skip_scan = conn.info.server_version >= 180000
        claim = query("job_claim_unlimited_skip_scan" if skip_scan else "job_claim_unlimited")
        assert NEW in claim, "the claim's token expression changed: update the bench"
        statements = {"timeline token": claim, "token + 1 (before)": claim.replace(NEW, OLD)}
        conn.execute(
            "INSERT INTO jobs (job_type) SELECT 'noop' FROM generate_series(1, %s)", (args.jobs,)
        )
        conn.execute("VACUUM ANALYZE jobs")
        print(f"backlog {args.jobs} jobs, {args.rounds} rounds, PostgreSQL "
              f"{conn.info.server_version}")  # fmt: skip
        for n in (1, 10, 100):
            times: dict[str, list[float]] = {k: [] for k in statements}
            for round_ in range(args.rounds):
                # Each goes first in every other round: the first after a rollback may pay for
                # what the other left (the rolled-back row versions it meets).
                order = list(statements.items())
                for label, text in order if round_ % 2 else reversed(order):
                    params = {
                        "queues": ["default"], "limits": [n], "worker": "bench",
                        "lease": timedelta(seconds=30), "now": None, "claim": uuid4(),
                        "job_types": None,
                    }  # fmt: skip
                    try:
                        with conn.transaction():
                            began = time.perf_counter()
                            got = conn.execute(text, params, prepare=True).fetchall()
                            times[label].append(time.perf_counter() - began)
                            assert len(got) == n
                            raise psycopg.Rollback
                    except psycopg.Rollback:
                        pass
            new, old = (statistics.median(times[k]) * 1000 for k in statements)
            print(f"claim of {n:3d}: timeline token {new:6.3f} ms  token + 1 (before) "
                  f"{old:6.3f} ms  ratio {new / old:.3f}", flush=True)  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
