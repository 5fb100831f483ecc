"""The packaging a user follows: the wheel `make dist` builds, installed with its extras into a
fresh venv outside the repository, runs docs/quickstart.md (issue 26).

``make test-install`` (marker ``install``, out of the default suite: pip takes most of a
minute) builds the sdist and the wheel, checks that they hold the package data (the SQL and the
migrations, the dashboard's templates and static files, ``py.typed``), creates a venv in a
temporary folder, ``pip install 'WHEEL[dashboard,embedded]'``, and then runs the quickstart
page's blocks in a copy of ``examples/quickstart`` there, through that venv's ``python`` and
``tockwork`` only (no ``PYTHONPATH``, the repository nowhere on the path): ``tockwork migrate``,
the python blocks (enqueue, create a schedule), the scheduler and the worker as processes until
the page's expected job and a job of the new schedule have succeeded, then SIGTERM (exit 0, no
traceback), then the page's remaining commands. The checkout and git-URL install lines of the
page are resolved by pip too (``--dry-run``: the same build, no second install).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.docs_snippets import PROJECT, ROOT, Block, collect
from tests.processes import TRACEBACK, wait_for

pytestmark = [pytest.mark.install, pytest.mark.timeout(600)]

QUICKSTART = ROOT / "docs" / "quickstart.md"
SERVICES = frozenset({"worker", "scheduler"})
# What the wheel must carry besides Python modules (pyproject.toml's package data).
PACKAGE_DATA = (
    "jobs/py.typed",
    "jobs/sql/schema.sql",
    "jobs/sql/job.sql",
    "jobs/sql/migrations/0001_jobs.sql",
    "scheduler/py.typed",
    "scheduler/sql/schema.sql",
    "scheduler/sql/migrations/0001_schedules.sql",
    "scheduler/simulated/sql/schema.sql",
    "scheduler/dashboard/templates/base.html",
    "scheduler/dashboard/static/style.css",
    "timezones/py.typed",
)


def _run(argv: list[str], cwd: Path, env: dict[str, str], timeout: float = 300) -> str:
    result = subprocess.run(
        argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, f"{argv} exited {result.returncode}:\n{output}"
    assert TRACEBACK not in output, f"{argv} printed a traceback:\n{output}"
    return output


def _build(dist: Path) -> tuple[Path, Path]:
    """``make dist`` into ``dist``: the wheel and the sdist, checked for their package data."""
    env = {**os.environ, "DIST_DIR": str(dist)}
    _run(["make", "-s", "dist", f"DIST_DIR={dist}"], ROOT, env)
    (wheel,) = dist.glob("tockwork-*-py3-none-any.whl")
    (sdist,) = dist.glob("tockwork-*.tar.gz")
    names = set(zipfile.ZipFile(wheel).namelist())
    missing = [n for n in PACKAGE_DATA if n not in names]
    assert not missing, f"the wheel lacks {missing}"
    assert any(n.endswith("entry_points.txt") for n in names)
    with tarfile.open(sdist) as archive:
        members = {m.split("/", 1)[1] for m in archive.getnames() if "/" in m}
    missing = [n for n in PACKAGE_DATA if n not in members]
    assert not missing, f"the sdist lacks {missing}"
    return wheel, sdist


def _clean_env(venv: Path, url: str) -> dict[str, str]:
    """The user's shell: the venv first on PATH, no PYTHONPATH, nothing of this repository."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in {"PYTHONPATH", "VIRTUAL_ENV", "TOCKWORK_DEV_DB", "PYTEST_ADDOPTS"}
        and not k.startswith("PYTEST_")
    }
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env["VIRTUAL_ENV"] = str(venv)
    env["DATABASE_URL"] = url
    env["PYTHONUNBUFFERED"] = "1"
    return env


def _python_source(blocks: list[Block], index: int) -> str:
    """A python block's script (a ``continues`` block runs after the one before it)."""
    block = blocks[index]
    if not block.continues:
        return block.text
    before = next(b for b in reversed(blocks[:index]) if b.lang == "python")
    return _python_source(blocks, blocks.index(before)) + "\n" + block.text


def test_the_built_wheel_runs_the_quickstart(tmp_path: Path, empty_db_url: str) -> None:
    assert not tmp_path.resolve().is_relative_to(ROOT), "the venv must be outside the repository"
    wheel, _sdist = _build(tmp_path / "dist")

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    env = _clean_env(venv, empty_db_url)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "--disable-pip-version-check"]
    # A current pip, as a user's would be (the one ensurepip bundles refuses git+file URLs).
    _run([*pip, "install", "-q", "-U", "pip"], tmp_path, env)
    _run([*pip, "install", "-q", f"{wheel}[dashboard,embedded]"], tmp_path, env)
    # The page's other two install lines resolve to the same project: a checkout's folder
    # with extras, and a git URL (here the repository's own, as git+file).
    for spec in (f"{ROOT}[dashboard]", f"tockwork[dashboard] @ git+file://{ROOT}"):
        out = _run(
            [*pip, "install", "--dry-run", "--no-deps", "--ignore-installed", spec], tmp_path, env
        )
        assert "Would install tockwork-" in out, out

    project = tmp_path / "project"
    shutil.copytree(PROJECT, project, ignore=shutil.ignore_patterns("__pycache__", ".pgdata*"))
    python = str(venv / "bin" / "python")
    tockwork = str(venv / "bin" / "tockwork")
    where = _run([python, "-c", "import jobs, scheduler; print(scheduler.__file__)"], project, env)
    assert str(venv) in where, f"scheduler imported from outside the venv: {where}"
    dashboard = "import scheduler.dashboard as d; d.create_app; print('ok')"
    assert "ok" in _run([python, "-c", dashboard], project, env)

    blocks = collect(QUICKSTART)
    services: list[tuple[str, subprocess.Popen[str]]] = []
    expectations: list[str] = []
    later: list[list[str]] = []
    try:
        for index, block in enumerate(blocks):
            for statement in block.directive("given-sql"):
                with psycopg.connect(empty_db_url, autocommit=True) as conn:
                    conn.execute(statement.encode())
            if block.lang == "python":
                if block.file:  # a file of the user's project: the copy holds it already
                    continue
                script = project / f"block_{block.line}.py"
                script.write_text(_python_source(blocks, index))
                _run([python, str(script)], project, env)
            for command in block.commands():
                if command.args and command.args[0] in SERVICES:
                    proc = subprocess.Popen(
                        [tockwork, *command.args], cwd=project, env=env, text=True,
                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                    )  # fmt: skip
                    services.append((str(command), proc))
                elif services:
                    later.append(command.args)  # after the services, as a reader types them
                else:
                    _run([tockwork, *command.args], project, env)
            expectations += block.directive("expect-sql")
        assert {s.split()[1] for s, _ in services} == SERVICES, "the page runs both services"
        # The page's own expectation (the enqueued job ran) and the schedule's first job: an
        # event the processes cause in the database, waited for, not a time.
        expectations.append(
            "SELECT EXISTS (SELECT FROM jobs_all WHERE job_type = 'send_push' "
            "AND status = 'succeeded' AND payload->>'user_id' = '7')"
        )
        with psycopg.connect(empty_db_url, autocommit=True) as conn:
            for query in expectations:
                wait_for(conn, query, timeout=120)
        for args in later:
            _run([tockwork, *args], project, env)
    finally:
        outputs = _stop(services)
    for name, (code, output) in outputs.items():
        assert code == 0, f"{name} exited {code} on SIGTERM:\n{output}"
        assert TRACEBACK not in output, f"{name} printed a traceback:\n{output}"
    assert "push to user 7" in next(out for n, (_, out) in outputs.items() if " worker " in n)
    # Nothing started an embedded server: DATABASE_URL was set throughout.
    assert not (project / ".pgdata").exists()


def _stop(services: list[tuple[str, subprocess.Popen[str]]]) -> dict[str, tuple[int, str]]:
    result: dict[str, tuple[int, Any]] = {}
    for _name, proc in services:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    for name, proc in services:
        try:
            out, _ = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate()
        result[f"{name} "] = (proc.returncode, out)
    return result
