"""One scheduler replica on a simulated clock, run as a process by test_exactly_once.py.

    python -m tests.integration.scheduler.replica --url URL --origin 2026-03-28T18:00:00+00:00 \
        --real-origin 1767225600.0 --speed 20160 --end 2026-04-04T18:00:00+00:00

Simulated time is ``origin + (time.time() - real_origin) * speed``, clamped to
``[origin, end]``; every replica is given the same origins, so they all agree on "now". The
replica ticks in a loop (a short pause between ticks) until simulated time reaches ``end``, then
ticks once more at exactly ``end`` and exits with status 0: the last horizon any replica covers
is ``end + lookahead``, whatever the timing of the run.

It prints one JSON line per event on stdout, flushed at once (a SIGKILL loses nothing already
printed): ``start``, one ``tick`` per tick that did something, and ``end``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from scheduler import Scheduler, TickResult


class SimClock:
    """Real elapsed time mapped to simulated time: ``origin + (time.time() - real) * speed``."""

    def __init__(
        self, origin: datetime, real_origin: float, speed: float, end: datetime | None = None
    ) -> None:
        if origin.tzinfo is None or (end is not None and end.tzinfo is None):
            raise ValueError("origin and end must be aware")
        self.origin = origin.astimezone(UTC)
        self.real_origin = real_origin
        self.speed = speed
        self.end = end.astimezone(UTC) if end is not None else None

    def now(self) -> datetime:
        elapsed = max(0.0, time.time() - self.real_origin) * self.speed
        sim = self.origin + timedelta(seconds=elapsed)
        return sim if self.end is None else min(sim, self.end)


def emit(event: str, **fields: Any) -> None:
    print(json.dumps({"event": event, "pid": os.getpid(), **fields}), flush=True)


def counts(result: TickResult) -> dict[str, int]:
    return {
        "enqueued": result.enqueued,
        "duplicates": result.duplicates,
        "missed": result.missed,
        "skipped": result.skipped,
        "locked_elsewhere": result.locked_elsewhere,
        "schedules": result.schedules,
        "batches": result.batches,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True)
    parser.add_argument("--origin", required=True, type=datetime.fromisoformat)
    parser.add_argument("--real-origin", required=True, type=float)
    parser.add_argument("--speed", required=True, type=float)
    parser.add_argument("--end", required=True, type=datetime.fromisoformat)
    parser.add_argument("--lookahead", type=float, default=900.0, help="simulated seconds")
    parser.add_argument("--batch-size", type=int, default=100)
    parser.add_argument("--pause", type=float, default=0.01, help="real seconds between ticks")
    parser.add_argument("--name", default="tockwork-replica", help="application_name")
    parser.add_argument(
        "--go",
        help="a file to wait for before ticking, holding the real origin (overrides "
        "--real-origin), after writing FILE.ready.PID: replicas that start slowly then still "
        "share the first instant",
    )
    args = parser.parse_args(argv)
    if args.go:
        with open(f"{args.go}.ready.{os.getpid()}", "w"):
            pass  # imported and waiting
        while not os.path.exists(args.go):
            time.sleep(0.005)
        with open(args.go) as f:
            args.real_origin = float(f.read())

    end: datetime = args.end.astimezone(UTC)
    clock = SimClock(args.origin, args.real_origin, args.speed, end)
    replica = Scheduler(
        args.url,
        clock=clock,
        lookahead=timedelta(seconds=args.lookahead),
        batch_size=args.batch_size,
        connect_kwargs={"application_name": args.name},
    )
    emit("start", now=clock.now().isoformat())
    totals = TickResult()
    ticks = 0
    try:
        replica.recompute_stale_tzdb()  # what Scheduler.run() does first
        while True:
            now = clock.now()
            final = now >= end
            result = replica.tick(now=end if final else now)
            totals.add(result)
            ticks += 1
            busy = result.enqueued or result.duplicates or result.missed or result.skipped
            if busy or final or ticks == 1:
                emit("tick", now=(end if final else now).isoformat(), final=final, **counts(result))
            if final:
                break
            time.sleep(args.pause)
    finally:
        replica.close()
    emit("end", **counts(totals))
    return 0


if __name__ == "__main__":
    sys.exit(main())
