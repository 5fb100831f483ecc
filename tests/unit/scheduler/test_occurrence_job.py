"""The occurrence meta of a scheduled job: one writer, one reader, the historic format kept."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

from scheduler.occurrence_job import (
    SCHEDULE_PAYLOAD_KEY,
    OccurrenceMeta,
    occurrence_idempotency_key,
)

AT = datetime(2026, 6, 1, 6, 0, tzinfo=UTC)
META = OccurrenceMeta(7, "2026-06-01T08:00", AT, 3)


def test_the_text_is_the_one_the_tick_always_wrote() -> None:
    """Jobs enqueued before and after read the same: the text is byte for byte the former one."""
    historic = (
        '{"id":7,"occurrence":"2026-06-01T08:00","at":"2026-06-01T06:00:00+00:00","version":3}'
    )
    assert META.json_text() == historic
    assert (
        META.into_payload('{"user_id": 42}')
        == '{"user_id": 42,"tockwork_schedule":' + historic + "}"
    )
    assert META.into_payload("{}") == '{"tockwork_schedule":' + historic + "}"


@pytest.mark.parametrize("at", [AT, AT.astimezone(timezone(timedelta(hours=2)))])
@pytest.mark.parametrize("key", ["2026-06-01T08:00", "2026-10-25T02:30#1", 'a"b\\c', "é"])
def test_what_is_written_reads_back(at: datetime, key: str) -> None:
    meta = OccurrenceMeta(2**63 - 1, key, at, 1)
    payload = json.loads(meta.into_payload('{"a": [1, {"b": null}]}'))
    assert payload["a"] == [1, {"b": None}]
    back = OccurrenceMeta.from_payload(payload)
    assert back == meta and back is not None and back.at.utcoffset() == at.utcoffset()


def test_the_idempotency_key() -> None:
    assert occurrence_idempotency_key(7, "2026-06-01T08:00") == "schedule:7:2026-06-01T08:00"
    assert META.idempotency_key == "schedule:7:2026-06-01T08:00"


@pytest.mark.parametrize(
    "payload",
    [
        None,
        [1],
        {},
        {"user_id": 1},
        {SCHEDULE_PAYLOAD_KEY: "7"},
        {SCHEDULE_PAYLOAD_KEY: {"id": 7, "occurrence": "k", "at": "2026-06-01T06:00:00+00:00"}},
        {SCHEDULE_PAYLOAD_KEY: {"id": "7", "occurrence": "k", "at": "2026-06-01", "version": 1}},
        {SCHEDULE_PAYLOAD_KEY: {"id": True, "occurrence": "k", "at": "2026-06-01", "version": 1}},
        {SCHEDULE_PAYLOAD_KEY: {"id": 7, "occurrence": 1, "at": "2026-06-01", "version": 1}},
        {SCHEDULE_PAYLOAD_KEY: {"id": 7, "occurrence": "k", "at": "June", "version": 1}},
        {
            SCHEDULE_PAYLOAD_KEY: {
                "id": 7,
                "occurrence": "k",
                "at": "2026-06-01T06:00",
                "version": 1,
            }
        },
    ],
)
def test_a_payload_no_schedule_wrote_has_no_meta(payload: Any) -> None:
    assert OccurrenceMeta.from_payload(payload) is None


def test_a_meta_read_is_an_occurrence_meta_in_every_respect() -> None:
    """Read through the writable twin (scheduler.occurrence_job._WritableMeta): the result is
    the meta the constructor builds, frozen, hashable, picklable, replaceable."""
    import dataclasses
    import pickle

    from scheduler.occurrence_job import _WritableMeta

    assert [f.name for f in dataclasses.fields(_WritableMeta)] == [
        f.name for f in dataclasses.fields(OccurrenceMeta)
    ]
    assert _WritableMeta.__slots__ == OccurrenceMeta.__slots__
    back = OccurrenceMeta.from_payload(json.loads(META.into_payload("{}")))
    assert type(back) is OccurrenceMeta
    assert back == META and hash(back) == hash(META)
    assert repr(back) == repr(META)
    assert pickle.loads(pickle.dumps(back)) == META
    assert dataclasses.replace(back, version=4) == dataclasses.replace(META, version=4)
    with pytest.raises(dataclasses.FrozenInstanceError):
        back.version = 4  # type: ignore[misc]


def test_a_subclass_reads_as_itself() -> None:
    class Meta(OccurrenceMeta):
        __slots__ = ()

    back = Meta.from_payload(json.loads(META.into_payload("{}")))
    assert type(back) is Meta and back.version == 3
