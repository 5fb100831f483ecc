"""FcmChannel's pure parts: the FCM v1 message of a PushMessage, and the one error table."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from scheduler.errors import InvalidPushConfig
from scheduler.push.fcm import classify, fcm_message, load_service_account
from scheduler.push.http2 import Response
from scheduler.push.message import PushMessage, PushStatus

NOW = datetime(2026, 3, 1, 8, 0, tzinfo=UTC)


def _message(**kwargs: object) -> PushMessage:
    values: dict[str, object] = {
        "key": "occ-1:dev-1",
        "channel": "fcm",
        "token": "device-token-abcdef123456",
        "title": "Pill",
        "body": "08:00",
    }
    values.update(kwargs)
    return PushMessage(**values)  # type: ignore[arg-type]


def test_mapping_full() -> None:
    message = _message(
        data={"schedule": "s1"},
        collapse_key="s1",
        expires_at=NOW + timedelta(hours=2, milliseconds=900),
        priority="high",
    )
    assert fcm_message(message, NOW) == {
        "token": "device-token-abcdef123456",
        "notification": {"title": "Pill", "body": "08:00"},
        "data": {"schedule": "s1", "tockwork_key": "occ-1:dev-1"},
        "android": {"priority": "HIGH", "ttl": "7200s", "collapse_key": "s1"},
        "apns": {
            "headers": {
                "apns-priority": "10",
                "apns-expiration": str(int((NOW + timedelta(hours=2)).timestamp())),
                "apns-collapse-id": "s1",
            }
        },
    }


def test_mapping_minimal_normal_priority_and_expired() -> None:
    plain = fcm_message(_message(priority="normal"), NOW)
    assert plain["android"] == {"priority": "NORMAL"}
    assert plain["apns"] == {"headers": {"apns-priority": "5"}}
    assert plain["data"] == {"tockwork_key": "occ-1:dev-1"}
    expired = fcm_message(_message(expires_at=NOW - timedelta(minutes=1)), NOW)
    assert expired["android"]["ttl"] == "0s"


def test_collapse_id_cut_to_64_bytes_on_a_character_boundary() -> None:
    key = "é" * 40  # 80 bytes
    headers = fcm_message(_message(collapse_key=key), NOW)["apns"]["headers"]
    assert len(headers["apns-collapse-id"].encode()) == 64
    assert headers["apns-collapse-id"] == "é" * 32
    assert fcm_message(_message(collapse_key=key), NOW)["android"]["collapse_key"] == key


def _error(
    http: int,
    status: str,
    code: str | None = None,
    field: str | None = None,
    retry_after: str | None = None,
) -> Response:
    details: list[dict[str, object]] = []
    if code:
        details.append(
            {"@type": "type.googleapis.com/google.firebase.fcm.v1.FcmError", "errorCode": code}
        )
    if field:
        details.append(
            {
                "@type": "type.googleapis.com/google.rpc.BadRequest",
                "fieldViolations": [{"field": field, "description": "x"}],
            }
        )
    body = json.dumps(
        {"error": {"code": http, "message": "m", "status": status, "details": details}}
    ).encode()
    headers = {"retry-after": retry_after} if retry_after else {}
    return Response(http, headers, body)


@pytest.mark.parametrize(
    ("response", "status", "code", "retry_after"),
    [
        (Response(200, {}, b'{"name": "x"}'), PushStatus.DELIVERED, None, None),
        (_error(404, "NOT_FOUND", "UNREGISTERED"), PushStatus.REJECTED, "UNREGISTERED", None),
        (
            _error(400, "INVALID_ARGUMENT", "INVALID_ARGUMENT", "message.token"),
            PushStatus.REJECTED,
            "INVALID_ARGUMENT",
            None,
        ),
        (
            _error(400, "INVALID_ARGUMENT", "INVALID_ARGUMENT", "message.android.ttl"),
            PushStatus.PERMANENT,
            "INVALID_ARGUMENT",
            None,
        ),
        (
            _error(429, "RESOURCE_EXHAUSTED", "QUOTA_EXCEEDED", retry_after="30"),
            PushStatus.RATE_LIMITED,
            "QUOTA_EXCEEDED",
            timedelta(seconds=30),
        ),
        (
            _error(429, "RESOURCE_EXHAUSTED"),
            PushStatus.RATE_LIMITED,
            "RESOURCE_EXHAUSTED",
            timedelta(seconds=60),
        ),
        (
            Response(429, {"retry-after": "999999"}, b""),
            PushStatus.RATE_LIMITED,
            "http_429",
            timedelta(hours=1),
        ),
        (
            Response(429, {"retry-after": "Sun, 01 Mar 2026 08:02:00 GMT"}, b""),
            PushStatus.RATE_LIMITED,
            "http_429",
            timedelta(minutes=2),
        ),
        (
            _error(503, "UNAVAILABLE", "UNAVAILABLE", retry_after="5"),
            PushStatus.TRANSIENT,
            "UNAVAILABLE",
            timedelta(seconds=5),
        ),
        (_error(500, "INTERNAL", "INTERNAL"), PushStatus.TRANSIENT, "INTERNAL", None),
        (Response(502, {}, b"<html>"), PushStatus.TRANSIENT, "http_502", None),
        (
            _error(403, "PERMISSION_DENIED", "SENDER_ID_MISMATCH"),
            PushStatus.PERMANENT,
            "SENDER_ID_MISMATCH",
            None,
        ),
        (_error(403, "PERMISSION_DENIED"), PushStatus.PERMANENT, "PERMISSION_DENIED", None),
        (
            _error(401, "UNAUTHENTICATED", "THIRD_PARTY_AUTH_ERROR"),
            PushStatus.PERMANENT,
            "THIRD_PARTY_AUTH_ERROR",
            None,
        ),
        (_error(401, "UNAUTHENTICATED"), PushStatus.TRANSIENT, "UNAUTHENTICATED", None),
        (Response(413, {}, b""), PushStatus.PERMANENT, "http_413", None),
        (_error(404, "NOT_FOUND"), PushStatus.PERMANENT, "NOT_FOUND", None),
    ],
)
def test_error_table(
    response: Response, status: PushStatus, code: str | None, retry_after: timedelta | None
) -> None:
    message = _message()
    result = classify(message, response, NOW)
    assert (result.status, result.code, result.retry_after) == (status, code, retry_after)
    assert result.message is message
    if status is not PushStatus.DELIVERED:
        assert result.error is not None and str(response.status) in result.error
        assert message.token not in result.error


def test_malformed_credentials_name_the_field(tmp_path: Path) -> None:
    missing = tmp_path / "none.json"
    with pytest.raises(InvalidPushConfig, match="credentials_file") as caught:
        load_service_account(missing)
    assert caught.value.field == "credentials_file"
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(InvalidPushConfig, match="is not JSON"):
        load_service_account(bad)
    secret = "-----BEGIN PRIVATE KEY-----\nSECRETMATERIAL\n-----END PRIVATE KEY-----\n"
    info = {
        "type": "service_account",
        "project_id": "p",
        "private_key": secret,
        "client_email": "a@b",
        "token_uri": "https://oauth2.googleapis.com/token",
    }
    for field in ("project_id", "client_email", "token_uri", "private_key"):
        partial = {k: v for k, v in info.items() if k != field}
        bad.write_text(json.dumps(partial))
        with pytest.raises(InvalidPushConfig) as caught:
            load_service_account(bad)
        assert caught.value.field == f"credentials_file.{field}"
    bad.write_text(json.dumps({**info, "type": "authorized_user"}))
    with pytest.raises(InvalidPushConfig, match="service_account"):
        load_service_account(bad)
    bad.write_text(json.dumps({**info, "token_uri": "file:///etc/passwd"}))
    with pytest.raises(InvalidPushConfig, match="token_uri"):
        load_service_account(bad)
    bad.write_text(json.dumps(info))
    with pytest.raises(InvalidPushConfig) as caught:
        load_service_account(bad)
    assert caught.value.field == "credentials_file.private_key"
    assert "SECRET" not in str(caught.value) and "BEGIN" not in str(caught.value)
