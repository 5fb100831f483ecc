"""A service's settings are declared once (jobs/config.py): the constructor and the CLI read them.

The worker's keyword arguments still work and override single fields of its config; the CLI's
options take their defaults, bounds and help from the config's fields.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Mapping
from datetime import timedelta
from types import MappingProxyType

import pytest

import jobs
from jobs.config import settings
from scheduler.cli import build_parser
from scheduler.cli.common import config_from_args

URL = "postgresql://nobody@/nowhere"  # a Worker connects only when it runs
HANDLERS: dict[str, jobs.Handler] = {"t": lambda job: None}


def test_the_worker_takes_its_settings_from_its_config() -> None:
    config = jobs.WorkerConfig(lease=timedelta(seconds=9), grace=timedelta(seconds=2))
    worker = jobs.Worker(URL, HANDLERS, config=config)
    assert worker.config == config
    assert (worker.lease, worker.grace, worker.queues) == (
        timedelta(seconds=9),
        timedelta(seconds=2),
        {"default": 4},
    )
    assert worker.heartbeat_every == timedelta(seconds=3)


def test_keyword_arguments_override_single_fields() -> None:
    config = jobs.WorkerConfig(lease=timedelta(seconds=9))
    worker = jobs.Worker(URL, HANDLERS, {"q": 2}, config=config, poll_interval=timedelta(seconds=5))
    assert worker.config == dataclasses.replace(
        config, queues={"q": 2}, poll_interval=timedelta(seconds=5)
    )
    assert jobs.Worker(URL, HANDLERS).config == jobs.WorkerConfig()
    assert jobs.Worker(URL, HANDLERS, {}).queues == {"default": 4}  # empty: the default, as before


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"lease": timedelta(milliseconds=999)}, "lease"),
        ({"prefetch": -1}, "prefetch"),
        ({"queues": {"q": 0}}, "queues['q']"),
    ],
)
def test_bad_settings_name_the_keyword(kwargs: dict[str, object], field: str) -> None:
    with pytest.raises(jobs.InvalidJob) as info:
        jobs.Worker(URL, HANDLERS, **kwargs)  # type: ignore[arg-type]
    assert info.value.field == field
    with pytest.raises(jobs.InvalidJob):
        jobs.WorkerConfig(**kwargs)  # type: ignore[arg-type]


def test_every_setting_has_a_help_line() -> None:
    for config in (jobs.WorkerConfig, jobs.RelayConfig):
        for field, setting in settings(config):
            assert setting.help, f"{config.__name__}.{field.name}"


def _subcommand(name: str) -> argparse.ArgumentParser:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    found: argparse.ArgumentParser = sub.choices[name]
    return found


def test_the_relay_takes_its_settings_from_its_config() -> None:
    config = jobs.RelayConfig(batch_size=7)
    relay = jobs.Relay(URL, [], config=config, max_attempts=3)
    assert relay.config == dataclasses.replace(config, max_attempts=3)
    assert (relay.batch_size, relay.max_attempts, relay.lease) == (7, 3, timedelta(seconds=60))
    assert jobs.Relay(URL, []).config == jobs.RelayConfig()
    with pytest.raises(jobs.InvalidJob) as info:
        jobs.Relay(URL, [], poll_interval=timedelta(0))
    assert info.value.field == "poll_interval"


def test_the_relay_command_defaults_are_the_config_defaults() -> None:
    args = build_parser().parse_args(["relay", "--app", "m:a"])
    assert config_from_args(jobs.RelayConfig, args) == jobs.RelayConfig()
    args = build_parser().parse_args(["relay", "--app", "m:a", "--batch-size", "9", "--no-listen"])
    assert config_from_args(jobs.RelayConfig, args) == jobs.RelayConfig(batch_size=9, listen=False)


def test_the_worker_command_defaults_are_the_config_defaults() -> None:
    args = build_parser().parse_args(["worker", "--app", "m:a"])
    assert config_from_args(jobs.WorkerConfig, args) == jobs.WorkerConfig()
    args = build_parser().parse_args(
        ["worker", "--app", "m:a", "--lease", "7", "--poll", "0.5", "--no-listen"]
    )
    config = config_from_args(jobs.WorkerConfig, args)
    assert (config.lease, config.poll_interval, config.listen) == (
        timedelta(seconds=7),
        timedelta(seconds=0.5),
        False,
    )
    helps = {a.dest: a.help for a in _subcommand("worker")._actions}
    for field, setting in settings(jobs.WorkerConfig):
        if setting.flag is not None:
            dest = f"no_{field.name}" if setting.flag.startswith("--no-") else field.name
            assert helps[dest] == setting.help


@pytest.mark.parametrize("handlers", [{}, MappingProxyType({})])
def test_a_worker_without_handlers_is_refused(handlers: Mapping[str, jobs.Handler]) -> None:
    """A worker with no handler would claim nothing it could run (issue 26): refused."""
    with pytest.raises(jobs.InvalidJob) as info:
        jobs.Worker(URL, handlers)
    assert info.value.field == "handlers"
    assert "no handler" in str(info.value)
