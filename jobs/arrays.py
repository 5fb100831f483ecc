"""Array parameters encoded in PostgreSQL's binary array format by ``struct``, not per element.

psycopg dumps a list parameter element by element in Python, after scanning the list twice for
its element type (and, for integers, for the largest value): for the worker's completion, which
sends a dozen arrays of hundreds of elements per cycle, that was about a sixth of the
dispatcher thread's time per job. These encoders build the same bytes in one ``struct.pack``
(numbers) or one join of cached element encodings (text: a batch repeats a few queue, job type,
status and outcome names), an array of one value throughout as that value's encoding repeated
(a batch's queue, job type, attempt and duration, a herd's title), and :func:`register`
teaches a connection to send them as binary parameters of the array type they name. A None
element is sent as NULL (an array of numbers with one goes element by element; a batch with no
failure sends a NULL array instead, see job_complete). The element type travels in the bytes
and the server checks it against the parameter's type, so a mislabelled array fails
(``DatatypeMismatch``).

The binary format (``array_recv``): number of dimensions, a has-nulls flag, the element type's
OID, then per dimension its length and lower bound (1), then per element its byte length and
its value in the element type's binary format (big-endian integers, IEEE 754 doubles, UTF-8
text, a UUID's 16 bytes); a NULL element has the byte length -1 and no value. An empty array has
no dimension.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from datetime import UTC, datetime
from itertools import chain, repeat
from typing import Any
from uuid import UUID

import psycopg
from psycopg import pq
from psycopg.adapt import Dumper

_INT4, _INT8, _FLOAT8, _TEXT, _UUID, _TIMESTAMPTZ = 23, 20, 701, 25, 2950, 1184
_PG_EPOCH = datetime(2000, 1, 1, tzinfo=UTC)  # timestamptz's binary zero
_HEADER = struct.Struct(">5i")
_EMPTY = struct.Struct(">3i")
_LENGTH = struct.Struct(">i")
_NULL = _LENGTH.pack(-1)
_INT8_ELEMENT = struct.Struct(">iq")
_INT4_ELEMENT = struct.Struct(">ii")
_FLOAT8_ELEMENT = struct.Struct(">id")
_UUID_LENGTH = _LENGTH.pack(16)


class Int4Array(bytes):
    """An ``int[]`` parameter, already encoded."""

    __slots__ = ()


class Int8Array(bytes):
    """A ``bigint[]`` parameter, already encoded."""

    __slots__ = ()


class Float8Array(bytes):
    """A ``double precision[]`` parameter, already encoded."""

    __slots__ = ()


class TextArray(bytes):
    """A ``text[]`` parameter, already encoded."""

    __slots__ = ()


class UuidArray(bytes):
    """A ``uuid[]`` parameter, already encoded."""

    __slots__ = ()


class TimestamptzArray(bytes):
    """A ``timestamptz[]`` parameter, already encoded."""

    __slots__ = ()


def _header(oid: int, n: int, nulls: bool = False) -> bytes:
    return _HEADER.pack(1, int(nulls), oid, n, 1) if n else _EMPTY.pack(0, 0, oid)


def int4_array(values: Sequence[int]) -> Int4Array:
    n = len(values)
    if n > 1 and values[0] == values[-1] and values.count(values[0]) == n:
        return Int4Array(_header(_INT4, n) + _INT4_ELEMENT.pack(4, values[0]) * n)
    body = struct.pack(f">{'ii' * n}", *chain.from_iterable(zip(repeat(4), values)))
    return Int4Array(_header(_INT4, n) + body)


def int8_array(values: Sequence[int | None]) -> Int8Array:
    n = len(values)
    if None in values:
        if values.count(None) == n:  # a column the rows leave empty
            return Int8Array(_header(_INT8, n, True) + _NULL * n)
        pack = _INT8_ELEMENT.pack
        parts = [_NULL if v is None else pack(8, v) for v in values]
        return Int8Array(_header(_INT8, n, True) + b"".join(parts))
    body = struct.pack(f">{'iq' * n}", *chain.from_iterable(zip(repeat(8), values)))
    return Int8Array(_header(_INT8, n) + body)


def float8_array(values: Sequence[float]) -> Float8Array:
    n = len(values)
    # A quiet batch's jobs share one duration. Not for a zero (0.0 == -0.0, packed apart);
    # a NaN equals nothing but itself (the same object): packed one by one, or as itself.
    if n > 1 and values[0] and values[0] == values[-1] and values.count(values[0]) == n:
        return Float8Array(_header(_FLOAT8, n) + _FLOAT8_ELEMENT.pack(8, values[0]) * n)
    body = struct.pack(f">{'id' * n}", *chain.from_iterable(zip(repeat(8), values)))
    return Float8Array(_header(_FLOAT8, n) + body)


def text_array(values: Sequence[str | None], cache: dict[str, bytes] | None = None) -> TextArray:
    """``cache`` (value -> its encoding) may be shared by the arrays of one batch of values
    that repeat; None: each value is encoded where it stands (values that do not repeat).

    One value throughout (a batch's queue or job type, a herd's title): encoded once and
    repeated, after a count in C (the first and last values differ for most other arrays,
    which so cost one comparison)."""
    n = len(values)
    if n > 1 and values[0] == values[-1] and values.count(values[0]) == n:
        value = values[0]
        if value is None:
            return TextArray(_header(_TEXT, n, True) + _NULL * n)
        raw = value.encode()
        return TextArray(_header(_TEXT, n) + (_LENGTH.pack(len(raw)) + raw) * n)
    parts = [_header(_TEXT, n, None in values)]
    append, length = parts.append, _LENGTH.pack
    if cache is None:
        for value in values:
            if value is None:
                append(_NULL)
            else:
                raw = value.encode()
                append(length(len(raw)))
                append(raw)
        return TextArray(b"".join(parts))
    for value in values:
        if value is None:
            append(_NULL)
            continue
        encoded = cache.get(value)
        if encoded is None:
            raw = value.encode()
            encoded = cache[value] = length(len(raw)) + raw
        append(encoded)
    return TextArray(b"".join(parts))


def uuid_array(values: Sequence[UUID | None]) -> UuidArray:
    n = len(values)
    if n and values.count(None) == n:  # jobs without an organization
        return UuidArray(_header(_UUID, n, True) + _NULL * n)
    parts = [_header(_UUID, n, None in values)]
    for value in values:
        parts.append(_NULL if value is None else _UUID_LENGTH + value.bytes)
    return UuidArray(b"".join(parts))


def timestamptz_array(values: Sequence[datetime]) -> TimestamptzArray | None:
    """Aware instants as microseconds since 2000-01-01 UTC, each distinct one encoded once (a
    batch's attempts share their start); None when one is naive (the caller sends the list:
    psycopg sends a naive datetime as a ``timestamp``, read in the session's zone)."""
    known: dict[datetime, bytes] = {}
    parts = [_header(_TIMESTAMPTZ, len(values))]
    for value in values:
        encoded = known.get(value)
        if encoded is None:
            if value.tzinfo is None:
                return None
            delta = value - _PG_EPOCH
            micros = (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
            encoded = known[value] = _INT8_ELEMENT.pack(8, micros)
        parts.append(encoded)
    return TimestamptzArray(b"".join(parts))


def _dumper(array_oid: int) -> type[Dumper]:
    class _Encoded(Dumper):
        format = pq.Format.BINARY
        oid = array_oid

        def dump(self, obj: Any) -> bytes:
            return bytes(obj)

    return _Encoded


_DUMPERS: tuple[tuple[type[bytes], type[Dumper]], ...] = (
    (Int4Array, _dumper(1007)),  # int4[]
    (Int8Array, _dumper(1016)),  # int8[]
    (Float8Array, _dumper(1022)),  # float8[]
    (TextArray, _dumper(1009)),  # text[]
    (UuidArray, _dumper(2951)),  # uuid[]
    (TimestamptzArray, _dumper(1185)),  # timestamptz[]
)


def register(conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any]) -> None:
    """Let ``conn`` send the encoded arrays of this module as binary parameters."""
    for cls, dumper in _DUMPERS:
        conn.adapters.register_dumper(cls, dumper)
