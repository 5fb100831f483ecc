"""A relay process killed inside a batch, and the ``tockwork relay`` command's input checks."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from datetime import datetime, timedelta
from uuid import UUID

import psycopg
import pytest

from jobs import outbox
from jobs.relay import Relay
from scheduler.cli import main
from tests.integration.outbox.apps import projections
from tests.processes import ROOT, start_tockwork, wait_for
from timezones.clock import FrozenClock


def start_relay(db_url: str, *extra: str) -> subprocess.Popen[bytes]:
    return start_tockwork(
        db_url, "relay", "--app", "tests.integration.outbox.apps:projections", *extra
    )


def test_relay_killed_mid_batch_loses_and_duplicates_nothing(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with psycopg.connect(db_url, autocommit=True) as auto:
        auto.execute("CREATE TABLE reached (event_id uuid, attempt int)")
        ids = [
            outbox.record(
                auto,
                aggregate_type="order",
                aggregate_id=f"o-{i}",
                event_type="order.blocking" if i == 12 else "order.placed",
                payload={"n": i},
            )
            for i in range(20)
        ]
        # Batches of 5: two commit, the third hangs inside the projection of event 12.
        proc = start_relay(db_url, "--batch-size", "5", "--lease", "30", "--no-listen")
        try:
            wait_for(auto, "SELECT count(*) FROM reached")
            proc.send_signal(signal.SIGKILL)
            proc.wait(10)
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.communicate()
        states = auto.execute(
            "SELECT processed_at IS NOT NULL, claimed_by IS NOT NULL, count(*)"
            " FROM outbox_events GROUP BY 1, 2 ORDER BY 1, 2"
        ).fetchall()
        assert states == [(False, False, 5), (False, True, 5), (True, False, 10)]
        assert auto.execute("SELECT count(*) FROM jobs_all").fetchone() == (10,)

        # Pin time past the lease instead of waiting for it.
        db_now: datetime = auto.execute("SELECT now()").fetchone()[0]  # type: ignore[index]
        later = FrozenClock(db_now + timedelta(seconds=31))
        monkeypatch.setenv("TOCKWORK_TEST_DB", db_url)
        relay = Relay(
            db_url,
            projections,
            batch_size=5,
            lease=timedelta(seconds=30),
            clock=later,
            listen=False,
        )
        stats = relay.run_until_idle()
        assert stats.processed == 10
        assert auto.execute(
            "SELECT count(*) FROM outbox_events WHERE processed_at IS NULL"
        ).fetchone() == (0,)
        per_event: dict[UUID, int] = dict(
            auto.execute(
                "SELECT (payload->>'event')::uuid, count(*) FROM jobs_all GROUP BY 1"
            ).fetchall()
        )
        assert per_event == dict.fromkeys(ids, 1)
        assert auto.execute(
            "SELECT count(*), count(DISTINCT idempotency_key) FROM jobs_all"
        ).fetchone() == (20, 20)
        assert auto.execute("SELECT attempt FROM reached ORDER BY attempt").fetchall() == [
            (1,),
            (2,),
        ]


@pytest.mark.parametrize(
    "app",
    [
        "bad",
        "no_such_module_xyz:projections",
        "tests.integration.outbox.apps:missing",
        "tests.integration.outbox.apps:not_projections",
    ],
)
def test_relay_command_rejects_a_bad_app(
    db_url: str, app: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["relay", "--database-url", db_url, "--app", app]) == 2
    assert "--app" in capsys.readouterr().err


def test_relay_command_rejects_bad_numbers(db_url: str) -> None:
    for flag, value in [("--batch-size", "0"), ("--lease", "-1"), ("--max-attempts", "x")]:
        with pytest.raises(SystemExit) as info:
            main(["relay", "--database-url", db_url, "--app", "m:a", flag, value])
        assert info.value.code == 2


def test_relay_command_exits_2_in_a_process(db_url: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "scheduler.cli", "relay", "--database-url", db_url, "--app", "bad"],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": ROOT},
        capture_output=True,
        check=False,
    )
    assert result.returncode == 2
    assert b"module:attribute" in result.stderr
