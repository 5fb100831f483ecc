"""A webhook endpoint's rate limit across worker processes, what it costs the other endpoints,
and what a reservation costs.

``python -m bench.webhook_rate_limit [--workers 3] [--rate 50] [--seconds 10] [--free 400]``

One throwaway database, one receiver (the fakes' HTTP/1.1 server on loopback, in this process,
recording each request's arrival time by path) and ``--workers`` real worker processes
(``tockwork worker --app scheduler.webhooks:app --queue webhooks=32``, the defaults otherwise),
started once for every phase:

1. **free alone**: ``--free`` deliveries to an endpoint without a limit: its deliveries/s
   (from the enqueue's commit to the last arrival), run before and after phase 2 (their mean
   is the same-run baseline).
2. **limited beside free**: ``--rate`` x ``--seconds`` deliveries to an endpoint limited to
   ``--rate`` a second; once a second of them has arrived, ``--free`` more to the free one
   (new events behind a limited endpoint's backlog). Prints the
   limited endpoint's achieved rate over its arrivals (target: within 2% of the limit, either
   way: the first and last arrivals' jitter is in the span), its busiest one-second window,
   sliding (target: at most the limit plus one, the window's edge, plus 2% for the jitter of
   the sends' wake-ups on a busy machine), and the free endpoint's deliveries/s against
   phase 1 (target: >= 90%).
3. **reservation cost**: the reservation statement (``webhook_endpoint_rate_reserve``) alone
   on one connection against ``SELECT 1`` on the same connection, alternating in rounds:
   median microseconds of each and the ratio (the round trip is the floor).

Uses ``DATABASE_URL`` or the embedded server; creates and drops its own database. Exits 1 when
a target is missed.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
import uuid
from datetime import UTC, datetime, timedelta

import psycopg

import jobs
from jobs import JobSpec
from scheduler.devdb import database_url, throwaway_database
from scheduler.migrations import ALL_COMPONENTS
from scheduler.push.fakes.server import FakeRequest, FakeResponse, FakeServer
from scheduler.queries import query
from scheduler.webhooks import add_endpoint
from scheduler.webhooks.fanout import JOB_TYPE, QUEUE, concurrency_key, idempotency_key
from scheduler.webhooks.ssrf import Guard, networks
from tests.processes import LoggedProcess, tockwork_argv

LOCAL = Guard(allow=networks(["127.0.0.1/32"]))


class Arrivals:
    """Answers 200 at once; records when each request arrived, by path."""

    def __init__(self) -> None:
        self.at: dict[str, list[float]] = {}
        self.lock = threading.Lock()

    async def __call__(self, request: FakeRequest) -> FakeResponse:
        arrived = time.monotonic()
        with self.lock:
            self.at.setdefault(request.path, []).append(arrived)
        return FakeResponse(200, [], b"ok")

    def count(self, path: str) -> int:
        with self.lock:
            return len(self.at.get(path, []))

    def taken(self, path: str) -> list[float]:
        with self.lock:
            return sorted(self.at.pop(path, []))


def deliveries(endpoint_id: int, n: int) -> list[JobSpec]:
    now = datetime.now(UTC).isoformat()
    specs = []
    for i in range(n):
        event_id = uuid.uuid4()
        payload = {"event_id": str(event_id), "endpoint_id": endpoint_id, "type": "order.paid",
                   "timestamp": now, "data": {"i": i}}  # fmt: skip
        specs.append(
            JobSpec(
                JOB_TYPE,
                payload,
                queue=QUEUE,
                idempotency_key=idempotency_key(event_id, endpoint_id),
                concurrency_key=concurrency_key(endpoint_id),
            )
        )
    return specs


def enqueue(url: str, specs: list[JobSpec]) -> float:
    """Enqueue ``specs`` in one transaction; the monotonic instant of its commit."""
    with psycopg.connect(url) as conn:
        jobs.enqueue_many(conn, specs)
        conn.commit()
        return time.monotonic()


def wait_for(receiver: Arrivals, wanted: dict[str, int], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while any(receiver.count(p) < n for p, n in wanted.items()):
        if time.monotonic() > deadline:
            got = {p: receiver.count(p) for p in wanted}
            raise SystemExit(f"timed out waiting for the receipts: {got} of {wanted}")
        time.sleep(0.05)


def free_rate(url: str, receiver: Arrivals, endpoint_id: int, n: int) -> float:
    """Deliveries/s of ``n`` deliveries to the free endpoint: from the commit of their enqueue
    to the last arrival."""
    start = enqueue(url, deliveries(endpoint_id, n))
    wait_for(receiver, {"/free": n}, 120)
    return n / max(receiver.taken("/free")[-1] - start, 1e-9)


def busiest_second(times: list[float]) -> int:
    """The most arrivals in a window [t, t + 1 s) starting at an arrival (two pointers)."""
    best, start = 0, 0
    for end, t in enumerate(times):
        while times[start] <= t - 1.0:
            start += 1
        best = max(best, end - start + 1)
    return best


def reservation_cost(url: str, endpoint_id: int, n: int, rounds: int) -> tuple[float, float]:
    """Median microseconds of ``SELECT 1`` and of a reservation, alternating in rounds."""
    params = {"id": endpoint_id, "horizon": timedelta(minutes=1), "now": None}
    plain: list[float] = []
    reserve: list[float] = []
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(query("webhook_endpoint_rate_ensure"), {"id": endpoint_id})
        for _ in range(rounds):
            for sink, sql, args in (
                (plain, "SELECT 1", None),
                (reserve, query("webhook_endpoint_rate_reserve"), params),
            ):
                started = time.perf_counter()
                for _ in range(n):
                    conn.execute(sql, args).fetchall()
                sink.append((time.perf_counter() - started) / n * 1e6)
    return statistics.median(plain), statistics.median(reserve)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=3, help="worker processes")
    parser.add_argument("--rate", type=int, default=50, help="the limited endpoint's limit (/s)")
    parser.add_argument("--seconds", type=float, default=10, help="seconds of limited backlog")
    parser.add_argument("--free", type=int, default=400, help="deliveries to the free endpoint")
    parser.add_argument("--reserves", type=int, default=2000, help="statements a cost round")
    parser.add_argument("--rounds", type=int, default=5, help="cost rounds")
    args = parser.parse_args()

    server = database_url()
    name = f"tockwork_webhook_rate_{os.getpid()}"
    receiver = Arrivals()
    fake = FakeServer(receiver).start_in_thread()
    missed: list[str] = []
    try:
        with (
            throwaway_database(server, name, components=ALL_COMPONENTS) as url,
            tempfile.TemporaryDirectory() as logs,
        ):
            with psycopg.connect(url) as conn:
                free = add_endpoint(conn, fake.url + "/free", guard=LOCAL).endpoint.id
                limited = add_endpoint(
                    conn, fake.url + "/limited", guard=LOCAL, rate_limit=args.rate
                ).endpoint.id
                costly = add_endpoint(
                    conn, fake.url + "/cost", guard=LOCAL, rate_limit=100_000
                ).endpoint.id
            env = {"TOCKWORK_WEBHOOK_ALLOW": "127.0.0.1/32", "DATABASE_URL": url}
            argv = tockwork_argv(
                url, "worker", "--app", "scheduler.webhooks:app", "--queue", "webhooks=32"
            )
            workers = [LoggedProcess(f"worker-{i}", argv, logs, env) for i in range(args.workers)]
            for worker in workers:
                worker.start()
            try:
                for worker in workers:
                    worker.wait_started()
                # 1. the free endpoint alone, before and after phase 2 (their mean)
                alone_rates = [free_rate(url, receiver, free, args.free)]
                # 2. a limited backlog, then the free deliveries beside it
                backlog = int(args.rate * args.seconds)
                enqueue(url, deliveries(limited, backlog))
                wait_for(receiver, {"/limited": min(backlog, args.rate)}, 60)
                beside_rate = free_rate(url, receiver, free, args.free)
                wait_for(receiver, {"/limited": backlog}, args.seconds * 3 + 60)
                paced = receiver.taken("/limited")
                alone_rates.append(free_rate(url, receiver, free, args.free))
            finally:
                for worker in workers:
                    if worker.alive():
                        worker.terminate()
            alone_rate = statistics.mean(alone_rates)
            held = (len(paced) - 1) / max(paced[-1] - paced[0], 1e-9)
            busiest = busiest_second(paced)
            plain_us, reserve_us = reservation_cost(url, costly, args.reserves, args.rounds)
    finally:
        fake.stop_thread()

    ceiling = int(args.rate * 1.02) + 1
    print(f"## webhook rate limit: {args.workers} worker processes, limit {args.rate}/s")
    print()
    print("| figure | value | target |")
    print("|---|---|---|")
    print(f"| limited: achieved rate | {held:,.2f}/s ({held / args.rate:.3f} of the limit) "
          "| 0.98 to 1.02 |")  # fmt: skip
    print(f"| limited: busiest second (sliding) | {busiest} | <= {ceiling} |")
    shown = " and ".join(f"{r:,.0f}" for r in alone_rates)
    print(f"| free: deliveries/s alone (before and after) | {alone_rate:,.0f} ({shown}) | |")
    print(f"| free: deliveries/s beside the limited backlog | {beside_rate:,.0f} "
          f"({beside_rate / alone_rate:.2f} of alone) | >= 0.90 |")  # fmt: skip
    print(f"| SELECT 1 (µs, median of {args.rounds} rounds) | {plain_us:,.0f} | |")
    print(f"| reservation (µs) | {reserve_us:,.0f} ({reserve_us / plain_us:.2f}x SELECT 1) | |")
    if not 0.98 <= held / args.rate <= 1.02:
        missed.append("achieved rate")
    if busiest > ceiling:
        missed.append("busiest second")
    if beside_rate < 0.9 * alone_rate:
        missed.append("free endpoint's rate")
    if missed:
        print(f"\nmissed: {', '.join(missed)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
