"""One embedded server per checkout (issue 26): a command in a sub-folder of the project (the
quickstart's ``cd examples/quickstart``) finds the project's ``.pgdata``, never makes its own."""

from __future__ import annotations

from pathlib import Path

import pytest

from scheduler.devdb import PGDATA_VARIABLE, project_pgdata


def test_a_sub_folder_finds_the_project_root(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(PGDATA_VARIABLE, raising=False)
    project = tmp_path / "checkout"
    (project / "examples" / "quickstart").mkdir(parents=True)
    (project / "pyproject.toml").write_text("")
    sub = project / "examples" / "quickstart"
    assert project_pgdata(sub) == project / ".pgdata"
    # A data folder that exists wins, wherever it is above.
    (tmp_path / ".pgdata").mkdir()
    (tmp_path / ".pgdata" / "PG_VERSION").write_text("18\n")
    assert project_pgdata(sub) == tmp_path / ".pgdata"
    # The variable wins over both.
    monkeypatch.setenv(PGDATA_VARIABLE, str(tmp_path / "mine"))
    assert project_pgdata(sub) == tmp_path / "mine"


def test_outside_any_project_it_is_the_current_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(PGDATA_VARIABLE, raising=False)
    lone = tmp_path / "lone"
    lone.mkdir()
    found = project_pgdata(lone)
    # Only an ancestor with a project marker or a data folder could change it.
    if not any((p / "pyproject.toml").exists() or (p / ".git").exists() for p in lone.parents):
        assert found == lone / ".pgdata"
