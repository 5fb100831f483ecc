"""The files of deploy/: Prometheus alert rules, their promtool unit tests, the Grafana dashboard.

Every metric they name is one Tockwork exports (the instruments of jobs/metrics.py and
scheduler/webhooks/metrics.py, read from a real registry with their types' sample suffixes, and
the scrape-time gauges of jobs/metrics.py, scheduler/health.py and scheduler/webhooks/metrics.py),
so a renamed metric cannot leave an alert that never fires; every alert has a promtool unit
test. Where promtool is installed (Debian's ``prometheus`` package, which
.ci/run installs), ``promtool check rules`` and ``promtool test rules`` must pass.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from jobs.metrics import Metrics
from scheduler.webhooks.metrics import WebhookMetrics

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "deploy" / "prometheus" / "tockwork-rules.yml"
RULE_TESTS = ROOT / "deploy" / "prometheus" / "tockwork-rules.test.yml"
DASHBOARD = ROOT / "deploy" / "grafana" / "tockwork.json"
GAUGE_SOURCES = (
    ROOT / "jobs" / "metrics.py",
    ROOT / "scheduler" / "health.py",
    ROOT / "scheduler" / "webhooks" / "metrics.py",
)

_METRIC = re.compile(r"\btockwork_[a-z0-9_]*[a-z0-9]\b")
_SUFFIXES = {
    "counter": ("_total", "_created"),
    "histogram": ("_bucket", "_count", "_sum", "_created"),
    "gauge": ("",),
}


def exported() -> set[str]:
    """Every series name a Tockwork process can expose."""
    registry = CollectorRegistry()
    Metrics(registry)
    WebhookMetrics(registry)
    names = {
        family.name + suffix for family in registry.collect() for suffix in _SUFFIXES[family.type]
    }
    gauges = {
        match
        for source in GAUGE_SOURCES
        for match in re.findall(
            r'(?:GaugeMetricFamily|gauge)\(\s*"(tockwork_[a-z0-9_]+)"',
            source.read_text(encoding="utf-8"),
        )
    }
    # The scan must find the scrape-time gauges, or this test would pass on nothing.
    assert {"tockwork_queue_ready", "tockwork_scheduler_lag_seconds", "tockwork_database_up"} <= (
        gauges
    )
    return names | gauges


def names_in(text: str) -> set[str]:
    """The metric names in a YAML file's text, its comments left out."""
    lines = [line for line in text.splitlines() if not line.lstrip().startswith("#")]
    return set(_METRIC.findall("\n".join(lines)))


def queries_in(text: str) -> set[str]:
    """The metric names in the rules' ``expr`` blocks and the tests' ``series``: series names,
    where a family's base name (in an annotation's prose) would name nothing."""
    found: set[str] = set()
    block: int | None = None  # the indentation of the expr key being read
    for line in text.splitlines():
        indent = len(line) - len(line.lstrip())
        key = line.strip().removeprefix("- ")
        if block is not None and (indent > block or not line.strip()):
            found.update(_METRIC.findall(line))
            continue
        block = None
        if key.startswith(("expr:", "series:")):
            found.update(_METRIC.findall(line))
            block = indent
    return found


def families() -> set[str]:
    """Base names (a histogram's, a counter's without _total), fine in prose."""
    return {re.sub(r"_(total|bucket|count|sum|created)$", "", n) for n in exported()}


def dashboard_exprs(dashboard: dict[str, Any]) -> list[str]:
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    exprs += [v["definition"] for v in dashboard["templating"]["list"] if "definition" in v]
    return exprs


def test_the_rules_name_only_exported_metrics() -> None:
    text = RULES.read_text(encoding="utf-8")
    queried = queries_in(text)
    assert len(queried) >= 10
    assert queried - exported() == set()
    assert names_in(text) - exported() - families() == set()


def test_the_rule_tests_feed_only_exported_metrics() -> None:
    text = RULE_TESTS.read_text(encoding="utf-8")
    fed = queries_in(text)
    assert len(fed) >= 10
    assert fed - exported() == set()
    assert names_in(text) - exported() - families() == set()


def test_every_alert_has_a_unit_test() -> None:
    alerts = re.findall(r"^\s*- alert: (\w+)", RULES.read_text(encoding="utf-8"), re.M)
    tested = set(re.findall(r"alertname: (\w+)", RULE_TESTS.read_text(encoding="utf-8")))
    assert len(alerts) == len(set(alerts)) >= 6
    assert set(alerts) - tested == set()
    assert tested - set(alerts) == set()


def test_the_dashboard_uses_only_exported_metrics() -> None:
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    exprs = dashboard_exprs(dashboard)
    assert len(exprs) >= 20
    used = {name for expr in exprs for name in _METRIC.findall(expr)}
    assert used - exported() == set()
    # Every instrument and gauge appears on it somewhere (by its base name).
    bases = {re.sub(r"_(total|bucket|count|sum|created)$", "", n) for n in used}
    assert families() - bases == set()


def test_the_dashboard_is_well_formed() -> None:
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    for panel in dashboard["panels"]:
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24, panel["title"]
        for target in panel.get("targets", []):
            assert target["datasource"]["uid"] == "${datasource}", panel["title"]
            assert target["expr"].count("(") == target["expr"].count(")"), target["expr"]


PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(
    PROMTOOL is None,
    reason="promtool is not installed (Debian's prometheus package; .ci/run installs it)",
)


@needs_promtool
def test_promtool_checks_the_rules() -> None:
    assert PROMTOOL is not None
    done = subprocess.run(
        [PROMTOOL, "check", "rules", str(RULES)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr


@needs_promtool
def test_promtool_unit_tests_of_the_rules_pass() -> None:
    assert PROMTOOL is not None
    done = subprocess.run(
        [PROMTOOL, "test", "rules", RULE_TESTS.name],
        cwd=RULE_TESTS.parent,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout
