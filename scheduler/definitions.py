"""Definitions as code: maintenance cron definitions declared in TOML or Python, synced by key.

A file holds ``[[schedule]]`` tables::

    [[schedule]]
    key = "retention"
    rule = "cron:0 3 * * *"
    zone = "UTC"
    job_type = "tockwork.retention"
    queue = "maintenance"

:func:`sync` makes the database match: creates definitions whose key is new, updates those that
changed, and deletes definitions that a previous sync created and the file no longer names
(schedules created through the API are never touched). It is idempotent: syncing the same file
twice changes nothing the second time.
"""

from __future__ import annotations

import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import psycopg
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from scheduler.errors import InvalidSchedule
from scheduler.schedules import (
    create_schedule,
    delete,
    list_schedules,
    update_schedule,
)
from timezones import parse_rule, rule_to_json


class Definition(BaseModel):
    """One named definition; the fields of :func:`scheduler.create_schedule`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    key: str = Field(min_length=1, max_length=200)
    rule: str | dict[str, Any]
    zone: str = "UTC"
    job_type: str
    queue: str = "maintenance"
    payload: dict[str, Any] = Field(default_factory=dict)
    jitter: float = 0
    catch_up: str = "all"
    catch_up_grace: float | None = None
    catch_up_max: int = 100
    gap: str | None = None
    fold: str | None = None


@dataclass
class SyncResult:
    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)


def load_file(path: str | Path) -> list[Definition]:
    """Read and validate a TOML file of ``[[schedule]]`` tables."""
    try:
        data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InvalidSchedule("file", str(path), "does not exist") from None
    except tomllib.TOMLDecodeError as exc:
        raise InvalidSchedule("file", str(path), f"is not valid TOML: {exc}") from None
    unknown = set(data) - {"schedule"}
    if unknown:
        raise InvalidSchedule("file", str(path), f"unknown top-level keys {sorted(unknown)}")
    return parse_definitions(data.get("schedule", []))


def parse_definitions(items: Iterable[Mapping[str, Any]]) -> list[Definition]:
    result: list[Definition] = []
    seen: set[str] = set()
    for index, item in enumerate(items):
        try:
            d = Definition.model_validate(item)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "?"
            raise InvalidSchedule(
                f"schedule[{index}].{where}", first.get("input"), first["msg"]
            ) from None
        if d.key in seen:
            raise InvalidSchedule(f"schedule[{index}].key", d.key, "appears twice")
        seen.add(d.key)
        result.append(d)
    return result


def _wanted(d: Definition) -> dict[str, Any]:
    return {
        "job_type": d.job_type,
        "rule": rule_to_json(parse_rule(d.rule)),
        "zone": d.zone,
        "queue": d.queue,
        "payload": d.payload,
        "jitter": int(d.jitter),
        "catch_up": d.catch_up,
        "catch_up_grace": None if d.catch_up_grace is None else int(d.catch_up_grace),
        "catch_up_max": d.catch_up_max,
        "gap": d.gap,
        "fold": d.fold,
    }


BUILTIN_PREFIX = "tockwork."


def sync(
    conn: psycopg.Connection[Any],
    definitions: Iterable[Definition],
    *,
    organization_id: Any = None,
    now: datetime | None = None,
    scope: str = "user",
) -> SyncResult:
    """Make the organization's synced definitions match ``definitions`` (caller's transaction).

    ``scope="user"`` (the default) manages every key except the built-in ``tockwork.`` ones;
    ``scope="builtin"`` manages only those (:mod:`scheduler.maintenance`), so a user's file never
    removes the built-in maintenance and the other way round.
    """
    if scope not in ("user", "builtin"):
        raise InvalidSchedule("scope", scope, "must be 'user' or 'builtin'")
    builtin = scope == "builtin"
    wanted = {d.key: d for d in definitions}
    for key in wanted:
        if key.startswith(BUILTIN_PREFIX) != builtin:
            reason = "is reserved for built-in definitions" if not builtin else "is not built-in"
            raise InvalidSchedule("key", key, reason)
    existing = {
        s.key: s
        for s in list_schedules(conn, organization_id=organization_id, limit=100_000)
        if s.key is not None and s.key.startswith(BUILTIN_PREFIX) == builtin
    }
    result = SyncResult()
    for key, d in wanted.items():
        try:
            want = _wanted(d)
        except ValueError as exc:
            raise InvalidSchedule(f"{key}.rule", d.rule, str(exc)) from None
        current = existing.get(key)
        if current is None:
            create_schedule(
                conn, key=key, organization_id=organization_id, source="definitions", now=now,
                **{**want, "rule": d.rule},
            )  # fmt: skip
            result.created.append(key)
            continue
        have = {
            "job_type": current.job_type,
            "rule": current.rule_json,
            "zone": current.zone,
            "queue": current.queue,
            "payload": current.payload,
            "jitter": current.jitter_seconds,
            "catch_up": str(current.catch_up),
            "catch_up_grace": current.catch_up_grace_seconds,
            "catch_up_max": current.catch_up_max,
            "gap": current.gap,
            "fold": current.fold,
        }
        changes = {k: v for k, v in want.items() if have[k] != v}
        if changes:
            update_schedule(conn, current.id, now=now, **changes)
            result.updated.append(key)
        else:
            result.unchanged.append(key)
    for key, s in existing.items():
        if key not in wanted and s.source == "definitions":
            delete(conn, s.id, now=now)
            result.deleted.append(key)
    return result
