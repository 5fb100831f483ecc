"""The overlap policies' decision (scheduler/overlap.py), pure: given the previous jobs still
active (id -> status) and n new occurrences, which are enqueued, which skipped, what is
cancelled. Invariant: under ``skip`` at most one job is active after the decision, under
``buffer_one`` at most two; ``cancel_previous`` cancels exactly the waiting ones."""

from __future__ import annotations

import pytest

from scheduler.model import Overlap
from scheduler.overlap import admit


@pytest.mark.parametrize(
    ("policy", "active", "n", "admitted", "cancel"),
    [
        (Overlap.ALLOW, {1: "leased"}, 3, [True, True, True], []),
        (Overlap.SKIP, {}, 1, [True], []),
        (Overlap.SKIP, {}, 3, [True, False, False], []),
        (Overlap.SKIP, {1: "pending"}, 1, [False], []),
        (Overlap.SKIP, {1: "retrying"}, 2, [False, False], []),
        (Overlap.BUFFER_ONE, {}, 3, [True, True, False], []),
        (Overlap.BUFFER_ONE, {1: "leased"}, 2, [True, False], []),
        (Overlap.BUFFER_ONE, {1: "leased", 2: "pending"}, 1, [False], []),
        (Overlap.CANCEL_PREVIOUS, {1: "leased", 2: "pending"}, 1, [True], [2]),
        (Overlap.CANCEL_PREVIOUS, {1: "retrying"}, 3, [False, False, True], [1]),
        (Overlap.CANCEL_PREVIOUS, {}, 0, [], []),
    ],
)
def test_admit(
    policy: Overlap, active: dict[int, str], n: int, admitted: list[bool], cancel: list[int]
) -> None:
    result = admit(policy, active, n)
    assert result.admitted == admitted and result.cancel == cancel
    assert len(result.reasons) == n
    assert all((r is None) == ok for r, ok in zip(result.reasons, result.admitted, strict=True))
    after = len(result.active) + sum(result.admitted)
    if policy is Overlap.SKIP:
        assert after <= max(1, len(active))
    if policy is Overlap.BUFFER_ONE:
        assert after <= max(2, len(active))


def test_a_skip_names_the_active_job() -> None:
    (reason,) = admit(Overlap.SKIP, {41: "leased"}, 1).reasons
    assert reason == "overlap: previous job still active (job 41 leased)"
