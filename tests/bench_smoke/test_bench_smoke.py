"""Every benchmark of bench/ runs to its figures table at a tiny size (`make bench-smoke`).

The benches are not part of the default suite (they measure, they do not test), so nothing else
notices when a change of the library breaks one: twice a bench kept running but measured
nothing (a statement counter that no longer knew the claim statements, a claim parameter a
bench did not pass). This module runs each bench module as its own process against the test
server (each creates and drops its own throwaway database there) and checks that it ended on
its report: no traceback, and the lines the report always prints. A bench may exit 1 because a
target was missed at this size (the figures of a tiny run mean nothing); it may not crash.
No timing is asserted.

Marked ``bench_smoke`` and excluded from ``make test`` (about five minutes on two cores);
``.ci/run`` runs ``make bench-smoke`` after the suite.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(__file__)))

pytestmark = pytest.mark.bench_smoke

# module, arguments, exit codes allowed (1: a target missed), text its report always prints.
BENCHES: list[tuple[str, list[str], set[int], str]] = [
    ("queue", ["--quick"], {0, 1}, "latency LISTEN on p50"),
    ("next_run", ["--n", "200"], {0, 1}, "rrule"),
    ("scheduler_herd", ["--quick"], {0, 1}, "occurrences/s (2 replicas)"),
    # --quick runs 2 library/raw pairs (--repeat 2): the requeued pair and its medians.
    ("reminder_delivery", ["--quick"], {0, 1}, "median library / raw"),
    ("outbox_hot", ["--events", "20", "--baseline-events", "2"], {0, 1}, "hot aggregate"),
    (
        "rate_limits",
        ["--seconds", "2", "--rate", "100", "--workers", "1", "--rounds", "1", "--claims", "5"],
        {0, 1},
        "busiest second",
    ),
    (
        "fairness",
        [
            "--flood",
            "500",
            "--orgs",
            "2",
            "--rate",
            "5",
            "--workers",
            "1",
            "--seconds",
            "3",
            "--claim-rounds",
            "1",
        ],
        {0, 1},
        "p99 wait on/off",
    ),
    ("claim_token", ["--rounds", "2", "--jobs", "500"], {0}, "ratio"),
    ("unique_enqueue", ["--n", "20", "--batches", "1", "--batch", "50"], {0, 1}, "unique keys"),
    ("enqueue_async", ["--n", "200", "--batch", "50"], {0, 1}, "async/sync"),
    ("validate_cost", ["--n", "200", "--rounds", "1"], {0, 1}, "this tree/s"),
    ("enqueue_one", ["--n", "50", "--rounds", "1"], {0, 1}, "statements = round trips per job"),
    ("push_channel", ["--n", "200", "--rounds", "1"], {0, 1}, "(b) FcmChannel"),
    ("delivery_worker", ["--size", "200", "--rounds", "1"], {0}, "worker CPU"),
    ("push_delivery", ["--quick"], {0, 1}, "ours / min(a, b)"),
    ("retention", ["--quick"], {0, 1}, "partitions / delete"),
    ("completion_wal", ["--quick"], {0}, "WAL B/job"),
    (
        "webhooks",
        [
            "--facts",
            "200",
            "--paced",
            "50",
            "--rate",
            "100",
            "--slow-latency",
            "0.05",
            "--repeat",
            "1",
        ],
        {0, 1},
        "ours / raw loop",
    ),
    ("process_registry", ["--jobs", "200", "--rounds", "1"], {0, 1}, "registered / unregistered"),
    (
        "webhook_rate_limit",
        [
            "--workers",
            "2",
            "--rate",
            "20",
            "--seconds",
            "2",
            "--free",
            "50",
            "--reserves",
            "200",
            "--rounds",
            "1",
        ],
        {0, 1},
        "busiest second",
    ),
    (
        "dashboard",
        ["--jobs", "2000", "--attempts", "2000", "--schedules", "200", "--requests", "2"],
        {0, 1},
        "/api/queues",
    ),
]


def test_every_bench_module_is_listed() -> None:
    found = {
        name[:-3]
        for name in os.listdir(os.path.join(ROOT, "bench"))
        if name.endswith(".py") and name not in {"__init__.py", "peer_pgqueuer.py"}
    }
    assert found == {module for module, *_ in BENCHES}


@pytest.mark.parametrize(
    ("module", "args", "codes", "marker"), BENCHES, ids=[b[0] for b in BENCHES]
)
def test_the_bench_runs_to_its_report(
    server_url: str, module: str, args: list[str], codes: set[int], marker: str
) -> None:
    env = {**os.environ, "DATABASE_URL": server_url}
    done = subprocess.run(
        [sys.executable, "-m", f"bench.{module}", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=420,
        check=False,
    )
    output = done.stdout + done.stderr
    assert "Traceback" not in output, output[-4000:]
    assert done.returncode in codes, output[-4000:]
    assert marker in done.stdout, done.stdout[-4000:]
