"""The PgQueuer side of ``bench/queue.py`` (issue 9 §7), run by the bench-only interpreter.

PgQueuer is never a dependency of the project: ``make bench-peers`` installs it (and asyncpg)
into ``.venv-bench`` from ``bench/requirements-peers.txt``, and ``bench/queue.py`` runs this file
with that interpreter as a subprocess, so the project's own interpreter never imports it. It
uses nothing of the project: it prints one JSON object on stdout per call.

    python bench/peer_pgqueuer.py COMMAND CONNINFO_JSON [ARGS...]

- ``install``: PgQueuer's tables, in the bench's throwaway database;
- ``single N``: enqueue one job per transaction with PgQueuer's producer (``Queries.enqueue``
  on an autocommit asyncpg connection, as its benchmark harness does), N times;
- ``bulk N BATCH``: the same with lists of BATCH jobs per call;
- ``drain N PROCESSES``: N no-op jobs (seeded in bulk, untimed) drained by PROCESSES worker
  processes, each one ``PgQueuer(AsyncpgDriver(...)).run(mode=drain)`` with PgQueuer's
  defaults (batch size 10), an async no-op entrypoint, on uvloop as ``pgq run`` uses;
  rate = N / (first worker started to last worker finished);
- ``latency SAMPLES GAP_MS``: one worker process runs continuously; one job per transaction
  every ~GAP_MS ms carries ``time.time()``; latency = the handler's first line minus that.
- ``serve``: ``single`` in blocks on one connection: reads a count per line on stdin, enqueues
  that many jobs and answers ``{"seconds": ...}`` on a line, until stdin ends (so that
  ``bench/queue.py`` can alternate short blocks of both libraries without a process start
  between them);
- ``account N``: ``single N`` without clearing the queue, counting the driver calls (statements)
  and the client's CPU, with its server backend's pid, for ``bench/enqueue_one.py`` (the
  caller reads the database's counters around it).

The connection is given as a JSON object of asyncpg ``connect`` keywords.
"""

from __future__ import annotations

import sys
from pathlib import Path

# Run as a script from bench/, whose queue.py would shadow the standard library's ``queue``
# (multiprocessing imports it): drop the folder from the path.
_BENCH_DIR = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _BENCH_DIR]

import asyncio  # noqa: E402
import importlib  # noqa: E402
import json  # noqa: E402
import multiprocessing  # noqa: E402
import os  # noqa: E402
import random  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
from multiprocessing.queues import Queue as MpQueue  # noqa: E402
from multiprocessing.synchronize import Event as MpEvent  # noqa: E402
from typing import Any  # noqa: E402

CTX = multiprocessing.get_context("spawn")
ENTRYPOINT = "noop"


def _modules() -> tuple[Any, Any, Any]:
    """(pgqueuer, asyncpg, the event-loop runner): imported here, in the bench venv only."""
    pgqueuer = importlib.import_module("pgqueuer")
    asyncpg = importlib.import_module("asyncpg")
    try:
        runner = importlib.import_module("uvloop").run
    except ImportError:  # pragma: no cover - uvloop is a PgQueuer dependency on Linux
        runner = asyncio.run
    return pgqueuer, asyncpg, runner


async def _queries(conninfo: dict[str, Any]) -> Any:
    pgqueuer, asyncpg, _ = _modules()
    conn = await asyncpg.connect(**conninfo)
    return pgqueuer.Queries(pgqueuer.AsyncpgDriver(conn))


async def _install(conninfo: dict[str, Any]) -> dict[str, Any]:
    queries = await _queries(conninfo)
    if not await queries.schema_is_installed():
        await queries.install()
    pgqueuer, _, _ = _modules()
    return {"version": pgqueuer.__version__}


async def _clear(queries: Any) -> None:
    await queries.clear_queue()
    await queries.clear_statistics_log()


async def _single(conninfo: dict[str, Any], n: int) -> dict[str, Any]:
    queries = await _queries(conninfo)
    await _clear(queries)
    for i in range(20):  # warm up: prepared statements
        await queries.enqueue(ENTRYPOINT, b'{"i": %d}' % i, 0)
    start = time.perf_counter()
    for i in range(n):
        await queries.enqueue(ENTRYPOINT, b'{"i": %d}' % i, 0)
    seconds = time.perf_counter() - start
    await _clear(queries)
    return {"rate": n / seconds, "seconds": seconds}


def _proc_cpu(pid: int) -> float | None:
    """User + system CPU seconds of a local process (the server backend), None if unreadable."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def _serve(conninfo: dict[str, Any]) -> dict[str, Any]:
    queries = await _queries(conninfo)
    await _clear(queries)
    for i in range(20):  # warm up: prepared statements
        await queries.enqueue(ENTRYPOINT, b'{"i": %d}' % i, 0)
    done = 0
    # Blocking reads between blocks: nothing else runs on this loop, and none is timed.
    for line in sys.stdin:
        n = int(line)
        start = time.perf_counter()
        for i in range(done, done + n):
            await queries.enqueue(ENTRYPOINT, b'{"i": %d}' % i, 0)
        seconds = time.perf_counter() - start
        done += n
        print(json.dumps({"seconds": seconds}), flush=True)
    await _clear(queries)
    return {"jobs": done}


async def _account(conninfo: dict[str, Any], n: int) -> dict[str, Any]:
    queries = await _queries(conninfo)
    for i in range(20):  # warm up: prepared statements, as in _single
        await queries.enqueue(ENTRYPOINT, b'{"i": %d}' % i, 0)
    driver = queries.driver
    calls = 0
    fetch, execute = driver.fetch, driver.execute

    async def counted_fetch(*args: Any) -> Any:
        nonlocal calls
        calls += 1
        return await fetch(*args)

    async def counted_execute(*args: Any) -> Any:
        nonlocal calls
        calls += 1
        return await execute(*args)

    driver.fetch, driver.execute = counted_fetch, counted_execute
    pid = (await driver.fetch("SELECT pg_backend_pid() AS pid"))[0]["pid"]
    calls = 0
    server0 = _proc_cpu(pid)
    cpu0, start = time.process_time(), time.perf_counter()
    for i in range(n):
        await queries.enqueue(ENTRYPOINT, b'{"i": %d}' % i, 0)
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu0
    server1 = _proc_cpu(pid)
    server = None if server0 is None or server1 is None else server1 - server0
    return {"seconds": seconds, "cpu": cpu, "server_cpu": server, "statements": calls}


async def _bulk(conninfo: dict[str, Any], n: int, batch: int) -> dict[str, Any]:
    queries = await _queries(conninfo)
    await _clear(queries)
    entrypoints = [ENTRYPOINT] * batch
    priorities = [0] * batch
    await queries.enqueue(entrypoints, [b"{}"] * batch, priorities)  # warm up
    calls = max(1, n // batch)
    seconds = 0.0
    for c in range(calls):
        payloads: list[bytes | None] = [b'{"i": %d}' % (c * batch + i) for i in range(batch)]
        start = time.perf_counter()
        await queries.enqueue(entrypoints, payloads, priorities)
        seconds += time.perf_counter() - start
    await _clear(queries)
    return {"rate": calls * batch / seconds, "seconds": seconds}


def _drain_child(
    conninfo: dict[str, Any], ready: MpQueue[Any], go: MpEvent, out: MpQueue[Any]
) -> None:
    pgqueuer, asyncpg, runner = _modules()
    done = 0

    async def main() -> dict[str, Any]:
        nonlocal done
        conn = await asyncpg.connect(**conninfo)
        pgq = pgqueuer.PgQueuer(pgqueuer.AsyncpgDriver(conn))

        async def noop(job: Any) -> None:
            nonlocal done
            done += 1

        pgq.entrypoint(ENTRYPOINT)(noop)

        ready.put(1)
        await asyncio.to_thread(go.wait)
        cpu0 = time.process_time()
        start = time.perf_counter()
        drain = importlib.import_module("pgqueuer.domain.types").QueueExecutionMode.drain
        await pgq.run(mode=drain)
        end = time.perf_counter()
        return {"start": start, "end": end, "done": done, "cpu": time.process_time() - cpu0}

    out.put(runner(main()))


async def _seed(conninfo: dict[str, Any], n: int) -> None:
    queries = await _queries(conninfo)
    await _clear(queries)
    batch = 5000
    for k in range(0, n, batch):
        size = min(batch, n - k)
        await queries.enqueue([ENTRYPOINT] * size, [b"{}"] * size, [0] * size)


async def _left(conninfo: dict[str, Any]) -> int:
    queries = await _queries(conninfo)
    sizes = await queries.queue_size()
    return int(sum(s.count for s in sizes))


def _drain(conninfo: dict[str, Any], n: int, processes: int) -> dict[str, Any]:
    _, _, runner = _modules()
    runner(_seed(conninfo, n))
    ready: MpQueue[Any] = CTX.Queue()
    out: MpQueue[Any] = CTX.Queue()
    go = CTX.Event()
    children = [
        CTX.Process(target=_drain_child, args=(conninfo, ready, go, out)) for _ in range(processes)
    ]
    for child in children:
        child.start()
    for _ in children:
        ready.get(timeout=120)
    go.set()
    reports = [out.get(timeout=1800) for _ in children]
    for child in children:
        child.join(30)
    span = max(r["end"] for r in reports) - min(r["start"] for r in reports)
    handled = sum(r["done"] for r in reports)
    left = runner(_left(conninfo))
    return {
        "rate": n / span,
        "span": span,
        "handled": handled,
        "left": left,
        "cpu": [r["cpu"] for r in reports],
    }


def _latency_child(
    conninfo: dict[str, Any], ready: MpQueue[Any], stop: MpEvent, out: MpQueue[Any]
) -> None:
    pgqueuer, asyncpg, runner = _modules()

    async def main() -> None:
        conn = await asyncpg.connect(**conninfo)
        pgq = pgqueuer.PgQueuer(pgqueuer.AsyncpgDriver(conn))

        async def probe(job: Any) -> None:
            started = time.time()
            out.put((float(job.payload.decode()), started))

        pgq.entrypoint(ENTRYPOINT)(probe)

        async def stopper() -> None:
            await asyncio.to_thread(stop.wait)
            pgq.shutdown.set()

        task = asyncio.create_task(stopper())
        ready.put(1)
        await pgq.run()
        task.cancel()

    runner(main())
    out.put("stopped")


def _latency(conninfo: dict[str, Any], samples: int, gap_ms: float) -> dict[str, Any]:
    _, _, runner = _modules()
    runner(_seed(conninfo, 0))
    ready: MpQueue[Any] = CTX.Queue()
    out: MpQueue[Any] = CTX.Queue()
    stop = CTX.Event()
    child = CTX.Process(target=_latency_child, args=(conninfo, ready, stop, out))
    child.start()
    ready.get(timeout=120)
    received: list[tuple[float, float]] = []
    warmup = 5

    def collect() -> None:
        while len(received) < samples + warmup:
            item = out.get(timeout=120)
            if isinstance(item, tuple):
                received.append(item)

    collector = threading.Thread(target=collect, daemon=True)
    collector.start()

    async def produce() -> None:
        queries = await _queries(conninfo)
        rnd = random.Random(7)
        for i in range(samples + warmup):
            await queries.enqueue(ENTRYPOINT, str(time.time()).encode(), 0)
            if i < warmup:
                while len(received) <= i:  # each warm-up job waited for: the worker is up
                    await asyncio.sleep(0.005)
            else:
                await asyncio.sleep(gap_ms / 1000.0 * (0.5 + rnd.random()))

    time.sleep(1.0)  # the worker's LISTEN is set up after it reported ready
    runner(produce())
    collector.join(timeout=120)
    stop.set()
    child.join(timeout=60)
    if child.is_alive():
        child.kill()
    latencies = sorted((started - sent) * 1000.0 for sent, started in received[warmup:])
    return {"latencies_ms": latencies, "samples": len(latencies)}


def main(argv: list[str]) -> int:
    command, conninfo = argv[0], json.loads(argv[1])
    _, _, runner = _modules()
    rest = argv[2:]
    result: dict[str, Any]
    if command == "install":
        result = runner(_install(conninfo))
    elif command == "single":
        result = runner(_single(conninfo, int(rest[0])))
    elif command == "serve":
        result = runner(_serve(conninfo))
    elif command == "account":
        result = runner(_account(conninfo, int(rest[0])))
    elif command == "bulk":
        result = runner(_bulk(conninfo, int(rest[0]), int(rest[1])))
    elif command == "drain":
        result = _drain(conninfo, int(rest[0]), int(rest[1]))
    elif command == "latency":
        result = _latency(conninfo, int(rest[0]), float(rest[1]))
    else:
        print(f"unknown command {command!r}", file=sys.stderr)
        return 2
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
