"""Projections for the relay processes the tests start (``--app ...outbox.apps:projections``).

``order.blocking`` records that its projection started in the ``reached`` table (which the test
creates), on its own autocommit connection to ``$TOCKWORK_TEST_DB``, so a test can wait for
"the relay is inside this batch" as an event; on its first attempt it then hangs until killed.
"""

from __future__ import annotations

import os
import time

import psycopg

from jobs import JobSpec
from jobs.outbox import Event, Projections

projections = Projections()


@projections.on("order.placed", "order.blocking", name="confirm")
def confirm(event: Event) -> list[JobSpec]:
    return [
        JobSpec(
            "send_confirmation",
            {"event": str(event.id), "aggregate": event.aggregate_id, "n": event.payload["n"]},
        )
    ]


@projections.on("order.blocking", name="block")
def block(event: Event) -> list[JobSpec]:
    with psycopg.connect(os.environ["TOCKWORK_TEST_DB"], autocommit=True) as c:
        c.execute(
            "INSERT INTO reached (event_id, attempt) VALUES (%s, %s)", (event.id, event.attempt)
        )
    if event.attempt == 1:
        time.sleep(120)  # the test kills the relay here
    return []


@projections.on("order.poison", name="poison")
def poison(event: Event) -> list[JobSpec]:
    raise ValueError("cannot project order " + event.aggregate_id + " " + "x" * 5000)


not_projections = {"a": 1}
