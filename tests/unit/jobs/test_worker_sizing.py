"""The adaptive claim size: ahead for fast handlers, a few for slow ones, none unmeasured."""

from __future__ import annotations

from datetime import timedelta

from jobs.worker import MAX_AHEAD, ClaimSizer

LEASE = timedelta(seconds=30)


def grow(sizer: ClaimSizer, rounds: int = 20) -> list[int]:
    """Claims that always come back full (a large backlog), nothing running or waiting."""
    asked = []
    for _ in range(rounds):
        n = sizer.wanted(running=0, unstarted=0)
        asked.append(n)
        sizer.claimed(n, n)
    return asked


def test_unmeasured_handlers_claim_only_free_threads() -> None:
    sizer = ClaimSizer(4, LEASE, None)
    assert grow(sizer) == [4] * 20
    assert sizer.wanted(running=3, unstarted=0) == 1
    assert sizer.wanted(running=4, unstarted=0) == 0


def test_fast_handlers_claim_ahead_up_to_the_cap() -> None:
    sizer = ClaimSizer(4, LEASE, None)
    sizer.observe(1, 0.0001)
    asked = grow(sizer)
    assert asked[:4] == [4, 8, 12, 20]  # free threads + an ahead target doubling from 4
    assert asked[-1] == 4 + MAX_AHEAD
    # Jobs already waiting for a thread count against the target.
    assert sizer.wanted(running=4, unstarted=MAX_AHEAD) == 0


def test_a_two_second_handler_does_not_hoard_leases() -> None:
    """4 threads, a 30 s lease: what they start within 3 s at 2 s a job is 6 jobs ahead."""
    sizer = ClaimSizer(4, LEASE, None)
    for _ in range(10):
        sizer.observe(1, 2.0)
    assert max(grow(sizer)) == 4 + 6
    assert sizer.wanted(running=4, unstarted=6) == 0


def test_a_batch_counts_its_time_over_its_jobs() -> None:
    sizer = ClaimSizer(16, LEASE, None)
    sizer.observe(500, 0.5)  # 1 ms a job
    assert sizer.bound() == MAX_AHEAD


def test_a_short_claim_halves_the_target() -> None:
    sizer = ClaimSizer(4, LEASE, None)
    sizer.observe(1, 0.0001)
    grow(sizer)
    sizer.claimed(sizer.wanted(0, 0), 3)
    assert sizer.ahead == MAX_AHEAD // 2
    for _ in range(20):
        sizer.claimed(sizer.wanted(0, 0), 0)
    assert sizer.ahead == 0


def test_the_estimate_follows_a_handler_that_slows_down() -> None:
    sizer = ClaimSizer(4, LEASE, None)
    sizer.observe(1, 0.0001)
    grow(sizer)
    for _ in range(40):
        sizer.observe(1, 2.0)
    assert sizer.wanted(running=0, unstarted=0) == 4 + 6


def test_an_explicit_prefetch_is_fixed() -> None:
    sizer = ClaimSizer(8, LEASE, 250)
    assert grow(sizer, 3) == [258] * 3
    sizer.observe(1, 10.0)
    assert sizer.wanted(running=8, unstarted=0) == 250
    assert ClaimSizer(4, LEASE, 0).wanted(running=1, unstarted=0) == 3
