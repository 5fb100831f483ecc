"""Exactly once, proven: scheduler replicas under SIGKILL over a simulated week of DST changes.

Three replica processes (tests/integration/scheduler/replica.py) share one simulated clock that
runs a week in about half a minute. Schedules in 20 zones cross the EU spring-forward gap
(2026-03-29) and the southern-hemisphere fall-back folds (2026-04-05: Sydney, Adelaide,
Lord_Howe's 30-minute one, Auckland, Chatham), with daily, weekday, weekly, monthly, once,
RRULE, interval and cron rules, every gap and fold policy, and jitter. A seeded chaos loop
SIGKILLs a random replica every few seconds, always mid-run, and restarts it; schedules are also
created while the replicas run. ``catch_up="all"`` with no grace, so no downtime may drop an
occurrence: the set of enqueued (schedule, occurrence key) pairs must equal, exactly, the set
``timezones.occurrences`` computes for each schedule from its creation instant (exclusive) to the
last horizon (``end + lookahead``), with no pair enqueued twice.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import IO, Any

import psycopg

import scheduler
from scheduler import Scheduler
from timezones import Adjustment, FrozenClock, Occurrence, next_after, occurrences

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
REPLICAS = 3
LOOKAHEAD = timedelta(minutes=15)
EU_SPRING_FORWARD = datetime(2026, 3, 29, 1, 0, tzinfo=UTC)

ZONES = [
    # Spring forward on 2026-03-29 at 01:00Z (gaps 01:00-02:00, 02:00-03:00, 03:00-04:00 local).
    "Europe/London", "Europe/Dublin", "Europe/Lisbon", "Europe/Paris", "Europe/Berlin",
    "Europe/Helsinki",
    # Fall back on 2026-04-05 local (2026-04-04 14:00Z-16:30Z): 1 h folds, Lord_Howe 30 min,
    # Chatham at 03:45 local.
    "Australia/Sydney", "Australia/Adelaide", "Australia/Lord_Howe", "Pacific/Auckland",
    "Pacific/Chatham",
    # No change in the window, odd offsets included.
    "America/New_York", "America/Chicago", "America/Los_Angeles", "America/Santiago",
    "America/Sao_Paulo", "Asia/Kolkata", "Asia/Kathmandu", "Asia/Tokyo", "UTC",
]  # fmt: skip

# Local times inside the gaps or folds of some zone above.
DST_TIMES = ["01:15", "01:30", "01:45", "02:00", "02:15", "02:30", "02:45", "02:59", "03:00",
             "03:15", "03:30", "03:45"]  # fmt: skip

FIXED_RULES = [
    "weekly:sat,sun@02:30", "weekly:sun@01:45", "monthly:1@02:30", "monthly:last@09:15",
    "monthly:5@02:15", "once:2026-04-01T12:00", "once:2026-04-05T02:30",
    "once:2026-03-29T02:30", "once:2020-01-01T00:00",
    # With a DTSTART: without one (2000-01-01) a fresh rule expands 26 years per tick.
    "rrule:DTSTART=2026-01-01T00:00;FREQ=DAILY;BYHOUR=2,14;BYMINUTE=30",
    "rrule:DTSTART=2026-03-01T00:10;FREQ=HOURLY;INTERVAL=5",
    "every:20m", "every:45m", "every:90m", "every:4h", "every:25m@2026-01-01T00:07:00Z",
    "cron:30 2 * * *", "cron:*/30 * * * *", "cron:0 */3 * * *", "cron:15 1-3 * * 0",
    "cron+anchored:*/20 2 * * *", "cron:0 9 * * 1-5", "cron:45 1,2 * * *", "cron:5 * * * *",
]  # fmt: skip


def random_rule(rng: random.Random) -> str:
    roll = rng.random()
    if roll < 0.35:
        hhmm = rng.choice(DST_TIMES) if rng.random() < 0.5 else random_hhmm(rng)
        return f"daily@{hhmm}"
    if roll < 0.45:
        return f"weekdays@{rng.choice(DST_TIMES) if rng.random() < 0.3 else random_hhmm(rng)}"
    return rng.choice(FIXED_RULES)


def random_hhmm(rng: random.Random) -> str:
    return f"{rng.randrange(24):02d}:{rng.choice([0, 0, 15, 30, 45, rng.randrange(60)]):02d}"


@dataclass
class Scenario:
    schedules: int
    origin: datetime
    days: float
    real_seconds: float  # how long the simulated window takes in real time
    kill_every: tuple[float, float]  # real seconds between kills, uniform
    seed: int
    created_midrun: int = 0  # schedules created while the replicas run (in several rounds)
    batch_size: int = 100

    @property
    def end(self) -> datetime:
        return self.origin + timedelta(days=self.days)

    @property
    def speed(self) -> float:
        return timedelta(days=self.days).total_seconds() / self.real_seconds


@dataclass
class Replica:
    slot: int
    generation: int
    proc: subprocess.Popen[bytes]
    log: Path
    err: Path
    handles: list[IO[bytes]] = field(default_factory=list)

    def events(self) -> list[dict[str, Any]]:
        lines = self.log.read_text().splitlines()
        return [json.loads(line) for line in lines if line.startswith("{")]

    def close(self) -> None:
        for h in self.handles:
            h.close()


class Chaos:
    """The replica processes of one run: start, kill, restart, wait."""

    def __init__(self, db_url: str, scenario: Scenario, real_origin: float, tmp: Path) -> None:
        self.db_url = db_url
        self.scenario = scenario
        self.real_origin = real_origin
        self.tmp = tmp
        self.replicas: list[Replica] = []
        self.finished: list[Replica] = []
        self.generations = Counter[int]()
        self.kills: list[tuple[int, int, str]] = []  # (slot, generation, sim time)
        self.kills_in_transaction = 0

    def start(self, slot: int) -> Replica:
        gen = self.generations[slot]
        self.generations[slot] += 1
        log, err = self.tmp / f"replica-{slot}-{gen}.log", self.tmp / f"replica-{slot}-{gen}.err"
        out_h, err_h = log.open("wb"), err.open("wb")
        s = self.scenario
        options = {
            "--url": self.db_url,
            "--origin": s.origin.isoformat(),
            "--real-origin": repr(self.real_origin),
            "--speed": repr(s.speed),
            "--end": s.end.isoformat(),
            "--lookahead": str(LOOKAHEAD.total_seconds()),
            "--batch-size": str(s.batch_size),
            "--name": f"replica-{slot}-{gen}",
        }
        proc = subprocess.Popen(
            [sys.executable, "-m", "tests.integration.scheduler.replica"]
            + [item for pair in options.items() for item in pair],
            env={**os.environ, "PYTHONPATH": ROOT},
            cwd=ROOT,
            stdout=out_h,
            stderr=err_h,
        )
        return Replica(slot, gen, proc, log, err, [out_h, err_h])

    def wait_until_ticked(self, replica: Replica, timeout: float = 30.0) -> None:
        """Wait until the replica has ticked at least once (it is mid-run), or fail."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if replica.proc.poll() is not None:
                raise AssertionError(f"replica exited early: {self.describe(replica)}")
            if any(e["event"] == "tick" for e in replica.events()):
                return
            time.sleep(0.02)
        raise AssertionError(f"replica never ticked: {self.describe(replica)}")

    def kill(self, slot: int, sim_now: datetime, conn: psycopg.Connection[Any]) -> None:
        victim = self.replicas[slot]
        self.wait_until_ticked(victim)
        assert victim.proc.poll() is None, f"replica died by itself: {self.describe(victim)}"
        # Diagnostics only (a race by nature): was the victim inside a transaction?
        row = conn.execute(
            "SELECT xact_start IS NOT NULL FROM pg_stat_activity WHERE application_name = %s",
            (f"replica-{slot}-{victim.generation}",),
        ).fetchone()
        if row and row[0]:
            self.kills_in_transaction += 1
        victim.proc.send_signal(signal.SIGKILL)
        assert victim.proc.wait(10) == -signal.SIGKILL
        victim.close()
        self.finished.append(victim)
        self.kills.append((slot, victim.generation, sim_now.isoformat()))
        self.replicas[slot] = self.start(slot)

    def describe(self, replica: Replica) -> str:
        stderr = replica.err.read_text()[-3000:]
        return (
            f"replica {replica.slot}.{replica.generation} rc={replica.proc.poll()}\n"
            f"stdout tail: {replica.log.read_text()[-1000:]}\nstderr tail: {stderr}"
        )

    def stop_all(self) -> None:
        for r in self.replicas:
            if r.proc.poll() is None:
                r.proc.kill()
                r.proc.wait(10)
            r.close()


def sim_now(scenario: Scenario, real_origin: float) -> datetime:
    elapsed = max(0.0, time.time() - real_origin) * scenario.speed
    return min(scenario.origin + timedelta(seconds=elapsed), scenario.end)


# Local times inside each changing zone's gap (EU, 2026-03-29) or fold (2026-04-05).
TRANSITION_TIMES = {
    "Europe/London": ("01:00", "01:30"), "Europe/Dublin": ("01:00", "01:30"),
    "Europe/Lisbon": ("01:00", "01:30"), "Europe/Paris": ("02:00", "02:30"),
    "Europe/Berlin": ("02:00", "02:30"), "Europe/Helsinki": ("03:00", "03:30"),
    "Australia/Sydney": ("02:00", "02:30"), "Australia/Adelaide": ("02:00", "02:30"),
    "Australia/Lord_Howe": ("01:30", "01:45"), "Pacific/Auckland": ("02:00", "02:30"),
    "Pacific/Chatham": ("02:45", "03:00"),
}  # fmt: skip
GAP_POLICIES = [None, "skip", "at_transition", "shift_forward"]
FOLD_POLICIES = [None, "first", "second", "both"]

Spec = tuple[str, str, str | None, str | None]  # rule, zone, gap policy, fold policy


def transition_specs() -> list[Spec]:
    """Every policy on rules that hit each zone's gap or fold; cron jobs that straddle them."""
    specs: list[Spec] = []
    for zone, times in TRANSITION_TIMES.items():
        gaps = zone.startswith("Europe/")
        for hhmm in times:
            for policy in GAP_POLICIES if gaps else FOLD_POLICIES:
                gap, fold = (policy, None) if gaps else (None, policy)
                specs.append((f"daily@{hhmm}", zone, gap, fold))
        specs.append(("cron:*/30 * * * *", zone, None, None))  # wall clock: twice in a fold
        specs.append(("cron:30 2 * * *", zone, None, "both" if not gaps else None))
    return specs


def random_spec(rng: random.Random) -> Spec:
    gap = rng.choices(GAP_POLICIES, [65, 15, 10, 10])[0]
    fold = rng.choices(FOLD_POLICIES, [65, 10, 10, 15])[0]
    return random_rule(rng), rng.choice(ZONES), gap, fold


def create_schedules(
    conn: psycopg.Connection[Any],
    rng: random.Random,
    specs: list[Spec],
    at: datetime,
    spread: float,
) -> dict[int, datetime]:
    """Create the schedules, each at a whole-second instant in ``[at - spread s, at]``."""
    created: dict[int, datetime] = {}
    for i, (rule, zone, gap, fold) in enumerate(specs):
        now = (at - timedelta(seconds=rng.uniform(0, spread))).replace(microsecond=0)
        jitter = rng.choices([0, 60, 900, 7200], [50, 20, 20, 10])[0]
        s = scheduler.create_schedule(
            conn, job_type="remind", rule=rule, zone=zone, subject=f"user-{rng.randrange(10**6)}",
            payload={"n": i}, jitter=jitter, catch_up="all", catch_up_max=100_000, gap=gap,
            fold=fold, now=now, allow_past=True,  # once:2020-... is in the mix on purpose
        )  # fmt: skip
        created[s.id] = now
    conn.commit()
    return created


Pair = tuple[int, str]


def expected_occurrences(
    conn: psycopg.Connection[Any], created: dict[int, datetime], horizon: datetime
) -> tuple[dict[Pair, Occurrence], dict[Pair, Occurrence | None], dict[int, int]]:
    """Per (schedule id, occurrence key): the occurrence, the one after it, the jitter."""
    expected: dict[Pair, Occurrence] = {}
    following: dict[Pair, Occurrence | None] = {}
    jitter: dict[int, int] = {}
    for s in scheduler.list_schedules(conn, limit=len(created) + 1):
        assert s.created_at == created[s.id]
        jitter[s.id] = s.jitter_seconds
        occs = list(
            occurrences(s.rule, s.zone, created[s.id], until=horizon, gap=s.gap, fold=s.fold)
        )
        last = occs[-1].at if occs else horizon
        after_last = next_after(s.rule, s.zone, last, gap=s.gap, fold=s.fold)
        for i, occ in enumerate(occs):
            pair = (s.id, occ.key)
            assert pair not in expected, f"two occurrences share a key: {pair}"
            expected[pair] = occ
            following[pair] = occs[i + 1] if i + 1 < len(occs) else after_last
    assert set(jitter) == set(created)
    return expected, following, jitter


def run_scenario(db_url: str, tmp_path: Path, scenario: Scenario) -> None:
    started = time.monotonic()
    rng = random.Random(scenario.seed)  # the schedules
    chaos_rng = random.Random(-scenario.seed)  # the kills
    with psycopg.connect(db_url) as conn:
        targeted = transition_specs()
        initial = targeted + [
            random_spec(rng)
            for _ in range(scenario.schedules - scenario.created_midrun - len(targeted))
        ]
        # Created up to 6 hours before the simulation starts: the first ticks catch up on
        # what fell due in between.
        created = create_schedules(conn, rng, initial, scenario.origin, spread=6 * 3600)
    setup = time.monotonic() - started

    real_origin = time.time() + 0.5  # the replicas connect before simulated time runs
    chaos = Chaos(db_url, scenario, real_origin, tmp_path)
    rounds = 4
    per_round = [scenario.created_midrun // rounds] * rounds
    per_round[0] += scenario.created_midrun - sum(per_round)
    try:
        chaos.replicas = [chaos.start(slot) for slot in range(REPLICAS)]
        real_end = real_origin + scenario.real_seconds
        with psycopg.connect(db_url) as conn, psycopg.connect(db_url, autocommit=True) as auto:
            while True:
                pause = chaos_rng.uniform(*scenario.kill_every)
                if time.time() + pause > real_end - 1.0:
                    break
                time.sleep(pause)  # chaos timing, not a wait for an effect
                if per_round and sim_now(scenario, real_origin) < scenario.end:
                    at = sim_now(scenario, real_origin)
                    specs = [random_spec(rng) for _ in range(per_round.pop())]
                    created.update(create_schedules(conn, rng, specs, at, spread=0))
                chaos.kill(chaos_rng.randrange(REPLICAS), sim_now(scenario, real_origin), auto)
            for leftover in per_round:  # rounds the chaos loop had no time for
                at = sim_now(scenario, real_origin)
                specs = [random_spec(rng) for _ in range(leftover)]
                created.update(create_schedules(conn, rng, specs, at, spread=0))

        # Every replica stops by itself after a final tick at exactly `end`.
        budget = max(0.0, real_end - time.time()) + 60.0
        for r in chaos.replicas:
            try:
                rc = r.proc.wait(budget)
            except subprocess.TimeoutExpired:
                raise AssertionError(f"replica did not stop: {chaos.describe(r)}") from None
            assert rc == 0, chaos.describe(r)
            ends = [e for e in r.events() if e["event"] == "tick" and e["final"]]
            assert ends and ends[-1]["now"] == scenario.end.isoformat(), chaos.describe(r)
        chaos.finished.extend(chaos.replicas)
    finally:
        chaos.stop_all()
    chaos_time = time.monotonic() - started - setup

    # A last replica at exactly `end` must find nothing left to do.
    last = Scheduler(db_url, clock=FrozenClock(scenario.end), lookahead=LOOKAHEAD)
    try:
        final = last.tick()
    finally:
        last.close()

    horizon = scenario.end + LOOKAHEAD
    with psycopg.connect(db_url) as conn:
        expected, following, jitter = expected_occurrences(conn, created, horizon)
        rows = conn.execute(
            "SELECT (payload->'tockwork_schedule'->>'id')::bigint,"
            " payload->'tockwork_schedule'->>'occurrence', payload->'tockwork_schedule'->>'at',"
            " run_at, idempotency_key FROM jobs_all"
        ).fetchall()
        skips = conn.execute("SELECT kind, count(*) FROM schedule_skips GROUP BY 1").fetchall()
        counters = {r[0]: r[1] for r in conn.execute("SELECT id, enqueued_count FROM schedules")}

    # The window really crosses DST changes, and every policy decided some occurrence.
    adjusted = Counter((str(o.zone), o.adjusted) for o in expected.values())
    folds = {a for _z, a in adjusted if a in (Adjustment.FOLD_FIRST, Adjustment.FOLD_SECOND)}
    assert len(folds) == 2 and adjusted["Australia/Lord_Howe", Adjustment.FOLD_SECOND], adjusted
    assert any(key.endswith("#1") for _sid, key in expected), "no second fold fire"
    if scenario.origin < EU_SPRING_FORWARD < scenario.end:
        gaps = {
            a for _z, a in adjusted if a in (Adjustment.GAP_SHIFTED, Adjustment.GAP_AT_TRANSITION)
        }
        assert len(gaps) == 2, adjusted

    seen = Counter[Pair]((r[0], r[1]) for r in rows)
    missing = sorted(set(expected) - set(seen))
    extra = sorted(set(seen) - set(expected))
    twice = sorted((pair, n) for pair, n in seen.items() if n > 1)
    replica_events = [e for r in chaos.finished for e in r.events() if e["event"] == "tick"]
    planned_twice = sum(e["duplicates"] for e in replica_events)
    report = (
        f"\nschedules={len(created)} expected={len(expected)} enqueued rows={len(rows)}"
        f" distinct={len(seen)} kills={len(chaos.kills)}"
        f" (inside a transaction: {chaos.kills_in_transaction}) final tick={final}"
        f" planned twice (idempotency no-ops, from replica logs)={planned_twice}"
        f" skips={skips}\nsetup {setup:.1f}s, chaos {chaos_time:.1f}s"
        f"\nmissing (first 20 of {len(missing)}): "
        + "".join(f"\n  {p} at {expected[p].at.isoformat()}" for p in missing[:20])
        + f"\nextra (first 20 of {len(extra)}): {extra[:20]}"
        + f"\ntwice (first 20 of {len(twice)}): {twice[:20]}"
        + f"\nkills: {chaos.kills}"
    )
    print(report)

    assert chaos.kills, "the chaos loop killed no replica" + report
    assert not missing and not extra and not twice, report
    assert (final.enqueued, final.duplicates, final.missed) == (0, 0, 0), report
    # The row and advisory locks alone must keep replicas from planning an occurrence twice;
    # the idempotency key is the last line of defence, not the mechanism.
    assert planned_twice == 0, report
    assert skips == [], report

    # Each job: the occurrence's instant in the payload, its key, and run_at = at + jitter in
    # [0, jitter), never reaching the next occurrence.
    per_schedule = Counter[int]()
    for sid, key, at_text, run_at, idem in rows:
        occ = expected[(sid, key)]
        per_schedule[sid] += 1
        assert idem == scheduler.occurrence_idempotency_key(sid, key)
        assert datetime.fromisoformat(at_text) == occ.at, (sid, key, at_text)
        nxt = following[(sid, key)]
        if jitter[sid] == 0:
            assert run_at == occ.at, (sid, key, run_at)
        else:
            assert occ.at <= run_at < occ.at + timedelta(seconds=jitter[sid]), (sid, key, run_at)
            assert nxt is None or run_at < nxt.at, (sid, key, run_at, nxt)
    # The counters committed with the cursor agree with the jobs.
    assert {k: v for k, v in counters.items() if v} == dict(per_schedule), report


def test_exactly_once_across_sigkills(db_url: str, tmp_path: Path) -> None:
    """A quicker run (about 12 s): 200 schedules over the 2 days of the southern fall-back."""
    run_scenario(
        db_url,
        tmp_path,
        Scenario(
            schedules=200,
            origin=datetime(2026, 4, 3, 12, 0, tzinfo=UTC),
            days=2,
            real_seconds=10,
            kill_every=(1.0, 2.5),
            seed=4,
            created_midrun=20,
        ),
    )


def test_exactly_once_for_a_week_of_1000_schedules(db_url: str, tmp_path: Path) -> None:
    """The issue's figure (about 36 s): 1,000 schedules in 20 zones, a week, both DST changes."""
    run_scenario(
        db_url,
        tmp_path,
        Scenario(
            schedules=1000,
            origin=datetime(2026, 3, 28, 18, 0, tzinfo=UTC),
            days=7,
            real_seconds=30,
            kill_every=(2.0, 5.0),
            seed=2026,
            created_midrun=50,
        ),
    )
