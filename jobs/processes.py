"""The registry of running processes: who is serving, where, since when, with what in hand.

Every long-running service (worker, scheduler, relay; :class:`jobs.service.Service`) and the
dashboard keeps one row of the ``processes`` table: kind, name, host, pid, version, the queues
it serves with their concurrency (a worker's), when it started, when it was last seen and the
jobs it holds. The row is written by the process's heartbeat, one upsert every
``beat_every`` (a worker's lease heartbeat interval, 10 s for the others), never per job, so
registering costs nothing on the claim path; it is deleted when the process stops.

A row is *live* while ``last_seen_at + stale_after`` (three heartbeats) is in the future. A
process that dies without deleting its row (SIGKILL, a lost host) shows as stale, and its row is
pruned 15 minutes after that by the next heartbeat of any process. Time follows the service's
clock: SQL takes ``now`` (None: the database's clock).

:func:`list_processes` (and its ``_async`` twin) reads the registry; :func:`queue_workers`
counts the live workers of each queue (the dashboard's overview flags a queue with ready jobs
and none).
"""

from __future__ import annotations

import functools
import importlib.metadata
import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from psycopg.types.json import Jsonb

from jobs import validate
from jobs.errors import InvalidJob
from jobs.queries import query
from jobs.steps import Steps, forms

#: How often a process that has no heartbeat of its own (scheduler, relay, dashboard) beats.
DEFAULT_BEAT = timedelta(seconds=10)
#: A process not seen for this many of its heartbeats is stale (presumed gone).
STALE_BEATS = 3
KINDS = ("worker", "scheduler", "relay", "dashboard")


@functools.cache  # read once: a distribution lookup costs more than the upsert it labels
def version() -> str | None:
    """The installed tockwork's version, None when run from a source tree not installed."""
    try:
        return importlib.metadata.version("tockwork")
    except importlib.metadata.PackageNotFoundError:  # pragma: no cover - run from a source tree
        return None


@dataclass(frozen=True, slots=True)
class ProcessFacts:
    """What a process says of itself at each heartbeat (one writer: the process's beat)."""

    kind: str
    name: str
    queues: Mapping[str, int] = field(default_factory=dict)
    jobs_in_hand: int = 0
    host: str = field(default_factory=socket.gethostname)
    pid: int = field(default_factory=os.getpid)
    version: str | None = field(default_factory=version)


@dataclass(frozen=True, slots=True)
class ProcessInfo:
    """One row of the registry, as :func:`list_processes` reads it."""

    kind: str
    name: str
    host: str
    pid: int
    version: str | None
    queues: dict[str, int]
    jobs_in_hand: int
    started_at: datetime
    last_seen_at: datetime
    live: bool
    seen_age: float  # seconds since last seen

    def as_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "name": self.name,
            "host": self.host,
            "pid": self.pid,
            "version": self.version,
            "queues": self.queues,
            "jobs_in_hand": self.jobs_in_hand,
            "started_at": self.started_at.isoformat(),
            "last_seen_at": self.last_seen_at.isoformat(),
            "live": self.live,
            "seen_age_s": round(self.seen_age, 3),
        }


@dataclass(frozen=True, slots=True)
class QueueWorkers:
    """The live workers serving one queue and their summed concurrency."""

    queue: str
    workers: int
    concurrency: int


def _kind(kind: str | None) -> str | None:
    if kind is not None and kind not in KINDS:
        raise InvalidJob("kind", kind, f"must be one of {', '.join(KINDS)}")
    return kind


def _beat(
    facts: ProcessFacts, *, beat_every: timedelta = DEFAULT_BEAT, now: datetime | None = None
) -> Steps[None]:
    """Record one heartbeat of a process (insert or refresh its row; prune long-stale rows)."""
    if not isinstance(beat_every, timedelta) or beat_every <= timedelta(0):
        raise InvalidJob("beat_every", beat_every, "must be a positive timedelta")
    params = {
        "kind": facts.kind,
        "name": facts.name,
        "host": facts.host,
        "pid": facts.pid,
        "version": facts.version,
        "queues": Jsonb(dict(facts.queues)),
        "jobs_in_hand": facts.jobs_in_hand,
        "stale_after": beat_every * STALE_BEATS,
        "now": validate.aware(now, "now"),
    }
    yield query("process_beat"), params


def _forget(*, kind: str, name: str) -> Steps[None]:
    """Delete a process's row (it is stopping)."""
    yield query("process_forget"), {"kind": kind, "name": name}


def _list_processes(
    *, kind: str | None = None, include_stale: bool = False, now: datetime | None = None
) -> Steps[list[ProcessInfo]]:
    """The registry: live processes (and, with ``include_stale``, those not seen for three
    heartbeats and not yet pruned), live first, then by kind and name; ``kind`` filters
    (worker, scheduler, relay, dashboard)."""
    params = {
        "kind": _kind(kind),
        "include_stale": bool(include_stale),
        "now": validate.aware(now, "now"),
    }
    rows = yield query("process_list"), params
    return [
        ProcessInfo(k, n, h, pid, v, dict(q), held, started, seen, live, age)
        for k, n, h, pid, v, q, held, started, seen, live, age in rows
    ]


def _queue_workers(*, now: datetime | None = None) -> Steps[list[QueueWorkers]]:
    """Per queue that a live worker serves: the live workers and their summed concurrency."""
    rows = yield query("process_queue_workers"), {"now": validate.aware(now, "now")}
    return [QueueWorkers(q, n, c) for q, n, c in rows]


beat, beat_async = forms(_beat, "beat")
forget, forget_async = forms(_forget, "forget")
list_processes, list_processes_async = forms(_list_processes, "list_processes")
queue_workers, queue_workers_async = forms(_queue_workers, "queue_workers")
