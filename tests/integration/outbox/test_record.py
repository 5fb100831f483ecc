"""Recording events: rollback, commit, one notification per transaction, bad input."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest

import jobs
from jobs import outbox

T0 = datetime(2026, 3, 8, 12, 0, tzinfo=UTC)


def count(url: str) -> int:
    with psycopg.connect(url) as c:
        row = c.execute("SELECT count(*) FROM outbox_events").fetchone()
        assert row is not None
        return int(row[0])


def test_rollback_means_no_event(db_url: str) -> None:
    with psycopg.connect(db_url) as c:
        with c.transaction(force_rollback=True):
            outbox.record(
                c,
                aggregate_type="order",
                aggregate_id="o-1",
                event_type="order.placed",
                payload={"n": 0},
            )
            assert c.execute("SELECT count(*) FROM outbox_events").fetchone() == (1,)
            assert count(db_url) == 0  # not visible to others before commit
        assert c.execute("SELECT count(*) FROM outbox_events").fetchone() == (0,)
    assert count(db_url) == 0


def test_commit_means_event_and_one_notification(db_url: str) -> None:
    org = uuid.uuid4()
    with psycopg.connect(db_url, autocommit=True) as listener:
        listener.execute("LISTEN outbox_ready")
        with psycopg.connect(db_url) as c:
            with c.transaction():
                first = outbox.record(
                    c,
                    aggregate_type="order",
                    aggregate_id=uuid.UUID(int=7),
                    event_type="order.placed",
                    payload={"total": 12.5, "items": ["a"]},
                    schema_version=2,
                    organization_id=str(org),
                    occurred_at=T0,
                )
                for n in range(2):
                    outbox.record(
                        c, aggregate_type="order", aggregate_id=42, event_type="x", payload=n
                    )
                assert count(db_url) == 0
            # A second transaction's notification marks the end of the first one's.
            c.execute("SELECT pg_notify('outbox_ready', 'sentinel')")
            c.commit()
        payloads = []
        for note in listener.notifies(timeout=10):
            if note.payload == "sentinel":
                break
            payloads.append(note.payload)
        row = listener.execute(
            "SELECT organization_id, aggregate_type, aggregate_id, event_type, schema_version,"
            " payload, occurred_at, processed_at, dead_at, attempts FROM outbox_events"
            " WHERE id = %s",
            (first,),
        ).fetchone()
    assert payloads == ["ready"]
    assert first.version == 7
    assert count(db_url) == 3
    assert row == (
        org,
        "order",
        str(uuid.UUID(int=7)),
        "order.placed",
        2,
        {"total": 12.5, "items": ["a"]},
        T0,
        None,
        None,
        0,
    )


def test_occurred_at_defaults_to_transaction_time(conn: psycopg.Connection[Any]) -> None:
    outbox.record(conn, aggregate_type="a", aggregate_id="1", event_type="e", payload={})
    assert conn.execute("SELECT occurred_at = now() FROM outbox_events").fetchone() == (True,)


@pytest.mark.parametrize(
    ("field", "kwargs"),
    [
        ("aggregate_type", {"aggregate_type": ""}),
        ("aggregate_type", {"aggregate_type": 5}),
        ("aggregate_id", {"aggregate_id": " padded"}),
        ("aggregate_id", {"aggregate_id": "x" * 201}),
        ("event_type", {"event_type": None}),
        ("payload", {"payload": {"when": datetime.now(UTC)}}),
        ("payload", {"payload": float("nan")}),
        ("payload", {"payload": "x" * (300 * 1024)}),
        ("schema_version", {"schema_version": 0}),
        ("schema_version", {"schema_version": True}),
        ("organization_id", {"organization_id": "not-a-uuid"}),
        ("occurred_at", {"occurred_at": datetime(2026, 1, 1)}),
    ],
)
def test_bad_input_names_the_field(
    conn: psycopg.Connection[Any], field: str, kwargs: dict[str, Any]
) -> None:
    args: dict[str, Any] = {
        "aggregate_type": "order",
        "aggregate_id": "o-1",
        "event_type": "order.placed",
        "payload": {},
        **kwargs,
    }
    with pytest.raises(jobs.InvalidJob) as info:
        outbox.record(conn, **args)
    assert info.value.field == field
    assert field in str(info.value)
    assert conn.execute("SELECT count(*) FROM outbox_events").fetchone() == (0,)


def test_projection_definitions_are_validated() -> None:
    def build(_event: outbox.Event) -> list[jobs.JobSpec]:
        return []

    with pytest.raises(jobs.InvalidJob, match=r"projection\.name"):
        outbox.Projection("Bad Name", frozenset({"e"}), build)
    with pytest.raises(jobs.InvalidJob, match=r"projection\.event_types"):
        outbox.Projection("ok", frozenset(), build)
    registry = outbox.Projections([outbox.Projection("ok", frozenset({"e"}), build)])
    with pytest.raises(jobs.InvalidJob, match="registered twice"):
        registry.add(outbox.Projection("ok", frozenset({"f"}), build))


def test_cli_lists_and_retries_dead_events(db_url: str, conn: psycopg.Connection[Any]) -> None:
    event_id = outbox.record(
        conn, aggregate_type="order", aggregate_id="7", event_type="order.shipped", payload={}
    )
    conn.execute(
        "UPDATE outbox_events SET dead_at = now(), attempts = 5, last_error = 'boom' WHERE id = %s",
        (event_id,),
    )
    conn.commit()

    def tockwork(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "scheduler.cli", *args, "--database-url", db_url],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip

    listed = tockwork("outbox", "dead", "--json")
    assert listed.returncode == 0, listed.stderr
    assert [(e["id"], e["last_error"]) for e in json.loads(listed.stdout)] == [
        (str(event_id), "boom")
    ]
    retried = tockwork("outbox", "retry", "--id", str(event_id))
    assert retried.stdout.strip() == "retried 1 event(s)"
    assert tockwork("outbox", "dead", "--json").stdout.strip() == "[]"
