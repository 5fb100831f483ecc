"""The replicated scheduler: any number of replicas, no leader, each occurrence enqueued once.

One tick works through the due schedules (``next_run_at <= now + lookahead``) in batches. A batch
is one short transaction:

1. lease up to ``batch_size`` due schedules with ``FOR NO KEY UPDATE SKIP LOCKED`` (replicas
   split the work instead of waiting on each other) and take each one's
   ``pg_try_advisory_xact_lock(class, id)`` without waiting (our own class id, so no other
   application's advisory locks collide); a schedule whose lock is held elsewhere is skipped;
2. plan each schedule (pure: :mod:`scheduler.planner`): the occurrences after its cursor up to
   the horizon, each enqueued, missed or skipped by the catch-up and quiet-hours policies;
3. enqueue every planned occurrence with one ``jobs.enqueue_many`` under the idempotency key
   ``schedule:<id>:<occurrence key>``;
4. advance each cursor to its last decided occurrence and ``next_run_at`` to the one after it;
5. commit.

The lookahead adapts to the backlog. ``lookahead`` is the minimum; before each tick (at most once
every :data:`PROBE_EVERY` of tick time) the replica counts the schedules due within
``max_lookahead`` and, when enqueueing them at its measured rate (occurrences per second over its
full batches) would take longer than ``lookahead``, looks as far ahead as that takes, times a
safety factor (:func:`scheduler.planner.adaptive_lookahead`). A million reminders due at 08:00 are
then started on early enough to be in the table before 08:00. Once extended, the horizon does not
shrink while the herd is worked through. Only how early a job is inserted changes: its run_at
(occurrence, jitter, quiet hours) is the planner's, whatever the horizon.

Exactly once: the cursor and the jobs commit together, so after a commit the occurrence is never
planned again, and before it nothing happened. A replica that crashes at any point before the
commit leaves nothing behind: the transaction rolls back, the locks go with the session, and the
next replica plans the same occurrences. Should two replicas ever plan the same occurrence (a
stale read), the idempotency key makes the second enqueue a no-op.
"""

from __future__ import annotations

import logging
import math
import random
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from itertools import pairwise
from typing import Any, cast

import psycopg
from psycopg.types.string import TextLoader

from jobs import Reconnect, Service
from jobs.internal import (
    DEFAULT_MAX_ATTEMPTS,
    UNSET,
    JobColumns,
    Unset,
    default_name,
    enqueue_columns,
    merged,
    service_span,
    setting,
    steps,
)
from jobs.metrics import Metrics
from scheduler.errors import InvalidSchedule
from scheduler.model import Overlap, Schedule, TickResult, schedule_from_row
from scheduler.occurrence_job import OccurrenceMeta, occurrence_idempotency_key
from scheduler.overlap import (
    Remembered,
    apply_overlap_steps,
    remember_steps,
    with_concurrency_keys,
)
from scheduler.planner import (
    LOOKAHEAD_SAFETY,
    OccurrenceDecision,
    Plan,
    PlanMemo,
    adaptive_lookahead,
    next_occurrence,
    plan,
)
from scheduler.queries import database_now, query
from timezones import Clock, Occurrence, tzdb_version

# pg_try_advisory_xact_lock(class, object): 'tocs' as an int4, our own class id.
SCHEDULE_LOCK_CLASS = 0x746F6373

log = logging.getLogger("tockwork.scheduler")

# The adaptive lookahead: how often (in tick time) the backlog is counted, and the rate assumed
# before a replica has measured its own (occurrences per second; a conservative figure for one
# replica on 2 cores, where the measured one is 5,000-15,000/s).
PROBE_EVERY = timedelta(seconds=10)
INITIAL_RATE = 2000.0
DEFAULT_MAX_LOOKAHEAD = timedelta(minutes=10)
DEFAULT_BATCH_SIZE = 2000
# Weight of the newest full batch in the measured rate (an exponential moving average).
_RATE_WEIGHT = 0.2


def _occurrence_key(occ: Occurrence) -> str:
    return occ.key


def _run_at_order(run_ats: list[datetime]) -> list[int] | None:
    """The order in which to write a batch's job rows: by run_at (stable: schedule order among
    equals); None when they are in that order already.

    Where the rows land in the table decides what delivering them costs. The workers claim in
    run_at order; a herd with jitter, written in schedule order, would put the jobs due in one
    second on as many heap pages as there are batches *and* scattered over each batch, so
    every claim reads and dirties pages all over the table (with a table larger than
    shared_buffers, each a read, a write back and a full-page image in the WAL). Written in
    run_at order, each batch is a run of pages that the claims walk front to back: the pages
    in use at any moment are about one per batch, and they stay in memory while their jobs are
    claimed and completed.
    """
    if all(a <= b for a, b in pairwise(run_ats)):
        return None
    return sorted(range(len(run_ats)), key=run_ats.__getitem__)


@dataclass(slots=True)
class _Skips:
    """The occurrences a batch records as missed or skipped, as ``schedule_skip_record``'s
    parallel arrays (one element per occurrence)."""

    ids: list[int] = field(default_factory=list)
    keys: list[str] = field(default_factory=list)
    ats: list[datetime] = field(default_factory=list)
    kinds: list[str] = field(default_factory=list)
    reasons: list[str | None] = field(default_factory=list)

    def add(self, schedule_id: int, key: str, decision: OccurrenceDecision) -> None:
        self.ids.append(schedule_id)
        self.keys.append(key)
        self.ats.append(decision.occurrence.at)
        self.kinds.append(decision.kind)
        self.reasons.append(decision.reason)

    def params(self, now: datetime) -> dict[str, Any]:
        return {"ids": self.ids, "keys": self.keys, "ats": self.ats, "kinds": self.kinds,
                "reasons": self.reasons, "now": now}  # fmt: skip


@dataclass(slots=True)
class _Advance:
    """Where each schedule of a batch moves to, as ``schedule_advance``'s parallel arrays (one
    element per schedule): its cursor, next occurrence, last job and counts."""

    ids: list[int] = field(default_factory=list)
    cursor_ats: list[datetime | None] = field(default_factory=list)
    next_run_ats: list[datetime | None] = field(default_factory=list)
    next_keys: list[str | None] = field(default_factory=list)
    last_keys: list[str | None] = field(default_factory=list)
    last_ats: list[datetime | None] = field(default_factory=list)
    last_job_ids: list[int | None] = field(default_factory=list)
    enqueued: list[int] = field(default_factory=list)
    missed: list[int] = field(default_factory=list)
    skipped: list[int] = field(default_factory=list)
    overlapped: list[int] = field(default_factory=list)
    tzdbs: list[str] = field(default_factory=list)

    def add(
        self,
        p: Plan,
        keyof: Callable[[Occurrence], str],
        last_job: int | None,
        created: int,
        tzdb: str,
    ) -> None:
        last = p.last_enqueued
        s = p.schedule
        nxt = p.next
        if s.max_runs is not None and s.enqueued_count + created >= s.max_runs:
            nxt = None  # every run used: the schedule is finished
        self.ids.append(s.id)
        self.cursor_ats.append(p.cursor_at)
        self.next_run_ats.append(nxt.at if nxt else None)
        self.next_keys.append(keyof(nxt) if nxt else None)
        self.last_keys.append(keyof(last.occurrence) if last else None)
        self.last_ats.append(last.occurrence.at if last else None)
        self.last_job_ids.append(last_job)
        self.enqueued.append(created)
        self.missed.append(p.missed)
        self.skipped.append(p.skipped)
        self.overlapped.append(p.overlapped)
        self.tzdbs.append(tzdb)

    def params(self, now: datetime) -> dict[str, Any]:
        return {
            "ids": self.ids, "cursor_ats": self.cursor_ats, "next_run_ats": self.next_run_ats,
            "next_keys": self.next_keys, "last_keys": self.last_keys, "last_ats": self.last_ats,
            "last_job_ids": self.last_job_ids, "enqueued": self.enqueued, "missed": self.missed,
            "skipped": self.skipped, "overlapped": self.overlapped, "tzdbs": self.tzdbs,
            "now": now,
        }  # fmt: skip


@dataclass(frozen=True, slots=True)
class SchedulerConfig:
    """A scheduler replica's settings, each with its default, bounds and help
    (:mod:`jobs.config`).

    ``Scheduler(conninfo, config=SchedulerConfig(...))``; the scheduler's keyword arguments of
    the same names override single fields. ``tockwork scheduler`` builds its options from these
    fields.
    """

    lookahead: timedelta = setting(
        timedelta(seconds=60),
        help="enqueue occurrences this many seconds ahead",
        flag="--lookahead",
        metavar="SECONDS",
    )
    max_lookahead: timedelta = setting(
        DEFAULT_MAX_LOOKAHEAD,
        help="how far ahead the lookahead may grow when a herd is due (seconds; at most "
        "--lookahead turns it off)",
        flag="--max-lookahead",
        metavar="SECONDS",
    )
    # The CLI's bound is its largest count (scheduler/cli/common.py, MAX_COUNT: 100,000).
    batch_size: int = setting(
        DEFAULT_BATCH_SIZE,
        help="schedules planned per tick transaction (1 to 100,000)",
        flag="--batch-size",
        minimum=1,
        metavar="N",
    )
    interval: timedelta = setting(
        timedelta(seconds=1),
        help="seconds between ticks when idle, on average: each at a random instant of its "
        "interval, so that replicas share the work (above 0)",
        flag="--interval",
        positive=True,
        metavar="SECONDS",
    )
    tick_rate: float | None = setting(
        None,
        help="occurrences a second this replica assumes when it sizes the adaptive lookahead "
        "(None: measured)",
    )

    def __post_init__(self) -> None:
        batch_size, tick_rate = self.batch_size, self.tick_rate
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise InvalidSchedule("batch_size", batch_size, "must be >= 1")
        if self.lookahead < timedelta(0):
            raise InvalidSchedule("lookahead", self.lookahead, "must not be negative")
        if tick_rate is not None and not tick_rate > 0:
            raise InvalidSchedule("tick_rate", tick_rate, "must be a positive number")


class Scheduler(Service[TickResult]):
    """One scheduler replica. Run as many as you like.

    :meth:`run` ticks about every ``interval`` (:meth:`idle_pause`; at once again after a tick
    that filled its batches: a herd) until stopped, and first recomputes the schedules of an
    older tz database;
    :meth:`run_until_idle` does the same until a tick leaves nothing due. Each tick uses one
    instant throughout: ``clock``'s if one is injected, else the database's.

    ``lookahead`` is how early an occurrence is enqueued at the least; up to ``max_lookahead``
    when the backlog needs it (module docstring; ``max_lookahead <= lookahead`` turns the
    adaptation off). ``tick_rate`` pins the rate the adaptation assumes (occurrences per second
    for this replica) instead of measuring it.
    """

    def __init__(
        self,
        conninfo: str,
        *,
        config: SchedulerConfig | None = None,
        clock: Clock | None = None,
        lookahead: timedelta | Unset = UNSET,
        max_lookahead: timedelta | Unset = UNSET,
        tick_rate: float | Unset | None = UNSET,
        batch_size: int | Unset = UNSET,
        interval: timedelta | Unset = UNSET,
        connect_kwargs: dict[str, Any] | None = None,
        metrics: Metrics | None = None,
        name: str | None = None,
        reconnect: Reconnect | None = None,
    ) -> None:
        config = merged(
            config,
            SchedulerConfig,
            lookahead=lookahead,
            max_lookahead=max_lookahead,
            tick_rate=tick_rate,
            batch_size=batch_size,
            interval=interval,
        )
        self.config = config
        super().__init__(
            conninfo,
            kind="scheduler",
            name=name or default_name(),
            log=log,
            clock=clock,
            connect_kwargs=connect_kwargs,
            autocommit=False,
            reconnect=reconnect,
        )
        self.lookahead = config.lookahead
        self.max_lookahead = config.max_lookahead
        self.fixed_rate = config.tick_rate
        # occurrences/s of this replica, over full batches
        self.rate = config.tick_rate or INITIAL_RATE
        self.effective_lookahead = config.lookahead
        self._probed_at: datetime | None = None
        self._reach: datetime | None = None  # the furthest horizon an extension has set
        self.batch_size = config.batch_size
        self.interval = config.interval
        self.metrics = metrics or Metrics.for_registry()
        self.tzdb = tzdb_version()
        self.totals = TickResult()
        self._random = random.Random()  # the phase of each tick (idle_pause); tests seed it

    # -- lifecycle --------------------------------------------------------------------------

    def _connected(self, conn: psycopg.Connection[Any]) -> None:
        # Rules and payloads stay JSON text on this connection: a tick reads them to copy
        # them into jobs and to find the (cached) parsed rule, and parsing each would cost
        # more than the rest of the planning.
        conn.adapters.register_loader("jsonb", TextLoader)

    def _tick_now(self, conn: psycopg.Connection[Any]) -> datetime:
        """The one instant of a tick: the injected clock's, else the database's (read once)."""
        at = self.now_or_none()
        if at is not None:
            return at
        value = database_now(conn)
        conn.commit()
        return value

    def _result(self) -> TickResult:
        return self.totals

    @contextmanager
    def _session(self, *, until_idle: bool) -> Iterator[None]:
        try:
            self.recompute_stale_tzdb()
            log.info(
                "scheduler %s started: lookahead %ss (adaptive up to %ss), batch %d, every %ss, "
                "tz database %s",
                self.name,
                self.lookahead.total_seconds(),
                max(self.lookahead, self.max_lookahead).total_seconds(),
                self.batch_size,
                self.interval.total_seconds(),
                self.tzdb,
            )
            yield
        finally:
            self.close()
            log.info("scheduler %s stopped: %s", self.name, self.totals)

    def _step(self, *, until_idle: bool) -> float | None:
        # A tick is safe to run again: a lost connection rolls its transaction back.
        result = self._retrying(self.tick)
        self.totals.add(result)
        if result.batches and result.schedules >= self.batch_size:
            return 0.0  # a herd: keep going
        return None if until_idle else self.idle_pause(time.monotonic())

    def idle_pause(self, now: float) -> float:
        """Seconds from ``now`` (monotonic) to the next tick: a random instant of the next
        interval, drawn anew for each tick (so one tick every ``interval`` on average).

        Ticking every ``interval`` from wherever a replica happened to (re)connect kept the
        replicas in one order: the first to tick after schedules fell due took every batch
        (SKIP LOCKED leaves nothing for the next) and the other replica found nothing, until
        the phases drifted across each other by the difference in their ticks' durations:
        after a fault, one replica enqueued nothing for 5 to 100 s (issue 25). A random phase
        in each interval makes every replica the first with the same chance in every
        interval, so one idle after a reconnect takes its share again within a tick or two.
        """
        period = self.interval.total_seconds()
        start = (math.floor(now / period) + 1) * period
        return start + self._random.random() * period - now

    # -- the tick ---------------------------------------------------------------------------

    def tick(self, now: datetime | None = None) -> TickResult:
        """One pass over the due schedules, in batches; returns what it did.

        Traced (jobs/tracing.py) as one ``tockwork.scheduler tick`` span with the tick's counts;
        the jobs it enqueues carry the span's context."""
        with service_span("tockwork.scheduler tick", {"tockwork.scheduler": self.name}) as span:
            result = self._tick(now)
            span.end(
                {
                    "tockwork.tick.enqueued": result.enqueued,
                    "tockwork.tick.duplicates": result.duplicates,
                    "tockwork.tick.missed": result.missed,
                    "tockwork.tick.skipped": result.skipped,
                    "tockwork.tick.locked_elsewhere": result.locked_elsewhere,
                    "tockwork.tick.schedules": result.schedules,
                    "tockwork.tick.batches": result.batches,
                }
            )
        return result

    def _tick(self, now: datetime | None) -> TickResult:
        conn = self._connection()
        at = now or self._tick_now(conn)
        horizon = self._horizon(conn, at)
        result = TickResult()
        while True:
            started = time.monotonic()
            batch = self._batch(conn, at, horizon)
            result.add(batch)
            self._measure(batch, time.monotonic() - started)
            if batch.schedules + batch.locked_elsewhere < self.batch_size:
                break
        for outcome, n in (
            ("enqueued", result.enqueued),
            ("missed", result.missed),
            ("skipped", result.skipped),
            ("overlap", result.overlapped),
            ("duplicate", result.duplicates),
        ):
            self.metrics.occurrences.labels(outcome).inc(n)
        self.metrics.overlap_skips.inc(result.overlapped)
        if result.enqueued or result.missed or result.skipped:
            log.info(
                "tick: enqueued %d, missed %d, skipped %d, locked elsewhere %d",
                result.enqueued,
                result.missed,
                result.skipped,
                result.locked_elsewhere,
            )
        return result

    def _horizon(self, conn: psycopg.Connection[Any], at: datetime) -> datetime:
        """``at`` plus the lookahead the backlog needs (module docstring)."""
        ceiling = at + self.max_lookahead
        if self.max_lookahead <= self.lookahead:
            return at + self.lookahead
        probed = self._probed_at
        if probed is None or not probed <= at < probed + PROBE_EVERY:
            # Counting beyond what max_lookahead would take to enqueue changes nothing.
            limit = math.ceil(self.rate * self.max_lookahead.total_seconds() / LOOKAHEAD_SAFETY)
            with conn.transaction():
                row = conn.execute(
                    query("schedule_count_due"), {"horizon": ceiling, "limit": limit + 1}
                ).fetchone()
            due = int(row[0]) if row else 0
            effective = adaptive_lookahead(
                due, self.rate, self.lookahead, self.max_lookahead, PROBE_EVERY
            )
            if effective != self.effective_lookahead and (
                effective > self.lookahead or self.effective_lookahead > self.lookahead
            ):
                log.info(
                    "lookahead %.0fs: %d schedule(s) due within %.0fs, %.0f/s measured",
                    effective.total_seconds(),
                    due,
                    self.max_lookahead.total_seconds(),
                    self.rate,
                )
            self.effective_lookahead = effective
            self._probed_at = at
            if effective <= self.lookahead:
                self._reach = None
        horizon = at + self.effective_lookahead
        # An extended horizon does not shrink while the herd drains (the count falls as it is
        # enqueued); it is forgotten if the clock goes back or it fell out of the ceiling.
        if self._reach is not None and horizon < self._reach <= ceiling:
            horizon = self._reach
        if self.effective_lookahead > self.lookahead:
            self._reach = horizon
        return horizon

    def _measure(self, batch: TickResult, seconds: float) -> None:
        """Fold a full batch into the measured rate (a partial one is mostly fixed costs)."""
        if self.fixed_rate is not None or batch.schedules < self.batch_size or seconds <= 0:
            return
        self.rate += _RATE_WEIGHT * (batch.schedules / seconds - self.rate)

    def _batch(self, conn: psycopg.Connection[Any], now: datetime, horizon: datetime) -> TickResult:
        result = TickResult(batches=1)
        with conn.transaction():
            rows = conn.execute(
                query("schedule_due_lock"),
                {
                    "horizon": horizon,
                    "now": now,
                    "limit": self.batch_size,
                    "lock_class": SCHEDULE_LOCK_CLASS,
                },
            ).fetchall()
            schedules: list[Schedule] = []
            for row in rows:
                if row[-1]:
                    schedules.append(schedule_from_row(tuple(row[:-1])))
                else:
                    result.locked_elsewhere += 1
            if not schedules:
                return result
            memo = PlanMemo()
            plans = [plan(s, now, horizon, memo) for s in schedules]
            _, remembered = steps.run(conn.cursor(), apply_overlap_steps(plans, now))
            self._write(conn, plans, now, result, memo, remembered)
        result.schedules = len(schedules)
        return result

    def _write(
        self,
        conn: psycopg.Connection[Any],
        plans: list[Plan],
        now: datetime,
        result: TickResult,
        memo: PlanMemo | None = None,
        remembered: Remembered | None = None,
    ) -> None:
        keyof = memo.key if memo is not None else _occurrence_key
        # The schedules were validated when created; build the insert's columns directly.
        columns = JobColumns()  # no unique or concurrency keys unless an overlap policy sets them
        latenesses: list[timedelta | None] | None = None  # the schedules' max_lateness
        enqueue_delay = self.metrics.occurrence_enqueue_delay
        owners: list[int] = []  # the plan index of each job row
        policed: list[tuple[int, Schedule]] = []  # (job row, schedule) under an overlap policy
        skips = _Skips()
        for p_index, p in enumerate(plans):
            s = p.schedule
            for d in p.decisions:
                key = keyof(d.occurrence)
                if d.kind == "enqueue":
                    meta = OccurrenceMeta(s.id, key, d.occurrence.at, s.version)
                    if s.overlap is not Overlap.ALLOW:
                        policed.append((len(owners), s))
                    columns.organization_ids.append(s.organization_id)
                    columns.queues.append(s.queue)
                    columns.job_types.append(s.job_type)
                    columns.payloads.append(meta.into_payload(s.payload_text))
                    columns.idempotency_keys.append(occurrence_idempotency_key(s.id, key))
                    columns.priorities.append(0)
                    columns.run_ats.append(d.run_at)
                    columns.max_attempts.append(DEFAULT_MAX_ATTEMPTS)
                    late = s.max_lateness_seconds
                    if late is not None or latenesses is not None:
                        if latenesses is None:
                            latenesses = columns.max_latenesses = [None] * len(owners)
                        latenesses.append(None if late is None else timedelta(seconds=late))
                    if d.occurrence.at < now:  # late (a catch-up, a slow tick): how late
                        enqueue_delay.observe((now - d.occurrence.at).total_seconds())
                    owners.append(p_index)
                else:
                    skips.add(s.id, key, d)
        if policed:
            with_concurrency_keys(columns, policed)
        order = _run_at_order(cast("list[datetime]", columns.run_ats))  # each has its run_at
        # The tick's instant, not a fresh clock read: planning and enqueueing agree on now.
        if order is None:
            enqueued = enqueue_columns(conn, columns, now=now)
        else:
            written = enqueue_columns(conn, columns.subset(order), now=now)
            enqueued = [written[0]] * len(written)
            for position, i in enumerate(order):
                enqueued[i] = written[position]
        created = [0] * len(plans)
        last_job: list[int | None] = [None] * len(plans)
        for p_index, outcome in zip(owners, enqueued, strict=True):
            last_job[p_index] = outcome.id
            if outcome.created:
                created[p_index] += 1
            else:
                result.duplicates += 1
        if policed and remembered is not None:
            for row, sched in policed:
                remembered.jobs.setdefault(sched.id, []).append(enqueued[row].id)
            steps.run(conn.cursor(), remember_steps(remembered))
        if skips.ids:
            conn.execute(query("schedule_skip_record"), skips.params(now))
        advance = _Advance()
        for i, p in enumerate(plans):
            advance.add(p, keyof, last_job[i], created[i], self.tzdb)
            result.enqueued += created[i]
            result.missed += p.missed
            result.skipped += p.skipped
            result.overlapped += p.overlapped
        conn.execute(query("schedule_advance"), advance.params(now))

    # -- tz database changes ----------------------------------------------------------------

    def recompute_stale_tzdb(self, batch_size: int = 1000) -> int:
        """Recompute next_run_at of schedules computed with another tz database version.

        Runs in batches (SKIP LOCKED, so replicas share the work) and is idempotent: a schedule
        is recomputed from its cursor, never from "now". Returns how many changed.
        """
        conn = self._connection()
        now = self._tick_now(conn)
        changed = examined = 0
        while True:
            with conn.transaction():
                rows = conn.execute(
                    query("schedule_stale_tzdb"), {"tzdb": self.tzdb, "limit": batch_size}
                ).fetchall()
                if not rows:
                    break
                ids, nexts, keys = [], [], []
                for row in rows:
                    s = schedule_from_row(tuple(row))
                    occ = next_occurrence(s, s.cursor_at)
                    ids.append(s.id)
                    nexts.append(occ.at if occ else None)
                    keys.append(occ.key if occ else None)
                    if (occ.at if occ else None) != s.next_run_at:
                        changed += 1
                conn.execute(
                    query("schedule_set_next"),
                    {"ids": ids, "next_run_ats": nexts, "next_keys": keys, "tzdb": self.tzdb,
                     "now": now},
                )  # fmt: skip
                examined += len(ids)
        if examined:
            log.warning(
                "tz database is now %s: recomputed %d schedule(s), %d next occurrence(s) changed",
                self.tzdb,
                examined,
                changed,
            )
        return changed
