"""LISTEN on a dedicated connection: a wake-up signal, never the truth.

A notification only says "work may exist on queue Q"; the worker's poll always runs as well, so
a lost notification adds latency and never loses work. When LISTEN is unavailable (for example
behind PgBouncer in transaction mode, or the connection drops), the listener says so once,
the worker keeps polling, and the listener reconnects in the background.

**One warning per outage.** An outage starts at the first failure and ends once LISTEN has
stayed up for ``stable_after`` seconds (by default ``retry_every``): a connection that is
terminated again right after each reconnect (a flapping network, a script killing LISTEN
backends) is one outage, logged once when it starts and once ("restored", with the failures
counted) when it ends, never once per reconnect. Wake-ups resume at each reconnect regardless.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg import sql

if TYPE_CHECKING:
    from jobs.metrics import Metrics

CHANNEL = "tockwork_jobs"

POLICIES_CHANGED = "~policies"
"""The payload on :data:`CHANNEL` that says a queue policy or a rate limit was set or cleared
(jobs.policy, jobs.limits): a worker re-reads which claim statements to use at once. No queue
name starts with '~', so it never reads as "work may exist on queue Q". The reconnect wake-up
("*") means the same, since notifications may have been lost while not listening."""

log = logging.getLogger("tockwork.listener")


class Listener:
    def __init__(
        self,
        conninfo: str,
        on_wake: Callable[[str], None],
        *,
        channel: str = CHANNEL,
        retry_every: float = 5.0,
        connect_kwargs: dict[str, Any] | None = None,
        metrics: Metrics | None = None,
        stable_after: float | None = None,
        on_event: Callable[[str], None] | None = None,
    ) -> None:
        self.conninfo = conninfo
        self.on_wake = on_wake
        self.channel = channel
        self.retry_every = retry_every
        self.connect_kwargs = connect_kwargs or {}
        self.metrics = metrics
        self.stable_after = retry_every if stable_after is None else stable_after
        # A test signal (None in production): called with "listening", "lost" or "restored".
        self.on_event = on_event
        self.alive = threading.Event()  # set while LISTEN is active
        self.wakeups = 0
        self.failures = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._conn: psycopg.Connection[Any] | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="tockwork-listener", daemon=True)
        self._thread.start()

    def wait_ready(self, timeout: float) -> bool:
        return self.alive.wait(timeout)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=3.0)

    def _signal(self, event: str) -> None:
        if self.on_event is not None:
            self.on_event(event)

    def _run(self) -> None:
        outage = 0  # failures in the current outage; 0 when none is under way
        while not self._stop.is_set():
            try:
                with psycopg.connect(self.conninfo, autocommit=True, **self.connect_kwargs) as conn:
                    conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(self.channel)))
                    self.alive.set()
                    if self.metrics is not None:
                        self.metrics.listening.set(1)
                    up_since = time.monotonic()
                    self._signal("listening")
                    # Anything committed while we were not listening is found by the poll.
                    self.on_wake("*")
                    while not self._stop.is_set():
                        if outage and time.monotonic() - up_since >= self.stable_after:
                            log.info(
                                "LISTEN %s restored after %d failure(s); wake-ups resume",
                                self.channel,
                                outage,
                            )
                            outage = 0
                            self._signal("restored")
                        for note in conn.notifies(timeout=0.1):
                            self.wakeups += 1
                            if self.metrics is not None:
                                self.metrics.wakeups.inc()
                            self.on_wake(note.payload)
            except psycopg.Error as exc:
                self.alive.clear()
                self.failures += 1
                if self.metrics is not None:
                    self.metrics.listening.set(0)
                    self.metrics.wakeup_failures.inc()
                outage += 1
                if outage == 1:
                    log.warning(
                        "LISTEN %s unavailable (%s); running poll-only until it returns",
                        self.channel,
                        _first_line(exc),
                    )
                self._signal("lost")
                self._stop.wait(self.retry_every)
        self.alive.clear()
        if self.metrics is not None:
            self.metrics.listening.set(0)


def _first_line(exc: BaseException) -> str:
    """libpq's messages run over several lines ("This probably means..."): a log line is one."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
