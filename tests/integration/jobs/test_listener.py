"""The listener logs an outage once, however often its connection is cut (issue 13 §4): a
chaos run that kept terminating LISTEN backends for a minute logged 55 warnings."""

from __future__ import annotations

import logging
import queue
from collections.abc import Iterator

import pytest

from jobs.listener import Listener
from tests.faultproxy import FaultProxy, sql_contains


@pytest.fixture
def proxy(db_url: str) -> Iterator[FaultProxy]:
    with FaultProxy(db_url) as p:
        yield p


def expect(events: queue.Queue[str], wanted: str) -> None:
    """Wait for the listener's next event (a test signal, no polling) and check it."""
    assert events.get(timeout=10) == wanted


def logged(caplog: pytest.LogCaptureFixture, text: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if text in r.getMessage()]


def test_a_flapping_connection_is_one_outage(
    proxy: FaultProxy, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="tockwork")
    events: queue.Queue[str] = queue.Queue()
    listener = Listener(
        proxy.url, lambda _p: None, retry_every=0.001, stable_after=3600, on_event=events.put
    )
    listener.start()
    try:
        for _ in range(5):
            expect(events, "listening")
            assert proxy.cut_all() == 1  # the backend is gone right after each reconnect
            expect(events, "lost")
        expect(events, "listening")
    finally:
        listener.stop()
    assert listener.failures == 5
    assert len(logged(caplog, "unavailable")) == 1
    assert logged(caplog, "restored") == []  # never stable for long: the outage goes on


def test_restored_is_logged_once_when_listen_stays_up(
    proxy: FaultProxy, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="tockwork")
    proxy.drop_reply(sql_contains("LISTEN"), mode="before", times=3)
    events: queue.Queue[str] = queue.Queue()
    listener = Listener(
        proxy.url, lambda _p: None, retry_every=0.001, stable_after=0.05, on_event=events.put
    )
    listener.start()
    try:
        for _ in range(3):
            expect(events, "lost")
        expect(events, "listening")
        expect(events, "restored")
    finally:
        listener.stop()
    (warning,) = logged(caplog, "unavailable")
    assert "\n" not in warning
    assert logged(caplog, "restored") == [
        "LISTEN tockwork_jobs restored after 3 failure(s); wake-ups resume"
    ]
