"""What the long-running services (worker, relay, scheduler) share."""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType


@contextmanager
def stop_on_signals(
    stop: Callable[[], None], name: str, log: logging.Logger, *, install: bool = True
) -> Iterator[None]:
    """Call ``stop`` on SIGTERM or SIGINT while the block runs (main thread only).

    The previous handlers come back when the block ends. Outside the main thread (tests, an
    application's own thread) nothing is installed: the caller stops the service itself.
    """
    if not install or threading.current_thread() is not threading.main_thread():
        yield
        return

    def handle(signum: int, _frame: FrameType | None) -> None:
        log.info("%s: %s received, stopping", name, signal.Signals(signum).name)
        stop()

    previous = {s: signal.signal(s, handle) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
