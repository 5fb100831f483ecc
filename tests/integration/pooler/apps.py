"""Handlers for the worker processes of the pooler tests (``--app ...pooler.apps:handlers``).

Each handler records its run in the ``runs`` table (which the test creates) on a connection of the
handler's thread, kept for the life of the process and opened with ``jobs.connect`` on
``$DATABASE_URL``: the pooler URL the worker was given, in the pooler mode the worker exported
(``TOCKWORK_POOLER``). A handler connection that prepared its statements would collide with the
worker's own on the pooler's one server connection.
"""

from __future__ import annotations

import os
import threading
from typing import Any

import psycopg

import jobs

_local = threading.local()


def _connection() -> psycopg.Connection[Any]:
    conn: psycopg.Connection[Any] | None = getattr(_local, "conn", None)
    if conn is None or conn.closed:
        conn = jobs.connect(os.environ["DATABASE_URL"], autocommit=True)
        _local.conn = conn
    return conn


def tick(job: jobs.Job) -> None:
    _connection().execute("INSERT INTO runs (job_id) VALUES (%s)", (job.id,))


# Jobs the test enqueues, the scheduler enqueues, and the relay projects (outbox apps).
handlers = {"tick": tick, "scheduled": tick, "send_confirmation": tick}
