"""A worker process's garbage collector (jobs.worker.collect_less, `tockwork worker`)."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from jobs.worker import GC_YOUNG_THRESHOLD, collect_less


@pytest.fixture(autouse=True)
def restored() -> Iterator[None]:
    before = gc.get_threshold()
    yield
    gc.set_threshold(*before)


def test_the_youngest_generation_is_collected_less_often() -> None:
    gc.set_threshold(700, 10, 10)  # Python's defaults
    collect_less()
    assert gc.get_threshold() == (GC_YOUNG_THRESHOLD, 10, 10)
    collect_less()  # twice: the same
    assert gc.get_threshold() == (GC_YOUNG_THRESHOLD, 10, 10)


@pytest.mark.parametrize("given", [(0, 10, 10), (50_000, 5, 20)])
def test_an_applications_own_setting_is_kept(given: tuple[int, int, int]) -> None:
    """Disabled (0), or collected less often already: left as it is."""
    gc.set_threshold(*given)
    collect_less()
    assert gc.get_threshold() == given
