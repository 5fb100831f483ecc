"""``tockwork devices add|list|show|remove``: output, exit codes, and no token in full.

The flow runs as real processes (the installed command's entry point, argv from the OS); the
bad-input table runs in-process (``tests/acceptance/cli_harness.py``) with the contract of
``test_cli_bad_input.py``: exit 2, one stderr line naming the value, nothing on stdout, no
traceback, nothing written. A token never appears in full in any output, good or bad.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import psycopg

from tests.acceptance.cli_harness import run

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(__file__)))
TOKEN = "dQw4w9WgXcQ:APA91b" + "F" * 120 + "Kq7Zp2"
ORG = "0193a8e4-0000-7000-8000-00000000000a"


def tockwork(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "scheduler.cli", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_add_list_show_remove(db_url: str) -> None:
    url = ["--database-url", db_url]
    added = tockwork("devices", "add", "alice", "fcm", TOKEN, "--platform", "android",
                     "--org", ORG, "--json", *url)  # fmt: skip
    assert added.returncode == 0, added.stderr
    device = json.loads(added.stdout)
    assert device["subject"] == "alice" and device["organization_id"] == ORG
    assert device["token"] == "…Kq7Zp2" and device["valid"] is True
    other = tockwork("devices", "add", "bob", "apns", "a" * 64, *url)
    assert other.returncode == 0 and "subject: bob" in other.stdout
    outputs = [added, other]

    listed = tockwork("devices", "list", *url)
    outputs.append(listed)
    assert listed.returncode == 0, listed.stderr
    assert "alice" in listed.stdout and "bob" in listed.stdout and "android" in listed.stdout
    assert "(2 device(s))" in listed.stdout
    page = tockwork("devices", "list", "--limit", "1", *url)
    assert "next page: --after " + str(device["id"]) in page.stdout
    rest = tockwork("devices", "list", "--after", str(device["id"]), "--json", *url)
    assert [x["subject"] for x in json.loads(rest.stdout)] == ["bob"]
    by_org = tockwork("devices", "list", "--org", ORG, "--subject", "alice", "--json", *url)
    assert [x["id"] for x in json.loads(by_org.stdout)] == [device["id"]]
    outputs += [page, rest, by_org]

    with psycopg.connect(db_url) as conn:
        conn.execute(
            "UPDATE devices SET invalidated_at = now(), invalid_reason = 'unregistered' "
            "WHERE id = %s",
            (device["id"],),
        )
    valid_only = tockwork("devices", "list", "--json", *url)
    assert [x["subject"] for x in json.loads(valid_only.stdout)] == ["bob"]
    everything = tockwork("devices", "list", "--all", *url)
    assert "invalid: unregistered" in everything.stdout
    shown = tockwork("devices", "show", str(device["id"]), *url)
    assert shown.returncode == 0 and "invalid_reason: unregistered" in shown.stdout
    as_json = tockwork("devices", "show", str(device["id"]), "--json", *url)
    assert json.loads(as_json.stdout)["valid"] is False
    outputs += [valid_only, everything, shown, as_json]

    removed = tockwork("devices", "remove", str(device["id"]), *url)
    assert removed.returncode == 0 and f"removed device {device['id']}" in removed.stdout
    again = tockwork("devices", "remove", str(device["id"]), *url)
    assert again.returncode == 1 and len(again.stderr.strip().splitlines()) == 1
    assert "no device with id" in again.stderr and "Traceback" not in again.stderr
    missing = tockwork("devices", "show", str(device["id"]), *url)
    assert missing.returncode == 2 and "no device with id" in missing.stderr
    outputs += [removed, again, missing]
    for result in outputs:
        assert TOKEN not in result.stdout + result.stderr
        assert "a" * 64 not in result.stdout + result.stderr


BAD: list[tuple[list[str], str]] = [
    (["add", "", "fcm", TOKEN], "subject"),
    (["add", "alice", "FCM", TOKEN], "channel"),
    (["add", "alice", "my-push", TOKEN], "channel"),
    (["add", "alice", "fcm", ""], "token"),
    (["add", "alice", "fcm", TOKEN + " extra"], "token"),
    (["add", "alice", "fcm", TOKEN * 20], "token"),
    (["add", "alice", "fcm", TOKEN, "--platform", ""], "--platform"),
    (["add", "alice", "fcm", TOKEN, "--platform", "p" * 33], "--platform"),
    (["add", "alice", "fcm", TOKEN, "--org", "acme"], "--org"),
    (["add", "s" * 201, "fcm", TOKEN], "subject"),
    (["list", "--subject", ""], "--subject"),
    (["list", "--org", "not-a-uuid"], "--org"),
    (["list", "--after", "-1"], "--after"),
    (["list", "--limit", "0"], "--limit"),
    (["list", "--limit", "10001"], "--limit"),
    (["show", "0"], "ID"),
    (["show", "x"], "ID"),
    (["remove", "-5"], "ID"),
    (["remove", "9" * 30], "ID"),
]


def _rows(conn: psycopg.Connection[Any]) -> Any:
    row = conn.execute("SELECT count(*), max(xmin::text) FROM devices").fetchone()
    conn.rollback()
    return row


def test_bad_input_is_one_line_exit_2_and_no_token(
    db_url: str, conn: psycopg.Connection[Any]
) -> None:
    conn.execute("INSERT INTO devices (subject, channel, token) VALUES ('alice', 'fcm', 'tok-1')")
    conn.commit()
    before = _rows(conn)
    failures = []
    for argv, needle in BAD:
        result = run(["devices", *argv, "--database-url", db_url])
        lines = result.err.strip().splitlines()
        ok = (
            result.code == 2
            and len(lines) == 1
            and needle in result.err
            and "Traceback" not in result.err
            and result.out == ""
            and TOKEN not in result.err
        )
        if not ok:
            failures.append(f"{[a[:40] for a in argv]}: exit {result.code}, {result.err[:300]!r}")
    assert failures == []
    assert _rows(conn) == before


def test_a_bad_token_as_a_real_process(db_url: str) -> None:
    bad = tockwork("devices", "add", "alice", "fcm", "x" + TOKEN + " y", "--database-url", db_url)
    assert bad.returncode == 2 and bad.stdout == ""
    assert len(bad.stderr.strip().splitlines()) == 1 and "Traceback" not in bad.stderr
    assert TOKEN not in bad.stderr and "invalid token '…7Zp2 y'" in bad.stderr


def test_input_is_checked_before_connecting() -> None:
    """A bad token is refused before any connection (the URL names no reachable server)."""
    unreachable = "postgresql://nobody@127.0.0.1:1/none?connect_timeout=1"
    result = run(["devices", "add", "alice", "fcm", "", "--database-url", unreachable])
    assert result.code == 2 and "token" in result.err and "127.0.0.1" not in result.err
