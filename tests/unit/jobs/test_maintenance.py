"""The maintenance configs validate, and the batch loop stops when a batch comes back short."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

import pytest

import jobs
from jobs.batch import RunEffects
from jobs.maintenance import RescueConfig, RetentionConfig, rescue_leases
from jobs.model import Job
from jobs.store import EffectFailed, Finished

NOW = datetime(2026, 6, 30, 12, 0, tzinfo=UTC)


class ExpiredLeases:
    """A JobStore whose reap hands out ``expired`` leases, at most ``limit`` per call."""

    def __init__(self, expired: int) -> None:
        self.left = expired
        self.calls: list[tuple[int, datetime | None]] = []

    def reap(self, limit: int, now: datetime | None) -> list[tuple[int, str, str]]:
        self.calls.append((limit, now))
        n = min(limit, self.left)
        self.left -= n
        return [(self.left + i, "default", "retrying") for i in range(n)]

    # The rest of the protocol is not used by the rescuer.
    def claim(self, wanted: Mapping[str, int], worker: str, lease: timedelta,
              now: datetime | None, *, claim: UUID | None = None,
              started: Sequence[tuple[int, int]] = (),
              job_types: Sequence[str] | None = None) -> list[Job]:  # fmt: skip
        raise NotImplementedError

    def complete(self, finished: Sequence[Finished], worker: str,
                 now: datetime | None) -> dict[int, str]:  # fmt: skip
        raise NotImplementedError

    def complete_and_claim(self, finished: Sequence[Finished], wanted: Mapping[str, int],
                           worker: str, lease: timedelta, now: datetime | None, *,
                           effects: Sequence[RunEffects] = (),
                           effect_failed: EffectFailed | None = None,
                           claim: UUID | None = None,
                           started: Sequence[tuple[int, int]] = (),
                           job_types: Sequence[str] | None = None,
                           ) -> tuple[dict[int, str], list[Job]]:  # fmt: skip
        raise NotImplementedError

    def lost_reply(self, finished: Sequence[Finished], claim: UUID | None,
                   worker: str) -> tuple[dict[int, str], list[Job]]:  # fmt: skip
        raise NotImplementedError

    def next_due(self, queues: Sequence[str], now: datetime | None, *,
                 job_types: Sequence[str] | None = None) -> float | None:  # fmt: skip
        raise NotImplementedError

    def heartbeat(self, leases: Sequence[tuple[int, int]], lease: timedelta,
                  now: datetime | None, *, started: Sequence[int] = ()) -> set[int]:  # fmt: skip
        raise NotImplementedError

    def release(self, leases: Sequence[tuple[int, int]], worker: str,
                now: datetime | None) -> list[int]:  # fmt: skip
        raise NotImplementedError

    def release_unstarted(self, leases: Sequence[tuple[int, int]]) -> list[int]:
        raise NotImplementedError


def test_rescue_runs_batches_until_one_comes_back_short() -> None:
    store = ExpiredLeases(7)
    batches: list[tuple[str, int]] = []
    rescued = rescue_leases(
        store, RescueConfig(batch_size=3), now=NOW, on_batch=lambda k, n: batches.append((k, n))
    )
    assert len(rescued) == 7
    assert batches == [("leases", 3), ("leases", 3), ("leases", 1)]
    assert store.calls == [(3, NOW)] * 3


def test_a_full_last_batch_takes_one_more_empty_batch() -> None:
    store = ExpiredLeases(6)
    batches: list[int] = []
    assert len(rescue_leases(store, RescueConfig(3), on_batch=lambda _k, n: batches.append(n))) == 6
    assert batches == [3, 3, 0]


def test_a_worker_reaper_runs_one_bounded_batch() -> None:
    store = ExpiredLeases(10)
    assert len(rescue_leases(store, RescueConfig(batch_size=4, max_batches=1))) == 4
    assert store.left == 6 and len(store.calls) == 1


def test_defaults() -> None:
    assert RescueConfig() == RescueConfig(batch_size=1000, max_batches=None)
    config = RetentionConfig()
    assert (config.finished_retention, config.dead_retention) == (timedelta(days=7), None)
    assert (config.attempt_retention, config.effect_retention) == (timedelta(days=30),) * 2
    assert (config.outbox_retention, config.batch_size) == (timedelta(days=7), 5000)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"finished_retention": timedelta(days=-1)}, "finished_retention"),
        ({"dead_retention": timedelta(seconds=-1)}, "dead_retention"),
        ({"attempt_retention": 30}, "attempt_retention"),
        ({"effect_retention": None}, "effect_retention"),
        ({"outbox_retention": timedelta(-1)}, "outbox_retention"),
        ({"batch_size": 0}, "batch_size"),
        ({"batch_size": True}, "batch_size"),
    ],
)
def test_bad_retention_configs_are_refused(kwargs: dict[str, Any], field: str) -> None:
    with pytest.raises(jobs.InvalidJob) as info:
        RetentionConfig(**kwargs)
    assert info.value.field == field


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [({"batch_size": 0}, "batch_size"), ({"max_batches": 0}, "max_batches"),
     ({"max_batches": 1.5}, "max_batches")],
)  # fmt: skip
def test_bad_rescue_configs_are_refused(kwargs: dict[str, Any], field: str) -> None:
    with pytest.raises(jobs.InvalidJob) as info:
        RescueConfig(**kwargs)
    assert info.value.field == field
