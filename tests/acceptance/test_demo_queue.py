"""``make demo-queue`` ends, with every job accounted for.

The queue demo ran forever once: its pager handler answered "rate limited" while
``job.attempt == 1``, and a RateLimited outcome stopped using an attempt
(``RetryPolicy.rate_limited_for``), so the 20 limited pages were limited again at every run.
Nothing ran the demo, so nothing saw it. This runs it as ``make demo-queue`` does, on the test
server, within a bound.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_queue_demo_finishes_with_each_job_accounted_for(server_url: str) -> None:
    env = {**os.environ, "DATABASE_URL": server_url}
    result = subprocess.run(
        [sys.executable, "-m", "scheduler.demos.queue"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    out = result.stdout
    assert "critical_alerts  succeeded     200" in out
    assert "rate_limited   rate_limited             20" in out
    assert "users notified twice: 0" in out
    assert "notifications    succeeded    2474" in out
    assert "notifications    dead           26" in out
