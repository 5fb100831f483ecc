"""One worker's CPU per delivered reminder, in process: the simulated channel's drain.

``python -m bench.delivery_worker --size 20000 --rounds 3``: in a throwaway database (on
``scheduler.devdb.database_url()``), each round creates ``--size`` daily schedules due at one
instant, enqueues their jobs with one scheduler tick (frozen clock), then drains them with one
in-process :class:`jobs.Worker` running the simulated app's handler
(:class:`scheduler.delivery.DeliveryHandler`, :class:`scheduler.simulated.SimulatedChannel`,
each subject its own device; queue ``reminders`` at 16, as ``bench.reminder_delivery``'s
workers). It prints, per round, the worker's CPU a delivery (this process's ``process_time``
over the drain: the dispatcher thread, the event loop's thread and the pool), the database
backends' CPU a delivery (``/proc``, when the server runs on this machine) and the rate.

This is the worker's side of ``bench.reminder_delivery`` without its processes, replicas and
waiting: a figure to compare before and after a change of the worker's or the handler's
Python, alternated run by run (docs/performance.md). The process's garbage collector is set as
``tockwork worker`` sets it (:func:`jobs.worker.collect_less`; ``--default-gc``: Python's
defaults, as before 2026-12-03). ``--profile FILE`` writes a cProfile of
the event loop's thread (the handler) and of the dispatcher thread (claim and completion) of
the last round, as FILE.loop and FILE.dispatcher.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import os
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg

import scheduler
from jobs import Worker
from jobs.worker import collect_less
from scheduler import Scheduler, devdb
from scheduler.delivery import DeliveryHandler, SubjectAsToken
from scheduler.devdb import database_url
from scheduler.migrations import ALL_COMPONENTS
from scheduler.simulated import SimulatedChannel
from timezones import FrozenClock

QUEUE = "reminders"
CONCURRENCY = 16
CREATED = datetime(2026, 3, 6, 12, 0, tzinfo=UTC)
TICK = datetime(2026, 3, 7, 7, 58, tzinfo=UTC)
DUE = datetime(2026, 3, 7, 8, 0, tzinfo=UTC)
CHUNK = 5000
RESET = (
    "TRUNCATE jobs, job_attempts, job_history, job_effects, schedules, simulated_pushes "
    "RESTART IDENTITY CASCADE"
)
BACKENDS = """
SELECT pid FROM pg_stat_activity
WHERE datname = current_database() AND pid <> pg_backend_pid() AND backend_type = 'client backend'
"""


def cpu_seconds(pid: int, tid: int | None = None) -> float | None:
    """User + system CPU of a process (or of its thread ``tid``) from /proc, None where /proc
    does not show it."""
    path = f"/proc/{pid}/stat" if tid is None else f"/proc/{pid}/task/{tid}/stat"
    try:
        with open(path, encoding="ascii") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def thread_seconds(native_id: int | None) -> float:
    """User + system CPU of one of this process's threads (0 where /proc does not show it)."""
    if native_id is None:
        return 0.0
    return cpu_seconds(os.getpid(), native_id) or 0.0


def backends(conn: psycopg.Connection[Any]) -> dict[int, float]:
    pids = [int(r[0]) for r in conn.execute(BACKENDS).fetchall()]
    return {pid: cpu for pid in pids if (cpu := cpu_seconds(pid)) is not None}


def enqueue(url: str, size: int) -> None:
    """``size`` schedules due at DUE, their jobs enqueued by one tick."""
    items = [
        {
            "job_type": "reminder",
            "rule": "daily@08:00",
            "zone": "UTC",
            "subject": f"user-{i}",
            "queue": QUEUE,
            "jitter": 0,
            "payload": {"subject": f"user-{i}", "message": "time to stretch"},
        }
        for i in range(size)
    ]
    with psycopg.connect(url) as conn:
        for k in range(0, size, CHUNK):
            with conn.transaction():
                scheduler.create_schedules(conn, items[k : k + CHUNK], now=CREATED)
    replica = Scheduler(url, clock=FrozenClock(TICK), lookahead=timedelta(minutes=5))
    try:
        while replica.tick().enqueued:
            pass
    finally:
        replica.close()


class ThreadProfiles:
    """cProfile (thread CPU time) of the dispatcher thread (this one) and the loop's thread."""

    def __init__(self) -> None:
        self.dispatcher = cProfile.Profile(time.thread_time)
        self.loop = cProfile.Profile(time.thread_time)

    def start_loop(self, worker: Worker) -> None:
        loop = worker._loop
        if loop is not None:
            loop.call_soon_threadsafe(self.loop.enable)

    def stop_loop(self, worker: Worker) -> None:
        loop = worker._loop
        if loop is not None:
            asyncio.run_coroutine_threadsafe(self._disable(), loop).result(5)

    async def _disable(self) -> None:
        self.loop.disable()


@dataclass
class Drained:
    """One drain's figures: CPU seconds of the worker (all of it, its dispatcher thread, its
    event loop's thread) and of the database backends, wall seconds, deliveries."""

    cpu: float
    dispatcher: float
    loop: float
    server: float
    wall: float
    delivered: int


def drain(url: str, size: int, profile: str | None, default_gc: bool = False) -> Drained:
    """Drain the herd of ``size`` reminders with one worker."""
    clock = FrozenClock(DUE)
    channel = SimulatedChannel(url)
    handler = DeliveryHandler(url, [channel], resolver=SubjectAsToken("simulated"), clock=clock)
    worker = Worker(url, {"reminder": handler}, {QUEUE: CONCURRENCY}, clock=clock, listen=False)
    if not default_gc:
        collect_less()  # as `tockwork worker` runs it (scheduler/cli/worker.py)
    profiles = ThreadProfiles() if profile else None
    ends: list[tuple[float, float, dict[int, float], float]] = []
    loop_cpu: list[float] = []
    with psycopg.connect(url, autocommit=True) as meter:
        # Read at the worker's shutdown, before its connection (and its backend) closes.
        shutdown, start_loop, stop_loop = worker._shutdown, worker._start_loop, worker._stop_loop

        def measured_shutdown() -> None:
            main = thread_seconds(threading.get_native_id())
            ends.append((time.process_time(), time.perf_counter(), backends(meter), main))
            shutdown()

        def profiled_start_loop() -> None:
            start_loop()
            if profiles is not None:
                profiles.start_loop(worker)

        def profiled_stop_loop() -> None:
            if profiles is not None:
                profiles.stop_loop(worker)
            thread = worker._loop_thread
            loop_cpu.append(thread_seconds(thread.native_id if thread is not None else None))
            stop_loop()

        worker._shutdown = measured_shutdown  # type: ignore[method-assign]
        worker._start_loop = profiled_start_loop  # type: ignore[method-assign]
        worker._stop_loop = profiled_stop_loop  # type: ignore[method-assign]
        before = backends(meter)
        main0 = thread_seconds(threading.get_native_id())
        cpu0, wall0 = time.process_time(), time.perf_counter()
        if profiles is not None:
            profiles.dispatcher.enable()
        worker.run_until_idle()
        if profiles is not None:
            profiles.dispatcher.disable()
        cpu1, wall1, after, main1 = ends[0]
        row = meter.execute("SELECT count(*) FROM simulated_pushes").fetchone()
        delivered = int(row[0]) if row else 0
    asyncio.run(handler.aclose())
    server = sum(cpu - before.get(pid, 0.0) for pid, cpu in after.items())
    if profiles is not None and profile:
        profiles.dispatcher.dump_stats(profile + ".dispatcher")
        profiles.loop.dump_stats(profile + ".loop")
    # The loop's thread starts with the drain: its whole life is the drain's.
    return Drained(cpu1 - cpu0, main1 - main0, sum(loop_cpu), server, wall1 - wall0, delivered)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=20_000, help="reminders a round")
    parser.add_argument("--rounds", type=int, default=3, help="herds drained, one after another")
    parser.add_argument("--profile", default=None, help="cProfile files of the last round")
    parser.add_argument(
        "--default-gc",
        action="store_true",
        help="leave Python's garbage collector as it is (not as `tockwork worker` sets it)",
    )
    args = parser.parse_args()
    name = f"tockwork_delivery_worker_{os.getpid()}"
    failed = False
    with devdb.throwaway_database(database_url(), name, components=ALL_COMPONENTS) as url:
        for n in range(args.rounds):
            with psycopg.connect(url, autocommit=True) as conn:
                conn.execute(RESET)
                conn.execute("VACUUM ANALYZE")
            enqueue(url, args.size)
            load = os.getloadavg()[0]
            last = n == args.rounds - 1
            d = drain(url, args.size, args.profile if last else None, args.default_gc)
            n_ = max(d.delivered, 1)
            print(
                f"round {n + 1}: load {load:.2f}, {d.delivered:,} delivered in {d.wall:.2f} s "
                f"({d.delivered / d.wall:,.0f}/s); worker CPU {d.cpu * 1e6 / n_:.1f} us a "
                f"delivery (dispatcher thread {d.dispatcher * 1e6 / n_:.1f}, event loop "
                f"{d.loop * 1e6 / n_:.1f}), backends' CPU {d.server * 1e6 / n_:.1f} us a delivery",
                flush=True,
            )
            if d.delivered != args.size:
                print(f"  {args.size - d.delivered} not delivered", flush=True)
                failed = True
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
