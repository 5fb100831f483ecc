"""The device registry refuses bad input before its first statement, naming the field.

Every operation is a generator of steps (scheduler/devices.py), driven here by hand with no
database: a bad argument must raise :class:`scheduler.errors.InvalidDevice` (an
``InvalidInput``) naming the field, on the first ``next()``, before anything is sent. A token
never appears in full in an error, whatever is wrong with it or with another argument.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest

from jobs.internal import Steps
from scheduler import devices as d
from scheduler.errors import InvalidDevice
from scheduler.queries import query
from tests.bad_inputs import BAD_INSTANTS, NOT_TEXT, NUL, SURROGATE, Case, cases_of, check_refused

NOW = datetime(2026, 3, 6, 12, 0, tzinfo=UTC)
TOKEN = "tok-" + "q" * 150 + "Z9Y8X7"


def first(steps: Steps[Any]) -> Any:
    return next(steps)


def _add(**changes: Any) -> Callable[[], object]:
    args: dict[str, Any] = {"subject": "user-1", "channel": "fcm", "token": TOKEN, **changes}
    return lambda: first(
        d._add(args.pop("subject"), args.pop("channel"), args.pop("token"), **args)
    )


BAD_SUBJECTS = [("empty", ""), ("long", "s" * 201), ("nul", NUL), ("surrogate", SURROGATE),
                ("none", None), ("float", 2.5), ("bytes", b"u"), ("huge-int", 10**300)]  # fmt: skip
BAD_CHANNELS = [("empty", ""), ("upper", "FCM"), ("digit-first", "1fcm"), ("dash", "my-push"),
                ("long", "c" * 33), ("space", "fcm "), ("none", None), ("int", 5)]  # fmt: skip
BAD_TOKENS = [("empty", ""), ("long", "t" * 2049), ("long-utf8", "é" * 1025), ("space", "ab cd"),
              ("newline", TOKEN + "\n"), ("nul", "abc\x00def123456"), ("tab", "a\tbcdefghij"),
              ("surrogate", "abcdefgh" + SURROGATE), ("none", None), ("bytes", TOKEN.encode()),
              ("int", 12345678901)]  # fmt: skip
BAD_PLATFORMS = [("empty", ""), ("long", "p" * 33), ("spaces", " ios"), ("newline", "ios\n"),
                 ("nul", NUL), ("int", 5)]  # fmt: skip
BAD_ORGS = [("text", "not-a-uuid"), ("int", 5), ("empty", ""), ("bytes", b"x" * 16)]
BAD_IDS = [("zero", 0), ("negative", -1), ("int8-overflow", 2**63), ("float", 1.0),
           ("text", "1"), ("bool", True), ("none", None)]  # fmt: skip


def cases() -> list[Case]:
    out: list[Case] = []
    out += cases_of("add-subject", "subject", BAD_SUBJECTS, lambda v: _add(subject=v))
    out += cases_of("add-channel", "channel", BAD_CHANNELS, lambda v: _add(channel=v))
    out += cases_of("add-token", "token", BAD_TOKENS, lambda v: _add(token=v))
    out += cases_of("add-platform", "platform", BAD_PLATFORMS, lambda v: _add(platform=v))
    out += cases_of("add-org", "organization_id", BAD_ORGS, lambda v: _add(organization_id=v))
    out += cases_of("add-now", "now", BAD_INSTANTS, lambda v: _add(now=v))
    out += cases_of("get-id", "device_id", BAD_IDS, lambda v: lambda: first(d._get(v)))
    out += cases_of("remove-id", "device_id", BAD_IDS, lambda v: lambda: first(d._remove(v)))
    out += cases_of(
        "list-subject", "subject", BAD_SUBJECTS[:-4], lambda v: lambda: first(d._list(subject=v))
    )
    out += cases_of(
        "list-org", "organization_id", BAD_ORGS, lambda v: lambda: first(d._list(organization_id=v))
    )
    out += cases_of(
        "list-limit",
        "limit",
        [("zero", 0), ("big", 10_001), ("bool", True), ("text", "5")],
        lambda v: lambda: first(d._list(limit=v)),
    )
    out += cases_of(
        "list-after",
        "after",
        [("negative", -1), ("text", "5"), ("float", 1.5), ("bool", False)],
        lambda v: lambda: first(d._list(after=v)),
    )
    out += cases_of(
        "list-invalid",
        "include_invalid",
        [("int", 1), ("text", "yes")],
        lambda v: lambda: first(d._list(include_invalid=v)),
    )
    out += cases_of(
        "for-subjects",
        "subjects",
        [("text", "alice"), ("dict", {}), ("none", None), ("too-many", [(None, "u")] * 10_001)],
        lambda v: lambda: first(d.devices_for_steps(v)),
    )
    out += cases_of(
        "for-pair",
        "subjects[1]",
        [("triple", (None, "u", 1)), ("list", [None, "u"]), ("str", "u")],
        lambda v: lambda: first(d.devices_for_steps([(None, "ok"), v])),
    )
    out += cases_of(
        "for-pair-subject",
        "subject",
        BAD_SUBJECTS,
        lambda v: lambda: first(d.devices_for_steps([(None, v)])),
    )
    out += cases_of(
        "for-pair-org",
        "organization_id",
        BAD_ORGS,
        lambda v: lambda: first(d.devices_for_steps([(v, "u")])),
    )
    out += cases_of(
        "invalidate-items",
        "items",
        [("text", "1"), ("none", None)],
        lambda v: lambda: first(d.invalidate_devices_steps(v, now=NOW)),
    )
    out += cases_of(
        "invalidate-item",
        "items[0]",
        [("pair", (1, "r")), ("list", [1, "r", "c"])],
        lambda v: lambda: first(d.invalidate_devices_steps([v], now=NOW)),
    )
    out += cases_of(
        "invalidate-id",
        "items[0].device_id",
        BAD_IDS,
        lambda v: lambda: first(d.invalidate_devices_steps([(v, "r", "c")], now=NOW)),
    )
    out += cases_of(
        "invalidate-reason",
        "items[0].reason",
        NOT_TEXT[:2],
        lambda v: lambda: first(d.invalidate_devices_steps([(1, v, "c")], now=NOW)),
    )
    out += cases_of(
        "invalidate-code",
        "items[0].code",
        NOT_TEXT[:2],
        lambda v: lambda: first(d.invalidate_devices_steps([(1, "r", v)], now=NOW)),
    )
    out += cases_of(
        "invalidate-now",
        "now",
        [*BAD_INSTANTS, ("none", None)],
        lambda v: lambda: first(d.invalidate_devices_steps([(1, "r", "c")], now=v)),
    )
    out += cases_of(
        "succeeded-ids",
        "device_ids[0]",
        BAD_IDS,
        lambda v: lambda: first(d.mark_succeeded_steps([v], now=NOW)),
    )
    out += cases_of(
        "succeeded-now",
        "now",
        [*BAD_INSTANTS, ("none", None)],
        lambda v: lambda: first(d.mark_succeeded_steps([1], now=v)),
    )
    return out  # fmt: skip


@pytest.mark.parametrize("case", cases(), ids=repr)
def test_bad_input_is_refused_before_any_statement(case: Case) -> None:
    error = check_refused(case)
    assert isinstance(error, InvalidDevice)
    assert TOKEN not in str(error) and TOKEN not in repr(error.value)


@pytest.mark.parametrize("name,token", [(n, t) for n, t in BAD_TOKENS if isinstance(t, str)])
def test_a_bad_token_is_shown_redacted(name: str, token: str) -> None:
    with pytest.raises(InvalidDevice) as caught:
        first(d._add("user-1", "fcm", token))
    if len(token) > 8:
        assert token not in str(caught.value), name
        assert caught.value.value == "…" + token[-6:]


def test_valid_edges_reach_the_statement() -> None:
    """The check is not stricter than the table: these are sent (the first step is the upsert)."""
    for token in ("t", "t" * 2048, "é" * 1024, "https://push.example/endpoint?x=1"):
        step = first(d._add(10**20, "my_channel_2", token, platform="web", organization_id=None))
        assert step[0] == query("device_upsert")
    assert first(d._list(after=0, limit=10_000))[0] == query("device_list")
    assert first(d.invalidate_devices_steps([(1, "r" * 10_000, "c" * 1000)], now=NOW))[1][
        "reasons"
    ] == ["r" * 500]


def test_empty_batches_send_nothing() -> None:
    for steps in (
        d.devices_for_steps([]),
        d.invalidate_devices_steps([], now=NOW),
        d.mark_succeeded_steps([], now=NOW),
    ):
        with pytest.raises(StopIteration):
            next(steps)


def test_the_repr_of_a_device_hides_its_token() -> None:
    device = d.Device(1, None, "u", "fcm", TOKEN, None, NOW, None, None, None, NOW)
    assert TOKEN not in repr(device) and "…Z9Y8X7" in repr(device)
    assert d.token_suffix(TOKEN) == "Z9Y8X7" and d.token_suffix("short") == ""
