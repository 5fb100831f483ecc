"""Failover on a real Patroni cluster (issue 25): ``make failover``, marked ``slow``.

The workload and its checks are in :mod:`tests.failover.workload`; the cluster in
:mod:`tests.failover.cluster` (skipped, with the reason, when Debian's patroni, etcd-server or
postgresql-15 is missing). Each variant takes about 3 minutes. ``TOCKWORK_FAILOVER_DIR`` keeps
the cluster's data and every process's log in that folder (else a new one in /tmp, removed
after a passing run). The figures are printed (``-s``) and are what docs/operations.md quotes.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests.failover.cluster import PatroniCluster, unavailable
from tests.failover.servers import scratch_dir
from tests.failover.workload import Failover

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("synchronous", [True, False], ids=["synchronous", "asynchronous"])
def test_failover(synchronous: bool) -> None:
    reason = unavailable()
    if reason is not None:
        pytest.skip(reason)
    given = os.environ.get("TOCKWORK_FAILOVER_DIR")
    mode = "sync" if synchronous else "async"
    root = Path(given) / mode if given else scratch_dir(f"tockwork-failover-{mode}-")
    if given:
        shutil.rmtree(root, ignore_errors=True)
    cluster = PatroniCluster(root / "cluster", synchronous=synchronous)
    try:
        cluster.start()
        report = Failover(cluster, root / "logs").run()
    finally:
        cluster.stop()
    print(report.summary())
    assert report.failures == [], report.summary()
    if synchronous:
        assert report.lost == []
    assert report.tokens_twice == []
    assert report.log_lines["primary changed"] > 0
    if not given:
        shutil.rmtree(root, ignore_errors=True)
