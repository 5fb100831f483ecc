"""A batch handler for the worker processes the batch tests start
(``--app tests.integration.jobs.batch_apps:handlers``).

``deliver`` records each run in ``runs`` (on its own autocommit connection to
``$TOCKWORK_TEST_DB``, so a test can wait for it as an event) and writes one ``deliveries`` row
per job in the completion transaction (both tables are created by the test). A job whose
payload says ``{"hang": "handler"}`` hangs its first attempt in the handler;
``{"hang": "completion"}`` hangs it inside the completion transaction, after writing its
deliveries and before the commit. The test then kills the worker.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from typing import Any

import psycopg

from jobs import Batch, Job, batch_handler


def _record(done: Sequence[Job], stage: str) -> None:
    with psycopg.connect(os.environ["TOCKWORK_TEST_DB"], autocommit=True) as c:
        c.execute(
            "INSERT INTO runs (job_id, attempt, stage)"
            " SELECT id, attempt, %s FROM unnest(%s::bigint[], %s::int[]) AS t(id, attempt)",
            (stage, [j.id for j in done], [j.attempt for j in done]),
        )


def _hangs(done: Sequence[Job], stage: str) -> bool:
    return any(j.attempt == 1 and j.payload.get("hang") == stage for j in done)


def _write(conn: psycopg.Connection[Any], done: Sequence[Job]) -> None:
    conn.execute(
        "INSERT INTO deliveries (job_id, attempt) SELECT * FROM unnest(%s::bigint[], %s::int[])",
        ([j.id for j in done], [j.attempt for j in done]),
    )
    if _hangs(done, "completion"):
        _record(done, "completion")
        time.sleep(120)


@batch_handler
def deliver(batch: Batch) -> None:
    _record(batch.jobs, "handler")
    if _hangs(batch.jobs, "handler"):
        time.sleep(120)
    batch.in_completion(_write)


handlers = {"deliver": deliver}
