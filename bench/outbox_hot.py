"""Outbox hot-aggregate benchmark (issue 15): a backlog of events on ONE aggregate, drained.

Every figure comes from one run on one throwaway database (``tockwork_outbox_<pid>``, on the
server of ``scheduler.devdb.database_url()``, migrated, dropped at the end). Each phase records
``--events`` events (one projection, one job each) in one transaction, then starts relays with
:meth:`jobs.relay.Relay.start` (the real service loop, LISTEN on, default poll 1 s) and times
from the start until every event is processed:

1. **hot**: all events on one aggregate, with 1, 2 and 4 relays. Per aggregate only one event is
   ever claimed, so this is the serial path: claim, build, mark + enqueue, claim the next.
2. **wide**: the same number of events, each on its own aggregate, 1 relay (batches of 100).
3. **poll-bound**, the baseline of main before issue 15: the same relay with main's loop rule
   (sleep until the next poll after a batch that was not full), on ``--baseline-events`` hot
   events only (it takes one poll per event); its per-event figure is extrapolated.
4. **raw**: the floor on this machine, no library: one connection looping "one transaction:
   mark the event processed, insert its job, claim the aggregate's next event", the relay's
   per-event work in the same one commit (the drain is bound by one WAL flush per event).

Figures, not a test: ``.venv/bin/python -m bench.outbox_hot [--events N] [--baseline-events N]``.
"""

from __future__ import annotations

import argparse
import os
import threading
import time
from datetime import timedelta
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from jobs import JobSpec, outbox
from jobs.outbox import Event, Projections
from jobs.relay import Relay
from scheduler.devdb import database_url, throwaway_database
from scheduler.migrations import COMPONENTS

projections = Projections()


@projections.on("bench.changed", name="bench")
def project(event: Event) -> list[JobSpec]:
    return [JobSpec("noop", {"n": event.payload["n"]})]


class Counted(Relay):
    """A relay that counts processed events into a shared tally and signals the target."""

    def __init__(self, tally: Tally, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.tally = tally

    def run_batch(self) -> int:
        before = self.stats.processed
        claimed = super().run_batch()
        self.tally.add(self.stats.processed - before)
        return claimed


class PollBound(Counted):
    """Main's loop before issue 15: claim again at once only after a full batch."""

    def _step(self, *, until_idle: bool) -> float | None:
        claimed = self._retrying(self.run_batch)
        return 0.0 if claimed >= self.batch_size else self.poll_interval.total_seconds()


class Tally:
    def __init__(self, target: int) -> None:
        self.target = target
        self.count = 0
        self.lock = threading.Lock()
        self.done = threading.Event()

    def add(self, n: int) -> None:
        with self.lock:
            self.count += n
            if self.count >= self.target:
                self.done.set()


def reset(url: str) -> None:
    with psycopg.connect(url, autocommit=True) as c:
        c.execute("TRUNCATE outbox_events, jobs, job_history, job_attempts")
        c.execute("VACUUM ANALYZE outbox_events")


def record(url: str, n: int, *, hot: bool) -> None:
    with psycopg.connect(url) as c, c.transaction():
        for i in range(n):
            outbox.record(
                c,
                aggregate_type="bench",
                aggregate_id="hot" if hot else f"a-{i}",
                event_type="bench.changed",
                payload={"n": i},
            )


def drain(url: str, n: int, relays: int, *, hot: bool, kind: type[Counted] = Counted) -> float:
    """Seconds from the relays' start until ``n`` events are processed."""
    reset(url)
    record(url, n, hot=hot)
    tally = Tally(n)
    fleet = [kind(tally, url, projections, name=f"bench-{i}") for i in range(relays)]
    started = time.perf_counter()
    for relay in fleet:
        relay.start()
    try:
        if not tally.done.wait(max(60.0, 2.0 * n)):
            raise SystemExit(f"timed out: {tally.count} of {n} events processed")
        elapsed = time.perf_counter() - started
    finally:
        for relay in fleet:
            relay.stop()
        for relay in fleet:
            relay.wait(30)
    with psycopg.connect(url) as c:
        row = c.execute(
            "SELECT count(*) FILTER (WHERE processed_at IS NULL), (SELECT count(*) FROM jobs_all)"
            " FROM outbox_events"
        ).fetchone()
    if row != (0, n):
        raise SystemExit(f"drain incomplete: (pending, jobs) = {row}")
    return elapsed


_RAW_CLAIM_NEXT = (
    "UPDATE outbox_events SET claimed_at = now(), attempts = attempts + 1"
    " WHERE id = (SELECT id FROM outbox_events WHERE aggregate_type = 'bench'"
    "  AND aggregate_id = 'hot' AND processed_at IS NULL AND dead_at IS NULL"
    "  ORDER BY seq LIMIT 1 FOR UPDATE SKIP LOCKED)"
    " RETURNING id, attempts, payload"
)


def raw(url: str, n: int) -> float:
    """The floor: the relay's per-event work with no library, one transaction per event."""
    reset(url)
    record(url, n, hot=True)
    with psycopg.connect(url, autocommit=True) as c:
        started = time.perf_counter()
        row = c.execute(_RAW_CLAIM_NEXT).fetchone()
        while row is not None:
            with c.transaction():
                c.execute(
                    "UPDATE outbox_events SET processed_at = now(), claimed_at = NULL"
                    " WHERE id = %s AND attempts = %s",
                    (row[0], row[1]),
                )
                c.execute(
                    "INSERT INTO jobs (queue, job_type, payload, idempotency_key)"
                    " VALUES ('default', 'noop', %s, %s)",
                    (Jsonb({"n": row[2]["n"]}), f"raw:{row[0]}"),
                )
                row = c.execute(_RAW_CLAIM_NEXT).fetchone()
        return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=1000, help="events per phase (1000)")
    parser.add_argument(
        "--baseline-events", type=int, default=5, help="hot events for the poll-bound baseline"
    )
    args = parser.parse_args()
    n = args.events
    with throwaway_database(
        database_url(), f"tockwork_outbox_{os.getpid()}", components=COMPONENTS
    ) as url:
        rows: list[tuple[str, float, int]] = []
        floor = raw(url, n)
        rows.append(("raw SQL floor, 1 connection, hot aggregate", floor, n))
        for relays in (1, 2, 4):
            rows.append((f"hot aggregate, {relays} relay(s)", drain(url, n, relays, hot=True), n))
        rows.append((f"{n} aggregates, 1 relay", drain(url, n, 1, hot=False), n))
        b = args.baseline_events
        rows.append(
            (
                "poll-bound baseline (main's loop), hot, 1 relay",
                drain(url, b, 1, hot=True, kind=PollBound),
                b,
            )
        )
    per_floor = floor / n
    print(f"\noutbox hot aggregate, {n} events (poll interval {timedelta(seconds=1)})\n")
    print(f"| phase | events | drain s | events/s | ms/event | vs raw floor | {n} events in |")
    print("|---|---|---|---|---|---|---|")
    for label, seconds, count in rows:
        per = seconds / count
        print(
            f"| {label} | {count:,} | {seconds:.2f} | {count / seconds:,.0f} | {per * 1000:.2f}"
            f" | {per / per_floor:.1f}x | {per * n:.1f} s |"
        )


if __name__ == "__main__":
    main()
