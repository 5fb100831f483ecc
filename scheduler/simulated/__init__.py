"""The simulated push provider: a real pipeline's last hop, recorded instead of sent.

:class:`SimulatedPush` records each delivery in the ``simulated_pushes`` table, keyed by the
job's effect key (a retried job never notifies twice), and can be told to fail transiently, to
rate-limit with a Retry-After, or to reject tokens, so a reminder pipeline can be tested end to
end without a live provider.

The table belongs to this opt-in migration component (``scheduler.simulated``), not to the
scheduler's core schema: a production database gets it only when something uses the provider
(:func:`install`, which ``scheduler.reminders.simulated_app`` calls, or ``tockwork migrate
--with simulated``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection
from datetime import datetime, timedelta
from functools import cache
from typing import Any, LiteralString

import psycopg

import jobs
from jobs import Job, effects, migrate
from jobs.queries import load
from scheduler.errors import InvalidSchedule
from scheduler.planner import schedule_meta

# The migration component's name (its package): ``sql/migrations`` and ``sql/schema.sql``.
COMPONENT = "scheduler.simulated"


def query(name: str) -> LiteralString:
    return load(COMPONENT)[name]


@cache
def _installed(url: str) -> bool:
    with psycopg.connect(url) as conn:
        migrate(conn, (COMPONENT,))
    return True


def install(url: str) -> None:
    """Apply this component's migrations to the database at ``url`` (once per process)."""
    _installed(url)


def _fraction(*parts: object) -> float:
    digest = hashlib.blake2b(":".join(map(str, parts)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64


class SimulatedPush:
    """A push provider that records deliveries in ``simulated_pushes`` instead of sending.

    Failures are deterministic per (job, attempt), so a run is reproducible: ``transient_rate``
    of attempts raise :class:`jobs.TransientError`, ``rate_limit_rate`` raise
    :class:`jobs.RateLimited` with ``retry_after``, and subjects in ``rejected_subjects`` get
    :class:`jobs.PermanentError` (a dead device token).
    """

    def __init__(
        self,
        *,
        transient_rate: float = 0.0,
        rate_limit_rate: float = 0.0,
        retry_after: timedelta = timedelta(seconds=1),
        rejected_subjects: Collection[str] = (),
        seed: int = 0,
    ) -> None:
        for name, rate in (
            ("transient_rate", transient_rate),
            ("rate_limit_rate", rate_limit_rate),
        ):
            if not 0.0 <= rate <= 1.0:
                raise InvalidSchedule(name, rate, "must be from 0 to 1")
        self.transient_rate = transient_rate
        self.rate_limit_rate = rate_limit_rate
        self.retry_after = retry_after
        self.rejected_subjects = frozenset(rejected_subjects)
        self.seed = seed

    def send(
        self, conn: psycopg.Connection[Any], job: Job, *, subject: str | None, message: str
    ) -> bool:
        """Deliver once: returns False if this job's push was already delivered.

        Runs in the caller's transaction; the delivery row and its effect record commit together.
        """
        if subject is not None and subject in self.rejected_subjects:
            raise jobs.PermanentError(f"device token of {subject} rejected", code="bad_token")
        draw = _fraction(self.seed, job.id, job.attempt)
        if draw < self.transient_rate:
            raise jobs.TransientError("simulated provider timeout", code="provider_timeout")
        if draw < self.transient_rate + self.rate_limit_rate:
            raise jobs.RateLimited(self.retry_after, "simulated provider: 429 Retry-After")
        key = effects.effect_key(job, "push")
        if not effects.record_once(conn, key, job_id=job.id):
            return False
        meta = schedule_meta(job) or {}
        conn.execute(
            query("simulated_push_insert"),
            {
                "effect_key": key,
                "job_id": job.id,
                "schedule_id": meta.get("id"),
                "occurrence_key": meta.get("occurrence"),
                "occurrence_at": datetime.fromisoformat(meta["at"]) if "at" in meta else None,
                "subject": subject,
                "message": message,
                "attempt": job.attempt,
            },
        )
        return True


__all__ = ["COMPONENT", "SimulatedPush", "install"]
