"""Queue benchmark (issue 2 §5): the jobs library beside raw psycopg doing the same work.

Every figure is measured in one run, on one throwaway database (``tockwork_bench_<pid>``, created
on the server of ``scheduler.devdb.database_url()``, migrated, dropped at the end), next to a raw
psycopg baseline that does the same operation with no library (the limit), and their ratio:

1. enqueue, one job per transaction: ``jobs.enqueue`` + commit vs a raw INSERT + COMMIT loop;
2. ``jobs.enqueue_many`` in batches vs raw ``COPY`` into ``jobs``;
3. drain of N no-op jobs by 1 and 2 ``jobs.Worker`` processes vs a raw claim+complete loop
   (batches of 100, ``FOR UPDATE SKIP LOCKED``) in 2 processes;
4. enqueue-to-start latency p50/p95/p99 with LISTEN on and off vs a bare LISTEN/NOTIFY round trip,
   LISTEN on with a ``def`` and with an ``async def`` handler (issue 11);
5. resident memory of a worker process after draining;
6. (issue 9) the 2-process drain with the library's defaults (``jobs.Worker(url, handlers)``)
   beside the tuned one, and PgQueuer 1.6 side by side (phase ``peers``): enqueue one job per
   transaction, 1,000 per call, the drain by 2 of its worker processes (and, issue 11, the
   same drain with an ``async def`` no-op against PgQueuer's asyncio worker), latency p50. PgQueuer
   runs from its own venv (``make bench-peers``) through ``bench/peer_pgqueuer.py``; without it
   the phase is skipped with the reason printed.

Figures, not a test: ``python bench/queue.py [--quick] [--help for the sizes]``.
"""

from __future__ import annotations

import sys
from pathlib import Path

# This file is called queue.py: when run as a script its folder comes first on sys.path and would
# shadow the standard library's ``queue`` (which concurrent.futures, multiprocessing and the
# worker import). Drop the folder and put the repository root there instead.
_BENCH_DIR = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _BENCH_DIR]
sys.path.insert(0, str(_BENCH_DIR.parent))

import argparse  # noqa: E402
import json  # noqa: E402
import multiprocessing  # noqa: E402
import os  # noqa: E402
import random  # noqa: E402
import resource  # noqa: E402
import subprocess  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
from _queue import Empty  # noqa: E402  (stdlib queue.Empty; 'queue' is this file's name)
from collections.abc import Callable, Iterator  # noqa: E402
from contextlib import contextmanager  # noqa: E402
from dataclasses import dataclass, field, replace  # noqa: E402
from datetime import timedelta  # noqa: E402
from multiprocessing.queues import Queue as MpQueue  # noqa: E402
from multiprocessing.synchronize import Event as MpEvent  # noqa: E402
from typing import Any, ClassVar, LiteralString, Self  # noqa: E402

import psycopg  # noqa: E402
from psycopg.conninfo import conninfo_to_dict  # noqa: E402

import jobs  # noqa: E402
from jobs.queries import load as load_queries  # noqa: E402
from jobs.queries import query as jobs_query  # noqa: E402
from scheduler import devdb  # noqa: E402
from scheduler.devdb import database_url  # noqa: E402

CTX = multiprocessing.get_context("spawn")  # fresh interpreters: realistic RSS, no forked state

# -- raw SQL: the baselines (the same rows and indexes, no library) ------------------------------

RAW_INSERT: LiteralString = "INSERT INTO jobs (queue, job_type, payload) VALUES (%s, %s, %s::jsonb)"
RAW_COPY: LiteralString = "COPY jobs (queue, job_type, payload) FROM STDIN"
RAW_COPY_KEYED: LiteralString = "COPY jobs (queue, job_type, payload, idempotency_key) FROM STDIN"
RAW_CLAIM: LiteralString = """
UPDATE jobs AS j
SET status = 'leased', attempts = j.attempts + 1, locked_at = now(), locked_by = %(worker)s,
    locked_until = now() + interval '30 seconds', lease_token = j.lease_token + 1
WHERE j.id IN (
    SELECT id FROM jobs
    WHERE queue = 'default' AND status IN ('pending', 'retrying') AND run_at <= now()
    ORDER BY priority DESC, run_at, id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
RETURNING j.id
"""
RAW_COMPLETE: LiteralString = """
UPDATE jobs
SET status = 'succeeded', completed_at = now(),
    locked_at = NULL, locked_by = NULL, locked_until = NULL
WHERE id = ANY(%(ids)s::bigint[])
"""
RESET: LiteralString = "TRUNCATE jobs, job_history, job_attempts RESTART IDENTITY"
CHANNEL_RT: LiteralString = "LISTEN tockwork_bench_rt"
NOTIFY_RT: LiteralString = "SELECT pg_notify('tockwork_bench_rt', %s)"


# -- helpers ----------------------------------------------------------------------------------


def percentile(values: list[float], q: float) -> float:
    """Linear-interpolated percentile (``q`` in 0..100) of ``values``."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100.0
    low = int(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def rss_mib() -> tuple[float, float]:
    """(VmRSS, VmHWM) of this process in MiB; the peak from getrusage when /proc is missing."""
    values: dict[str, float] = {}
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                key, _, rest = line.partition(":")
                if key in ("VmRSS", "VmHWM"):
                    values[key] = int(rest.split()[0]) / 1024.0
    except OSError:
        pass
    peak = values.get("VmHWM", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0)
    return values.get("VmRSS", peak), peak


@contextmanager
def throwaway_database(server_url: str) -> Iterator[str]:
    """Create and migrate ``tockwork_bench_<pid>``; drop it (forcibly) afterwards."""
    with devdb.throwaway_database(
        server_url, f"tockwork_bench_{os.getpid()}", components=("jobs",)
    ) as url:
        yield url


def reset(url: str, vacuum: bool = False) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(RESET)
        if vacuum:
            conn.execute("VACUUM ANALYZE jobs, job_attempts")


def vacuum_analyze(url: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE jobs, job_attempts")


def seed_noop_jobs(url: str, n: int, job_type: str = "noop") -> None:
    """Insert ``n`` ready jobs quickly (raw COPY; not timed) and analyze the table."""
    with psycopg.connect(url) as conn:
        with conn.cursor() as cur, cur.copy(RAW_COPY) as copy:
            for i in range(n):
                copy.write_row(("default", job_type, f'{{"i":{i}}}'))
        conn.commit()
    vacuum_analyze(url)


def counts(url: str) -> tuple[int, int, int]:
    """(jobs, succeeded jobs, job_attempts rows)."""
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*), count(*) FILTER (WHERE status = 'succeeded') FROM jobs_all"
        ).fetchone()
        att = conn.execute("SELECT count(*) FROM job_attempts").fetchone()
    assert row is not None and att is not None
    return int(row[0]), int(row[1]), int(att[0])


# -- 1. enqueue, one job per transaction ------------------------------------------------------


def enqueue_single_library(conn: psycopg.Connection[Any], n: int, base: int) -> float:
    start = time.perf_counter()
    for i in range(base, base + n):
        jobs.enqueue(conn, "noop", {"i": i})
        conn.commit()
    return time.perf_counter() - start


@contextmanager
def enqueue_single_autocommit(url: str) -> Iterator[Callable[[int], float]]:
    """``jobs.enqueue`` on an autocommit connection, one job per statement (each its own
    transaction): the shape of PgQueuer's ``Queries.enqueue`` in bench/peer_pgqueuer.py, one
    round trip a job. Yields ``run(n)``: the seconds of ``n`` more enqueues on the one
    connection. The explicit ``enqueue`` + ``commit()`` of :func:`enqueue_single_library`
    pays psycopg's ``BEGIN`` and the ``COMMIT`` as round trips of their own."""
    reset(url, vacuum=True)
    with psycopg.connect(url, autocommit=True) as conn:
        for i in range(20):  # warm up: prepared statements, as the peer's harness does
            jobs.enqueue(conn, "noop", {"i": i})
        done = 0

        def run(n: int) -> float:
            nonlocal done
            start = time.perf_counter()
            for i in range(done, done + n):
                jobs.enqueue(conn, "noop", {"i": i})
            done += n
            return time.perf_counter() - start

        yield run


def enqueue_single_raw(conn: psycopg.Connection[Any], n: int, base: int) -> float:
    start = time.perf_counter()
    for i in range(base, base + n):
        conn.execute(RAW_INSERT, ("default", "noop", json.dumps({"i": i})))
        conn.commit()
    return time.perf_counter() - start


def bench_enqueue_single(url: str, n: int, rounds: int) -> tuple[float, float]:
    """Alternate library and raw rounds (so drift hits both); return (library/s, raw/s)."""
    reset(url, vacuum=True)
    per_round = max(1, n // rounds)
    lib_time = raw_time = 0.0
    with psycopg.connect(url) as lib_conn, psycopg.connect(url) as raw_conn:
        enqueue_single_library(lib_conn, 20, 0)  # warm up: connection, prepared statements
        enqueue_single_raw(raw_conn, 20, 0)
        for r in range(rounds):
            lib_time += enqueue_single_library(lib_conn, per_round, r * per_round)
            raw_time += enqueue_single_raw(raw_conn, per_round, r * per_round)
    total = per_round * rounds
    return total / lib_time, total / raw_time


# -- 2. enqueue_many vs COPY -------------------------------------------------------------------


def bench_enqueue_many(url: str, n: int, batch: int) -> tuple[float, float]:
    """Alternate library and raw batches; return (library jobs/s, raw COPY rows/s)."""
    reset(url, vacuum=True)
    batches = max(1, n // batch)
    specs = [jobs.JobSpec("noop", {"i": i}) for i in range(batch)]
    rows = [("default", "noop", json.dumps({"i": i})) for i in range(batch)]
    lib_time = raw_time = 0.0
    with psycopg.connect(url) as conn:
        jobs.enqueue_many(conn, specs[:100])  # warm up
        conn.commit()
        for _ in range(batches):
            start = time.perf_counter()
            jobs.enqueue_many(conn, specs)
            conn.commit()
            lib_time += time.perf_counter() - start
            raw_time += _raw_copy(conn, RAW_COPY, rows)
    total = batches * batch
    return total / lib_time, total / raw_time


def _raw_copy(conn: psycopg.Connection[Any], sql: LiteralString, rows: list[Any]) -> float:
    start = time.perf_counter()
    with conn.cursor() as cur, cur.copy(sql) as copy:
        for row in rows:
            copy.write_row(row)
    conn.commit()
    return time.perf_counter() - start


def bench_enqueue_many_keyed(url: str, n: int, batch: int) -> tuple[float, float, float]:
    """``enqueue_many`` of specs with idempotency keys (every key new), alternating batch by
    batch with a raw COPY of the same rows with their keys and a raw COPY without keys; return
    (library jobs/s, raw keyed COPY rows/s, raw key-less COPY rows/s). Issue 9 sets the target
    against the key-less COPY; the keyed COPY shows what the unique index on the keys costs
    before any library code runs."""
    reset(url, vacuum=True)
    batches = max(1, n // batch)
    lib_time = keyed_time = plain_time = 0.0
    plain = [("default", "noop", json.dumps({"i": i})) for i in range(batch)]
    with psycopg.connect(url) as conn:
        jobs.enqueue_many(
            conn, [jobs.JobSpec("noop", {}, idempotency_key=f"w{i}") for i in range(100)]
        )
        conn.commit()
        for b in range(batches):
            specs = [
                jobs.JobSpec("noop", {"i": i}, idempotency_key=f"lib-{b}-{i}") for i in range(batch)
            ]
            start = time.perf_counter()
            jobs.enqueue_many(conn, specs)
            conn.commit()
            lib_time += time.perf_counter() - start
            keyed = [
                ("default", "noop", json.dumps({"i": i}), f"raw-{b}-{i}") for i in range(batch)
            ]
            keyed_time += _raw_copy(conn, RAW_COPY_KEYED, keyed)
            plain_time += _raw_copy(conn, RAW_COPY, plain)
    total = batches * batch
    return total / lib_time, total / keyed_time, total / plain_time


# -- 3. drain ----------------------------------------------------------------------------------


def _noop(_job: jobs.Job) -> None:
    return None


async def _noop_async(_job: jobs.Job) -> None:
    return None


@dataclass
class DrainResult:
    """``rate`` = jobs / ``span``: first claim sent to last completion written, any process."""

    rate: float
    span: float
    wall: float  # start signal to the last process's report: adds connect and shutdown
    per_process: list[dict[str, Any]] = field(default_factory=list)

    @property
    def drained_rate(self) -> float:
        return self.rate * self.span / self.wall


class StatementCounter(psycopg.Cursor[Any]):
    """Counts the drain workers' claim and complete statements.

    A ``cursor_factory`` given through ``jobs.Worker(connect_kwargs=...)``: it measures and
    changes nothing in the library. ``first_claim`` is stamped as the first claim is sent,
    ``last_complete`` when the rows of the latest complete have arrived (in the worker's
    pipelined cycle too).
    """

    calls: ClassVar[dict[str, float]] = {
        "claim": 0, "complete": 0, "first_claim": 0.0, "last_complete": 0.0,
    }  # fmt: skip
    _names: ClassVar[dict[str, str]] = {}
    _counted: str | None = None

    def execute(self, query: Any, params: Any = None, **kwargs: Any) -> Self:
        names = self._names
        if not names:
            # Every claim statement the store may send (PgJobStore picks one by the server
            # version, the queue's policy and whether any rate limit exists): read from the
            # jobs queries, so a new claim statement is counted without a list to keep.
            for statement, text in load_queries("jobs").items():
                if statement.startswith("job_claim") and statement != "job_claim_lookup":
                    names[text] = "claim"
            names[jobs_query("job_complete")] = "complete"
        name = names.get(query) if isinstance(query, str) else None
        calls = self.calls
        if name == "claim" and not calls["claim"]:
            calls["first_claim"] = time.perf_counter()
        result = super().execute(query, params, **kwargs)
        if name is not None:
            calls[name] += 1
        self._counted = name
        return result

    def fetchall(self) -> list[Any]:
        rows = super().fetchall()
        if self._counted == "complete":
            self.calls["last_complete"] = time.perf_counter()
        return rows


def _library_drain_child(
    url: str,
    worker_kwargs: dict[str, Any],
    connect_kwargs: dict[str, Any],
    profile: str | None,
    ready: MpQueue[Any],
    go: MpEvent,
    results: MpQueue[Any],
) -> None:
    """A drain worker: ``jobs.Worker(url, {"noop": ...}, **worker_kwargs)``; ``{}`` = defaults."""
    calls = StatementCounter.calls
    worker_kwargs = dict(worker_kwargs)
    noop = _noop_async if worker_kwargs.pop("async_noop", False) else _noop  # --async-drain
    worker = jobs.Worker(
        url,
        {"noop": noop},
        **worker_kwargs,
        connect_kwargs={**connect_kwargs, "cursor_factory": StatementCounter},
    )
    ready.put(os.getpid())
    go.wait()
    cpu0 = time.process_time()
    start = time.perf_counter()
    if profile:
        import cProfile

        profiler = cProfile.Profile()
        stats = profiler.runcall(worker.run_until_idle)
        profiler.dump_stats(f"{profile}.{os.getpid()}")
    else:
        stats = worker.run_until_idle()
    seconds = time.perf_counter() - start
    rss, peak = rss_mib()
    results.put(
        {
            "pid": os.getpid(),
            "seconds": seconds,
            "cpu": time.process_time() - cpu0,
            "claimed": stats.claimed,
            "claim_s": stats.claim_seconds,
            "write_s": stats.write_seconds,
            "outcomes": dict(stats.outcomes),
            "calls": dict(calls),
            "first_claim": calls["first_claim"],
            "last_complete": calls["last_complete"],
            "rss_mib": rss,
            "peak_mib": peak,
        }
    )


def _raw_drain_child(
    url: str, batch: int, ready: MpQueue[Any], go: MpEvent, results: MpQueue[Any]
) -> None:
    name = f"raw:{os.getpid()}"
    done = 0
    with psycopg.connect(url, autocommit=True) as conn:
        ready.put(os.getpid())
        go.wait()
        cpu0 = time.process_time()
        start = last = time.perf_counter()
        while True:
            ids = [r[0] for r in conn.execute(RAW_CLAIM, {"worker": name, "limit": batch})]
            if not ids:
                break
            conn.execute(RAW_COMPLETE, {"ids": ids})
            last = time.perf_counter()
            done += len(ids)
        seconds = time.perf_counter() - start
    rss, peak = rss_mib()
    results.put(
        {
            "pid": os.getpid(),
            "seconds": seconds,
            "cpu": time.process_time() - cpu0,
            "claimed": done,
            "first_claim": start,
            "last_complete": last,
            "rss_mib": rss,
            "peak_mib": peak,
        }
    )


def _get(source: MpQueue[Any], children: list[Any], timeout: float = 600.0) -> Any:
    """The next item of ``source``; fail fast when a child died instead of reporting."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return source.get(timeout=0.05)
        except Empty:
            if any(c.exitcode not in (None, 0) for c in children):
                raise RuntimeError("a benchmark process failed (see its traceback above)") from None
            if time.monotonic() > deadline:
                raise


def run_drain(
    url: str, n: int, processes: int, target: Callable[..., None], args: tuple[Any, ...]
) -> DrainResult:
    """Seed ``n`` jobs, start ``processes`` children, time from 'go' to the last one's report."""
    reset(url)
    seed_noop_jobs(url, n)
    ready: MpQueue[Any] = CTX.Queue()
    results: MpQueue[Any] = CTX.Queue()
    go = CTX.Event()
    children = [
        CTX.Process(target=target, args=(url, *args, ready, go, results)) for _ in range(processes)
    ]
    for child in children:
        child.start()
    for _ in children:
        _get(ready, children)
    start = time.perf_counter()
    go.set()
    reports = [_get(results, children) for _ in children]
    seconds = time.perf_counter() - start
    for child in children:
        child.join(timeout=30)
    total, succeeded, _attempts = counts(url)
    if succeeded != n or total != n:
        raise RuntimeError(f"drain left work behind: {succeeded}/{total} succeeded of {n}")
    if any(not r["first_claim"] for r in reports):
        # A worker that counted no claim would make the span start at 0 (hours long).
        raise RuntimeError("drain: StatementCounter matched no claim statement of the store")
    # perf_counter is CLOCK_MONOTONIC on Linux: one clock for all processes of the machine.
    span = max(r["last_complete"] for r in reports) - min(r["first_claim"] for r in reports)
    return DrainResult(n / span, span, seconds, reports)


# -- 4. latency --------------------------------------------------------------------------------


def _latency_child(
    url: str,
    listen: bool,
    poll: float,
    concurrency: int,
    kind: str,
    ready: MpQueue[Any],
    stop: MpEvent,
    results: MpQueue[Any],
) -> None:
    """A worker whose ``probe`` handler reports when it starts: ``def`` on the queue's
    threads (``kind="sync"``) or ``async def`` on the worker's event loop (``"async"``)."""

    def probe(job: jobs.Job) -> None:
        started = time.time()
        results.put((job.payload["t"], started))

    async def probe_async(job: jobs.Job) -> None:
        started = time.time()
        results.put((job.payload["t"], started))  # no await: Queue.put hands off to a thread

    worker = jobs.Worker(
        url,
        {"probe": probe_async if kind == "async" else probe},
        {"default": concurrency},
        listen=listen,
        poll_interval=timedelta(seconds=poll),
    )

    def stopper() -> None:
        stop.wait()
        worker.stop()

    threading.Thread(target=stopper, daemon=True).start()
    ready.put(os.getpid())
    stats = worker.run(install_signal_handlers=False)
    rss, peak = rss_mib()
    results.put({"rss_mib": rss, "peak_mib": peak, "claimed": stats.claimed})


def _collect(results: MpQueue[Any], into: list[tuple[float, float]], expected: int) -> None:
    while len(into) < expected:
        item = results.get(timeout=60)
        if isinstance(item, tuple):
            into.append(item)


def latency_library(
    url: str,
    listen: bool,
    poll: float,
    samples: int,
    gap: float,
    warmup: int,
    kind: str = "sync",
) -> tuple[list[float], dict[str, Any]]:
    """One job per transaction every ~``gap`` s; return latencies (ms) and the worker report.

    ``kind`` is the probe handler's: ``"sync"`` (``def``) or ``"async"`` (``async def``)."""
    reset(url)
    ready: MpQueue[Any] = CTX.Queue()
    results: MpQueue[Any] = CTX.Queue()
    stop = CTX.Event()
    child = CTX.Process(
        target=_latency_child, args=(url, listen, poll, 4, kind, ready, stop, results)
    )
    child.start()
    ready.get(timeout=60)
    received: list[tuple[float, float]] = []
    rnd = random.Random(7)
    with psycopg.connect(url) as conn:
        # Warm-up jobs, each waited for: the worker is up, listening and its statements prepared.
        for _ in range(warmup):
            jobs.enqueue(conn, "probe", {"t": time.time()})
            conn.commit()
            _collect(results, received, len(received) + 1)
        received.clear()
        collector = threading.Thread(target=_collect, args=(results, received, samples))
        collector.start()
        commits: list[float] = []  # enqueue+commit alone: the part no worker can shorten
        for _ in range(samples):
            sent = time.time()
            jobs.enqueue(conn, "probe", {"t": sent})
            conn.commit()
            commits.append((time.time() - sent) * 1000.0)
            time.sleep(gap * (0.5 + rnd.random()))
        collector.join(timeout=poll * 2 + 60)
    stop.set()
    report: dict[str, Any] = results.get(timeout=60)
    report["commit_p50_ms"] = percentile(commits, 50)
    child.join(timeout=30)
    if len(received) != samples:
        raise RuntimeError(f"latency run lost samples: {len(received)} of {samples}")
    return [(started - sent) * 1000.0 for sent, started in received], report


def latency_bare_notify(url: str, samples: int, gap: float) -> list[float]:
    """Round trip of a bare NOTIFY (autocommit) to a LISTENing connection in another thread."""
    received: dict[str, float] = {}
    listening = threading.Event()

    def listen() -> None:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(CHANNEL_RT)
            listening.set()
            for note in conn.notifies(timeout=60, stop_after=samples + 5):
                received[note.payload] = time.perf_counter()

    thread = threading.Thread(target=listen, daemon=True)
    thread.start()
    listening.wait(10)
    sent: dict[str, float] = {}
    rnd = random.Random(7)
    with psycopg.connect(url, autocommit=True) as conn:
        for i in range(samples + 5):
            key = str(i)
            sent[key] = time.perf_counter()
            conn.execute(NOTIFY_RT, (key,))
            time.sleep(gap * (0.5 + rnd.random()))
    thread.join(timeout=10)
    keys = [str(i) for i in range(5, samples + 5)]  # the first 5 are warm-up
    return [(received[k] - sent[k]) * 1000.0 for k in keys if k in received]


# -- report ------------------------------------------------------------------------------------


@dataclass
class Row:
    figure: str
    value: str
    baseline: str
    ratio: str
    target: str
    ok: bool | None  # None: no target, shown for context


def fmt_rate(v: float) -> str:
    return f"{v:,.0f}/s"


PHASES = ("enqueue", "many", "drain", "latency", "peers")


def _phase_enqueue(
    url: str, args: argparse.Namespace, rows: list[Row], figures: dict[str, float]
) -> None:
    print(f"enqueue, one job per transaction: {args.single:,} per side ...", flush=True)
    lib, raw = bench_enqueue_single(url, args.single, rounds=4)
    figures["single"] = lib
    rows.append(
        Row(
            "enqueue, 1 job/txn",
            fmt_rate(lib),
            f"{fmt_rate(raw)} INSERT+COMMIT",
            f"{lib / raw:.0%}",
            ">= 90% of raw",
            lib / raw >= 0.9,
        )
    )


def _phase_many(url: str, args: argparse.Namespace, rows: list[Row]) -> None:
    print(f"enqueue_many vs COPY, without and with keys: {args.many:,} per side ...", flush=True)
    lib, raw = bench_enqueue_many(url, args.many, args.batch)
    rows.append(
        Row(
            f"enqueue_many, batch {args.batch:,}",
            fmt_rate(lib),
            f"{fmt_rate(raw)} COPY",
            f"{lib / raw:.0%}",
            ">= 70% of raw COPY",
            lib >= 0.7 * raw,
        )
    )
    lib, keyed, plain = bench_enqueue_many_keyed(url, args.many, args.batch)
    rows.append(
        Row(
            f"enqueue_many with keys, batch {args.batch:,}",
            fmt_rate(lib),
            f"{fmt_rate(plain)} COPY",
            f"{lib / plain:.0%}",
            ">= 70% of raw COPY",
            lib >= 0.7 * plain,
        )
    )
    rows.append(
        Row(
            "  the same rows with keys, raw COPY",
            fmt_rate(lib),
            f"{fmt_rate(keyed)} COPY",
            f"{lib / keyed:.0%}",
            "-",
            None,
        )
    )


def _describe(label: str, result: DrainResult) -> str:
    parts = []
    for r in result.per_process:
        extra = ""
        if "calls" in r:
            extra = (
                f", {r['calls']['claim']:,.0f} claims {r['claim_s']:.2f}s"
                f", {r['calls']['complete']:,.0f} completes {r['write_s']:.2f}s"
            )
        parts.append(
            f"{r['claimed']:,} jobs in {r['seconds']:.2f}s (cpu {r['cpu']:.2f}s{extra}, "
            f"rss {r['rss_mib']:.1f} MiB)"
        )
    return (
        f"  {label}: span {result.span:.2f}s; wall {result.wall:.2f}s "
        f"= {result.drained_rate:,.0f}/s; " + "; ".join(parts)
    )


def drain_defaults(url: str, n: int, *, async_noop: bool = False) -> DrainResult:
    """2 worker processes with the library's defaults: ``jobs.Worker(url, handlers)``, the
    no-op handler a ``def`` or (``async_noop``) an ``async def``."""
    options = {"async_noop": True} if async_noop else {}
    return run_drain(url, n, 2, _library_drain_child, (options, {}, None))


def _phase_async_drain(
    url: str, args: argparse.Namespace, rows: list[Row], notes: list[str], figures: dict[str, float]
) -> None:
    """(issue 11) The 2-process drain with an ``async def`` no-op beside the sync one, same run."""
    print(f"drain {args.drain:,} no-op jobs x2, defaults: sync handler, async ...", flush=True)
    sync2 = drain_defaults(url, args.drain)
    async2 = drain_defaults(url, args.drain, async_noop=True)
    figures["drain_async"] = async2.rate
    figures["drain_defaults"] = sync2.rate  # the same measure as drain_defaults' (phase drain)
    ratio = async2.rate / sync2.rate
    rows.append(
        Row(
            "drain, 2 processes, async no-op",
            fmt_rate(async2.rate),
            f"{fmt_rate(sync2.rate)} sync x2",
            f"{ratio:.0%}",
            "-",
            None,
        )
    )
    cpu_async = ", ".join(f"{r['cpu']:.2f}s" for r in async2.per_process)
    cpu_sync = ", ".join(f"{r['cpu']:.2f}s" for r in sync2.per_process)
    notes.append(
        "async drain: jobs.Worker(url, handlers) (the defaults), `async def noop(job)` vs "
        "`def noop(job)`; "
        f"CPU per process async {cpu_async}, sync {cpu_sync}"
    )


def _phase_drain(
    url: str,
    args: argparse.Namespace,
    rows: list[Row],
    notes: list[str],
    memory: list[float],
    figures: dict[str, float],
) -> None:
    print(
        f"drain {args.drain:,} no-op jobs: raw x2, library x1, library x2, library x2 with "
        "the defaults ...",
        flush=True,
    )
    raw2 = run_drain(url, args.drain, 2, _raw_drain_child, (args.raw_batch,))
    options = {"options": args.worker_options} if args.worker_options else {}
    tuned = {"queues": {"default": args.concurrency}, "prefetch": args.prefetch, "listen": True}
    lib1 = run_drain(url, args.drain, 1, _library_drain_child, (tuned, options, None))
    attempts1 = counts(url)[2]
    lib2 = run_drain(url, args.drain, 2, _library_drain_child, (tuned, options, args.profile))
    attempts2 = counts(url)[2]
    default2 = drain_defaults(url, args.drain)
    attempts_default = counts(url)[2]
    figures["drain_tuned"] = lib2.rate
    figures["drain_defaults"] = default2.rate
    raw_base = f"{fmt_rate(raw2.rate)} raw x2"
    rows.append(
        Row(
            "drain, 1 worker process",
            fmt_rate(lib1.rate),
            raw_base,
            f"{lib1.rate / raw2.rate:.0%}",
            "-",
            None,
        )
    )
    rows.append(
        Row(
            "drain, 2 worker processes",
            fmt_rate(lib2.rate),
            raw_base,
            f"{lib2.rate / raw2.rate:.0%}",
            ">= 8,000/s, >= 40% raw",
            lib2.rate >= 8000 and lib2.rate / raw2.rate >= 0.4,
        )
    )
    ratio = default2.rate / lib2.rate
    rows.append(
        Row(
            "drain, 2 processes, defaults",
            fmt_rate(default2.rate),
            raw_base,
            f"{default2.rate / raw2.rate:.0%}",
            f">= 80% tuned ({ratio:.0%})",
            ratio >= 0.8,
        )
    )
    rows.append(
        Row(
            "attempt history rows x1 / x2 / defaults",
            f"{attempts1:,} / {attempts2:,} / {attempts_default:,}",
            "- (raw writes none)",
            "-",
            f"= {args.drain:,} each",
            attempts1 == attempts2 == attempts_default == args.drain,
        )
    )
    memory.extend(r["rss_mib"] for r in lib1.per_process + lib2.per_process)
    memory.extend(r["rss_mib"] for r in default2.per_process)
    notes.append(
        f"drain: jobs.Worker(queues={{'default': {args.concurrency}}}, "
        f"prefetch={args.prefetch}, listen=True"
        + (f", connect_kwargs={options}" if options else "")
        + f"); raw: claim {args.raw_batch} (SKIP LOCKED) + complete, autocommit; "
        "wall time from start signal to the last process's report"
    )
    notes.append(_describe("raw x2", raw2))
    notes.append(_describe("lib x1", lib1))
    notes.append(_describe("lib x2", lib2))
    notes.append(_describe("lib x2 defaults: jobs.Worker(url, handlers)", default2))
    raw_rss = max(r["rss_mib"] for r in raw2.per_process)
    notes.append(f"raw drain client RSS {raw_rss:.1f} MiB (python + psycopg, for scale)")


def _phase_latency(
    url: str,
    args: argparse.Namespace,
    rows: list[Row],
    notes: list[str],
    memory: list[float],
    figures: dict[str, float],
) -> None:
    print(f"latency: {args.samples} samples a mode: on (def, async def), off, bare", flush=True)
    gap = args.gap_ms / 1000.0
    bare = latency_bare_notify(url, args.samples, gap)
    on, on_report = latency_library(url, True, 1.0, args.samples, gap, warmup=5)
    # (issue 11) The same harness with an ``async def`` probe: the job starts as a task on the
    # worker's event loop, one thread hop from the dispatcher.
    on_async, async_report = latency_library(
        url, True, 1.0, args.samples, gap, warmup=5, kind="async"
    )
    off, off_report = latency_library(url, False, args.poll, args.samples, gap, warmup=2)
    figures["latency_p50"] = percentile(on, 50)
    figures["latency_async_p50"] = percentile(on_async, 50)
    for label, values in (("", on), (", async handler", on_async)):
        for q, target in ((50, 4.0), (95, None), (99, 10.0)):
            value = percentile(values, q)
            base = percentile(bare, q)
            rows.append(
                Row(
                    f"latency LISTEN on{label} p{q}",
                    f"{value:.2f} ms",
                    f"{base:.2f} ms bare NOTIFY",
                    f"{value / base:.1f}x",
                    f"<= {target:g} ms" if target else "-",
                    value <= target if target else None,
                )
            )
    poll_ms = args.poll * 1000.0
    for q in (50, 95, 99):
        value = percentile(off, q)
        rows.append(
            Row(
                f"latency LISTEN off p{q}",
                f"{value:.1f} ms",
                f"poll {poll_ms:.0f} ms",
                f"{value / poll_ms:.2f}",
                "<= poll + 10 ms" if q == 99 else "-",
                value <= poll_ms + 10.0 if q == 99 else None,
            )
        )
    memory.extend([on_report["rss_mib"], async_report["rss_mib"], off_report["rss_mib"]])
    notes.append(
        f"latency: {len(on)} / {len(on_async)} / {len(off)} / {len(bare)} samples (on, on "
        f"async, off, bare), gap ~{args.gap_ms:g} ms, "
        f"from just before enqueue+commit to the handler's first line; "
        f"max LISTEN on {max(on):.1f} ms, on async {max(on_async):.1f} ms, off "
        f"{max(off):.1f} ms, bare {max(bare):.2f} ms; "
        "worker Worker(queues={'default': 4}), default (adaptive) claim size; "
        f"of which enqueue+commit p50 {on_report['commit_p50_ms']:.2f} ms (sync run), "
        f"{async_report['commit_p50_ms']:.2f} ms (async run)"
    )


# -- 5. PgQueuer side by side (issue 9 §7) ------------------------------------------------------

PEER_SCRIPT = _BENCH_DIR / "peer_pgqueuer.py"
PEER_PYTHON = _BENCH_DIR.parent / ".venv-bench" / "bin" / "python"
PEER_BULK = 1000  # jobs per bulk call on both sides
PEER_SINGLE_ROUNDS = 30  # alternated blocks of the one-job-per-transaction comparison


class PeerUnavailable(RuntimeError):
    """The bench-only interpreter with PgQueuer is missing or cannot import it."""


def asyncpg_conninfo(url: str) -> dict[str, Any]:
    """The keywords of ``asyncpg.connect`` for a libpq URL or conninfo string."""
    params = conninfo_to_dict(url)
    mapping = {"host": "host", "port": "port", "user": "user", "password": "password"}
    out: dict[str, Any] = {k: params[p] for p, k in mapping.items() if params.get(p)}
    if "port" in out:
        out["port"] = int(out["port"])
    out["database"] = params.get("dbname")
    return out


def peer(python: Path, url: str, command: str, *args: object, timeout: float = 1800) -> Any:
    """Run one command of ``bench/peer_pgqueuer.py`` in the bench venv; its JSON answer."""
    done = subprocess.run(
        [
            str(python),
            str(PEER_SCRIPT),
            command,
            json.dumps(asyncpg_conninfo(url)),
            *map(str, args),
        ],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"PgQueuer {command} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


@contextmanager
def peer_session(python: Path, url: str, command: str) -> Iterator[Callable[[int], float]]:
    """A long-lived ``bench/peer_pgqueuer.py serve``: yields ``run(n)``, the seconds of ``n``
    more jobs on the peer's one connection (no process start between blocks)."""
    proc = subprocess.Popen(
        [str(python), str(PEER_SCRIPT), command, json.dumps(asyncpg_conninfo(url))],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdin is not None and proc.stdout is not None
    stdin, stdout = proc.stdin, proc.stdout

    def run(n: int) -> float:
        stdin.write(f"{n}\n")
        stdin.flush()
        line = stdout.readline()
        if not line:
            raise RuntimeError(f"PgQueuer {command} ended early (exit {proc.wait(60)})")
        return float(json.loads(line)["seconds"])

    try:
        yield run
    finally:
        stdin.close()
        stdout.read()
        proc.wait(timeout=120)


def peer_python(path: str) -> Path:
    """The bench venv's interpreter if it exists and imports PgQueuer 1.x, else PeerUnavailable."""
    python = Path(path)
    if not python.exists():
        raise PeerUnavailable(f"{python} not found: run `make bench-peers` to create .venv-bench")
    probe = subprocess.run(
        [str(python), "-c", "import pgqueuer, asyncpg; print(pgqueuer.__version__)"],
        capture_output=True,
        text=True,
        check=False,
    )
    if probe.returncode != 0:
        raise PeerUnavailable(f"{python} cannot import pgqueuer: {probe.stderr.strip()[-300:]}")
    return python


def _phase_peers(
    url: str,
    args: argparse.Namespace,
    rows: list[Row],
    notes: list[str],
    figures: dict[str, float],
) -> None:
    try:
        python = peer_python(args.peer_python)
    except PeerUnavailable as exc:
        print(f"PgQueuer side by side: skipped ({exc})", flush=True)
        notes.append(f"PgQueuer figures skipped: {exc}")
        return
    version = peer(python, url, "install")["version"]
    print(
        f"PgQueuer {version} side by side: enqueue 1/txn {args.single:,}, bulk "
        f"{args.many:,} in calls of {PEER_BULK:,}, drain {args.drain:,} x2, latency "
        f"{args.samples} samples (library figures measured here when their phase did not run) ...",
        flush=True,
    )
    # The library's side: the same sizes, measured in this run (reused from the earlier phases).
    if "single" not in figures:
        figures["single"] = bench_enqueue_single(url, args.single, rounds=4)[0]
    if "drain_defaults" not in figures:
        figures["drain_defaults"] = drain_defaults(url, args.drain).rate
    if "drain_async" not in figures:  # (issue 11) the async no-op drain, defaults
        figures["drain_async"] = drain_defaults(url, args.drain, async_noop=True).rate
    if "latency_p50" not in figures:
        on, _ = latency_library(url, True, 1.0, args.samples, args.gap_ms / 1000.0, warmup=5)
        figures["latency_p50"] = percentile(on, 50)
    # The enqueue figures alternate the two libraries in rounds (the commit-bound rates drift
    # with the machine's load within a minute): rate = all jobs / all the seconds of a side.
    # One job per transaction takes a loop of its own: short blocks (100 jobs, ~30 ms) in ABBA
    # order on one connection a side (PgQueuer's a long-lived subprocess), so that the load of
    # a shared machine, which comes and goes in seconds, hits both sides alike; nothing runs
    # between them (the bulk rounds leave work to autovacuum).
    rounds = 4
    single_rounds = PEER_SINGLE_ROUNDS
    single_n = max(1, args.single // single_rounds)
    bulk_n = max(1, args.many // rounds // PEER_BULK) * PEER_BULK  # whole calls on both sides
    seconds = {"single_auto": 0.0, "single": 0.0, "lib_bulk": 0.0, "raw_copy": 0.0, "bulk": 0.0}
    with (
        enqueue_single_autocommit(url) as lib_single,
        peer_session(python, url, "serve") as peer_single,
    ):
        for r in range(single_rounds):
            for side in ("lib", "peer") if r % 4 in (0, 3) else ("peer", "lib"):
                if side == "lib":
                    seconds["single_auto"] += lib_single(single_n)
                else:
                    seconds["single"] += peer_single(single_n)
    for _ in range(rounds):
        lib_rate, raw_rate = bench_enqueue_many(url, bulk_n, PEER_BULK)
        seconds["lib_bulk"] += bulk_n / lib_rate
        seconds["raw_copy"] += bulk_n / raw_rate
        reset(url, vacuum=True)
        seconds["bulk"] += peer(python, url, "bulk", bulk_n, PEER_BULK)["seconds"]
    single_auto, single = (single_rounds * single_n / seconds[k] for k in ("single_auto", "single"))
    lib_bulk = rounds * bulk_n / seconds["lib_bulk"]
    raw_copy = rounds * bulk_n / seconds["raw_copy"]
    bulk = rounds * bulk_n / seconds["bulk"]
    drain = peer(python, url, "drain", args.drain, 2)
    if drain["handled"] != args.drain or drain["left"]:
        raise RuntimeError(f"PgQueuer drain left work behind: {drain}")
    latency = peer(python, url, "latency", args.samples, args.gap_ms)["latencies_ms"]
    pgq_p50 = percentile(latency, 50)

    def compare(figure: str, lib: float, theirs: float, factor: float) -> Row:
        target = f">= {factor:g}x PgQueuer" if factor != 1 else ">= PgQueuer"
        return Row(
            figure,
            fmt_rate(lib),
            f"{fmt_rate(theirs)} PgQueuer",
            f"{lib / theirs:.2f}x",
            target,
            lib >= factor * theirs,
        )

    rows.append(
        compare("vs PgQueuer: drain x2, defaults", figures["drain_defaults"], drain["rate"], 2)
    )
    rows.append(
        compare(
            "vs PgQueuer: drain x2, async def no-op",
            figures["drain_async"],
            drain["rate"],
            3,
        )
    )
    # Like for like: one statement a job on an autocommit connection on both sides. The
    # explicit transaction (BEGIN, INSERT, COMMIT: three round trips) is printed beside it.
    rows.append(compare("vs PgQueuer: enqueue 1 job/txn, autocommit", single_auto, single, 1))
    explicit = compare("vs PgQueuer: enqueue + commit()", figures["single"], single, 1)
    rows.append(replace(explicit, target="- (3 round trips)", ok=None))
    rows.append(compare(f"vs PgQueuer: bulk, {PEER_BULK:,}/call", lib_bulk, bulk, 2))
    # The ceiling of that row: raw COPY of the same batches, no library, over PgQueuer's bulk.
    rows.append(
        Row(
            f"  raw COPY {PEER_BULK:,}/call (ceiling)",
            fmt_rate(raw_copy),
            f"{fmt_rate(bulk)} PgQueuer",
            f"{raw_copy / bulk:.2f}x",
            "-",
            None,
        )
    )
    lib_p50 = figures["latency_p50"]
    rows.append(
        Row(
            "vs PgQueuer: latency p50",
            f"{lib_p50:.2f} ms",
            f"{pgq_p50:.2f} ms PgQueuer",
            f"{lib_p50 / pgq_p50:.2f}x",
            "<= 4 ms",
            lib_p50 <= 4.0,
        )
    )
    notes.append(
        f"PgQueuer {version} (asyncpg, uvloop, run as subprocesses of {python}): drain = "
        f"PgQueuer(AsyncpgDriver).run(mode=drain) with its defaults (batch 10) in 2 processes, "
        f"span {drain['span']:.2f}s, cpu {', '.join(f'{c:.2f}s' for c in drain['cpu'])}; "
        f"enqueue = Queries.enqueue on an autocommit connection (1 job/txn: {single_rounds} "
        f"blocks of {single_n:,} a side, ABBA); latency p95/p99 "
        f"{percentile(latency, 95):.2f}/{percentile(latency, 99):.2f} ms "
        f"({len(latency)} samples); raw COPY in the same run {fmt_rate(raw_copy)} "
        f"(batches of {PEER_BULK:,}); library drain defaults = jobs.Worker(url, handlers)"
    )


def print_table(rows: list[Row]) -> None:
    headers = ("figure", "value", "baseline (raw)", "ratio", "target", "result")
    table = [
        (
            r.figure,
            r.value,
            r.baseline,
            r.ratio,
            r.target,
            "-" if r.ok is None else ("PASS" if r.ok else "FAIL"),
        )
        for r in rows
    ]
    widths = [max(len(h), *(len(t[i]) for t in table)) for i, h in enumerate(headers)]
    line = "  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip()
    print(line)
    print("-" * len(line))
    for t in table:
        print("  ".join(c.ljust(w) for c, w in zip(t, widths, strict=True)).rstrip())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smoke run: tiny sizes, seconds")
    parser.add_argument(
        "--only", default=",".join(PHASES), help=f"comma-separated phases of {', '.join(PHASES)}"
    )
    parser.add_argument("--single", type=int, default=3000, help="jobs per side, enqueue 1/txn")
    parser.add_argument("--many", type=int, default=100_000, help="jobs per side, enqueue_many")
    parser.add_argument("--batch", type=int, default=5000, help="enqueue_many / COPY batch size")
    parser.add_argument("--drain", type=int, default=20_000, help="no-op jobs per drain run")
    parser.add_argument("--concurrency", type=int, default=8, help="drain: threads per worker")
    parser.add_argument("--prefetch", type=int, default=100, help="drain: worker prefetch")
    parser.add_argument("--raw-batch", type=int, default=100, help="drain: raw claim batch size")
    parser.add_argument(
        "--worker-options",
        default="",
        help="libpq options for the drain workers' connections, e.g. '-c synchronous_commit=off'",
    )
    parser.add_argument("--samples", type=int, default=500, help="latency samples per mode")
    parser.add_argument("--gap-ms", type=float, default=5.0, help="mean gap between samples")
    parser.add_argument("--poll", type=float, default=0.5, help="poll interval, LISTEN off (s)")
    parser.add_argument("--profile", metavar="PREFIX", help="cProfile the x2 drain workers")
    parser.add_argument(
        "--async-drain",
        action="store_true",
        help="also drain with an async def no-op handler beside the sync one (issue 11)",
    )
    parser.add_argument(
        "--peer-python",
        default=str(PEER_PYTHON),
        help="interpreter with PgQueuer installed (make bench-peers), for the peers phase",
    )
    args = parser.parse_args()
    if args.quick:
        args.single, args.many, args.drain, args.samples = 200, 10_000, 2000, 40
        args.batch, args.poll = 2000, 0.2
    phases = {p.strip() for p in args.only.split(",") if p.strip()}
    if not phases <= set(PHASES):
        parser.error(f"--only: unknown phase(s) {sorted(phases - set(PHASES))}")

    began = time.perf_counter()
    rows: list[Row] = []
    notes: list[str] = []
    memory: list[float] = []
    figures: dict[str, float] = {}  # library figures the PgQueuer comparison reuses
    with throwaway_database(database_url()) as url:
        with psycopg.connect(url, autocommit=True) as conn:
            settings = conn.execute(
                "SELECT current_setting('server_version'), current_setting('fsync'), "
                "current_setting('synchronous_commit'), current_database()"
            ).fetchone()
        assert settings is not None
        print(
            f"PostgreSQL {settings[0]} (fsync={settings[1]}, synchronous_commit={settings[2]}), "
            f"{os.cpu_count()} CPUs, throwaway database {settings[3]}"
        )
        if "enqueue" in phases:
            _phase_enqueue(url, args, rows, figures)
        if "many" in phases:
            _phase_many(url, args, rows)
        if "drain" in phases:
            _phase_drain(url, args, rows, notes, memory, figures)
        if args.async_drain:
            _phase_async_drain(url, args, rows, notes, figures)
        if "latency" in phases:
            _phase_latency(url, args, rows, notes, memory, figures)
        if "peers" in phases:
            _phase_peers(url, args, rows, notes, figures)
    if memory:
        rows.append(
            Row(
                "worker RSS after its run",
                f"{max(memory):.1f} MiB",
                "-",
                "-",
                "< 80 MiB",
                max(memory) < 80.0,
            )
        )
    print()
    for note in notes:
        print(note)
    print()
    print_table(rows)
    print(f"\ntotal {time.perf_counter() - began:.1f}s")
    return 0 if all(r.ok is not False for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
