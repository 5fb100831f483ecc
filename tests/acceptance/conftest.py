"""Acceptance-test plumbing: the generated suites record how many cases they ran, and the
terminal summary prints the counts (so a run shows that the table did not shrink)."""

from __future__ import annotations

import pytest

# suite name -> number of cases run (filled by the tests)
COUNTS: dict[str, int] = {}


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    for name, count in sorted(COUNTS.items()):
        terminalreporter.write_line(f"{name}: {count} cases")
