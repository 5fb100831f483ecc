"""Every command takes a multi-host URL (issue 25): libpq tries the hosts in turn and keeps the
one the URL asks for, so after a failover the same URL finds the new primary.

A real primary and a streaming standby (tests/failover/servers.py). The commands are given the
standby first and the primary second with ``target_session_attrs=read-write``: each must skip
the standby (which refuses writes) and run on the primary. The read URL lists them the other
way round with ``prefer-standby``: the reads go to the standby. (The services, given such a
URL, run in the failover suite: tests/failover/workload.py.)
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import psycopg
import pytest

from tests.acceptance.cli_harness import run
from tests.failover.servers import LocalServer, migrated_primary_and_standby

# One-shot commands with the arguments they need; each exits 0 on a migrated, empty database.
COMMANDS = [
    ["migrate"],
    ["stats"],
    ["healthz", "--max-scheduler-lag", "0"],
    ["jobs", "list", "--status", "dead"],
    ["jobs", "dead"],
    ["processes"],
    ["schedules", "list"],
    ["schedules", "overdue"],
    ["outbox", "dead"],
    ["limits", "set", "--queue", "q", "--per-second", "10"],
    ["limits", "list"],
    ["policies", "list"],
    ["devices", "list"],
    ["webhooks", "list"],
]


@pytest.fixture(scope="module")
def pair() -> Iterator[tuple[LocalServer, LocalServer]]:
    with migrated_primary_and_standby() as servers:
        yield servers


def _hosts(*servers: LocalServer, attrs: str) -> str:
    hosts = ",".join(f"127.0.0.1:{s.port}" for s in servers)
    return f"postgresql://postgres@{hosts}/postgres?target_session_attrs={attrs}&connect_timeout=3"


@pytest.mark.parametrize("argv", COMMANDS, ids=" ".join)
def test_a_command_given_a_multi_host_url_runs_on_the_primary(
    pair: tuple[LocalServer, LocalServer], argv: list[str]
) -> None:
    primary, standby = pair
    url = _hosts(standby, primary, attrs="read-write")
    result = run([*argv, "--database-url", url])
    assert result.code == 0, result
    assert "Traceback" not in result.err


def test_the_limit_set_through_a_multi_host_url_is_on_the_primary(
    pair: tuple[LocalServer, LocalServer],
) -> None:
    primary, standby = pair
    url = _hosts(standby, primary, attrs="read-write")
    assert (
        run(["limits", "set", "--queue", "multi", "--per-second", "5", "--database-url", url]).code
        == 0
    )
    with psycopg.connect(primary.url) as conn:
        row = conn.execute("SELECT count(*) FROM job_rate_limits WHERE name = 'multi'").fetchone()
    assert row == (1,)


def test_a_multi_host_read_url_prefers_the_standby(pair: tuple[LocalServer, LocalServer]) -> None:
    primary, standby = pair
    write = _hosts(standby, primary, attrs="read-write")
    read = _hosts(primary, standby, attrs="prefer-standby")
    result = run(["healthz", "--compact", "--database-url", write, "--read-url", read])
    assert result.code == 0, result
    assert json.loads(result.out)["checks"]["replica"]["ok"] is True
    stats = run(["stats", "--database-url", write, "--read-url", read])
    assert stats.code == 0, stats
    assert "read from a replica, " in stats.out
