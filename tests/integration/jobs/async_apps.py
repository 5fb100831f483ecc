"""Async handlers for the worker process the async tests start
(``--app tests.integration.jobs.async_apps:HANDLERS``).

``ping`` is an ``async def`` single handler, ``pings`` a batch handler wrapping an ``async def``,
``sync_ping`` a plain function: one worker mixes them. Each records its job in the ``runs``
table (created by the test) in the completion transaction, so a row exists exactly when the
job's outcome committed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import psycopg

import jobs
from jobs import Batch, Job, batch_handler
from jobs.batch import BatchEffect


def _record(kind: str) -> BatchEffect:
    def write(conn: psycopg.Connection[Any], done: Sequence[Job]) -> None:
        conn.execute(
            "INSERT INTO runs (job_id, kind) SELECT unnest(%s::bigint[]), %s",
            ([j.id for j in done], kind),
        )

    return write


async def ping(job: Job) -> None:
    await asyncio.sleep(0)  # yields to the loop: a real coroutine
    jobs.in_completion(lambda conn: _record("async")(conn, [job]))


@batch_handler(max_batch=50)
async def pings(batch: Batch) -> None:
    await asyncio.sleep(0)
    batch.in_completion(_record("async_batch"))


def sync_ping(job: Job) -> None:
    jobs.in_completion(lambda conn: _record("sync")(conn, [job]))


HANDLERS: dict[str, Any] = {"ping": ping, "pings": pings, "sync_ping": sync_ping}
