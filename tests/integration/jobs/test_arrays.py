"""jobs.arrays: parameters encoded in the binary array format read back as the same values."""

from __future__ import annotations

import struct
from datetime import UTC, datetime, timedelta, timezone
from typing import Any
from uuid import UUID, uuid4

import psycopg
import pytest

from jobs import arrays


def test_each_encoder_round_trips_through_postgresql(conn: psycopg.Connection[Any]) -> None:
    arrays.register(conn)
    ints = [0, 1, -1, 2**31 - 1, -(2**31)]
    bigs = [0, 2**63 - 1, -(2**63), 42]
    floats = [0.0, 1.5, -2.25, 1e300, 0.1]
    names: dict[str, bytes] = {}
    texts = ["default", "", "é ☃ 日本", "default", 'a,b{c}"d\\']
    row = conn.execute(
        "SELECT %(i)b::int[], %(b)b::bigint[], %(f)b::float8[], %(t)b::text[], %(e)b::bigint[]",
        {
            "i": arrays.int4_array(ints),
            "b": arrays.int8_array(bigs),
            "f": arrays.float8_array(floats),
            "t": arrays.text_array(texts, names),
            "e": arrays.int8_array([]),
        },
    ).fetchone()
    assert row == (ints, bigs, floats, texts, [])
    assert set(names) == set(texts)  # each distinct value encoded once


def test_none_elements_are_sent_as_null_and_uuids_as_uuids(
    conn: psycopg.Connection[Any],
) -> None:
    arrays.register(conn)
    bigs = [None, 2**63 - 1, None, -(2**63)]
    texts = ["a", None, "", "é ☃", None]
    ids: list[UUID | None] = [uuid4(), None, UUID(int=0), uuid4()]
    row = conn.execute(
        "SELECT %(b)b::bigint[], %(t)b::text[], %(c)b::text[], %(u)b::uuid[], %(e)b::uuid[],"
        " array_position(%(t)b::text[], NULL)",
        {
            "b": arrays.int8_array(bigs),
            "t": arrays.text_array(texts),
            "c": arrays.text_array(texts, {}),
            "u": arrays.uuid_array(ids),
            "e": arrays.uuid_array([]),
        },
    ).fetchone()
    assert row == (bigs, texts, texts, ids, [], 2)


def test_instants_round_trip_whatever_their_zone(conn: psycopg.Connection[Any]) -> None:
    arrays.register(conn)
    instants = [
        datetime(2026, 3, 7, 8, 0, 0, 123456, tzinfo=UTC),
        datetime(1999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),  # before the binary zero
        datetime(2026, 3, 7, 9, 0, tzinfo=timezone(timedelta(hours=1))),  # 08:00 UTC
        datetime(2026, 3, 7, 8, 0, 0, 123456, tzinfo=UTC),
    ]
    encoded = arrays.timestamptz_array(instants)
    row = conn.execute("SELECT %(t)b::timestamptz[]", {"t": encoded}).fetchone()
    assert row is not None
    assert [t.timestamp() for t in row[0]] == [t.timestamp() for t in instants]
    assert arrays.timestamptz_array([datetime(2026, 3, 7, 8, 0)]) is None  # naive: not encoded


def test_an_encoding_of_another_type_fails_instead_of_converting(
    conn: psycopg.Connection[Any],
) -> None:
    """The element type travels in the bytes: PostgreSQL checks it against the parameter's."""
    arrays.register(conn)
    mislabelled = arrays.Int8Array(bytes(arrays.int4_array([1])))
    with pytest.raises(psycopg.errors.DatatypeMismatch):
        conn.execute("SELECT %(i)b::bigint[]", {"i": mislabelled})


@pytest.mark.parametrize(
    "texts",
    [
        ["reminders"] * 3,  # one value throughout: encoded once, repeated
        ["é ☃"] * 2,
        [""] * 4,
        [None, None, None],  # all NULL
        ["a", "b", "a"],  # first and last equal, not all
        ["a", None, "a"],
        ["only"],
    ],
)
def test_a_text_array_of_one_repeated_value_is_the_same_array(
    conn: psycopg.Connection[Any], texts: list[str | None]
) -> None:
    arrays.register(conn)
    one_by_one = b"".join(
        [arrays._header(25, len(texts), None in texts)]
        + [
            arrays._NULL if t is None else arrays._LENGTH.pack(len(t.encode())) + t.encode()
            for t in texts
        ]
    )
    assert bytes(arrays.text_array(texts)) == one_by_one
    assert bytes(arrays.text_array(texts, {})) == one_by_one
    row = conn.execute(
        "SELECT %(t)b::text[], %(c)b::text[]",
        {"t": arrays.text_array(texts), "c": arrays.text_array(texts, {})},
    ).fetchone()
    assert row == (texts, texts)


def test_a_uuid_array_of_nulls_only(conn: psycopg.Connection[Any]) -> None:
    arrays.register(conn)
    ids: list[UUID | None] = [None, None, None]
    assert bytes(arrays.uuid_array(ids)) == arrays._header(2950, 3, True) + arrays._NULL * 3
    row = conn.execute("SELECT %(u)b::uuid[]", {"u": arrays.uuid_array(ids)}).fetchone()
    assert row == (ids,)


@pytest.mark.parametrize(
    ("ints", "floats"),
    [
        ([1, 1, 1], [2.5, 2.5, 2.5]),  # one value throughout: encoded once, repeated
        ([1, 2, 1], [2.5, 1.0, 2.5]),
        ([7], [0.25]),
        ([0, 0], [0.0, -0.0]),  # equal, not the same bytes
        ([-3, -3], [-0.0, 0.0]),
        ([5, 5], [float("nan"), float("nan")]),
    ],
)
def test_number_arrays_of_one_repeated_value_are_the_same_arrays(
    conn: psycopg.Connection[Any], ints: list[int], floats: list[float]
) -> None:
    arrays.register(conn)
    assert bytes(arrays.int4_array(ints)) == arrays._header(23, len(ints)) + b"".join(
        arrays._LENGTH.pack(4) + arrays._LENGTH.pack(i) for i in ints
    )
    assert bytes(arrays.float8_array(floats)) == arrays._header(701, len(floats)) + b"".join(
        arrays._LENGTH.pack(8) + struct.pack(">d", f) for f in floats
    )
    row = conn.execute(
        "SELECT %(i)b::int[], %(f)b::float8[]",
        {"i": arrays.int4_array(ints), "f": arrays.float8_array(floats)},
    ).fetchone()
    assert row is not None
    assert row[0] == ints
    # As bytes: a NaN equals nothing, and -0.0 equals 0.0.
    assert [struct.pack(">d", f) for f in row[1]] == [struct.pack(">d", f) for f in floats]
