"""Helpers for tests that run ``tockwork`` commands as separate processes."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from typing import Any

import psycopg

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def start_tockwork(db_url: str, *args: str) -> subprocess.Popen[bytes]:
    """Start ``tockwork ARGS --database-url DB`` with the repository importable.

    ``TOCKWORK_TEST_DB`` tells the tests' handler apps where to record what they did.
    """
    env = {**os.environ, "TOCKWORK_TEST_DB": db_url, "PYTHONPATH": ROOT}
    return subprocess.Popen(
        [sys.executable, "-m", "scheduler.cli", *args, "--database-url", db_url],
        env=env,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def wait_for(conn: psycopg.Connection[Any], sql_text: str, timeout: float = 20.0) -> None:
    """Wait for a database condition (an event another process causes), not for time."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        row = conn.execute(sql_text).fetchone()
        if row and row[0]:
            return
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for: {sql_text}")
