"""jobs.metrics.observe_many: n observations of one value recorded in one call expose exactly
what n calls of observe expose (every bucket, the count and the sum to its last digit), in
histograms with and without labels, for values on bucket bounds, between them, beyond the last,
and for values whose repeated sum differs from their product."""

from __future__ import annotations

import math

import pytest
from prometheus_client import CollectorRegistry, Histogram, generate_latest

from jobs.metrics import observe_many

BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0)
# (value, times): 0.1 and 1/3 added up one by one give another float than times * value.
SERIES = [(0.1, 7), (1 / 3, 501), (0.01, 3), (0.0, 2), (0.0123, 1), (7.5, 4), (0.1, 0), (1.0, 9)]


def exposition(registry: CollectorRegistry) -> list[str]:
    # Without the _created samples: the two registries' histograms are created at other times.
    text = generate_latest(registry).decode()
    return [line for line in text.splitlines() if "_created" not in line]


def histograms() -> tuple[CollectorRegistry, Histogram, Histogram]:
    registry = CollectorRegistry()
    plain = Histogram("t_plain_seconds", "plain", buckets=BUCKETS, registry=registry)
    labelled = Histogram(
        "t_labelled_seconds", "labelled", ["queue"], buckets=BUCKETS, registry=registry
    )
    return registry, plain, labelled


def test_the_exposition_is_that_of_one_observe_per_value() -> None:
    one_by_one, plain_a, labelled_a = histograms()
    at_once, plain_b, labelled_b = histograms()
    for value, times in SERIES:
        for _ in range(times):
            plain_a.observe(value)
            labelled_a.labels("q").observe(value)
            labelled_a.labels("r").observe(value * 2)
        observe_many(plain_b, value, times)
        observe_many(labelled_b.labels("q"), value, times)
        observe_many(labelled_b.labels("r"), value * 2, times)
    assert exposition(at_once) == exposition(one_by_one)
    # The test can fail on the sum: multiplying instead of adding up gives another sum here.
    total = 0.0
    for _ in range(501):
        total += 1 / 3
    assert total != 501 * (1 / 3)


def test_nothing_is_recorded_for_no_observation() -> None:
    registry, plain, _ = histograms()
    before = exposition(registry)
    observe_many(plain, 0.2, 0)
    assert exposition(registry) == before


def test_nan_counts_but_lands_in_no_bucket_as_observe_does() -> None:
    one_by_one, plain_a, _ = histograms()
    at_once, plain_b, _ = histograms()
    for _ in range(3):
        plain_a.observe(math.nan)
    observe_many(plain_b, math.nan, 3)
    assert exposition(at_once) == exposition(one_by_one)


def test_a_histogram_with_labels_refuses_as_observe_does() -> None:
    _, _, labelled = histograms()
    with pytest.raises(ValueError):
        labelled.observe(0.1)
    with pytest.raises(ValueError):
        observe_many(labelled, 0.1, 3)


def test_a_histogram_without_prometheus_clients_fields_gets_one_observe_each() -> None:
    class Recorder:
        def __init__(self) -> None:
            self.values: list[float] = []

        def observe(self, amount: float) -> None:
            self.values.append(amount)

    recorder = Recorder()
    observe_many(recorder, 0.5, 3)  # type: ignore[arg-type]
    assert recorder.values == [0.5, 0.5, 0.5]
