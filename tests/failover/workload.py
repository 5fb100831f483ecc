"""The chaos workload on a Patroni cluster while its primary fails over (issue 25).

What runs (real processes, every one given the cluster's multi-host URL with
``target_session_attrs=read-write``): 2 scheduler replicas, 3 workers, a relay and a producer
(the chaos suite's: :mod:`tests.chaos.app`, :mod:`tests.chaos.producer`), over the chaos
schedules. The faults, in order, each once the cluster is whole again: the primary is
SIGKILLed (its Patroni too: the node dies) and Patroni promotes a standby, twice; then a
switchover. The killed node is brought back after each failover (it rejoins as a standby).

Asynchronous variant: before each kill, the primary's WAL senders are stopped (SIGSTOP) for
``lag`` seconds while the load goes on, so the primary dies ``lag`` seconds ahead of every
standby, as with replicas lagging at the crash; they die with it.

Recorded outside the database (which a failover may roll back): each order the producer saw
commit, with its time (``acked``), and each lease a handler ran under (``TOCKWORK_TOKEN_LOG``).
Checked, synchronous: the chaos suite's every invariant (:func:`tests.chaos.harness.check`:
each occurrence once, every committed order with its job, event and projected job, no job lost
or stuck, no effect twice, no traceback) and every acknowledged order present; measured, the
time from each kill to the first job completed on the new primary. Asynchronous: no
``(job, lease token)`` run twice, the services' logs say that acknowledged work can be lost and
that the primary changed, and the loss (acknowledged orders missing, their time window).
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import sys
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg

import jobs
from scheduler.migrations import COMPONENTS
from tests.chaos.harness import LEASE_SECONDS, check, create_schedules, create_tables
from tests.failover.cluster import Node, PatroniCluster
from tests.processes import LoggedProcess, tockwork_argv


@dataclass
class Report:
    synchronous: bool
    failures: list[str] = field(default_factory=list)
    figures: dict[str, Any] = field(default_factory=dict)
    to_first_completion: list[float] = field(default_factory=list)  # seconds, per fault
    after_promotion: list[float] = field(default_factory=list)  # from the new primary's first
    # accepted write (seen by the harness) to the first job completed after it
    acked: int = 0
    lost: list[int] = field(default_factory=list)
    loss_window: float = 0.0  # seconds between the first lost acknowledgement and the kill
    tokens_twice: list[tuple[int, int]] = field(default_factory=list)
    log_lines: dict[str, int] = field(default_factory=dict)

    def summary(self) -> str:
        mode = "synchronous" if self.synchronous else "asynchronous"
        firsts = ", ".join(f"{s:.1f}" for s in self.to_first_completion)
        promoted = ", ".join(f"{s:.1f}" for s in self.after_promotion)
        return (
            f"failover ({mode}): kill -> first job completed on the new primary: {firsts} s "
            f"(from the promotion: {promoted} s); "
            f"acknowledged orders {self.acked}, lost {len(self.lost)} "
            f"(window {self.loss_window:.1f} s); (job, token) run twice: "
            f"{len(self.tokens_twice)}; log lines {self.log_lines}; figures {self.figures}"
        )


class Failover:
    def __init__(self, cluster: PatroniCluster, log_dir: Path, *, lag: float = 2.0) -> None:
        self.cluster = cluster
        self.log_dir = log_dir
        self.lag = lag
        self.url = cluster.url()
        self.tokens = log_dir / "tokens"
        self.tokens.mkdir(parents=True, exist_ok=True)
        self.acked = log_dir / "acked.txt"
        self.procs: list[LoggedProcess] = []
        self.kills: list[float] = []  # unix times of the faults
        self.promotions: list[float] = []  # unix times the new primary was seen writable

    def _process(self, name: str, argv: list[str]) -> LoggedProcess:
        env = {"TOCKWORK_TEST_DB": self.url, "TOCKWORK_TOKEN_LOG": str(self.tokens)}
        p = LoggedProcess(name, argv, self.log_dir, env=env)
        self.procs.append(p)
        return p

    def setup(self) -> None:
        with psycopg.connect(self.url, autocommit=True) as conn:
            jobs.migrate(conn, COMPONENTS)
            create_tables(conn)
            with conn.transaction():
                create_schedules(conn, 40, random.Random(25))
        for i in range(2):
            self._process(f"scheduler{i}", tockwork_argv(
                self.url, "scheduler", "--lookahead", "2", "--max-lookahead", "2",
                "--interval", "0.5", "--log-json",
                # The chaos checks count every job: no built-in maintenance among them.
                "--no-maintenance"))  # fmt: skip
        for i in range(3):
            self._process(f"worker{i}", tockwork_argv(
                self.url, "worker", "--app", "tests.chaos.app:handlers", "--queue",
                "default=4", "--lease", str(LEASE_SECONDS), "--poll", "0.5", "--grace", "10",
                "--name", f"fo-w{i}-{{gen}}", "--log-json", "--no-maintenance"))  # fmt: skip
        self._process("relay", tockwork_argv(
            self.url, "relay", "--app", "tests.chaos.app:projections", "--lease",
            str(LEASE_SECONDS), "--poll", "0.5", "--name", "fo-relay-{gen}",
            "--log-json"))  # fmt: skip
        producer = [sys.executable, "-m", "tests.chaos.producer", "--url", self.url,
                    "--rate", "20", "--acked", str(self.acked)]  # fmt: skip
        self._process("producer", producer)
        for p in self.procs:
            p.start()
        for p in self.procs:
            if p.name != "producer":
                assert p.wait_started(), p.tail()

    def _walsenders(self, leader: Node) -> list[int]:
        try:
            with psycopg.connect(self.cluster.node_url(leader), autocommit=True) as conn:
                return [int(r[0]) for r in conn.execute("SELECT pid FROM pg_stat_replication")]
        except psycopg.Error:
            return []

    def fault(self, what: str, *, lag: bool) -> None:
        leader = self.cluster.leader()
        assert leader is not None
        # Lag only before a kill: a switchover waits for the standbys (it loses nothing). The
        # primary's WAL senders are stopped, so the WAL of the lag never leaves it (stopping the
        # standbys' receivers would not do: what was sent waits in their sockets).
        stopped = self._walsenders(leader) if lag and what == "kill" else []
        try:
            for pid in stopped:
                os.kill(pid, signal.SIGSTOP)
            if stopped:
                time.sleep(self.lag)  # the standbys fall behind while the load goes on
            self.kills.append(time.time())
            if what == "kill":
                self.cluster.kill(leader)
            else:
                self.cluster.switchover(leader)
        finally:
            for pid in stopped:  # the dead primary's senders: they go with it
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        self.cluster.wait_leader(leader)
        self.promotions.append(time.time())
        if what == "kill":
            self.cluster.start_node(leader)
        self.cluster.wait_replicas(180)

    def run(self, *, settle: float = 15.0) -> Report:
        try:
            return self._run(settle)
        finally:
            for p in self.procs:  # after a failure: nothing may outlive the run
                if p.alive():
                    p.kill()

    def _run(self, settle: float) -> Report:
        synchronous = self.cluster.synchronous
        report = Report(synchronous)
        self.setup()
        time.sleep(settle)  # load before the first fault (the workload's length, not a wait)
        for what in ("kill", "kill", "switchover"):
            self.fault(what, lag=not synchronous)
            time.sleep(settle)
        stopped_at = datetime.now(UTC)
        for p in self.procs:
            if p.name.startswith(("producer", "scheduler")):
                p.terminate()
        self._drain()
        for p in self.procs:
            if p.alive():
                p.terminate()
        logs = [path for p in self.procs for path in p.logs]
        with psycopg.connect(self.url) as conn:
            self._measure(conn, report)
            if synchronous:
                report.failures, report.figures = check(conn, stopped_at=stopped_at, logs=logs,
                                                        proxied="fo-none-")  # fmt: skip
        self._tokens(report)
        self._logs(report, logs)
        for p in self.procs:
            if p.exit_codes[-1:] != [0]:
                report.failures.append(f"{p.label} exit codes {p.exit_codes}: {p.tail(500)}")
        return report

    def _drain(self, timeout: float = 180.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                with psycopg.connect(self.url, autocommit=True) as conn:
                    row = conn.execute(
                        "SELECT (SELECT count(*) FROM jobs WHERE status IN ('pending', 'retrying',"
                        " 'leased') AND run_at <= now() + interval '5 seconds')"
                        " + (SELECT count(*) FROM outbox_events WHERE processed_at IS NULL)"
                    ).fetchone()
                if row == (0,):
                    return
            except psycopg.OperationalError:
                pass
            time.sleep(0.5)

    def _measure(self, conn: psycopg.Connection[Any], report: Report) -> None:
        for times, into in ((self.kills, report.to_first_completion),
                            (self.promotions, report.after_promotion)):  # fmt: skip
            for at in times:
                row = conn.execute(
                    "SELECT extract(epoch FROM min(completed_at) - to_timestamp(%s))::float8"
                    " FROM jobs_all WHERE completed_at > to_timestamp(%s)",
                    (at, at),
                ).fetchone()
                into.append(float(row[0]) if row and row[0] is not None else float("nan"))
        acked: dict[int, float] = {}
        for line in self.acked.read_text().splitlines():
            order_id, when = line.split()
            acked[int(order_id)] = float(when)
        report.acked = len(acked)
        present = {r[0] for r in conn.execute("SELECT id FROM chaos_orders")}
        report.lost = sorted(set(acked) - present)
        if report.lost:
            kills = sorted(self.kills)
            window = 0.0
            for order in report.lost:
                after = [k for k in kills if k >= acked[order]]
                if after:
                    window = max(window, after[0] - acked[order])
            report.loss_window = window
        if report.synchronous and report.lost:
            report.failures.append(f"acknowledged orders lost: {report.lost[:10]}")

    def _tokens(self, report: Report) -> None:
        seen: dict[tuple[int, int], int] = {}
        for path in self.tokens.glob("*.tokens"):
            for line in path.read_text().splitlines():
                job_id, token = (int(x) for x in line.split())
                seen[(job_id, token)] = seen.get((job_id, token), 0) + 1
        report.tokens_twice = sorted(k for k, n in seen.items() if n > 1)
        report.figures["leases_run"] = len(seen)
        if report.tokens_twice:
            report.failures.append(f"(job, lease token) run twice: {report.tokens_twice[:10]}")

    def _logs(self, report: Report, logs: list[str]) -> None:
        texts = {"primary changed": "the primary changed",
                 "can be lost": "acknowledged work can be lost at failover"}  # fmt: skip
        for key, text in texts.items():
            count = 0
            for path in logs:
                with open(path, errors="replace") as f:
                    count += f.read().count(text)
            report.log_lines[key] = count
        if report.log_lines["primary changed"] == 0:
            report.failures.append("no service logged the change of primary")
        if not report.synchronous and report.log_lines["can be lost"] == 0:
            report.failures.append("no service said that acknowledged work can be lost")
