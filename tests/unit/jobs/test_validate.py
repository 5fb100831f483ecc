"""Payload encoding: the fast encoder (orjson) and the standard library agree on every value.

Invariant: ``validate.payload`` accepts exactly what ``json.dumps(allow_nan=False)`` accepts,
refuses the rest with the same message, and its text decodes to the same JSON value; except
what PostgreSQL cannot store or the standard library would change silently, which is refused:
the NUL character, lone surrogates, and object keys that are not strings.

Also: the short path of the common ``jobs.enqueue`` call validates as every validator would.
"""

from __future__ import annotations

import importlib
import json
import uuid
from collections import OrderedDict
from datetime import UTC, datetime
from enum import Enum, IntEnum
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from jobs import InvalidJob, validate


def has_nul(value: Any) -> bool:
    """Whether a text anywhere in ``value`` (a key or a string) holds the NUL character."""
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, dict):
        return any(has_nul(k) or has_nul(v) for k, v in value.items())
    if isinstance(value, list | tuple):
        return any(has_nul(v) for v in value)
    return False


def reference(value: Any) -> str:
    return json.dumps(value, allow_nan=False, separators=(",", ":"), ensure_ascii=False)


class Colour(Enum):
    RED = "red"


class Level(IntEnum):
    HIGH = 3


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.tuples(inner, inner)
        | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)


@given(json_values)
def test_plain_values_encode_to_the_same_json_as_the_standard_library(value: Any) -> None:
    """Every JSON-shaped value (big integers, any text, nesting) gives the same JSON value."""
    try:
        expected = json.loads(reference(value))
    except UnicodeEncodeError:  # pragma: no cover - lone surrogates, refused alike below
        return
    if has_nul(value):
        with pytest.raises(InvalidJob):
            validate.payload(value)
        return
    assert json.loads(validate.payload(value)) == expected


@pytest.mark.parametrize(
    "value",
    [
        {"i": 1, "s": 'é\n\t"\\', "f": 1.5e300, "n": None, "b": [True, False]},
        {"big": 2**70, "neg": -(2**64)},  # beyond orjson's 64 bits: the stdlib's text
        [[[[{"deep": [1]}]]]] * 3,
        {"level": Level.HIGH},  # an int subclass: as the stdlib writes it
        OrderedDict(a=1),
        "text",
        7,
    ],
)
def test_the_text_is_the_standard_librarys(value: Any) -> None:
    assert json.loads(validate.payload(value)) == json.loads(reference(value))


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ({"x": float("nan")}, "Out of range float values are not JSON compliant"),
        ({"x": [float("inf")]}, "Out of range float values are not JSON compliant"),
        ({"when": datetime(2026, 1, 1, tzinfo=UTC)}, "is not JSON serializable"),
        ({"id": uuid.UUID(int=1)}, "is not JSON serializable"),  # orjson would accept it
        ({"colour": Colour.RED}, "is not JSON serializable"),  # so would it an Enum
        ({"x": object()}, "is not JSON serializable"),
        ({"x": b"bytes"}, "is not JSON serializable"),
    ],
)
def test_what_the_standard_library_refuses_is_refused_with_its_message(
    value: Any, reason: str
) -> None:
    with pytest.raises(InvalidJob) as info:
        validate.payload(value)
    assert info.value.field == "payload"
    assert "must be JSON-serialisable" in str(info.value)
    assert reason in str(info.value)


def test_nul_and_size_limits() -> None:
    with pytest.raises(InvalidJob, match="NUL"):
        validate.payload({"x": "a\x00b"})
    with pytest.raises(InvalidJob, match="larger than 1 MiB"):
        validate.payload({"x": "é" * (validate.MAX_PAYLOAD_BYTES // 2)})  # 2 bytes a char
    assert len(validate.payload({"x": "a" * (validate.MAX_PAYLOAD_BYTES - 10)})) > 10


@pytest.mark.parametrize(
    "value",
    [
        {1: "int key"},
        {"a": {None: "null key"}},
        [{2.5: "float key"}],
    ],
)
def test_keys_that_are_not_strings_are_refused_not_converted(value: Any) -> None:
    """The standard library would write ``{1: "a"}`` as ``{"1": "a"}``: a silent change."""
    with pytest.raises(InvalidJob, match="object keys must be strings"):
        validate.payload(value)


def test_a_backslash_before_u0000_is_text_not_a_nul() -> None:
    assert json.loads(validate.payload({"a": "\\u0000"})) == {"a": "\\u0000"}
    with pytest.raises(InvalidJob, match="NUL"):
        validate.payload({"a": "\\\x00"})


def _general_params(job_type: Any, payload: Any, queue: Any) -> dict[str, Any]:
    """What ``jobs.enqueue``'s validation made of a call with every optional field at its
    default before the common call had a path of its own: each validator, in order."""
    return {
        "job_type": validate.job_type(job_type),
        "payload": validate.payload(payload),
        "queue": validate.queue_name(queue),
        "idempotency_key": validate.idempotency_key(None),
        "organization_id": validate.organization_id(None),
        "run_at": validate.aware(None, "run_at"),
        "priority": validate.priority(0),
        "max_attempts": validate.max_attempts(None),
        "now": validate.aware(None, "now"),
        "trace_parent": None,
        "trace_state": None,
        "unique_key": validate.unique_key(None),
        "concurrency_key": validate.concurrency_key(None),
        "on_active": validate.on_active("keep", None),
        "max_lateness": validate.max_lateness(None),
    }


def test_the_common_enqueue_validates_as_every_validator_would() -> None:
    """``_params`` takes a short path for the common call (job type, payload, queue, nothing
    else) and remembers the job types and queues it saw valid: the same values come out, and
    bad ones raise the same errors, before and after a valid one was remembered."""
    enqueue_module = importlib.import_module("jobs.enqueue")

    def fast(job_type: Any, payload: Any, queue: Any) -> dict[str, Any]:
        return dict(
            enqueue_module._params(
                job_type, payload, queue, None, None, None, 0, None, None, None, "keep", None
            )
        )

    for _ in range(2):  # first seen, then remembered
        assert fast("send", {"n": 1}, "mail") == _general_params("send", {"n": 1}, "mail")
    cases: list[tuple[Any, Any, Any]] = [
        ("", {}, "mail"),
        (" send", {}, "mail"),
        ("send", {1: "a"}, "mail"),
        ("send", {}, "Mail"),
        ("send", {}, "mail\n"),
        (7, {}, "mail"),
        ("send", {}, None),
        ("", {1: "a"}, "Mail"),  # several bad fields: the first in the validators' order
    ]
    for job_type, payload, queue in cases:
        with pytest.raises(InvalidJob) as expected:
            _general_params(job_type, payload, queue)
        with pytest.raises(InvalidJob) as got:
            fast(job_type, payload, queue)
        assert (got.value.field, got.value.reason) == (expected.value.field, expected.value.reason)
