"""The fault proxy (tests/faultproxy.py) against the real server: it forwards, and a lost reply
is a committed transaction the client believes failed."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from tests.faultproxy import FaultProxy, is_commit, sql_contains


@pytest.fixture
def proxy(db_url: str) -> Iterator[FaultProxy]:
    with FaultProxy(db_url) as p:
        yield p


@pytest.fixture
def table(db_url: str) -> str:
    with psycopg.connect(db_url, autocommit=True) as c:
        c.execute("CREATE TABLE fp (id int PRIMARY KEY, note text)")
    return "fp"


def _ids(db_url: str) -> list[int]:
    with psycopg.connect(db_url) as c:
        return [r[0] for r in c.execute("SELECT id FROM fp ORDER BY id").fetchall()]


def test_commit_matcher() -> None:
    assert is_commit("COMMIT")
    assert is_commit(" commit work; ")
    assert is_commit("END")
    assert not is_commit("COMMIT PREPARED 'x'")
    assert not is_commit("SELECT 'COMMIT'")


def test_forwards_both_protocols_and_prepared_statements(proxy: FaultProxy, table: str) -> None:
    # prepare_threshold=0: every statement is prepared at once and re-run by Bind alone.
    with psycopg.connect(proxy.url, prepare_threshold=0) as conn:
        for i in range(3):
            conn.execute("INSERT INTO fp VALUES (%s, %s)", (i, "x" * 100_000))
        conn.execute("SELECT 1").fetchone()
        with conn.cursor() as cur, cur.copy("COPY fp (id) FROM STDIN") as copy:
            copy.write_row((10,))
        conn.commit()
        assert conn.execute("SELECT count(*) FROM fp").fetchone() == (4,)
    assert proxy.counts.connections == 1
    assert proxy.counts.commits == 2  # ours, and the one the with block's exit sends
    assert proxy.counts.faults == 0


def test_lost_commit_reply_of_a_committed_transaction(
    proxy: FaultProxy, table: str, db_url: str
) -> None:
    """The server committed, the client sees OperationalError: the fault this proxy exists for."""
    with psycopg.connect(proxy.url) as conn:
        conn.execute("INSERT INTO fp VALUES (1, 'a')")
        proxy.drop_next_commit_reply()
        with pytest.raises(psycopg.OperationalError):
            conn.commit()
    assert proxy.counts.faults == 1
    assert proxy.armed == 0
    assert _ids(db_url) == [1]


def test_lost_commit_reply_in_pipeline_mode(proxy: FaultProxy, table: str, db_url: str) -> None:
    """A COMMIT sent through a pipeline travels in the extended protocol (Parse/Bind/Sync)."""
    with (
        psycopg.connect(proxy.url) as conn,
        pytest.raises(psycopg.OperationalError),
        conn.pipeline(),
    ):
        conn.execute("INSERT INTO fp VALUES (2, 'b')")
        proxy.drop_next_commit_reply()
        conn.commit()
    assert proxy.counts.faults == 1
    assert _ids(db_url) == [2]


def test_lost_reply_of_an_autocommit_statement(proxy: FaultProxy, table: str, db_url: str) -> None:
    """An autocommit statement commits at its Sync: matched by its text, it is done when cut."""
    with psycopg.connect(proxy.url, autocommit=True) as conn:
        conn.execute("INSERT INTO fp VALUES (1, 'kept')")
        proxy.drop_reply(sql_contains("'lost reply'"))
        with pytest.raises(psycopg.OperationalError):
            conn.execute("INSERT INTO fp VALUES (3, 'lost reply') RETURNING id").fetchone()
    assert _ids(db_url) == [1, 3]
    assert proxy.counts.matched == ["INSERT INTO fp VALUES (3, 'lost reply') RETURNING id"]


def test_before_mode_never_reaches_the_server(proxy: FaultProxy, table: str, db_url: str) -> None:
    with psycopg.connect(proxy.url) as conn:
        conn.execute("INSERT INTO fp VALUES (4, 'd')")
        proxy.drop_reply(is_commit, mode="before")
        with pytest.raises(psycopg.OperationalError):
            conn.commit()
    assert _ids(db_url) == []


def test_only_the_named_application_and_times(proxy: FaultProxy, table: str, db_url: str) -> None:
    proxy.drop_next_commit_reply(times=2, application_name="victim")
    kw: dict[str, Any] = {"application_name": "bystander"}
    with psycopg.connect(proxy.url, **kw) as other:
        other.execute("INSERT INTO fp VALUES (5, 'e')")
        other.commit()  # not the victim: the reply arrives
    for i in (6, 7):
        with psycopg.connect(proxy.url, application_name="victim") as conn:
            conn.execute("INSERT INTO fp VALUES (%s, 'f')", (i,))
            with pytest.raises(psycopg.OperationalError):
                conn.commit()
    with psycopg.connect(proxy.url, application_name="victim") as conn:
        conn.execute("INSERT INTO fp VALUES (8, 'g')")
        conn.commit()  # both faults used
    assert proxy.wait_faults(2, timeout=5)
    assert _ids(db_url) == [5, 6, 7, 8]


def test_cut_all_is_a_restart_as_the_client_sees_it(proxy: FaultProxy, table: str) -> None:
    with psycopg.connect(proxy.url) as conn:
        conn.execute("SELECT 1")
        assert proxy.cut_all() == 1
        with pytest.raises(psycopg.OperationalError):
            conn.execute("SELECT 1")
    with psycopg.connect(proxy.url) as again:
        assert again.execute("SELECT 2").fetchone() == (2,)
