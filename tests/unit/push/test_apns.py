"""The APNs channel's pure parts: the request it builds, the error table, the provider token."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from scheduler.errors import InvalidPushConfig
from scheduler.push.apns import (
    DEFAULT_RETRY_AFTER,
    ApnsChannel,
    ProviderToken,
    apns_id,
    classify,
    collapse_id,
    load_key,
    payload,
    request_headers,
    retry_after,
    valid_device_token,
)
from scheduler.push.fakes.apns import ApnsKey
from scheduler.push.http2 import Response
from scheduler.push.message import PushMessage, PushStatus

NOW = datetime(2026, 3, 1, 8, 0, tzinfo=UTC)
TOKEN = "a1" * 32


def message(**changes: Any) -> PushMessage:
    fields: dict[str, Any] = {
        "key": "occ-1:dev-1",
        "channel": "apns",
        "token": TOKEN,
        "title": "Water the plants",
        "body": "It is 08:00",
    }
    fields.update(changes)
    return PushMessage(**fields)


# -- the request ---------------------------------------------------------------------------------


def test_apns_id_is_a_uuid_derived_from_the_key() -> None:
    first = apns_id("occ-1:dev-1")
    assert uuid.UUID(first).version == 5
    assert apns_id("occ-1:dev-1") == first
    assert apns_id("occ-1:dev-2") != first


@pytest.mark.parametrize(
    ("key", "expected"),
    [
        ("x" * 100, "x" * 64),
        ("é" * 40, "é" * 32),  # 2 bytes each: 64 bytes exactly
        ("€" * 30, "€" * 21),  # 3 bytes each: 63 bytes, the 22nd would be cut inside
        ("a" + "😀" * 20, "a" + "😀" * 15),  # 1 + 4*15 = 61 bytes
        ("short", "short"),
    ],
)
def test_collapse_id_is_cut_to_64_bytes_never_inside_a_character(key: str, expected: str) -> None:
    cut = collapse_id(key)
    assert cut == expected
    assert len(cut.encode()) <= 64


@pytest.mark.parametrize(
    ("token", "valid"),
    [
        ("a1" * 32, True),
        ("A1" * 32, True),
        ("ab" * 100, True),
        ("a1" * 31, False),  # 62 digits: short
        ("ab" * 101, False),  # 202 digits: long
        ("a" * 65, False),  # odd: not whole bytes
        ("g1" * 32, False),
        ("a1" * 31 + "/x", False),
        ("", False),
    ],
)
def test_device_tokens_are_hex_of_whole_bytes(token: str, valid: bool) -> None:
    assert valid_device_token(token) is valid


def test_headers_of_a_message() -> None:
    m = message(collapse_key="schedule-7", expires_at=NOW + timedelta(hours=2))
    assert request_headers(m, topic="com.example.app", now=NOW) == [
        ("apns-topic", "com.example.app"),
        ("apns-push-type", "alert"),
        ("apns-priority", "10"),
        ("apns-id", apns_id(m.key)),
        ("apns-expiration", str(int((NOW + timedelta(hours=2)).timestamp()))),
        ("apns-collapse-id", "schedule-7"),
    ]


def test_headers_priority_expiry_and_collapse_variants() -> None:
    plain = dict(request_headers(message(priority="normal"), topic="t.app", now=NOW))
    assert plain["apns-priority"] == "5"
    assert "apns-expiration" not in plain and "apns-collapse-id" not in plain
    past = message(expires_at=NOW - timedelta(seconds=1))
    assert dict(request_headers(past, topic="t.app", now=NOW))["apns-expiration"] == "0"
    at_now = message(expires_at=NOW)
    assert dict(request_headers(at_now, topic="t.app", now=NOW))["apns-expiration"] == "0"
    long = message(collapse_key="k" * 80)
    assert dict(request_headers(long, topic="t.app", now=NOW))["apns-collapse-id"] == "k" * 64
    with pytest.raises(ValueError, match="priority 'urgent'"):
        request_headers(message(priority="urgent"), topic="t.app", now=NOW)


def test_payload_puts_data_beside_aps_and_the_key_last() -> None:
    m = message(data={"schedule": "7", "tockwork_key": "spoofed"})
    assert json.loads(payload(m)) == {
        "aps": {"alert": {"title": "Water the plants", "body": "It is 08:00"}, "sound": "default"},
        "schedule": "7",
        "tockwork_key": "occ-1:dev-1",
    }
    assert json.loads(payload(message(title="Café ☕")))["aps"]["alert"]["title"] == "Café ☕"
    with pytest.raises(ValueError, match="'aps' is reserved"):
        payload(message(data={"aps": "x"}))


# -- the answer ----------------------------------------------------------------------------------


def test_retry_after_reads_seconds_and_http_dates() -> None:
    assert retry_after("120", NOW) == timedelta(seconds=120)
    assert retry_after(" 7 ", NOW) == timedelta(seconds=7)
    assert retry_after("Sun, 01 Mar 2026 08:05:00 GMT", NOW) == timedelta(minutes=5)
    assert retry_after("Sun, 01 Mar 2026 07:00:00 GMT", NOW) == timedelta(0)
    assert retry_after("soon", NOW) is None
    assert retry_after(None, NOW) is None


def answer(status: int, reason: str | None = None, **extra: Any) -> Response:
    body = json.dumps({"reason": reason, **extra}).encode() if reason else b""
    headers = {"retry-after": extra.pop("retry")} if "retry" in extra else {}
    return Response(status, headers, body)


TABLE = [
    (200, None, PushStatus.DELIVERED, None),
    (400, "BadDeviceToken", PushStatus.REJECTED, "BadDeviceToken"),
    (400, "DeviceTokenNotForTopic", PushStatus.REJECTED, "DeviceTokenNotForTopic"),
    (410, "Unregistered", PushStatus.REJECTED, "Unregistered"),
    (410, "ExpiredToken", PushStatus.REJECTED, "ExpiredToken"),
    (400, "BadCollapseId", PushStatus.PERMANENT, "BadCollapseId"),
    (400, "BadExpirationDate", PushStatus.PERMANENT, "BadExpirationDate"),
    (400, "BadPriority", PushStatus.PERMANENT, "BadPriority"),
    (400, "BadTopic", PushStatus.PERMANENT, "BadTopic"),
    (400, "MissingTopic", PushStatus.PERMANENT, "MissingTopic"),
    (400, "PayloadEmpty", PushStatus.PERMANENT, "PayloadEmpty"),
    (400, "TopicDisallowed", PushStatus.PERMANENT, "TopicDisallowed"),
    (403, "InvalidProviderToken", PushStatus.PERMANENT, "InvalidProviderToken"),
    (403, "MissingProviderToken", PushStatus.PERMANENT, "MissingProviderToken"),
    (403, "BadCertificate", PushStatus.PERMANENT, "BadCertificate"),
    (403, "BadCertificateEnvironment", PushStatus.PERMANENT, "BadCertificateEnvironment"),
    (403, "ExpiredProviderToken", PushStatus.TRANSIENT, "ExpiredProviderToken"),
    (404, "BadPath", PushStatus.PERMANENT, "BadPath"),
    (405, "MethodNotAllowed", PushStatus.PERMANENT, "MethodNotAllowed"),
    (413, "PayloadTooLarge", PushStatus.PERMANENT, "PayloadTooLarge"),
    (429, "TooManyRequests", PushStatus.RATE_LIMITED, "TooManyRequests"),
    (429, "TooManyProviderTokenUpdates", PushStatus.RATE_LIMITED, "TooManyProviderTokenUpdates"),
    (500, "InternalServerError", PushStatus.TRANSIENT, "InternalServerError"),
    (503, "ServiceUnavailable", PushStatus.TRANSIENT, "ServiceUnavailable"),
    (503, "Shutdown", PushStatus.TRANSIENT, "Shutdown"),
    (502, None, PushStatus.TRANSIENT, "http_502"),
    (401, None, PushStatus.PERMANENT, "http_401"),
]


@pytest.mark.parametrize(("status", "reason", "expected", "code"), TABLE)
def test_the_error_table(
    status: int, reason: str | None, expected: PushStatus, code: str | None
) -> None:
    m = message()
    result = classify(m, answer(status, reason), NOW)
    assert (result.status, result.code) == (expected, code)
    assert result.message is m
    if status != 200:
        assert result.error is not None and str(status) in result.error
        assert TOKEN not in result.error


def test_rate_limits_and_5xx_carry_the_servers_hint() -> None:
    limited = classify(message(), answer(429, "TooManyRequests"), NOW)
    assert limited.retry_after == DEFAULT_RETRY_AFTER
    hinted = classify(message(), answer(429, "TooManyRequests", retry="30"), NOW)
    assert hinted.retry_after == timedelta(seconds=30)
    busy = classify(message(), answer(503, "ServiceUnavailable", retry="5"), NOW)
    assert (busy.status, busy.retry_after) == (PushStatus.TRANSIENT, timedelta(seconds=5))
    assert classify(message(), answer(500, "InternalServerError"), NOW).retry_after is None


def test_an_unregistered_answer_says_since_when() -> None:
    since = int(datetime(2026, 2, 1, tzinfo=UTC).timestamp() * 1000)
    result = classify(message(), answer(410, "Unregistered", timestamp=since), NOW)
    assert (
        result.error == "APNs answered 410 Unregistered (invalid since 2026-02-01T00:00:00+00:00)"
    )


@pytest.mark.parametrize(
    "body",
    [b"not json", b"[]", json.dumps({"reason": TOKEN + " is gone"}).encode(), b'{"reason": 5}'],
)
def test_an_odd_reason_is_not_repeated(body: bytes) -> None:
    result = classify(message(), Response(400, {}, body), NOW)
    assert (result.status, result.code, result.error) == (
        PushStatus.PERMANENT,
        "http_400",
        "APNs answered 400",
    )


# -- the provider token --------------------------------------------------------------------------


class Clock:
    def __init__(self, start: float = 1_772_352_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def key() -> ApnsKey:
    return ApnsKey.generate("ABCDE12345", "TEAM123456")


def test_the_token_is_an_es256_jwt_of_the_key(key: ApnsKey) -> None:
    clock = Clock()
    signing = serialization.load_pem_private_key(key.pem, password=None)
    assert isinstance(signing, ec.EllipticCurvePrivateKey)
    tokens = ProviderToken(signing, key_id=key.key_id, team_id=key.team_id, clock=clock)
    token = tokens.current()
    assert jwt.get_unverified_header(token) == {"alg": "ES256", "kid": "ABCDE12345", "typ": "JWT"}
    claims = jwt.decode(token, key.public_key(), algorithms=["ES256"])
    assert claims == {"iss": "TEAM123456", "iat": int(clock.now)}


def test_the_token_is_renewed_at_50_minutes_and_on_expiry_no_sooner_than_20(
    tmp_path: Path, key: ApnsKey
) -> None:
    clock = Clock()
    signing = load_key(key.write(tmp_path / "k.p8"))
    tokens = ProviderToken(signing, key_id=key.key_id, team_id=key.team_id, clock=clock)
    first = tokens.current()
    clock.now += 50 * 60 - 1
    assert tokens.current() == first
    clock.now += 1
    second = tokens.current()
    assert second != first and tokens.signed == 2
    # APNs says "expired" to the new token: younger than 20 minutes, it is kept.
    clock.now += 20 * 60 - 1
    assert tokens.expired(second) is False
    assert tokens.current() == second
    # A stale answer to the old token: the current one is already newer, resend with it.
    assert tokens.expired(first) is True and tokens.signed == 2
    clock.now += 1
    assert tokens.expired(second) is True
    third = tokens.current()
    assert third not in (first, second) and tokens.signed == 3


# -- configuration -------------------------------------------------------------------------------


def write_key(path: Path, private: Any, fmt: serialization.PrivateFormat) -> Path:
    path.write_bytes(
        private.private_bytes(serialization.Encoding.PEM, fmt, serialization.NoEncryption())
    )
    return path


def test_bad_key_files_are_named_never_shown(tmp_path: Path, key: ApnsKey) -> None:
    pkcs8 = serialization.PrivateFormat.PKCS8
    rsa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    p384 = ec.generate_private_key(ec.SECP384R1())
    p256 = ec.generate_private_key(ec.SECP256R1())
    cases = {
        tmp_path / "missing.p8": "cannot be read",
        tmp_path / "text.p8": "not a PKCS#8 PEM",
        write_key(tmp_path / "rsa.p8", rsa_key, pkcs8): "not an EC P-256",
        write_key(tmp_path / "p384.p8", p384, pkcs8): "not an EC P-256",
        write_key(tmp_path / "sec1.p8", p256, serialization.PrivateFormat.TraditionalOpenSSL): (
            "not a PKCS#8 PEM"
        ),
        tmp_path / "broken.p8": "not a readable",
    }
    (tmp_path / "text.p8").write_text("hello")
    (tmp_path / "broken.p8").write_bytes(key.pem.replace(b"M", b"Q", 5))
    for path, reason in cases.items():
        with pytest.raises(InvalidPushConfig) as info:
            load_key(path)
        assert (info.value.field, info.value.value) == ("key_file", str(path))
        assert reason in str(info.value)
        assert "PRIVATE KEY" not in str(info.value) and info.value.__cause__ is None
    assert isinstance(load_key(key.write(tmp_path / "good.p8")), ec.EllipticCurvePrivateKey)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("key_id", "short"),
        ("key_id", "abcde12345"),
        ("team_id", "TEAM12345678"),
        ("topic", ""),
        ("topic", "com.example/app"),
        ("url", "ftp://example.com"),
        ("url", "prod"),
        ("connections", 0),
        ("max_in_flight", True),
        ("quota_per_minute", 0),
        ("connect_timeout", 0),
        ("request_timeout", -1.0),
    ],
)
def test_bad_settings_name_the_field(
    tmp_path: Path, key: ApnsKey, field: str, value: object
) -> None:
    settings: dict[str, Any] = {
        "key_file": key.write(tmp_path / "k.p8"),
        "key_id": key.key_id,
        "team_id": key.team_id,
        "topic": "com.example.app",
        field: value,
    }
    with pytest.raises(InvalidPushConfig) as info:
        ApnsChannel(**settings)
    assert (info.value.field, info.value.value) == (field, value)


def test_a_url_with_credentials_is_refused_without_them(tmp_path: Path, key: ApnsKey) -> None:
    with pytest.raises(InvalidPushConfig) as info:
        ApnsChannel(
            key_file=key.write(tmp_path / "k.p8"),
            key_id=key.key_id,
            team_id=key.team_id,
            topic="com.example.app",
            url="https://user:hunter2@push.example.com",
        )
    assert info.value.field == "url" and "hunter2" not in str(info.value)


def test_a_good_configuration_builds(tmp_path: Path, key: ApnsKey) -> None:
    channel = ApnsChannel(
        key_file=key.write(tmp_path / "k.p8"),
        key_id=key.key_id,
        team_id=key.team_id,
        topic="com.example.app",
        url="sandbox",
        quota_per_minute=600,
    )
    assert (channel.name, channel.quota_per_minute) == ("apns", 600)
    assert "PRIVATE" not in repr(channel)


def test_hpack_debug_records_are_dropped_and_warnings_kept(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """hpack logs header values (bearer tokens, device tokens in ``:path``) at DEBUG; the
    HTTP/2 client under the channel drops them, and hpack's warnings still pass."""
    import logging

    caplog.set_level(logging.DEBUG)
    names = ("hpack.hpack", "hpack.table")
    # aioapns (imported by another test) sets hpack's level to CRITICAL: back to the default
    # here, so the filter is what is checked.
    parent = logging.getLogger("hpack")
    level = parent.level
    parent.setLevel(logging.NOTSET)
    try:
        for name in names:
            logger = logging.getLogger(name)
            logger.debug("Decoded (b'authorization', b'bearer %s')", "secret-jwt")
            logger.warning("a warning of %s", name)
    finally:
        parent.setLevel(level)
    messages = [record.getMessage() for record in caplog.records]
    assert messages == [f"a warning of {name}" for name in names]
