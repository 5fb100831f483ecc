"""``tockwork worker --app scheduler.delivery:app`` refuses a bad push configuration the way
every command refuses bad input: one line on stderr naming the setting, exit code 2, no
traceback, nothing on stdout, and no worker started."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from scheduler import delivery

ROOT = Path(__file__).resolve().parents[2]
PUSH_ENV = [*delivery.SETTINGS, "TOCKWORK_SIM_TRANSIENT", "TOCKWORK_SIM_RATE_LIMIT",
            "TOCKWORK_SIM_RETRY_AFTER"]  # fmt: skip


def worker(db_url: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    environment = {k: v for k, v in os.environ.items() if k not in PUSH_ENV}
    environment.update(env, PYTHONPATH=str(ROOT))
    return subprocess.run(
        [sys.executable, "-m", "scheduler.cli", "worker", "--app", "scheduler.delivery:app",
         "--database-url", db_url, "--no-listen"],
        cwd=ROOT, env=environment, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("env", "needle"),
    [
        ({}, "TOCKWORK_FCM_CREDENTIALS"),
        ({"TOCKWORK_APNS_KEY_FILE": "/run/secrets/AuthKey_ABCDEFGHIJ.p8"}, "TOCKWORK_APNS_KEY_ID"),
        ({"TOCKWORK_PUSH_SIMULATED": "1", "TOCKWORK_PUSH_TTL": "an hour"}, "TOCKWORK_PUSH_TTL"),
        ({"TOCKWORK_PUSH_SIMULATED": "1", "TOCKWORK_PUSH_DEVICES": "subject:fcm"},
         "TOCKWORK_PUSH_DEVICES"),
    ],
)  # fmt: skip
def test_the_delivery_app_with_a_bad_environment_exits_2_on_one_line(
    db_url: str, env: dict[str, str], needle: str
) -> None:
    result = worker(db_url, env)
    assert result.returncode == 2, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert needle in result.stderr
    assert "Traceback" not in result.stderr
    assert "InvalidPushConfig" in result.stderr
    assert result.stdout == ""
