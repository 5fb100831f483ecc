"""``tockwork schedules ...`` and ``tockwork scheduler`` in a subprocess: output and exit codes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(__file__)))

DEFINITIONS = """
[[schedule]]
key = "nightly-backup"
rule = "cron:30 1 * * *"
zone = "America/New_York"
job_type = "backup"
"""


def tockwork(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "scheduler.cli", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_sync_list_show_preview(db_url: str, tmp_path: Path) -> None:
    path = tmp_path / "defs.toml"
    path.write_text(DEFINITIONS)
    dry = tockwork("schedules", "sync", str(path), "--dry-run", "--database-url", db_url)
    assert dry.returncode == 0, dry.stderr
    assert "would create: nightly-backup" in dry.stdout
    done = tockwork("schedules", "sync", str(path), "--database-url", db_url)
    assert "create: nightly-backup" in done.stdout
    again = tockwork("schedules", "sync", str(path), "--database-url", db_url)
    assert "create: -" in again.stdout and "unchanged: 1" in again.stdout
    listed = tockwork("schedules", "list", "--database-url", db_url)
    assert "nightly-backup" in listed.stdout and "America/New_York" in listed.stdout
    shown = tockwork("schedules", "show", "nightly-backup", "--database-url", db_url)
    assert "catch_up: all" in shown.stdout
    preview = tockwork(
        "schedules", "preview", "nightly-backup", "--after", "2026-10-31T12:00Z", "--count", "3",
        "--json", "--database-url", db_url,
    )  # fmt: skip
    assert preview.returncode == 0, preview.stderr
    items = json.loads(preview.stdout)
    # 01:30 on the fall-back night (2026-11-01 in New York) fires once, at the first instant.
    assert [i["utc"] for i in items] == [
        "2026-11-01T05:30:00Z", "2026-11-02T06:30:00Z", "2026-11-03T06:30:00Z",
    ]  # fmt: skip
    assert items[0]["adjusted"] == "fold_first"


def test_bad_input_exits_2(db_url: str, tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text('[[schedule]]\nkey = "x"\nrule = "cron:0 0 31 2 *"\njob_type = "t"\n')
    result = tockwork("schedules", "sync", str(bad), "--database-url", db_url)
    assert result.returncode == 2 and "31 2" in result.stderr
    missing = tockwork("schedules", "show", "no-such-key", "--database-url", db_url)
    assert missing.returncode == 2 and "no-such-key" in missing.stderr
    assert tockwork("scheduler", "--lookahead", "soon").returncode == 2
    assert tockwork("schedules", "sync", str(tmp_path / "nope.toml")).returncode == 2
