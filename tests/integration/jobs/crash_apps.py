"""Handlers for tests/integration/jobs/test_crash_unstarted.py's worker processes.

``hang`` and ``quick`` are those of :mod:`tests.integration.jobs.apps` (they record their runs
in the test's ``runs`` table); ``crash`` kills its worker process the moment it starts, with
exit code 97 (the proof it ran), before the worker can tell the database it started.
"""

from __future__ import annotations

import os

from jobs import Job
from tests.integration.jobs.apps import hang_first_attempt, quick

CRASH_EXIT = 97


def crash(job: Job) -> None:
    os._exit(CRASH_EXIT)


handlers = {"hang": hang_first_attempt, "quick": quick, "crash": crash}
