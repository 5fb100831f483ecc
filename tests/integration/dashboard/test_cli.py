"""``tockwork dashboard`` in a subprocess: it serves the app, and refuses without a token."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.integration.dashboard.conftest import TOKEN

ROOT = Path(__file__).resolve().parents[3]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def test_the_command_serves_the_dashboard_with_the_token(db_url: str) -> None:
    port = _free_port()
    env = {**os.environ, "TOCKWORK_DASHBOARD_TOKEN": TOKEN}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "scheduler.cli",
            "dashboard",
            "--database-url",
            db_url,
            "--port",
            str(port),
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()  # waits for the server to listen (pytest-timeout bounds it)
        assert line.strip() == f"tockwork dashboard listening on http://127.0.0.1:{port}/", line + (
            proc.stderr.read() if proc.stderr and proc.poll() is not None else ""
        )
        url = f"http://127.0.0.1:{port}/api/queues"
        request = urllib.request.Request(url, headers={"Authorization": f"Bearer {TOKEN}"})
        with urllib.request.urlopen(request, timeout=30) as response:
            assert json.loads(response.read()) == []
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(url, timeout=30)
        assert refused.value.code == 401
        refused.value.close()
    finally:
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=30)
    assert proc.returncode == 0  # Ctrl-C stops it cleanly, as every tockwork service
