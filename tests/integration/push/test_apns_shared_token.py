"""The APNs provider token shared across processes through the database
(``scheduler.push.apns.database_issue``, table ``apns_provider_tokens``): every process of one
key sends the same token, exactly one of them renews it, and no token is stored.

Each ``ProviderToken`` here stands for a worker process (its own clock, its own cache); they
meet only in the database. The races use real concurrent connections.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import jwt
import psycopg
import pytest

from scheduler.push.apns import (
    TOKEN_REFRESH_AFTER,
    ProviderToken,
    database_issue,
    load_key,
    sign_provider_token,
)
from scheduler.push.fakes.apns import ApnsKey

T = 1_700_000_000.0  # an epoch second (in the past: PyJWT checks iat)


class Clock:
    def __init__(self, now: float = T) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def process(key: ApnsKey, path: Path, db_url: str, clock: Clock) -> ProviderToken:
    shared = database_issue(db_url, team_id=key.team_id, key_id=key.key_id)
    signing = load_key(key.write(path))
    return ProviderToken(
        signing, key_id=key.key_id, team_id=key.team_id, clock=clock, shared=shared
    )


def rows(conn: psycopg.Connection[Any]) -> list[tuple[Any, ...]]:
    return [tuple(r) for r in conn.execute("SELECT * FROM apns_provider_tokens").fetchall()]


def test_two_processes_send_one_token_and_one_renews_it(
    tmp_path: Path, db_url: str, conn: psycopg.Connection[Any]
) -> None:
    key = ApnsKey.generate()
    clock_a, clock_b = Clock(), Clock(T + 600)  # b starts ten minutes later (a restart)
    a = process(key, tmp_path / "a.p8", db_url, clock_a)
    b = process(key, tmp_path / "b.p8", db_url, clock_b)
    first = a.current()
    assert b.current() == first  # not a second token of the key within 20 minutes
    assert jwt.decode(first, options={"verify_signature": False})["iat"] == int(T)
    # Only the issue time is stored: the row holds no token, no signature.
    assert rows(conn) == [(key.team_id, key.key_id, int(T))]
    assert first not in str(rows(conn))
    # 50 minutes after it was signed, a renews; b, past its own 50 minutes later, takes a's.
    clock_a.now = T + TOKEN_REFRESH_AFTER
    renewed = a.current()
    assert renewed != first
    clock_b.now = T + TOKEN_REFRESH_AFTER + 1
    assert b.current() == renewed
    assert rows(conn) == [(key.team_id, key.key_id, int(T + TOKEN_REFRESH_AFTER))]
    # Each process signed twice (the first token, the renewal), none signed a token of its own.
    assert (a.signed, b.signed) == (2, 2)


def test_processes_racing_past_the_refresh_age_agree_on_one_renewal(
    tmp_path: Path, db_url: str, conn: psycopg.Connection[Any]
) -> None:
    """Eight processes whose cached token is due at once (clocks a second apart): one renews,
    the others read its issue time, whatever the interleaving (real concurrent statements)."""
    key = ApnsKey.generate()
    sign = database_issue(db_url, team_id=key.team_id, key_id=key.key_id)
    assert sign(int(T), int(TOKEN_REFRESH_AFTER)) == int(T)
    later = int(T + TOKEN_REFRESH_AFTER)
    got: list[int] = []
    start = threading.Barrier(8)

    def renew(i: int) -> None:
        start.wait()
        got.append(sign(later + i, int(TOKEN_REFRESH_AFTER)))

    threads = [threading.Thread(target=renew, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(got) == 8 and len(set(got)) == 1, got
    assert later <= got[0] < later + 8
    assert rows(conn) == [(key.team_id, key.key_id, got[0])]


def test_the_same_claims_make_the_same_token_and_another_key_another(tmp_path: Path) -> None:
    """What makes sharing the issue time enough: the signature is deterministic (RFC 6979)
    and verifies as ES256."""
    key, other = ApnsKey.generate(), ApnsKey.generate()
    signing = load_key(key.write(tmp_path / "k.p8"))
    tokens = {
        sign_provider_token(signing, key_id=key.key_id, team_id=key.team_id, issued_at=int(T))
        for _ in range(3)
    }
    assert len(tokens) == 1
    (token,) = tokens
    claims = jwt.decode(token, key.public_key(), algorithms=["ES256"])
    assert claims == {"iss": key.team_id, "iat": int(T)}
    signing_other = load_key(other.write(tmp_path / "o.p8"))
    assert token != sign_provider_token(
        signing_other, key_id=key.key_id, team_id=key.team_id, issued_at=int(T)
    )


def test_a_database_that_is_down_leaves_the_process_its_own_token(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    key = ApnsKey.generate()
    unreachable = "postgresql://nobody@127.0.0.1:1/none?connect_timeout=1"
    tokens = process(key, tmp_path / "k.p8", unreachable, Clock())
    with caplog.at_level("WARNING", logger="scheduler.push.apns"):
        token = tokens.current()
    assert jwt.decode(token, key.public_key(), algorithms=["ES256"])["iat"] == int(T)
    assert "could not be read" in caplog.text and token not in caplog.text
