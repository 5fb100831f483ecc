"""The dashboard's connections: a few kept open, each bounded by a statement timeout.

Requests run in Starlette's thread pool; each takes a connection for its duration and gives it
back. A connection that failed or was left inside a transaction is closed, never reused.
"""

from __future__ import annotations

import logging
import queue
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg.pq import TransactionStatus

from jobs import connect
from jobs.primary import PrimaryWatch
from scheduler.queries import query

log = logging.getLogger("tockwork.dashboard")

STATEMENT_TIMEOUT = "5s"


class ConnectionPool:
    """Up to ``size`` idle autocommit connections to ``url``, opened on demand."""

    def __init__(self, url: str, *, size: int = 4, timeout: str = STATEMENT_TIMEOUT) -> None:
        self.url = url
        self.timeout = timeout
        self._idle: queue.LifoQueue[psycopg.Connection[Any]] = queue.LifoQueue(maxsize=size)
        # Which primary the connections reach and its replication mode (jobs/primary.py): the
        # pages say when acknowledged work can be lost at failover; a change is logged once.
        self.primary = PrimaryWatch("dashboard", log)

    def _open(self) -> psycopg.Connection[Any]:
        conn = connect(self.url, autocommit=True, connect_timeout=10)
        try:
            self.primary.observe(conn)
            conn.execute(query("dashboard_session_setup"), {"timeout": self.timeout})
        except BaseException:
            conn.close()
            raise
        return conn

    @contextmanager
    def connection(self) -> Iterator[psycopg.Connection[Any]]:
        try:
            conn = self._idle.get_nowait()
        except queue.Empty:
            conn = self._open()
        reuse = False
        try:
            yield conn
            reuse = conn.info.transaction_status == TransactionStatus.IDLE and not conn.closed
        finally:
            if reuse:
                try:
                    self._idle.put_nowait(conn)
                except queue.Full:
                    conn.close()
            else:
                conn.close()

    def close(self) -> None:
        while True:
            try:
                self._idle.get_nowait().close()
            except queue.Empty:
                return
