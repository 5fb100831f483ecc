"""Logs an operator can read (issue 13 §4): with --log-json every line on stderr is one JSON
object, psycopg's own warnings included; its "error ignored" noise is demoted to debug."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator

import pytest

from jobs import logs

NAMES = ("tockwork", "psycopg")


@pytest.fixture
def restore_loggers() -> Iterator[None]:
    saved = {
        n: (list(logging.getLogger(n).handlers), logging.getLogger(n).level,
            logging.getLogger(n).propagate)
        for n in NAMES
    }  # fmt: skip
    yield
    for n, (handlers, level, propagate) in saved.items():
        logger = logging.getLogger(n)
        logger.handlers[:] = handlers
        logger.setLevel(level)
        logger.propagate = propagate


def lines(err: str) -> list[dict[str, object]]:
    return [json.loads(line) for line in err.splitlines()]


@pytest.mark.usefixtures("restore_loggers")
def test_psycopg_warnings_are_json_lines_and_ignored_errors_are_debug(
    capsys: pytest.CaptureFixture[str],
) -> None:
    logs.configure("info", json_lines=True)
    # What psycopg logs when a pipeline cannot be closed on a connection already lost.
    logging.getLogger("psycopg").warning(
        "error ignored terminating %r: %s", "<psycopg.Pipeline [BAD]>", "server closed\nline 2"
    )
    logging.getLogger("psycopg.transaction").warning("error ignored in rollback of %s: %s", 1, 2)
    logging.getLogger("psycopg").warning("a warning worth reading")
    logging.getLogger("tockwork.worker").warning("worker w: something")
    got = lines(capsys.readouterr().err)
    assert [(g["logger"], g["level"], g["message"]) for g in got] == [
        ("psycopg", "warning", "a warning worth reading"),
        ("tockwork.worker", "warning", "worker w: something"),
    ]


@pytest.mark.usefixtures("restore_loggers")
def test_at_debug_the_ignored_errors_show_as_debug_lines(
    capsys: pytest.CaptureFixture[str],
) -> None:
    logs.configure("debug", json_lines=True)
    logging.getLogger("psycopg").warning("error ignored terminating %r: %s", "p", "gone")
    (line,) = lines(capsys.readouterr().err)
    assert line["level"] == "debug"
    assert line["message"] == "error ignored terminating 'p': gone"


def test_the_relay_stop_line_is_for_humans() -> None:
    """Issue 26: the relay's stop log printed ``RelayStats(batches=0, ...)``, a Python repr."""
    from jobs.relay import RelayStats

    assert str(RelayStats(batches=2, claimed=10, jobs_created=9, dead=1)) == (
        "batches 2, claimed 10, processed 0, jobs created 9, retried 0, dead 1, fenced 0"
    )
