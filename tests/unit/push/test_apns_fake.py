"""The APNs fake's protocol as a pure function: what it accepts and each documented refusal."""

from __future__ import annotations

import base64
import json
import uuid
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from scheduler.push.fakes.apns import Answer, ApnsFake, ApnsKey

TOPIC = "com.example.app"
TOKEN = "ab" * 32
START = 1_772_352_000.0


class Clock:
    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> float:
        return self.now


@pytest.fixture(scope="module")
def key() -> ApnsKey:
    return ApnsKey.generate("ABCDE12345", "TEAM123456")


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def fake(key: ApnsKey, clock: Clock) -> ApnsFake:
    return ApnsFake(keys=[key], topic=TOPIC, clock=clock)


def sign(key: ApnsKey, iat: float, **header: Any) -> str:
    private = serialization.load_pem_private_key(key.pem, password=None)
    assert isinstance(private, ec.EllipticCurvePrivateKey)
    claims = {"iss": header.pop("iss", key.team_id), "iat": int(iat)}
    return jwt.encode(claims, private, algorithm="ES256", headers={"kid": key.key_id, **header})


_DEFAULT_TOKENS: dict[int, str] = {}


def default_token(fake: ApnsFake, key: ApnsKey) -> str:
    """One token per fake (a new signature differs: a new token every request would be refused
    as too many updates, as APNs refuses it)."""
    return _DEFAULT_TOKENS.setdefault(id(fake), sign(key, START))


def request(
    fake: ApnsFake,
    key: ApnsKey,
    *,
    method: str = "POST",
    path: str = f"/3/device/{TOKEN}",
    jwt_token: str | None = None,
    drop: tuple[str, ...] = (),
    body: bytes | None = None,
    **headers: str,
) -> Answer:
    fields = {
        "authorization": f"bearer {jwt_token or default_token(fake, key)}",
        "apns-topic": TOPIC,
        "apns-push-type": "alert",
        "apns-priority": "10",
        "apns-id": "8f7d1f0e-1c2b-4a3d-9e8f-0a1b2c3d4e5f",
    }
    fields.update({k.replace("_", "-"): v for k, v in headers.items()})
    for name in drop:
        del fields[name]
    if body is None:
        body = json.dumps({"aps": {"alert": "hi"}, "tockwork_key": "k1"}).encode()
    return fake.handle(method, path, list(fields.items()), body)


def test_a_valid_request_is_delivered_recorded_and_counted(fake: ApnsFake, key: ApnsKey) -> None:
    answer = request(fake, key, apns_expiration="1772355600", apns_collapse_id="s7")
    assert (answer.status, answer.body) == (200, b"")
    assert dict(answer.headers)["apns-id"] == "8f7d1f0e-1c2b-4a3d-9e8f-0a1b2c3d4e5f"
    [seen] = fake.notifications
    assert (seen.token, seen.tockwork_key, seen.expiration, seen.collapse_id) == (
        TOKEN,
        "k1",
        1772355600,
        "s7",
    )
    assert seen.received_at == START
    assert fake.duplicates() == {}
    request(fake, key)
    assert fake.duplicates() == {(TOKEN, "k1"): 2}


def test_an_absent_apns_id_is_generated(fake: ApnsFake, key: ApnsKey) -> None:
    answer = request(fake, key, drop=("apns-id",))
    assert answer.status == 200
    assert uuid.UUID(dict(answer.headers)["apns-id"])


@pytest.mark.parametrize(
    ("changes", "status", "reason"),
    [
        ({"method": "GET"}, 405, "MethodNotAllowed"),
        ({"path": "/3/devices/ab"}, 404, "BadPath"),
        ({"path": "/3/device/"}, 400, "MissingDeviceToken"),
        ({"path": "/3/device/xyz"}, 400, "BadDeviceToken"),
        ({"drop": ("authorization",)}, 403, "MissingProviderToken"),
        ({"authorization": "basic abc"}, 403, "MissingProviderToken"),
        ({"jwt_token": "a.b.c"}, 403, "InvalidProviderToken"),
        ({"jwt_token": "nodots"}, 403, "InvalidProviderToken"),
        ({"drop": ("apns-topic",)}, 400, "MissingTopic"),
        ({"apns_topic": "com.other.app"}, 400, "TopicDisallowed"),
        ({"apns_push_type": "shout"}, 400, "InvalidPushType"),
        ({"apns_priority": "7"}, 400, "BadPriority"),
        ({"apns_expiration": "tomorrow"}, 400, "BadExpirationDate"),
        ({"apns_collapse_id": "c" * 65}, 400, "BadCollapseId"),
        ({"apns_id": "not-a-uuid"}, 400, "BadMessageId"),
        ({"body": b""}, 400, "PayloadEmpty"),
        ({"body": b"{not json"}, 400, "PayloadEmpty"),
        ({"body": b'{"alert": "no aps"}'}, 400, "PayloadEmpty"),
        ({"body": b'{"aps": {}, "x": "' + b"y" * 4096 + b'"}'}, 413, "PayloadTooLarge"),
    ],
)
def test_each_documented_refusal(
    fake: ApnsFake, key: ApnsKey, changes: dict[str, Any], status: int, reason: str
) -> None:
    answer = request(fake, key, **changes)
    assert (answer.status, answer.reason) == (status, reason)
    assert dict(answer.headers)["content-type"] == "application/json"
    assert list(fake.notifications) == []
    assert fake.reasons[reason] == 1


def test_provider_tokens_are_verified(fake: ApnsFake, key: ApnsKey, clock: Clock) -> None:
    other = ApnsKey.generate("ABCDE12345", "TEAM123456")  # same ids, another key
    assert request(fake, key, jwt_token=sign(other, clock())).reason == "InvalidProviderToken"
    stranger = ApnsKey.generate("ZZZZZ99999", "TEAM123456")
    assert request(fake, key, jwt_token=sign(stranger, clock())).reason == "InvalidProviderToken"
    wrong_team = sign(key, clock(), iss="OTHERTEAM1")
    assert request(fake, key, jwt_token=wrong_team).reason == "InvalidProviderToken"
    future = sign(key, clock() + 60)
    assert request(fake, key, jwt_token=future).reason == "InvalidProviderToken"
    old = sign(key, clock() - 3601)
    assert request(fake, key, jwt_token=old).reason == "ExpiredProviderToken"
    good = sign(key, clock())
    head, _claims, signature = good.split(".")
    forged = json.dumps({"iss": key.team_id, "iat": int(clock()) + 1}).encode()
    forged_claims = base64.urlsafe_b64encode(forged).rstrip(b"=").decode()
    tampered = f"{head}.{forged_claims}.{signature}"
    assert request(fake, key, jwt_token=tampered).reason == "InvalidProviderToken"
    hs256 = jwt.encode({"iss": key.team_id, "iat": int(clock())}, "secret" * 6, "HS256")
    assert request(fake, key, jwt_token=hs256).reason == "InvalidProviderToken"
    assert request(fake, key, jwt_token=good).status == 200


def test_a_new_token_within_20_minutes_is_too_many_updates(
    fake: ApnsFake, key: ApnsKey, clock: Clock
) -> None:
    first = sign(key, clock())
    assert request(fake, key, jwt_token=first).status == 200
    clock.now += 20 * 60 - 1
    answer = request(fake, key, jwt_token=sign(key, clock()))
    assert (answer.status, answer.reason) == (429, "TooManyProviderTokenUpdates")
    assert request(fake, key, jwt_token=first).status == 200  # the old one still serves
    clock.now += 1
    second = sign(key, clock())
    assert request(fake, key, jwt_token=second).status == 200
    assert request(fake, key, jwt_token=first).status == 200  # 20 minutes old: still valid
    assert fake.token_updates[key.key_id] == 1
    clock.now += 41 * 60
    assert request(fake, key, jwt_token=first).reason == "ExpiredProviderToken"


def test_device_token_sets_and_scripted_answers(fake: ApnsFake, key: ApnsKey) -> None:
    bad, foreign, gone, busy = ("b1" * 32, "c1" * 32, "d1" * 32, "e1" * 32)
    fake.bad_tokens.add(bad)
    fake.other_topic_tokens.add(foreign)
    fake.unregister(gone, since_ms=1_700_000_000_000)
    fake.scripted[busy] = (503, "Shutdown")
    assert request(fake, key, path=f"/3/device/{bad}").reason == "BadDeviceToken"
    assert request(fake, key, path=f"/3/device/{foreign}").reason == "DeviceTokenNotForTopic"
    unregistered = request(fake, key, path=f"/3/device/{gone}")
    assert unregistered.status == 410
    assert json.loads(unregistered.body) == {"reason": "Unregistered", "timestamp": 1700000000000}
    assert (request(fake, key, path=f"/3/device/{busy}").status, fake.reasons["Shutdown"]) == (
        503,
        1,
    )
    assert list(fake.notifications) == []


def test_records_are_bounded(key: ApnsKey, clock: Clock) -> None:
    fake = ApnsFake(keys=[key], topic=TOPIC, clock=clock, max_records=3)
    for _ in range(5):
        assert request(fake, key).status == 200
    assert len(fake.notifications) == 3
    assert fake.counts[(TOKEN, "k1")] == 5
