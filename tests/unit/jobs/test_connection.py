"""The pooler mode (jobs/connection.py): where it comes from, and what it changes."""

from __future__ import annotations

import pytest

import jobs
from jobs.connection import listen_url


def test_the_mode_comes_from_the_argument_then_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("TOCKWORK_POOLER", raising=False)
    assert jobs.pooler_mode() == "session"
    monkeypatch.setenv("TOCKWORK_POOLER", "")
    assert jobs.pooler_mode() == "session"
    monkeypatch.setenv("TOCKWORK_POOLER", "transaction")
    assert jobs.pooler_mode() == "transaction"
    assert jobs.pooler_mode("session") == "session"  # the caller wins


@pytest.mark.parametrize(
    ("given", "env", "field"),
    [
        ("Transaction", None, "pooler"),
        ("statement", None, "pooler"),
        (None, "txn", "TOCKWORK_POOLER"),
    ],
)
def test_other_modes_are_input_errors_naming_where_they_came_from(
    given: str | None, env: str | None, field: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if env is not None:
        monkeypatch.setenv("TOCKWORK_POOLER", env)
    with pytest.raises(jobs.InvalidInput) as info:
        jobs.pooler_mode(given)
    assert info.value.field == field
    assert info.value.value == (given or env)


def test_a_long_bad_value_is_shown_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOCKWORK_POOLER", "x" * 100_000)
    with pytest.raises(jobs.InvalidInput) as info:
        jobs.pooler_mode()
    assert len(str(info.value)) < 200


def test_transaction_mode_turns_prepared_statements_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TOCKWORK_POOLER", raising=False)
    assert jobs.connect_kwargs() == {}
    assert jobs.connect_kwargs("session", prepare_threshold=2) == {"prepare_threshold": 2}
    given = {"prepare_threshold": 0, "application_name": "x"}
    assert jobs.connect_kwargs("transaction", **given) == {
        "prepare_threshold": None,  # whatever was asked: it cannot survive the pooler
        "application_name": "x",
    }
    monkeypatch.setenv("TOCKWORK_POOLER", "transaction")
    assert jobs.connect_kwargs() == {"prepare_threshold": None}


def test_the_listen_url_comes_from_the_argument_then_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("TOCKWORK_LISTEN_URL", raising=False)
    assert listen_url() is None
    monkeypatch.setenv("TOCKWORK_LISTEN_URL", "postgresql://db/app")
    assert listen_url() == "postgresql://db/app"
    assert listen_url("postgresql://other/app") == "postgresql://other/app"
