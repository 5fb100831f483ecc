"""The Django adapter on the real package and database: an enqueue inside
``transaction.atomic()`` commits and rolls back with it; outside, it autocommits."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict

import jobs
from scheduler import ScheduleExists, create_schedule, list_schedules
from scheduler.devdb import throwaway_database
from scheduler.migrations import COMPONENTS

django = pytest.importorskip("django")


@pytest.fixture(scope="module")
def django_db(server_url: str) -> Iterator[str]:
    """One database for this module: Django's settings are configured once per process."""
    from django.conf import settings

    with throwaway_database(
        server_url, f"tockwork_django_{os.getpid()}", components=COMPONENTS
    ) as url:
        params = conninfo_to_dict(url)
        database = {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": params.get("dbname"),
            "USER": params.get("user", ""),
            "PASSWORD": params.get("password", ""),
            "HOST": params.get("host", ""),
            "PORT": params.get("port", ""),
        }
        if not settings.configured:
            settings.configure(DATABASES={"default": database}, USE_TZ=True)
            django.setup()
        else:  # pragma: no cover - another module configured Django first
            settings.DATABASES["default"].update(database)
        yield url
        from django.db import connections

        connections.close_all()


def _payloads(url: str) -> list[Any]:
    with psycopg.connect(url) as conn:
        return [j.payload for j in jobs.list_jobs(conn, statuses=list(jobs.JobStatus))]


@pytest.fixture(autouse=True)
def _empty(django_db: str) -> None:
    with psycopg.connect(django_db) as conn:
        conn.execute("TRUNCATE jobs, schedules CASCADE")


def test_atomic_commit_and_rollback(django_db: str) -> None:
    from django.db import transaction

    from jobs.integrations import django as tw

    with transaction.atomic():
        tw.enqueue("send_welcome", {"user": 1})
        tw.enqueue_many([jobs.JobSpec("send_welcome", {"user": 2})])
        assert _payloads(django_db) == []  # not visible before atomic() commits
    with pytest.raises(RuntimeError), transaction.atomic():
        tw.enqueue("send_welcome", {"user": 3})
        raise RuntimeError("the view failed")
    assert sorted(p["user"] for p in _payloads(django_db)) == [1, 2]


def test_nested_atomic_rolls_back_only_the_inner_block(django_db: str) -> None:
    from django.db import transaction

    from jobs.integrations import django as tw

    with transaction.atomic():
        tw.enqueue("t", {"n": "outer"})
        try:
            with transaction.atomic():
                tw.enqueue("t", {"n": "inner"})
                raise ValueError
        except ValueError:
            pass
    assert _payloads(django_db) == [{"n": "outer"}]


def test_outside_atomic_it_autocommits_and_schedules_join(django_db: str) -> None:
    from django.db import transaction

    from jobs.integrations import django as tw

    tw.enqueue("t", {"n": 1})
    with transaction.atomic():
        create_schedule(tw.connection(), job_type="remind", rule="daily@08:00", zone="UTC")
        transaction.set_rollback(True)
    with psycopg.connect(django_db) as conn:
        assert list_schedules(conn) == []
    assert _payloads(django_db) == [{"n": 1}]


def test_a_schedule_commits_with_atomic_and_once(django_db: str) -> None:
    """A schedule created on the adapter's connection inside atomic() is invisible to another
    connection until the block commits, then exists once (a rollback of a second block with
    the same key leaves the first alone)."""
    from django.db import transaction

    from jobs.integrations import django as tw

    with transaction.atomic():
        created = create_schedule(
            tw.connection(),
            job_type="remind",
            rule="weekdays@08:00",
            zone="Europe/Rome",
            key="standup",
        )
        tw.enqueue("t", {"n": "with the schedule"})
        with psycopg.connect(django_db) as conn:
            assert list_schedules(conn) == []
    with pytest.raises(ScheduleExists), transaction.atomic():
        create_schedule(
            tw.connection(),
            job_type="remind",
            rule="daily@09:00",
            zone="Europe/Rome",
            key="standup",
        )
    with psycopg.connect(django_db) as conn:
        schedules = list_schedules(conn)
    assert [(s.id, s.key, str(s.rule)) for s in schedules] == [
        (created.id, "standup", "weekdays@08:00")
    ]
    assert _payloads(django_db) == [{"n": "with the schedule"}]


def test_unknown_alias(django_db: str) -> None:
    from jobs.integrations import django as tw

    with pytest.raises(jobs.InvalidJob, match="using"):
        tw.enqueue("t", using="replica")
