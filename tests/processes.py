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


TRACEBACK = "Traceback (most recent call last)"


class LoggedProcess:
    """A long-running process whose stdout and stderr go to files, restartable under one name.

    Each start is a new *generation*: its logs are ``DIR/NAME-GEN.out`` and ``.err``, and
    ``{gen}`` in the arguments is replaced by the generation (so a worker's ``--name`` differs
    per start). The logs of every generation stay for the end-of-run checks (tracebacks).
    """

    def __init__(
        self,
        name: str,
        argv: list[str],
        log_dir: str | os.PathLike[str],
        env: dict[str, str] | None = None,
    ) -> None:
        self.name = name
        self.argv = argv
        self.log_dir = os.fspath(log_dir)
        self.env = {**os.environ, "PYTHONPATH": ROOT, **(env or {})}
        self.generation = -1
        self.proc: subprocess.Popen[bytes] | None = None
        self.logs: list[str] = []
        self.exit_codes: list[int] = []

    @property
    def label(self) -> str:
        """This generation's name: ``NAME-GEN``."""
        return f"{self.name}-{self.generation}"

    def start(self) -> None:
        assert not self.alive(), f"{self.label} is still running"
        self.generation += 1
        base = os.path.join(self.log_dir, self.label)
        argv = [a.replace("{gen}", str(self.generation)) for a in self.argv]
        with open(base + ".out", "wb") as out, open(base + ".err", "wb") as err:
            self.proc = subprocess.Popen(argv, env=self.env, cwd=ROOT, stdout=out, stderr=err)
        self.logs += [base + ".out", base + ".err"]

    def wait_started(self, marker: str = "started", timeout: float = 90.0) -> bool:
        """Wait until this generation's logs contain ``marker`` (it has installed its signal
        handlers and runs): True, or False if it ended first. A process logs it; no timing."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for path in self.logs[-2:]:
                with open(path, errors="replace") as f:
                    if marker in f.read():
                        return True
            if not self.alive():
                return False
            time.sleep(0.05)
        raise AssertionError(f"{self.label} logged no {marker!r} within {timeout}s")

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> int:
        """SIGKILL this generation and reap it; returns its exit code (-9 unless it had ended)."""
        assert self.proc is not None
        self.proc.kill()
        return self._reaped(self.proc.wait(30))

    def terminate(self, timeout: float = 60.0) -> int:
        """SIGTERM (a graceful stop) and wait for the exit code."""
        assert self.proc is not None
        self.proc.terminate()
        try:
            return self._reaped(self.proc.wait(timeout))
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(30)
            raise AssertionError(
                f"{self.label} did not stop within {timeout}s of SIGTERM"
            ) from None

    def _reaped(self, code: int) -> int:
        self.exit_codes.append(code)
        return code

    def tail(self, chars: int = 2000) -> str:
        """The end of this generation's logs, for an assertion message."""
        parts = []
        for path in self.logs[-2:]:
            with open(path, errors="replace") as f:
                parts.append(f"{os.path.basename(path)}: {f.read()[-chars:]}")
        return "\n".join(parts)


def tockwork_argv(db_url: str, *args: str) -> list[str]:
    """The command line of ``tockwork ARGS --database-url DB`` (for :class:`LoggedProcess`)."""
    return [sys.executable, "-m", "scheduler.cli", *args, "--database-url", db_url]


def tracebacks(paths: list[str]) -> dict[str, int]:
    """Python tracebacks per log file (only files that have any)."""
    found: dict[str, int] = {}
    for path in paths:
        with open(path, errors="replace") as f:
            n = f.read().count(TRACEBACK)
        if n:
            found[path] = n
    return found
