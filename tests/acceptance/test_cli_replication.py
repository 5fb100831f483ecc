"""``--require-sync-replication``: every service refuses to start without synchronous
replication, with exit code 2 and one line (issue 25); healthz fails; without it, they say
at start-up that acknowledged work can be lost at failover.

The test server replicates asynchronously (no synchronous_standby_names: it has no standby).
"""

from __future__ import annotations

import json

import pytest

from tests.acceptance.cli_harness import run

SERVICES = {
    "worker": ["worker", "--app", "tests.integration.jobs.apps:handlers"],
    "scheduler": ["scheduler"],
    "relay": ["relay", "--app", "tests.integration.outbox.apps:projections"],
    "dashboard": ["dashboard", "--no-auth", "--port", "0"],
}


@pytest.mark.parametrize("service", sorted(SERVICES))
@pytest.mark.parametrize("how", ["flag", "env"])
def test_a_service_refuses_to_start_without_synchronous_replication(
    db_url: str, service: str, how: str
) -> None:
    argv = [*SERVICES[service], "--database-url", db_url]
    env = {"TOCKWORK_REQUIRE_SYNC_REPLICATION": "1" if how == "env" else None}
    result = run([*argv, "--require-sync-replication"] if how == "flag" else argv, env=env)
    assert result.code == 2, result
    assert "Traceback" not in result.err
    lines = [line for line in result.err.splitlines() if "--require-sync-replication" in line]
    assert len(lines) == 1, result.err
    assert "does not replicate synchronously" in lines[0]
    assert "acknowledged work can be lost at failover" in lines[0]


def test_healthz_reports_the_replication_mode_and_fails_when_sync_is_required(
    db_url: str,
) -> None:
    plain = run(["healthz", "--database-url", db_url, "--compact"])
    check = json.loads(plain.out)["checks"]["replication"]
    assert check["ok"] is True and check["value"] == 0.0
    assert "acknowledged work can be lost at failover" in check["detail"]
    required = run(["healthz", "--database-url", db_url, "--compact", "--require-sync-replication"])
    assert required.code == 1
    assert json.loads(required.out)["checks"]["replication"]["ok"] is False


def test_a_bad_variable_is_an_input_error(db_url: str) -> None:
    result = run(["scheduler", "--database-url", db_url],
                 env={"TOCKWORK_REQUIRE_SYNC_REPLICATION": "maybe"})  # fmt: skip
    assert result.code == 2
    assert result.err.strip().count("\n") == 0
    assert "TOCKWORK_REQUIRE_SYNC_REPLICATION" in result.err
