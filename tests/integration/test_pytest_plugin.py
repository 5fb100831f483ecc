"""The pytest plugin as a user's project runs it: pytest in a subprocess, the plugin found through
its entry point, the test file taken from docs/testing.md (so the documented example cannot
drift), plus a failing DST assertion and its message."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from scheduler.testing import assert_dst_safe, dst_surprises, golden_cases
from timezones.errors import InvalidInput
from timezones.testing import ZonedRule

pytest_plugins = ["pytester"]

DOC = Path(__file__).resolve().parents[2] / "docs" / "testing.md"


def _doc_test_file() -> str:
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)
    assert len(blocks) == 1, "docs/testing.md holds one python block: the user's test file"
    return str(blocks[0])


def _run(
    pytester: pytest.Pytester, server_url: str, monkeypatch: pytest.MonkeyPatch
) -> pytest.RunResult:
    monkeypatch.setenv("DATABASE_URL", server_url)
    return pytester.runpytest_subprocess("-p", "no:cacheprovider", "-q", timeout=240)


def test_the_documented_test_file_passes(
    pytester: pytest.Pytester, server_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makepyfile(test_user=_doc_test_file())
    result = _run(pytester, server_url, monkeypatch)
    result.assert_outcomes(passed=27)


def test_a_failing_dst_assertion_names_zone_local_and_utc(
    pytester: pytest.Pytester, server_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makefile(
        ".toml",
        schedules="""
[[schedule]]
key = "nightly-backup"
rule = "daily@02:30"
zone = "America/New_York"
job_type = "backup"
""",
    )
    pytester.makepyfile(
        test_dst="""
def test_definitions_are_dst_safe(tockwork_dst):
    tockwork_dst("schedules.toml", years=(2026, 2027))
"""
    )
    result = _run(pytester, server_url, monkeypatch)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*2 occurrence(s) moved by DST (shifted)*",
            "*nightly-backup: shifted in America/New_York (daily@02:30): local slot "
            "2026-03-08 02:30:00 fires 2026-03-08 03:30:00-0400 local = 2026-03-08T07:30:00Z*",
            "*nightly-backup: shifted in America/New_York (daily@02:30): local slot "
            "2027-03-14 02:30:00*",
        ]
    )


def test_fixtures_clean_between_tests_and_honour_the_marker(
    pytester: pytest.Pytester, server_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makepyfile(
        test_clean="""
import psycopg, pytest, jobs

@pytest.mark.parametrize("n", range(3))
def test_starts_empty(tockwork_database, n):
    with psycopg.connect(tockwork_database) as conn:
        assert jobs.list_jobs(conn, statuses=list(jobs.JobStatus)) == []
        jobs.enqueue(conn, "t", {"n": n})

@pytest.mark.tockwork_now("2030-07-01T00:00:00+02:00")
def test_marker(frozen_clock):
    assert frozen_clock.now().isoformat() == "2030-06-30T22:00:00+00:00"

def test_default_now(frozen_clock):
    assert frozen_clock.now().isoformat() == "2026-01-05T09:00:00+00:00"
"""
    )
    result = _run(pytester, server_url, monkeypatch)
    result.assert_outcomes(passed=5)


def test_drain_runs_async_handlers_single_and_batch(
    pytester: pytest.Pytester, server_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``drain`` with ``async def`` handlers, as a user's project writes them: single, batch,
    mixed with a sync one, failing, and retried on the frozen clock. Each test asserts what
    ran on the worker's event loop and the outcomes written, so a drain that skipped the
    coroutines, ran them without a loop, or left jobs behind fails here."""
    pytester.makepyfile(
        test_async_drain="""
import asyncio
import threading
from datetime import timedelta

import psycopg

import jobs

RAN = []


async def send_push(job):
    loop = asyncio.get_running_loop()  # raises unless on a running event loop
    await asyncio.sleep(0)  # a real suspension point
    RAN.append(("push", job.payload["n"], loop.is_running()))


@jobs.batch_handler(max_batch=50)
async def digest(batch):
    await asyncio.sleep(0)
    for job in batch:
        if job.payload["n"] == 3:
            batch.fail(job, "bad address")
    RAN.append(("digest", sorted(j.payload["n"] for j in batch)))


def sync_audit(job):
    RAN.append(("audit", job.payload["n"], threading.current_thread().name))


def _jobs_by_status(url):
    with psycopg.connect(url) as conn:
        return sorted(
            (str(j.status), j.job_type, j.payload["n"])
            for j in jobs.list_jobs(conn, statuses=list(jobs.JobStatus))
        )


def test_async_single(tockwork_database, drain):
    RAN.clear()
    with psycopg.connect(tockwork_database) as conn:
        jobs.enqueue_many(conn, [jobs.JobSpec("send_push", {"n": n}) for n in range(5)])
    stats = drain({"send_push": send_push})
    assert sorted(RAN) == [("push", n, True) for n in range(5)]
    assert stats.outcomes == {"succeeded": 5}
    assert _jobs_by_status(tockwork_database) == [
        ("succeeded", "send_push", n) for n in range(5)
    ]


def test_async_batch_with_a_failed_job(tockwork_database, drain):
    RAN.clear()
    with psycopg.connect(tockwork_database) as conn:
        jobs.enqueue_many(conn, [jobs.JobSpec("digest", {"n": n}) for n in range(6)])
    stats = drain({"digest": digest})
    assert RAN == [("digest", [0, 1, 2, 3, 4, 5])]  # one call: the batch
    assert stats.batches == 1
    assert stats.outcomes == {"succeeded": 5, "dead": 1}
    assert ("dead", "digest", 3) in _jobs_by_status(tockwork_database)


def test_async_and_sync_handlers_in_one_drain(tockwork_database, drain):
    RAN.clear()
    with psycopg.connect(tockwork_database) as conn:
        jobs.enqueue(conn, "send_push", {"n": 1}, queue="pushes")
        jobs.enqueue(conn, "audit", {"n": 2}, queue="audit")
        jobs.enqueue(conn, "digest", {"n": 7}, queue="pushes")
    stats = drain({"send_push": send_push, "audit": sync_audit, "digest": digest})
    assert sorted(r[:2] for r in RAN) == [("audit", 2), ("digest", [7]), ("push", 1)]
    assert [r[2] for r in RAN if r[0] == "audit"][0].startswith("tockwork-audit")
    assert stats.outcomes == {"succeeded": 3}


def test_async_retry_waits_for_the_frozen_clock(tockwork_database, frozen_clock, drain):
    attempts = []

    async def flaky(job):
        await asyncio.sleep(0)
        attempts.append(job.attempt)
        if job.attempt == 1:
            raise ConnectionError("provider down")

    with psycopg.connect(tockwork_database) as conn:
        jobs.enqueue(conn, "flaky", {"n": 0}, now=frozen_clock.now())
    assert drain({"flaky": flaky}).outcomes == {"retry": 1}
    assert attempts == [1]
    assert drain({"flaky": flaky}).claimed == 0  # the backoff has not passed
    frozen_clock.advance(timedelta(hours=1))
    assert drain({"flaky": flaky}).outcomes == {"succeeded": 1}
    assert attempts == [1, 2]
"""
    )
    result = _run(pytester, server_url, monkeypatch)
    result.assert_outcomes(passed=4)


def test_dst_kinds() -> None:
    berlin = [ZonedRule("standup", "weekdays@09:00", "Europe/Berlin")]
    assert dst_surprises(berlin, (2026, 2030)) == []
    doubled = dst_surprises([ZonedRule("x", "daily@01:30", "America/New_York", fold="both")], 2026)
    assert [(s.kind, len(s.item.fires)) for s in doubled] == [("doubled", 2)]
    once = dst_surprises([ZonedRule("x", "daily@01:30", "America/New_York")], 2026)
    assert once == []  # the default fold policy fires once: not a surprise
    skipped = dst_surprises([("daily@02:30", "America/New_York")], 2026)
    assert [s.kind for s in skipped] == ["shifted"]
    assert assert_dst_safe([("daily@02:30", "America/New_York")], years=2026, allow=["shifted"])


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"years": (2030, 2026)}, "years"),
        ({"years": (2026, 9999)}, "years"),
        ({"years": range(0)}, "years"),
        ({"years": "2026"}, "years"),
        ({"years": True}, "years"),
        ({"years": 2026, "allow": ["moved"]}, "allow"),
    ],
)
def test_bad_arguments_are_typed_errors(kwargs: dict[str, object], field: str) -> None:
    with pytest.raises(InvalidInput) as info:
        assert_dst_safe([("daily@02:30", "UTC")], **kwargs)  # type: ignore[arg-type]
    assert info.value.field == field


def test_bad_schedules_are_typed_errors() -> None:
    with pytest.raises(InvalidInput, match=r"schedules\[0\]"):
        dst_surprises([42], 2026)
    with pytest.raises(InvalidInput, match="schedules"):
        dst_surprises(ZonedRule("x", "daily@02:30", "UTC"), 2026)


def test_golden_cases_ship_with_the_package() -> None:
    cases = golden_cases()
    assert len(cases) > 400
    assert len({c.id for c in cases}) == len(cases)
