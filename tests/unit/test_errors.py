"""One root for every error (``TockworkError``) and for bad input (``InvalidInput``)."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from types import ModuleType

import pytest

import jobs
import scheduler
import timezones
from jobs.retry import RetryPolicy
from timezones.errors import InvalidInput, TockworkError, shown


def test_every_package_shares_the_roots() -> None:
    assert jobs.InvalidInput is scheduler.InvalidInput is timezones.InvalidInput
    inputs: tuple[type[Exception], ...] = (
        jobs.InvalidJob,
        scheduler.InvalidSchedule,
        timezones.InvalidRule,
    )
    for cls in inputs:
        assert issubclass(cls, InvalidInput)
        assert issubclass(cls, ValueError)
    roots: tuple[type[Exception], ...] = (
        jobs.JobsError,
        scheduler.SchedulerError,
        timezones.TimezoneError,
    )
    for cls in roots:
        assert issubclass(cls, TockworkError)
    assert not issubclass(jobs.MigrationError, InvalidInput)


def test_input_errors_name_field_and_value() -> None:
    with pytest.raises(InvalidInput) as info:
        RetryPolicy(jitter=2.0)
    assert (info.value.field, info.value.value) == ("jitter", 2.0)
    assert str(info.value) == "invalid jitter 2.0: must be from 0 to 1"
    with pytest.raises(InvalidInput) as info:
        timezones.get_zone("America/Chicgo")
    assert info.value.field == "zone"


def test_messages_embedding_a_value_are_bounded() -> None:
    error = jobs.InvalidJob("queue", "q" * 1_000_000, "too long")
    assert len(str(error)) < 250
    assert shown("x" * 10) == repr("x" * 10)


PACKAGES = ("timezones", "jobs", "scheduler")


def package_modules(package: str) -> list[ModuleType]:
    """``package`` and every module under it (``__main__`` aside: importing it runs the CLI)."""
    root = importlib.import_module(package)
    names = [m.name for m in pkgutil.walk_packages(root.__path__, f"{package}.")]
    return [root] + [importlib.import_module(n) for n in names if not n.endswith(".__main__")]


def exceptions_outside_the_root(modules: list[ModuleType]) -> list[str]:
    """Every exception class defined in ``modules`` that does not derive from TockworkError."""
    return sorted(
        f"{module.__name__}.{name}"
        for module in modules
        for name, obj in vars(module).items()
        if inspect.isclass(obj)
        and issubclass(obj, BaseException)
        and obj.__module__ == module.__name__
        and not issubclass(obj, TockworkError)
    )


@pytest.mark.parametrize("package", PACKAGES)
def test_every_exception_class_derives_from_the_root(package: str) -> None:
    modules = package_modules(package)
    assert len(modules) > 5, f"the walk found too few modules of {package}"
    assert exceptions_outside_the_root(modules) == []


def test_the_walk_sees_exceptions_outside_the_root() -> None:
    """The check finds a stray class (so the test above can fail)."""
    stray = ModuleType("stray")
    exec(
        "from timezones.errors import TockworkError\n"
        "class Stray(RuntimeError): pass\n"
        "class Fine(TockworkError, RuntimeError): pass\n",
        stray.__dict__,
    )
    assert exceptions_outside_the_root([stray]) == ["stray.Stray"]


def test_errors_keep_the_builtin_classes_callers_catch() -> None:
    from jobs.errors import ProjectionError, ServiceAlreadyRunning
    from scheduler.dashboard.app import Forbidden
    from scheduler.testing import DstSurprises

    assert issubclass(ServiceAlreadyRunning, jobs.JobsError)
    assert issubclass(ServiceAlreadyRunning, RuntimeError)
    assert issubclass(DstSurprises, scheduler.SchedulerError)
    assert issubclass(DstSurprises, AssertionError)
    assert issubclass(jobs.HandlerOutcome, jobs.JobsError)
    assert issubclass(ProjectionError, jobs.JobsError)
    assert issubclass(Forbidden, scheduler.SchedulerError)
