"""Validation of what callers pass to the jobs API, before anything is written.

Every failure raises :class:`jobs.InvalidJob` naming the field and the value.
"""

from __future__ import annotations

import json
import re
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

import orjson

from jobs.errors import InvalidJob
from timezones.inputs import text_problem

# Matched with fullmatch: "$" alone would match before a final newline ("default\n").
QUEUE_PATTERN = re.compile(r"[a-z0-9][a-z0-9_.-]{0,62}")
MAX_PAYLOAD_BYTES = 1024 * 1024
MAX_IDEMPOTENCY_KEY = 512
MAX_UNIQUE_KEY = 512
# What an enqueue with a unique key does when an active job holds the key (docs/jobs.md).
ON_ACTIVE = ("keep", "replace")
MAX_JOB_TYPE = 200
PRIORITY_RANGE = (-1000, 1000)
MAX_ATTEMPTS_LIMIT = 1000
DEFAULT_MAX_ATTEMPTS = 10
# Bounds of the database's integer columns, and of a delay (whole seconds in an int4 column).
INT8_MAX = 2**63 - 1
MAX_DELAY_SECONDS = 2**31 - 1
# A payload nested deeper than this is refused (jsonb and both encoders have limits).
MAX_PAYLOAD_DEPTH = 1000
# An error code (a filter, a cancel reason): short text.
MAX_ERROR_CODE = 200
# In JSON text, an escaped NUL is "\u0000" after an even number of backslashes; after an odd
# number it is a backslash followed by the text "u0000", which jsonb stores fine.
_JSON_NUL = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")


def text(value: Any, field: str, max_chars: int) -> str:
    """A string of at most ``max_chars`` characters that PostgreSQL can store (no NUL, no lone
    surrogate); else :class:`InvalidJob` naming ``field``."""
    if not isinstance(value, str):
        raise InvalidJob(field, value, f"must be a string, got {type(value).__name__}")
    problem = text_problem(value, max_chars)
    if problem is not None:
        raise InvalidJob(field, value, problem)
    return value


def queue_name(value: Any, field: str = "queue") -> str:
    if not isinstance(value, str) or not QUEUE_PATTERN.fullmatch(value):
        raise InvalidJob(
            field,
            value,
            "a queue name is 1-63 characters of a-z, 0-9, '_', '.' or '-', "
            "starting with a letter or digit",
        )
    return value


def job_type(value: Any) -> str:
    if not isinstance(value, str) or not 1 <= len(value) <= MAX_JOB_TYPE or value != value.strip():
        raise InvalidJob(
            "job_type", value, f"must be a non-empty string of at most {MAX_JOB_TYPE} characters"
        )
    return text(value, "job_type", MAX_JOB_TYPE)


# Nesting deeper than this goes to the standard library's encoder (orjson stops at 255 levels).
_PLAIN_DEPTH = 64


def _plain(value: Any, depth: int = 0) -> bool:
    """True when ``value`` is built of exactly dict (str keys), list, tuple, str, int, bool,
    None and finite floats: the types on which orjson and ``json.dumps`` agree. Exact types,
    not subclasses (an ``IntEnum`` or an ``OrderedDict`` subclass may serialise differently).
    Scalars inside a container are tested in line: this runs once per payload."""
    t = type(value)
    if t is dict:
        if depth >= _PLAIN_DEPTH:
            return False
        for k, v in value.items():
            tv = type(v)
            if type(k) is not str:
                return False
            if tv is str or tv is int or tv is bool or v is None:
                continue
            if tv is float:
                if v - v != 0.0:  # NaN and infinities are the standard library's to refuse
                    return False
            elif not _plain(v, depth + 1):
                return False
        return True
    if t is list or t is tuple:
        if depth >= _PLAIN_DEPTH:
            return False
        return all(_plain(v, depth + 1) for v in value)
    return t is str or t is int or t is bool or value is None or _finite(value)


def _finite(value: Any) -> bool:
    return type(value) is float and bool(value - value == 0.0)


def payload(value: Any) -> str:
    """The payload as JSON text; JSON-serialisable values only, at most 1 MiB.

    Exactly the values ``json.dumps(allow_nan=False)`` accepts, encoded as it would (up to the
    spelling of floats, which jsonb does not keep): the plain JSON types go through orjson
    (several times faster), anything else (and anything orjson refuses, such as integers beyond
    64 bits) through the standard library, whose verdict and message stand.
    """
    text: str | None = None
    if _plain(value):
        try:
            # Decoded at once: orjson's bytes keep a buffer of a few KiB each, and a batch
            # holding 100,000 of them would spend its time in page faults.
            text = orjson.dumps(value).decode()
        except orjson.JSONEncodeError:
            text = None
    if text is None:
        _check_structure(value)
        try:
            text = json.dumps(value, allow_nan=False, separators=(",", ":"), ensure_ascii=False)
        except (TypeError, ValueError, RecursionError) as exc:
            raise InvalidJob("payload", value, f"must be JSON-serialisable ({exc})") from None
        if not text.isascii():
            try:
                text.encode()
            except UnicodeEncodeError:
                raise InvalidJob(
                    "payload", value, "contains a lone surrogate (not valid Unicode text)"
                ) from None
    if "\\u0000" in text and _JSON_NUL.search(text):
        raise InvalidJob("payload", value, "PostgreSQL jsonb cannot store the NUL character")
    # A character is 1 to 4 bytes: only a long text needs encoding to be measured.
    if len(text) > MAX_PAYLOAD_BYTES // 4 and len(text.encode()) > MAX_PAYLOAD_BYTES:
        raise InvalidJob("payload", f"<{len(text)} characters>", "larger than 1 MiB")
    return text


def _check_structure(value: Any) -> None:
    """What the standard library's encoder would let through silently: keys that are not
    strings (``{1: "a"}`` would become ``{"1": "a"}``), and nesting too deep to store."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if depth > MAX_PAYLOAD_DEPTH:
            raise InvalidJob("payload", value, f"nested deeper than {MAX_PAYLOAD_DEPTH} levels")
        if isinstance(item, dict):
            for key, inner in item.items():
                if not isinstance(key, str):
                    raise InvalidJob(
                        "payload", value, f"object keys must be strings, got {type(key).__name__}"
                    )
                stack.append((inner, depth + 1))
        elif isinstance(item, list | tuple):
            stack.extend((inner, depth + 1) for inner in item)


def idempotency_key(value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not 1 <= len(value) <= MAX_IDEMPOTENCY_KEY:
        raise InvalidJob(
            "idempotency_key",
            value,
            f"must be None or a string of 1-{MAX_IDEMPOTENCY_KEY} characters",
        )
    return text(value, "idempotency_key", MAX_IDEMPOTENCY_KEY)


def concurrency_key(value: Any) -> str | None:
    """The key a queue's per-key limit counts (jobs.set_queue_policy): None or 1-512 characters."""
    if value is None:
        return None
    if not isinstance(value, str) or not 1 <= len(value) <= MAX_IDEMPOTENCY_KEY:
        raise InvalidJob(
            "concurrency_key",
            value,
            f"must be None or a string of 1-{MAX_IDEMPOTENCY_KEY} characters",
        )
    return text(value, "concurrency_key", MAX_IDEMPOTENCY_KEY)


def unique_key(value: Any) -> str | None:
    """A unique-while-active key: None, or 1-512 characters PostgreSQL can store."""
    if value is None:
        return None
    if not isinstance(value, str) or not 1 <= len(value) <= MAX_UNIQUE_KEY:
        raise InvalidJob(
            "unique_key", value, f"must be None or a string of 1-{MAX_UNIQUE_KEY} characters"
        )
    return text(value, "unique_key", MAX_UNIQUE_KEY)


def on_active(value: Any, unique: str | None) -> str:
    """``keep`` or ``replace``; ``replace`` only with a unique key (it would do nothing)."""
    if not isinstance(value, str) or value not in ON_ACTIVE:
        raise InvalidJob("on_active", value, "must be 'keep' or 'replace'")
    if value == "replace" and unique is None:
        raise InvalidJob("on_active", value, "'replace' needs a unique_key")
    return value


def keys(idempotency: str | None, unique: str | None) -> None:
    """A job has an idempotency key or a unique key, not both: the permanent key already makes
    it unique, and an insert can name only one arbiter index, so which key answers would
    depend on which one happens to conflict."""
    if idempotency is not None and unique is not None:
        raise InvalidJob(
            "unique_key", unique, "cannot be combined with idempotency_key (give one of the two)"
        )


def key_is_plain(value: str) -> bool:
    """A cheap test that a key of the right length needs no further check (the fast path of
    ``enqueue_many``): ASCII without NUL."""
    return value.isascii() and "\x00" not in value


def organization_id(value: Any) -> UUID | None:
    if value is None or isinstance(value, UUID):
        return value
    if isinstance(value, str):
        try:
            return UUID(value)
        except ValueError:
            pass
    raise InvalidJob("organization_id", value, "must be None or a UUID")


def aware(value: Any, field: str) -> datetime | None:
    if value is None:
        return None
    if not isinstance(value, datetime):
        raise InvalidJob(field, value, "must be a datetime")
    if value.tzinfo is None or value.utcoffset() is None:
        raise InvalidJob(field, value, "must be timezone-aware (naive datetimes are ambiguous)")
    return value


def priority(value: Any) -> int:
    low, high = PRIORITY_RANGE
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise InvalidJob("priority", value, f"must be an integer from {low} to {high}")
    return value


def max_attempts(value: Any) -> int:
    if value is None:
        return DEFAULT_MAX_ATTEMPTS
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidJob("max_attempts", value, "must be an integer")
    if not 1 <= value <= MAX_ATTEMPTS_LIMIT:
        raise InvalidJob("max_attempts", value, f"must be from 1 to {MAX_ATTEMPTS_LIMIT}")
    return value


MAX_LATENESS = timedelta(days=366)
"""The longest ``max_lateness`` a job may carry (a year: a limit beyond is no limit)."""


def max_lateness(value: Any, field: str = "max_lateness") -> timedelta | None:
    """A job's maximum lateness: None (no limit), or a positive timedelta or number of seconds
    of at most :data:`MAX_LATENESS`."""
    if value is None:
        return None
    if isinstance(value, timedelta):
        result = value
    elif isinstance(value, int | float) and not isinstance(value, bool):
        if not -1e12 < value < 1e12:  # also False for NaN and the infinities
            raise InvalidJob(field, value, "must be a finite number of seconds")
        result = timedelta(seconds=value)
    else:
        raise InvalidJob(field, value, "must be a timedelta or a number of seconds")
    if result <= timedelta(0):
        raise InvalidJob(field, value, "must be positive (a job must have time to start)")
    if result > MAX_LATENESS:
        raise InvalidJob(field, value, f"must be at most {MAX_LATENESS.days} days")
    return result


def delay(value: Any, field: str, max_seconds: int = MAX_DELAY_SECONDS) -> timedelta:
    if isinstance(value, timedelta):
        result = value
    elif isinstance(value, int | float) and not isinstance(value, bool):
        if not -max_seconds <= value <= max_seconds:  # also False for NaN
            raise InvalidJob(field, value, f"must be a finite number of at most {max_seconds} s")
        result = timedelta(seconds=value)
    else:
        raise InvalidJob(field, value, "must be a timedelta or a number of seconds")
    if result < timedelta(0):
        raise InvalidJob(field, value, "must not be negative")
    if result > timedelta(seconds=max_seconds):
        raise InvalidJob(field, value, f"must be at most {max_seconds} seconds")
    return result
