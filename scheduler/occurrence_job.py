"""How a schedule's occurrence becomes a job: the meta in its payload and its idempotency key.

A job the tick enqueues for an occurrence carries, under :data:`SCHEDULE_PAYLOAD_KEY` of its
payload, which occurrence it is for (:class:`OccurrenceMeta`: the schedule's id, the
occurrence's key, its nominal instant, and the schedule's version when it was planned), stored
as ``{"id": 7, "occurrence": "2026-06-01T08:00", "at": "2026-06-01T06:00:00+00:00",
"version": 3}``. This module is that format's one writer (:meth:`OccurrenceMeta.into_payload`)
and one reader (:meth:`OccurrenceMeta.from_payload`): the still-due check, the skip records and
the simulated provider read it back through the reader, so the format changes in one place, and
jobs enqueued by any earlier version read the same.

The job's idempotency key, :func:`occurrence_idempotency_key` (``schedule:<id>:<occurrence
key>``), is what makes each occurrence enqueued once whatever the replicas do, and what
superseding an occurrence renames.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, fields, make_dataclass
from datetime import UTC, datetime
from functools import lru_cache
from typing import Any, Self, TypeGuard, cast

from jobs import Job

SCHEDULE_PAYLOAD_KEY = "tockwork_schedule"

# The meta's text is assembled from its fields, each encoded as json.dumps encodes it (a string
# by the json module's string encoder; an integer is its repr), compact, as the tick has always
# written it: byte for byte the same text. The tick writes thousands of these per batch:
# encoding a dict of the four cost twice what the text splice did (2.5 against 1.3 us of CPU a
# payload), the fields with the slot and instant's text cached (_middle) cost the same (1.2 us).
_string = json.JSONEncoder(ensure_ascii=False).encode
_KEY = _string(SCHEDULE_PAYLOAD_KEY) + ":"


# The occurrence keys of occurrences triggered by hand (scheduler.runs.trigger) start so.
MANUAL = "manual:"


def occurrence_idempotency_key(schedule_id: int, occurrence_key: str) -> str:
    """The idempotency key of one occurrence's job: the same in every replica, every time."""
    return f"schedule:{schedule_id}:{occurrence_key}"


@dataclass(frozen=True, slots=True)
class OccurrenceMeta:
    """Which occurrence of which schedule a job is for (module docstring)."""

    schedule_id: int
    occurrence_key: str  # the local slot, e.g. 2026-06-01T08:00
    at: datetime  # the nominal instant (before jitter or quiet hours), aware UTC
    version: int  # the schedule's version when the occurrence was planned

    @property
    def idempotency_key(self) -> str:
        """The idempotency key of this occurrence's job."""
        return occurrence_idempotency_key(self.schedule_id, self.occurrence_key)

    def json_text(self) -> str:
        """The meta as the JSON text stored under :data:`SCHEDULE_PAYLOAD_KEY`."""
        return self._text("")

    def into_payload(self, payload_text: str) -> str:
        """The job's payload: the schedule's payload (JSON object text) with this meta added.

        Spliced as text, not parsed and dumped again: the schedule's payload is JSON text
        from the database already (jsonb's canonical form, so its last character is the
        object's closing brace), and the tick writes thousands of these per batch.
        """
        base = payload_text.rstrip()[:-1].rstrip()  # the object without its closing brace
        return self._text(base + ("," if base != "{" else "") + _KEY) + "}"

    def _text(self, head: str) -> str:
        key, at = self.occurrence_key, self.at
        # An instant in UTC (the tick's always are) has one text: the encoding of the slot and
        # the instant, the same for every schedule of a herd, is looked up. Another zone's
        # instant equal to it would share the cache entry, so it is encoded afresh.
        middle = _middle(key, at) if at.tzinfo is UTC else _middle.__wrapped__(key, at)
        return (
            head
            + '{"id":'
            + int.__repr__(self.schedule_id)
            + middle
            + int.__repr__(self.version)
            + "}"
        )

    @classmethod
    def from_payload(cls, payload: Any) -> Self | None:
        """The meta of a job's payload, or None for a payload that no schedule wrote (no
        :data:`SCHEDULE_PAYLOAD_KEY`, or not a meta of this form)."""
        # type() first: a job's payload is a dict (JSON), and the ABC check costs more than
        # the rest of the read (a delivery reads every job's meta).
        if type(payload) is not dict and not isinstance(payload, Mapping):
            return None
        meta = payload.get(SCHEDULE_PAYLOAD_KEY)
        if type(meta) is not dict and not isinstance(meta, Mapping):
            return None
        get = meta.get
        schedule_id, key, at, version = get("id"), get("occurrence"), get("at"), get("version")
        # type() first, as above: JSON's integers and strings are exactly int and str (the
        # checks for a subclass, and for a bool, which is an int, follow only for the others).
        if not (type(schedule_id) is int or _integer(schedule_id)):
            return None
        if not (type(version) is int or _integer(version)):
            return None
        if not (type(key) is str or isinstance(key, str)):
            return None
        if not (type(at) is str or isinstance(at, str)):
            return None
        instant = _instant(at)
        if instant is None:
            return None
        if cls is not OccurrenceMeta:  # a subclass: its own constructor
            return cls(schedule_id, key, instant, version)
        meta_ = _WritableMeta(schedule_id, key, instant, version)
        meta_.__class__ = OccurrenceMeta
        return cast(Self, meta_)

    @classmethod
    def of(cls, job: Job) -> Self | None:
        """The meta of ``job``'s payload (:meth:`from_payload`)."""
        return cls.from_payload(job.payload)


# A meta read from a payload is built as a _WritableMeta, then takes OccurrenceMeta's class
# (as jobs.store builds a claimed Job): a frozen dataclass's __init__ writes each field through
# object.__setattr__ (0.58 us for these four, against 0.23), and a delivery reads every job's
# meta. Same slots in the same order, no __dict__: CPython allows the change of class (another
# layout would raise TypeError at the first read); the result is an ordinary frozen meta.
_WritableMeta: Any = make_dataclass(
    "_WritableMeta",
    [(f.name, f.type) for f in fields(OccurrenceMeta)],
    slots=True,
    eq=False,
    repr=False,
    match_args=False,
)


@lru_cache(maxsize=4096)
def _middle(occurrence_key: str, at: datetime) -> str:
    """The meta's text between the id and the version: one slot and instant for every
    schedule of a herd, encoded once."""
    return (
        ',"occurrence":'
        + _string(occurrence_key)
        + ',"at":'
        + _string(at.isoformat())
        + ',"version":'
    )


@lru_cache(maxsize=4096)
def _instant(text: str) -> datetime | None:
    """The aware instant of a meta's ``at`` text (None: not one); the jobs of a herd share a
    few, so each is parsed once."""
    try:
        instant = datetime.fromisoformat(text)
    except ValueError:
        return None
    return instant if instant.tzinfo is not None else None


def _integer(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def schedule_meta(job: Job) -> Mapping[str, Any] | None:
    """The meta the scheduler put in a job's payload, as the JSON mapping it is stored as, or
    None (kept for applications that read it so; :meth:`OccurrenceMeta.of` is the typed
    reader)."""
    payload = job.payload
    if isinstance(payload, Mapping):
        meta = payload.get(SCHEDULE_PAYLOAD_KEY)
        if isinstance(meta, Mapping):
            return meta
    return None
