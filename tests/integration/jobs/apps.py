"""Handlers for the worker processes the tests start (``--app ...jobs.apps:handlers``).

Each handler records that it started in the ``runs`` table (which the test creates), on its
own autocommit connection to ``$TOCKWORK_TEST_DB``, so a test can wait for "the handler is
running" as an event.
"""

from __future__ import annotations

import os
import time

import psycopg

from jobs import Job


def _record(job: Job) -> None:
    with psycopg.connect(os.environ["TOCKWORK_TEST_DB"], autocommit=True) as c:
        c.execute("INSERT INTO runs (job_id, attempt) VALUES (%s, %s)", (job.id, job.attempt))


def hang_first_attempt(job: Job) -> None:
    """Records the run; the first attempt then hangs (the test kills or stops the worker)."""
    _record(job)
    if job.attempt == 1:
        time.sleep(120)


def quick(job: Job) -> None:
    _record(job)


handlers = {"hang": hang_first_attempt, "quick": quick}
