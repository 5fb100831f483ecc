"""The chaos suite's producer: orders, each with a job and an outbox event, in one transaction.

``python -m tests.chaos.producer --url URL --rate N`` inserts about N orders a second until
SIGTERM (finishing the transaction it is in) or SIGKILL. Each transaction inserts a row in
``chaos_orders``, enqueues a ``chaos.order`` job (idempotency key ``order:ID``) and records a
``chaos.order.placed`` event (one order in 20 is ``slow``: its handler works for 2 s): the
three exist together or not at all, whatever kills the
producer or the server. A lost connection is logged on one line and retried on a new one; the
order whose commit had no reply is simply not known to the producer (the checks read what
committed). Prints one JSON line at the end: the orders it saw commit. With ``--acked FILE``,
each acknowledged order is also appended to FILE as ``ID UNIX_TIME`` (the failover suite checks
that none is lost, and measures the loss window when some are).
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from types import FrameType
from typing import Any

import psycopg

import jobs
from jobs import outbox

stopping = False


def _stop(_signum: int, _frame: FrameType | None) -> None:
    global stopping
    stopping = True


def place_order(conn: psycopg.Connection[Any], max_attempts: int | None) -> int:
    with conn.transaction():
        row = conn.execute("INSERT INTO chaos_orders DEFAULT VALUES RETURNING id").fetchone()
        assert row is not None
        order: int = row[0]
        jobs.enqueue(
            conn,
            "chaos.order",
            {"order": order, "slow": order % 20 == 0},
            idempotency_key=f"order:{order}",
            max_attempts=max_attempts,
        )
        outbox.record(
            conn,
            aggregate_type="order",
            aggregate_id=order,
            event_type="chaos.order.placed",
            payload={"order": order},
        )
    return order


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="tests.chaos.producer")
    p.add_argument("--url", required=True)
    p.add_argument("--rate", type=float, default=10.0, help="orders per second")
    p.add_argument("--max-attempts", type=int, default=None)
    p.add_argument("--acked", default=None, help="append each acknowledged order id here")
    args = p.parse_args(argv)
    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    print(json.dumps({"event": "started", "rate": args.rate}), flush=True)
    committed = reconnects = 0
    conn: psycopg.Connection[Any] | None = None
    period = 1.0 / args.rate
    acked = open(args.acked, "a") if args.acked else None  # noqa: SIM115 (open for the run)
    next_at = time.monotonic()
    while not stopping:
        try:
            if conn is None:
                conn = psycopg.connect(args.url, application_name="chaos-producer")
            order = place_order(conn, args.max_attempts)
            committed += 1
            if acked is not None:
                acked.write(f"{order} {time.time():.3f}\n")
                acked.flush()
        except psycopg.OperationalError as exc:
            reconnects += 1
            first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            print(json.dumps({"event": "reconnect", "error": first_line[:200]}), flush=True)
            if conn is not None:
                conn.close()
            conn = None
            time.sleep(0.2)  # back-off while the server restarts
            continue
        next_at = max(next_at + period, time.monotonic() - 1.0)  # no catch-up burst
        time.sleep(max(0.0, next_at - time.monotonic()))  # the arrival rate, not a wait
    if conn is not None:
        conn.close()
    if acked is not None:
        acked.close()
    print(json.dumps({"event": "stopped", "committed": committed, "reconnects": reconnects}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
