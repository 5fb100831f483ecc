"""The pytest plugin on a machine with no DATABASE_URL and no server running (issue 26): it starts
the project's embedded server for the session, says so, and stops it. Marker ``install`` (an
``initdb`` takes most of 20 s on a loaded machine): ``make test-install`` runs it, and
``.ci/run`` runs that."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest_plugins = ["pytester"]
pytestmark = [pytest.mark.install, pytest.mark.timeout(300)]

DOC = Path(__file__).resolve().parents[2] / "docs" / "testing.md"


def test_without_database_url_it_starts_the_embedded_server_says_so_and_stops_it(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 26: the plugin started a server in the user's project folder and left it running
    without a word. Whoever starts it stops it: the session says what it started, where, and
    stops it at its end."""
    import os
    import shutil

    from scheduler import devdb

    root = DOC.parents[1]
    # Beside the project's .pgdata (as root, the server runs as another user, who must reach it).
    pgdata = root / f".pgdata-plugin-test-{os.getpid()}"
    monkeypatch.delenv("DATABASE_URL", raising=False)
    monkeypatch.setenv(devdb.PGDATA_VARIABLE, str(pgdata))
    pytester.makepyfile(
        test_uses_db="""
import psycopg

def test_tables_are_there(tockwork_database):
    with psycopg.connect(tockwork_database) as conn:
        assert conn.execute("SELECT count(*) FROM jobs").fetchone() == (0,)
"""
    )
    try:
        result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-q", timeout=240)
        result.assert_outcomes(passed=1)
        output = result.stdout.str()
        assert f"started the embedded development PostgreSQL (data in {pgdata}" in output
        assert f"stopped the embedded PostgreSQL it started ({pgdata})" in output
        assert not devdb.is_running(pgdata)  # nothing left running
    finally:
        devdb.stop_embedded(pgdata)
        shutil.rmtree(pgdata, ignore_errors=True)
        shutil.rmtree(pgdata.parent / (pgdata.name + "-run"), ignore_errors=True)
