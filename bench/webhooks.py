"""Outbound webhooks (issue 23): outbox facts to 20 local endpoints, one of them slow.

One throwaway database (``tockwork_webhooks_<pid>``, every component, dropped at the end) and
one receiver process (``python -m bench.webhooks --receiver``: the fakes' HTTP/1.1 server on
loopback, one path per endpoint; the slow path answers after ``--slow-latency`` seconds; it
records each request's path, ``webhook-id`` and arrival time, read back through
``GET /_receipts``). ``--facts`` facts go round robin to 20 organizations of one endpoint each
(so ``--facts`` deliveries, a twentieth per endpoint). Phases, in one run:

1. **raw loop**: an asyncio loop with our HTTP client (no database) POSTs the same signed bodies
   to the same receivers, ``--in-flight`` at once, one path per request as the pipeline would:
   the HTTP limit of this machine.
2. **drain, all fast**: the facts recorded first, then one ``tockwork relay`` process
   (``scheduler.webhooks.projection``) and one ``tockwork worker --app scheduler.webhooks:app
   --queue webhooks=<--slots>`` process (per-endpoint concurrency ``--per-endpoint``) start and
   deliver them, every endpoint fast.
3. **drain, one slow**: the same with endpoint 19 slow: the fast endpoints' deliveries/s
   against phase 2 is what the slow one costs them.
4. **worker alone, all fast / one slow**: the facts projected into jobs before the worker
   starts (no relay running beside it): the worker's own rate.

   Phases 2-4 run as ``--repeat`` pairs (all fast, then one slow), alternated. The slow
   endpoint's cost is taken per pair from the fast endpoints' *steady* rate (between the 10th
   and the 90th percentile of their arrival times: a 2-4 s phase's start and last stragglers
   moved the plain rate by tens of percent on a shared machine), and printed per pair with the
   median; beside it, each phase's CPU (every process, and PostgreSQL's) from its start to the
   fast endpoints' last delivery, over their deliveries: what the fast deliveries cost with and
   without the slow endpoint, steadier than their rate on a shared machine.
5. **backlogs** (``--backlogs 4000,10000,50000``, off by default): the worker alone, all fast,
   draining backlogs of those sizes one after the other: whether the drain rate, or the CPU a
   delivery costs, depends on the backlog.
6. **paced**: ``--paced`` facts recorded at ``--rate`` a second while the relay and the worker
   run, all fast then one slow: the fast endpoints' fact-to-receipt latency.

Figures: deliveries/s (receipts / (last receipt - start: the first request of the raw loop,
the moment both processes have started for a drain)), ours / raw, the fast endpoints' own rate,
and in the paced phases the p50 / p99 fact-to-receipt latency of the fast endpoints (from the
fact's commit to its arrival at the receiver). Beside them, the CPU each delivery cost, by
process: the sender (the raw loop's own process, or the worker), the relay, the receiver, and
the PostgreSQL backends of the bench's database (user + system time from ``/proc``, sampled
every 0.2 s while the phase runs), and their total. On a shared machine the rates move with
the load; the CPU per delivery less (a starved worker still cycles more often for fewer jobs),
so "cpu ratio" (the raw loop's total CPU per request / ours) says what the rate ratio would be
were the CPU the only limit. Targets: ours
>= 50% of the raw loop; the slow endpoint costs the fast ones under 10%. Figures, not a test:
the exit code is 1 when a target is missed. ``python -m bench.webhooks [--facts N]``.
"""

from __future__ import annotations

import sys
from pathlib import Path

# bench/ holds queue.py, which would shadow the standard library's ``queue``: put the
# repository root first on sys.path instead of this folder.
_BENCH_DIR = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _BENCH_DIR]
sys.path.insert(0, str(_BENCH_DIR.parent))

import argparse  # noqa: E402
import asyncio  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import signal  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
import urllib.request  # noqa: E402
import uuid  # noqa: E402
from collections.abc import Callable  # noqa: E402
from dataclasses import dataclass, field  # noqa: E402
from datetime import UTC, datetime  # noqa: E402
from typing import Any  # noqa: E402

import psycopg  # noqa: E402

import jobs  # noqa: E402
from jobs.outbox import Projections, record  # noqa: E402
from scheduler.devdb import database_url, throwaway_database  # noqa: E402
from scheduler.migrations import ALL_COMPONENTS  # noqa: E402
from scheduler.webhooks import add_endpoint, projection  # noqa: E402
from scheduler.webhooks.delivery import bound_endpoints  # noqa: E402
from scheduler.webhooks.http import HttpClient  # noqa: E402
from scheduler.webhooks.signing import headers as signed  # noqa: E402
from scheduler.webhooks.signing import secret_key  # noqa: E402
from scheduler.webhooks.ssrf import Guard, networks, parse_url  # noqa: E402
from tests.processes import LoggedProcess, tockwork_argv  # noqa: E402

ENDPOINTS = 20
SLOW = ENDPOINTS - 1
LOCAL = Guard(allow=networks(["127.0.0.1/32"]))


# -- the receiver process ------------------------------------------------------------------


def serve(slow_latency: float) -> None:
    from scheduler.push.fakes.server import FakeRequest, FakeResponse, FakeServer

    receipts: list[tuple[str, str, float]] = []
    slow_flag = {"on": False}

    async def app(request: FakeRequest) -> FakeResponse:
        if request.path == "/_receipts":
            taken = list(receipts)
            receipts.clear()
            return FakeResponse.json(200, taken)
        if request.path.startswith("/_slow/"):
            slow_flag["on"] = request.path == "/_slow/on"
            return FakeResponse(200)
        if request.path == f"/e{SLOW}" and slow_flag["on"]:
            await asyncio.sleep(slow_latency)
        receipts.append((request.path, request.headers.get("webhook-id", ""), time.time()))
        return FakeResponse(200, [("content-type", "application/json")], b'{"ok":true}')

    async def main() -> None:
        server = FakeServer(app, max_concurrent_streams=10_000)
        await server.start()
        print(json.dumps({"port": server.port}), flush=True)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGTERM, stop.set)
        await stop.wait()
        await server.stop()

    asyncio.run(main())


@dataclass
class Receiver:
    process: subprocess.Popen[str]
    port: int

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def get(self, path: str) -> Any:
        with urllib.request.urlopen(self.url + path, timeout=30) as response:
            return json.loads(response.read() or b"null")

    def receipts(self) -> list[tuple[str, str, float]]:
        return [(str(p), str(i), float(t)) for p, i, t in self.get("/_receipts")]

    def slow(self, on: bool) -> None:
        urllib.request.urlopen(self.url + ("/_slow/on" if on else "/_slow/off"), timeout=30).read()


def start_receiver(latency: float) -> Receiver:
    process = subprocess.Popen(
        [sys.executable, "-m", "bench.webhooks", "--receiver", "--slow-latency", str(latency)],
        stdout=subprocess.PIPE,
        text=True,
        cwd=str(_BENCH_DIR.parent),
    )
    assert process.stdout is not None
    line = process.stdout.readline()
    return Receiver(process, json.loads(line)["port"])


# -- the phases ----------------------------------------------------------------------------


@dataclass
class Phase:
    label: str
    deliveries: int
    seconds: float
    fast_per_s: float
    p50_ms: float | None
    p99_ms: float | None
    lost: int
    doubled: int
    cpu_us: dict[str, float] = field(default_factory=dict)  # process -> CPU us per delivery
    fast_steady: float = 0.0  # the fast endpoints' deliveries/s between their 10th and 90th %
    fast_deliveries: int = 0


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def process_cpu(pid: int) -> float:
    """Seconds of CPU (user + system) a live process has used; 0 once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def own_cpu() -> float:
    """Seconds of CPU this process has used (every thread)."""
    return time.process_time()


class BackendCpu:
    """The CPU of the PostgreSQL backends of one database while a phase runs: their pids
    sampled every 0.2 s (a backend's last sample stands once it exits), read from ``/proc``
    (the server runs on this machine; elsewhere the figures read 0)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.seen: dict[int, list[float]] = {}
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._sample, daemon=True)

    def __enter__(self) -> BackendCpu:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopping.set()
        self.thread.join()

    def _sample(self) -> None:
        with psycopg.connect(self.url, autocommit=True) as conn:
            me = conn.execute("SELECT pg_backend_pid()").fetchone()
            while True:
                rows = conn.execute(
                    "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
                    " AND pid <> %s",
                    (me[0] if me else 0,),
                ).fetchall()
                for (pid,) in rows:
                    used = process_cpu(pid)
                    if used:
                        self.seen.setdefault(pid, [used, used])[1] = used
                if self.stopping.wait(0.2):
                    return

    @property
    def seconds(self) -> float:
        return sum(last - first for first, last in self.seen.values())


def collect(
    receiver: Receiver,
    expected: int,
    deadline: float,
    fast_done: tuple[int, Callable[[], None]] | None = None,
) -> list[tuple[str, str, float]]:
    """The receipts, until ``expected`` or the deadline; ``fast_done``: (n, f), f called once
    n receipts of the fast endpoints are in (to within the 50 ms of a poll)."""
    got: list[tuple[str, str, float]] = []
    fast = 0
    while len(got) < expected and time.monotonic() < deadline:
        new = receiver.receipts()
        got.extend(new)
        if fast_done is not None:
            fast += sum(1 for p, _, _ in new if p != f"/e{SLOW}")
            if fast >= fast_done[0]:
                fast_done[1]()
                fast_done = None
        if len(got) < expected:
            time.sleep(0.05)
    return got


def summarize(
    label: str,
    got: list[tuple[str, str, float]],
    committed: dict[str, float],
    start: float,
    expected: int,
) -> Phase:
    ids = [i for _, i, _ in got]
    doubled = len(ids) - len(set(ids))
    fast = [(p, i, t) for p, i, t in got if p != f"/e{SLOW}"]
    end = max((t for _, _, t in got), default=start)
    fast_end = max((t for _, _, t in fast), default=start)
    latencies = [(t - committed[i]) * 1000 for _, i, t in fast if i in committed]
    return Phase(
        label,
        len(got),
        end - start,
        len(fast) / max(fast_end - start, 1e-9),
        percentile(latencies, 0.5),
        percentile(latencies, 0.99),
        max(expected - len(set(ids)), 0),
        doubled,
        fast_steady=steady_rate(sorted(t for _, _, t in fast)),
        fast_deliveries=len(fast),
    )


def steady_rate(times: list[float]) -> float:
    """Deliveries/s between the 10th and the 90th percentile of these arrival times: the rate
    once the processes run, without their start (connections, the first claims) or the last
    stragglers, which on a shared machine move a 2-4 s phase's rate by tens of percent."""
    if len(times) < 10:
        return 0.0
    low, high = int(0.1 * len(times)), int(0.9 * len(times))
    return (high - low) / max(times[high] - times[low], 1e-9)


def raw_loop(receiver: Receiver, facts: int, in_flight: int, secret: str) -> Phase:
    key = secret_key(secret)
    urls = [parse_url(f"{receiver.url}/e{i}") for i in range(ENDPOINTS)]
    bodies = [
        (
            str(uuid.uuid4()),
            json.dumps({"type": "order.paid", "timestamp": "x", "data": {"n": n}}).encode(),
        )
        for n in range(facts)
    ]
    committed = {event_id: 0.0 for event_id, _ in bodies}

    async def run() -> float:
        client = HttpClient(LOCAL)
        gate = asyncio.Semaphore(in_flight)

        async def one(n: int) -> None:
            event_id, body = bodies[n]
            async with gate:
                await client.post(
                    urls[n % ENDPOINTS], signed([key], event_id, int(time.time()), body), body
                )

        start = time.time()
        await asyncio.gather(*(one(n) for n in range(facts)))
        await client.aclose()
        return start

    receiver_before, own_before = process_cpu(receiver.process.pid), own_cpu()
    start = asyncio.run(run())
    sender = own_cpu() - own_before
    got = collect(receiver, facts, time.monotonic() + 60)
    phase = summarize("raw async HTTP loop (no database)", got, committed, start, facts)
    phase.p50_ms = phase.p99_ms = None
    phase.cpu_us = per_delivery(
        {"sender": sender, "receiver": process_cpu(receiver.process.pid) - receiver_before},
        facts,
    )
    return phase


def per_delivery(seconds: dict[str, float], deliveries: int) -> dict[str, float]:
    """CPU seconds by process -> microseconds per delivery, with their total."""
    out = {k: v * 1e6 / max(deliveries, 1) for k, v in seconds.items()}
    out["total"] = sum(out.values())
    return out


# What ``tockwork relay --app bench.webhooks:PROJECTIONS`` projects (DATABASE_URL: the
# relay's --database-url, which the CLI exports).
PROJECTIONS = Projections([projection(["order.paid"], name="webhooks")])


def record_facts(
    url: str, first: int, count: int, committed: dict[str, float], per_tx: int = 500
) -> None:
    """``count`` facts from number ``first``, round robin over the organizations, ``per_tx``
    a transaction; the commit time of each in ``committed`` (by event id)."""
    with psycopg.connect(url) as conn:
        for low in range(first, first + count, per_tx):
            batch = []
            for n in range(low, min(low + per_tx, first + count)):
                batch.append(
                    record(
                        conn,
                        aggregate_type="order",
                        aggregate_id=str(n),
                        event_type="order.paid",
                        payload={"n": n},
                        organization_id=ORGS[n % ENDPOINTS],
                    )
                )
            conn.commit()
            at = time.time()
            committed.update((str(e), at) for e in batch)


def pipeline(
    url: str,
    receiver: Receiver,
    facts: int,
    args: argparse.Namespace,
    label: str,
    logs: str,
    *,
    paced: float | None = None,
    projected: bool = False,
) -> Phase:
    """One relay and one worker as real processes (the user's commands). Without ``paced``,
    the facts are recorded first and the processes drain them (deliveries/s: from the moment
    both have started); with it, the facts are recorded while they run, ``paced`` a second
    (fact-to-receipt latency)."""
    env = {
        "TOCKWORK_WEBHOOK_ALLOW": "127.0.0.1/32",
        "TOCKWORK_WEBHOOK_PER_ENDPOINT": str(args.per_endpoint),
        "DATABASE_URL": url,
    }
    tag = f"{len(os.listdir(logs))}"
    relay = LoggedProcess(
        f"relay-{tag}", tockwork_argv(url, "relay", "--app", "bench.webhooks:PROJECTIONS"),
        logs, env,
    )  # fmt: skip
    worker = LoggedProcess(
        f"worker-{tag}",
        tockwork_argv(url, "worker", "--app", "scheduler.webhooks:app", "--queue",
                      f"webhooks={args.slots}"),
        logs,
        env,
    )  # fmt: skip
    committed: dict[str, float] = {}
    if paced is None:
        record_facts(url, 0, facts, committed)
    if projected:
        # The worker alone: the facts are projected into jobs before it starts.
        here = projection(["order.paid"], conninfo=url, name="webhooks")
        jobs.Relay(url, [here], listen=False).run_until_idle()
        here.build.close()  # type: ignore[attr-defined]
    else:
        relay.start()
    worker.start()
    cpu: dict[str, float] = {}
    backends = BackendCpu(url)
    try:
        if not projected:
            relay.wait_started()
        worker.wait_started()
        # CPU from here on: the processes' start-up (imports, connections) is not a delivery's.
        started = [(name, p) for name, p in (("sender", worker), ("relay", relay)) if p.proc]
        for name, process in started:
            assert process.proc is not None
            cpu[name] = -process_cpu(process.proc.pid)
        cpu["receiver"] = -process_cpu(receiver.process.pid)
        backends.__enter__()
        start = time.time()
        if paced is not None:
            step = 10
            for first in range(0, facts, step):
                record_facts(url, first, min(step, facts - first), committed, step)
                time.sleep(max(0.0, start + (first + step) / paced - time.time()))

        # The CPU until the fast endpoints' last delivery: what they cost, without the slow
        # endpoint's tail (when it is slow, the worker then cycles for its deliveries only).
        def fast_done() -> None:
            used = sum(process_cpu(p.proc.pid) for _, p in started if p.proc is not None)
            used += process_cpu(receiver.process.pid) + backends.seconds
            fast_cpu.extend([used + sum(cpu.values()), backends.seconds])

        fast_cpu: list[float] = []
        fast_n = sum(1 for n in range(facts) if n % ENDPOINTS != SLOW)
        got = collect(receiver, facts, time.monotonic() + args.timeout, (fast_n, fast_done))
        for name, process in started:
            assert process.proc is not None
            cpu[name] += process_cpu(process.proc.pid)
        cpu["receiver"] += process_cpu(receiver.process.pid)
    finally:
        if backends.thread.is_alive():
            backends.__exit__()
        for process in (relay, worker):
            if process.alive():
                process.terminate()
    cpu["postgres"] = backends.seconds
    phase = summarize(label, got, committed, start, facts)
    if paced is None:
        phase.p50_ms = phase.p99_ms = None  # a backlog's drain: latency says nothing
        phase.cpu_us = per_delivery(cpu, len(got))
        if fast_cpu:
            phase.cpu_us["fast total"] = fast_cpu[0] * 1e6 / max(phase.fast_deliveries, 1)
            phase.cpu_us["fast postgres"] = fast_cpu[1] * 1e6 / max(phase.fast_deliveries, 1)
    # Paced: the facts recorded meanwhile (by this process, through connections of their own)
    # would be counted with the deliveries, so no CPU figures.
    return phase


ORGS = [uuid.UUID(int=(0x0193A8E4 << 96) | i) for i in range(ENDPOINTS)]


def register(url: str, receiver: Receiver) -> str:
    secret = ""
    with psycopg.connect(url) as conn:
        for i in range(ENDPOINTS):
            created = add_endpoint(
                conn, f"{receiver.url}/e{i}", organization_id=ORGS[i], guard=LOCAL
            )
            secret = created.secret
    return secret


def reset(url: str) -> None:
    with psycopg.connect(url) as conn:
        conn.execute("TRUNCATE jobs, job_history")
        conn.execute("DELETE FROM outbox_events")
        conn.execute("DELETE FROM webhook_attempts")


def row(p: Phase, raw: Phase | None) -> str:
    rate = p.deliveries / max(p.seconds, 1e-9)
    ratio = f"{rate / (raw.deliveries / max(raw.seconds, 1e-9)):.2f}" if raw else "1.00"
    p50 = "-" if p.p50_ms is None else f"{p.p50_ms:,.0f}"
    p99 = "-" if p.p99_ms is None else f"{p.p99_ms:,.0f}"
    cpu = " | ".join(
        f"{p.cpu_us[k]:,.0f}" if k in p.cpu_us else "-"
        for k in ("sender", "relay", "postgres", "receiver", "total")
    )
    if raw is None:
        cpu_ratio = "1.00"
    elif raw.cpu_us.get("total") and p.cpu_us.get("total"):
        cpu_ratio = f"{raw.cpu_us['total'] / p.cpu_us['total']:.2f}"
    else:
        cpu_ratio = "-"
    return (
        f"| {p.label} | {p.deliveries:,} | {p.seconds:.2f} | {rate:,.0f} | {ratio} | "
        f"{p.fast_per_s:,.0f} | {p50} | {p99} | {p.lost} | {p.doubled} | {cpu} | {cpu_ratio} |"
    )


def slow_costs(pairs: list[tuple[Phase, Phase]]) -> list[float]:
    """Per (all fast, one slow) pair: 1 - the fast endpoints' steady rate with one slow / all
    fast."""
    return [1 - w.fast_steady / max(f.fast_steady, 1e-9) for f, w in pairs]


def spread(costs: list[float]) -> str:
    ordered = sorted(costs)
    each = ", ".join(f"{c * 100:.1f}%" for c in costs)
    return f"{each}: median {ordered[len(ordered) // 2] * 100:.1f}%"


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--facts", type=int, default=10_000, help="facts (= deliveries)")
    parser.add_argument("--slots", type=int, default=128, help="deliveries a worker runs at once")
    parser.add_argument("--per-endpoint", type=int, default=8, help="in flight per endpoint (8)")
    parser.add_argument("--in-flight", type=int, default=128, help="raw loop's requests at once")
    parser.add_argument("--slow-latency", type=float, default=0.25, help="slow endpoint (s)")
    parser.add_argument("--paced", type=int, default=2000, help="facts of the paced phases")
    parser.add_argument("--rate", type=float, default=200, help="facts/s of the paced phases")
    parser.add_argument("--timeout", type=float, default=300, help="seconds a phase may take")
    parser.add_argument(
        "--repeat", type=int, default=3, help="pairs (all fast, one slow) per kind of drain (3)"
    )
    parser.add_argument(
        "--backlogs",
        default="",
        help="worker-alone drains of these backlogs, e.g. 4000,10000,50000 (default: none)",
    )
    parser.add_argument("--receiver", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.receiver:
        serve(args.slow_latency)
        return 0
    receiver = start_receiver(args.slow_latency)
    try:
        with throwaway_database(
            database_url(), f"tockwork_webhooks_{os.getpid()}", components=ALL_COMPONENTS
        ) as url:
            secret = register(url, receiver)
            bound_endpoints(url, args.per_endpoint)
            raw = raw_loop(receiver, args.facts, args.in_flight, secret)
            with tempfile.TemporaryDirectory() as logs:
                # The slow endpoint's cost: --repeat pairs (all fast, then one slow), the
                # pairs alternated, for the drain and for the worker alone.
                drains: list[tuple[Phase, Phase]] = []
                alones: list[tuple[Phase, Phase]] = []
                for rep in range(1, args.repeat + 1):
                    for pairs, projected, name in ((drains, False, "drain"),
                                                   (alones, True, "worker alone")):  # fmt: skip
                        pair = []
                        for slow_on in (False, True):
                            reset(url)
                            receiver.slow(slow_on)
                            label = f"{name}, " + (
                                f"endpoint {SLOW} slow" if slow_on else "20 fast endpoints"
                            )
                            if args.repeat > 1:
                                label += f" (pair {rep})"
                            pair.append(
                                pipeline(
                                    url, receiver, args.facts, args, label, logs,
                                    projected=projected,
                                )
                            )  # fmt: skip
                        pairs.append((pair[0], pair[1]))
                fast, slow = drains[0]
                alone = [alones[0][0], alones[0][1]]
                backlogs = []
                receiver.slow(False)
                for size in [int(b) for b in args.backlogs.split(",") if b.strip()]:
                    reset(url)
                    backlogs.append(
                        pipeline(
                            url,
                            receiver,
                            size,
                            args,
                            f"worker alone, backlog {size:,}",
                            logs,
                            projected=True,
                        )
                    )
                paced_phases = []
                for slow_on in (False, True):
                    reset(url)
                    receiver.slow(slow_on)
                    label = f"paced {args.rate:g}/s, " + (
                        f"endpoint {SLOW} slow" if slow_on else "20 fast endpoints"
                    )
                    paced_phases.append(
                        pipeline(url, receiver, args.paced, args, label, logs, paced=args.rate)
                    )
    finally:
        receiver.process.send_signal(signal.SIGTERM)
        receiver.process.wait(10)
    ours = fast.deliveries / max(fast.seconds, 1e-9)
    base = raw.deliveries / max(raw.seconds, 1e-9)
    costs = slow_costs(drains)
    cost = sorted(costs)[len(costs) // 2]  # the median pair's
    print(
        f"\nwebhooks: {args.facts:,} facts to {ENDPOINTS} endpoints (one per organization), "
        f"worker {args.slots} deliveries at once, {args.per_endpoint} in flight per endpoint, "
        f"slow endpoint {args.slow_latency:g} s, {datetime.now(UTC):%Y-%m-%d %H:%M} UTC, "
        f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs\n"
    )
    print(
        "| phase | deliveries | seconds | deliveries/s | ours / raw | fast endpoints/s | "
        "p50 fact-to-receipt ms | p99 ms | lost | doubled | CPU us/delivery: sender | relay | "
        "postgres | receiver | total | cpu ratio |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    phases = [p for pair in drains for p in pair] + [p for pair in alones for p in pair]
    for phase in (raw, *phases, *backlogs, *paced_phases):
        print(row(phase, raw if phase is not raw else None))
    print(
        f"\nours / raw loop: {ours / base:.2f} (target >= 0.50); the slow endpoint costs the "
        f"fast ones {cost * 100:.1f}% of their steady drain rate, the median of {len(costs)} "
        f"pairs ({spread(costs)}; target < 10%); p99 fact-to-receipt "
        f"of the fast endpoints at {args.rate:g} facts/s: "
        + " / ".join("-" if p.p99_ms is None else f"{p.p99_ms:,.0f} ms" for p in paced_phases)
        + " (all fast / one slow)"
    )
    alone_rate = alone[0].deliveries / max(alone[0].seconds, 1e-9)
    alone_costs = slow_costs(alones)
    print(
        f"worker alone (facts projected first): {alone_rate / base:.2f} of the raw loop; the "
        f"slow endpoint costs the fast ones {spread(alone_costs)} of their steady rate"
    )
    for name, both in (("drain", drains), ("worker alone", alones)):
        extra = [w.cpu_us.get("fast total", 0) - f.cpu_us.get("fast total", 0) for f, w in both]
        print(
            f"{name}: CPU us a fast delivery until the fast endpoints' last one (every process; "
            "PostgreSQL's), all fast -> one slow: "
            + "; ".join(
                f"{f.cpu_us.get('fast total', 0):,.0f} ({f.cpu_us.get('fast postgres', 0):,.0f})"
                f" -> {w.cpu_us.get('fast total', 0):,.0f} "
                f"({w.cpu_us.get('fast postgres', 0):,.0f})"
                for f, w in both
            )
            + f"; the slow endpoint adds a median {sorted(extra)[len(extra) // 2]:,.0f} us"
        )
    if fast.cpu_us.get("total") and raw.cpu_us.get("total"):
        print(
            f"CPU per delivery: the raw loop {raw.cpu_us['total']:,.0f} us (sender and "
            f"receiver), the drain {fast.cpu_us['total']:,.0f} us (worker, relay, PostgreSQL, "
            f"receiver): cpu ratio {raw.cpu_us['total'] / fast.cpu_us['total']:.2f}"
        )
    ok = ours / base >= 0.5 and cost < 0.10 and not (fast.lost or slow.lost)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
