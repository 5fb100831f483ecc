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

The same file may declare global rate limits (:mod:`jobs.limits`) in ``[[limit]]`` tables::

    [[limit]]
    job_type = "send_push"   # or queue = "notifications"
    per_second = 500
    per_minute = 30000       # optional
    pause_on_rate_limited = true   # optional, the default

:func:`load_limits` reads them (:func:`load_file` checks them too, so a bad limit fails the
file before anything is written) and ``sync(..., limits=...)`` syncs them the same way: set
when new or changed, cleared when a previous sync set them and the file no longer does.

A table is a :class:`Definition`: a :class:`scheduler.spec.ScheduleSpec` (the fields and checks
of the API, declared once) restricted to what a definition may set. Loading checks everything,
so a bad file fails before anything is written. An error names the entry by position when its
shape is wrong (a missing, unknown or not-allowed field, or a bad key: ``schedule[0].job_type``)
and by key when a check refuses a value (``retention.rule``).
"""

from __future__ import annotations

import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import psycopg
from pydantic import ValidationError, model_validator

from jobs import InvalidInput, RateLimit
from jobs.limits import LimitSync, sync_limits
from scheduler.errors import InvalidSchedule
from scheduler.model import Schedule
from scheduler.schedules import (
    create_schedule,
    delete,
    list_schedules,
    update_schedule,
)
from scheduler.spec import ScheduleSpec, check_key, first_error

# What a definition gets for the fields it does not set, where that differs from the API's.
DEFAULTS: dict[str, Any] = {"zone": "UTC", "queue": "maintenance"}


def _named_key(value: Any) -> str:
    key = check_key(value)
    if key is None:
        raise InvalidSchedule("key", value, "Field required")
    return key


class Definition(ScheduleSpec):
    """One named definition: the :class:`ScheduleSpec` fields a definition may set.

    The ``key`` is required; ``zone`` defaults to ``UTC``, ``queue`` to ``maintenance`` and
    ``catch_up`` to ``all`` (the spec's default for a named schedule). The fields whose
    :class:`~scheduler.spec.Setting` has ``definition=False`` (``subject``, ``quiet_hours``...)
    are refused like unknown ones.
    """

    # Required here (a definition is known by its key); otherwise the spec's key.
    key: Annotated[str, replace(ScheduleSpec.settings()["key"], check=_named_key)]

    if TYPE_CHECKING:

        def __init__(self, /, **data: Any) -> None: ...  # as ScheduleSpec's

    @model_validator(mode="before")
    @classmethod
    def _as_definition(cls, data: Any) -> Any:
        if not isinstance(data, Mapping):
            return data
        settings = cls.settings()
        for name, value in data.items():
            if name in settings and not settings[name].definition:
                raise InvalidSchedule(name, value, "Extra inputs are not permitted")
        return {**DEFAULTS, **data}

    @classmethod
    def synced(cls) -> frozenset[str]:
        """The fields :func:`sync` compares and updates (settable here and by an update)."""
        return frozenset(n for n, s in cls.settings().items() if s.definition and s.update)


@dataclass
class SyncResult:
    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    limits: LimitSync | None = None  # when sync was given limits


# A definitions file larger than this is refused before it is read.
MAX_FILE_BYTES = 4 * 1024 * 1024


def _all_schedules(conn: psycopg.Connection[Any], organization_id: Any) -> Iterable[Schedule]:
    """Every schedule of the organization, page by page (no cap on how many)."""
    after: int | None = None
    while True:
        page = list_schedules(conn, organization_id=organization_id, limit=10_000, after=after)
        yield from page
        if len(page) < 10_000:
            return
        after = page[-1].id


def load_file(path: str | Path) -> list[Definition]:
    """Read and validate a TOML file of ``[[schedule]]`` tables (and its ``[[limit]]`` ones)."""
    data = _read(path)
    tables = data.get("schedule", [])
    if not isinstance(tables, list):
        raise InvalidSchedule(
            "schedule", tables, "must be an array of tables ([[schedule]] entries)"
        )
    parse_limits(data.get("limit", []))
    return parse_definitions(tables)


def load_limits(path: str | Path) -> list[RateLimit]:
    """Read and validate the ``[[limit]]`` tables of a definitions file (none: ``[]``)."""
    return parse_limits(_read(path).get("limit", []))


LIMIT_FIELDS = frozenset({"queue", "job_type", "per_second", "per_minute", "pause_on_rate_limited"})


def parse_limits(items: Any) -> list[RateLimit]:
    """Validate ``[[limit]]`` tables; an error names ``limit[i].field``."""
    if not isinstance(items, list):
        raise InvalidSchedule("limit", items, "must be an array of tables ([[limit]] entries)")
    result: list[RateLimit] = []
    seen: set[tuple[str, str]] = set()
    for index, item in enumerate(items):
        if not isinstance(item, Mapping):
            raise InvalidSchedule(f"limit[{index}]", item, "must be a table")
        unknown = sorted(set(item) - LIMIT_FIELDS)
        if unknown:
            raise InvalidSchedule(f"limit[{index}].{unknown[0]}", item[unknown[0]],
                                  "Extra inputs are not permitted")  # fmt: skip
        if "per_second" not in item:
            raise InvalidSchedule(f"limit[{index}].per_second", item, "Field required")
        try:
            limit = RateLimit(**item)
        except InvalidInput as exc:
            raise InvalidSchedule(f"limit[{index}].{exc.field}", exc.value, exc.reason) from None
        if (limit.scope, limit.name) in seen:
            raise InvalidSchedule(f"limit[{index}].{limit.scope}", limit.name, "appears twice")
        seen.add((limit.scope, limit.name))
        result.append(limit)
    return result


def _read(path: str | Path) -> dict[str, Any]:
    try:
        file = Path(path)
        size = file.stat().st_size
        if size > MAX_FILE_BYTES:
            raise InvalidSchedule("file", str(path), f"is larger than {MAX_FILE_BYTES} bytes")
        data = tomllib.loads(file.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InvalidSchedule("file", str(path), "does not exist") from None
    except UnicodeDecodeError as exc:
        raise InvalidSchedule(
            "file", str(path), f"is not UTF-8 text (byte {exc.start}: {exc.reason})"
        ) from None
    except tomllib.TOMLDecodeError as exc:
        raise InvalidSchedule("file", str(path), f"is not valid TOML: {exc}") from None
    except (OSError, ValueError) as exc:  # a directory, no permission, a NUL in the path
        raise InvalidSchedule("file", str(path), f"cannot be read: {exc}") from None
    unknown = set(data) - {"schedule", "limit"}
    if unknown:
        raise InvalidSchedule("file", str(path), f"unknown top-level keys {sorted(unknown)}")
    return data


def parse_definitions(items: Iterable[Mapping[str, Any]]) -> list[Definition]:
    """Validate ``[[schedule]]`` tables; an error names ``schedule[i].field``, or ``key.field``
    for a wrong value in a definition whose key is fine."""
    if isinstance(items, str | bytes | Mapping) or not isinstance(items, Iterable):
        raise InvalidSchedule("schedule", items, "must be a list of tables")
    result: list[Definition] = []
    seen: set[str] = set()
    for index, item in enumerate(items):
        if not isinstance(item, Mapping):
            raise InvalidSchedule(f"schedule[{index}]", item, "must be a table")
        try:
            d = Definition.model_validate(item)
        except ValidationError as exc:
            raise _invalid(exc, index, item) from None
        if d.key in seen:
            raise InvalidSchedule(f"schedule[{index}].key", d.key, "appears twice")
        seen.add(d.key)
        result.append(d)
    return result


def _invalid(exc: ValidationError, index: int, item: Any) -> InvalidSchedule:
    error = first_error(exc)
    key_errors = [e for e in exc.errors() if e["loc"][:1] == ("key",)]
    if key_errors and error["type"] not in ("extra_forbidden", "missing"):
        error = key_errors[0]  # a wrong key before the values it would name
    cause = error.get("ctx", {}).get("error")
    if not isinstance(cause, InvalidSchedule):
        # The entry's shape: a missing or unknown field.
        where = ".".join(str(p) for p in error["loc"]) or "?"
        value = item if error["type"] == "missing" else error.get("input")
        return InvalidSchedule(f"schedule[{index}].{where}", value, error["msg"])
    if error["loc"] and not key_errors and isinstance(item, Mapping):
        # A value a field's check refused, in a definition known by its key.
        return InvalidSchedule(f"{item['key']}.{cause.field}", cause.value, cause.reason)
    return InvalidSchedule(f"schedule[{index}].{cause.field}", cause.value, cause.reason)


BUILTIN_PREFIX = "tockwork."


def sync(
    conn: psycopg.Connection[Any],
    definitions: Iterable[Definition],
    *,
    organization_id: Any = None,
    now: datetime | None = None,
    scope: str = "user",
    limits: Iterable[RateLimit] | None = None,
) -> SyncResult:
    """Make the organization's synced definitions match ``definitions`` (caller's transaction).

    ``scope="user"`` (the default) manages every key except the built-in ``tockwork.`` ones;
    ``scope="builtin"`` manages only those (:mod:`scheduler.maintenance`), so a user's file never
    removes the built-in maintenance and the other way round.

    ``limits`` (a file's ``[[limit]]`` tables, :func:`load_limits`): synced too, by
    :func:`jobs.limits.sync_limits`, when given (``[]`` clears the file's earlier ones).
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
        for s in _all_schedules(conn, organization_id)
        if s.key is not None and s.key.startswith(BUILTIN_PREFIX) == builtin
    }
    result = SyncResult()
    synced = Definition.synced()
    for key, d in wanted.items():
        current = existing.get(key)
        if current is None:
            create_schedule(
                conn, organization_id=organization_id, source="definitions", now=now,
                **{name: getattr(d, name) for name in synced | {"key"}},
            )  # fmt: skip
            result.created.append(key)
            continue
        have = ScheduleSpec.of(current)
        changes = {name: getattr(d, name) for name in synced if d.differs(have, name)}
        if changes:
            update_schedule(conn, current.id, now=now, **changes)
            result.updated.append(key)
        else:
            result.unchanged.append(key)
    for key, s in existing.items():
        if key not in wanted and s.source == "definitions":
            delete(conn, s.id, now=now)
            result.deleted.append(key)
    if limits is not None:
        result.limits = sync_limits(conn, limits, now=now)
    return result
