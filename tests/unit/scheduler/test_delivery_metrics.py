"""The delivery handler's start delays, observed a batch at a time: the same exposed figures as
one observation a job."""

from __future__ import annotations

import random

from prometheus_client import CollectorRegistry, generate_latest

from jobs.metrics import Metrics, observe_all


def test_a_batch_s_delays_observed_together_expose_what_one_by_one_would() -> None:
    # A herd's one delay many times, values on and between the buckets' bounds, sums that
    # round differently by order (0.1 + 0.2), a huge one (the +Inf bucket), in random order.
    values = [0.5] * 300 + [0.0, 0.005, 0.1, 0.2, 1 / 3, 2.5, 7.0, 1e9, 0.5, 2.5, 60.0]
    random.Random(7).shuffle(values)
    one_by_one, together = CollectorRegistry(), CollectorRegistry()
    a = Metrics.for_registry(one_by_one).occurrence_start_delay
    b = Metrics.for_registry(together).occurrence_start_delay
    for start in (0, 150, 300):  # three batches, the sum carried from one to the next
        for value in values[start : start + 150]:
            a.labels("reminder").observe(value)
        observe_all(b.labels("reminder"), values[start : start + 150])
    observe_all(b.labels("other"), [])
    a.labels("other")
    assert figures(together) == figures(one_by_one)
    name = "tockwork_scheduler_occurrence_start_delay_seconds"
    assert f'{name}_count{{job_type="reminder"}} 311.0' in figures(together)
    assert f'{name}_bucket{{job_type="reminder",le="+Inf"}} 311.0' in figures(together)


def figures(registry: CollectorRegistry) -> list[str]:
    """The histogram's exposed samples (not their creation times, which differ)."""
    lines = generate_latest(registry).decode().splitlines()
    return [line for line in lines if "start_delay" in line and "_created" not in line]
