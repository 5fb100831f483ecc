"""The FCM fake checked against Google's own SDK (firebase-admin): its token endpoint accepts the
SDK's JWT-bearer grant, and every error answer is parsed by the SDK into the exception class the
real service's answer gives. Also: what the SDK rejects at the fake (a forged key), and the
fake's accounting."""

from __future__ import annotations

import asyncio
import itertools
import json
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import firebase_admin
import pytest
import requests.adapters
from firebase_admin import credentials, exceptions, messaging

from scheduler.push.fakes.fcm import FcmFake
from scheduler.push.fakes.server import FakeServer

# firebase-admin 7.7 deprecates Message.token for Message.fid; FCM v1 (and FcmChannel) still
# send "token", which is what these tests check at the fake (one test sends an fid).
pytestmark = pytest.mark.filterwarnings("ignore:Message.token is deprecated:DeprecationWarning")

_apps = itertools.count()
TOKEN = "dGVzdC10b2tlbi0xMjM0NTY3ODkw:APA91bFakeTokenForTests"


class Fixture:
    def __init__(self, fake: FcmFake, server: FakeServer, app: firebase_admin.App) -> None:
        self.fake, self.server, self.app = fake, server, app


@pytest.fixture
def fcm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Fixture]:
    fake = FcmFake(project_id="proj-1")
    server = FakeServer(fake.app).start_in_thread()
    path = fake.write_credentials(tmp_path / "sa.json", server.url)
    monkeypatch.setattr(
        messaging._MessagingService,
        "FCM_URL",
        server.url + "/v1/projects/{0}/messages:send",
    )
    app = firebase_admin.initialize_app(credentials.Certificate(path), name=f"t{next(_apps)}")
    try:
        yield Fixture(fake, server, app)
    finally:
        firebase_admin.delete_app(app)
        server.stop_thread()


def _no_retries(app: firebase_admin.App) -> None:
    """The SDK retries 500/503 with back-off (seconds); one answer is what these tests check."""
    service = messaging._get_messaging_service(app)
    adapter = requests.adapters.HTTPAdapter(max_retries=0)
    service._client.session.mount("http://", adapter)


def _message(token: str = TOKEN, **data: str) -> messaging.Message:
    return messaging.Message(
        token=token,
        notification=messaging.Notification(title="Take your pill", body="08:00"),
        data={"tockwork_key": "k1", **data},
        android=messaging.AndroidConfig(ttl=3600, collapse_key="s1", priority="high"),
        apns=messaging.APNSConfig(
            headers={
                "apns-priority": "10",
                "apns-collapse-id": "s1",
                "apns-expiration": "1900000000",
            },
        ),
    )


def test_sdk_send_succeeds_with_its_own_token_grant(fcm: Fixture) -> None:
    name = messaging.send(_message(), app=fcm.app)
    assert name.startswith("projects/proj-1/messages/")
    assert fcm.fake.tokens_issued == 1 and fcm.fake.token_rejections == {}
    assert fcm.fake.counts[(TOKEN, "k1")] == 1
    received = fcm.fake.received[-1]
    assert received.message["android"]["ttl"] == "3600s"
    assert received.message["notification"] == {"title": "Take your pill", "body": "08:00"}
    assert received.http_version == "1.1"
    # the dry run is validated, not delivered
    messaging.send(_message(), dry_run=True, app=fcm.app)
    assert fcm.fake.delivered == 1


@pytest.mark.parametrize(
    ("token_set", "exception", "http"),
    [
        ("unregistered", messaging.UnregisteredError, 404),
        ("sender_mismatch", messaging.SenderIdMismatchError, 403),
        ("third_party_auth", messaging.ThirdPartyAuthError, 401),
        ("quota_exceeded", messaging.QuotaExceededError, 429),
        ("unavailable", exceptions.UnavailableError, 503),
        ("internal", exceptions.InternalError, 500),
    ],
)
def test_sdk_parses_each_error(
    fcm: Fixture, token_set: str, exception: type[Exception], http: int
) -> None:
    _no_retries(fcm.app)
    getattr(fcm.fake, token_set).add(TOKEN)
    with pytest.raises(exception) as caught:
        messaging.send(_message(), app=fcm.app)
    assert isinstance(caught.value, exceptions.FirebaseError)
    assert caught.value.http_response is not None
    assert caught.value.http_response.status_code == http
    if token_set == "quota_exceeded":
        assert caught.value.http_response.headers["retry-after"] == "60"
    assert fcm.fake.delivered == 0


def test_sdk_invalid_token_and_bad_payload_are_invalid_argument(fcm: Fixture) -> None:
    with pytest.raises(exceptions.InvalidArgumentError, match="not a valid FCM registration"):
        messaging.send(_message(token="bad token!"), app=fcm.app)
    big = "x" * 5000
    with pytest.raises(exceptions.InvalidArgumentError, match="too big"):
        messaging.send(_message(blob=big), app=fcm.app)
    error = json.loads(_raw_send(fcm, {"message": {"token": TOKEN, "data": {"n": 1}}}).decode())[
        "error"
    ]
    assert error["status"] == "INVALID_ARGUMENT"
    assert error["details"][1]["fieldViolations"][0]["field"] == "message.data[0].value"


def _raw_send(fcm: Fixture, body: dict[str, Any]) -> bytes:
    access = fcm.app.credential.get_access_token().access_token
    request = urllib.request.Request(
        fcm.server.url + "/v1/projects/proj-1/messages:send",
        data=json.dumps(body).encode(),
        headers={"authorization": f"Bearer {access}", "content-type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request) as reply:
            return bytes(reply.read())
    except urllib.error.HTTPError as exc:
        with exc:
            return bytes(exc.read())


def test_sdk_fid_target(fcm: Fixture) -> None:
    messaging.send(messaging.Message(fid="fid-0123456789", data={"tockwork_key": "f"}), app=fcm.app)
    assert fcm.fake.counts[("fid-0123456789", "f")] == 1


def test_sdk_send_each_reports_per_message(fcm: Fixture) -> None:
    _no_retries(fcm.app)
    fcm.fake.unregistered.add("dead-token-000000")
    batch = messaging.send_each(
        [_message(), _message(token="dead-token-000000"), _message(token="bad token")],
        app=fcm.app,
    )
    assert batch.success_count == 1
    kinds = [type(r.exception) if r.exception else None for r in batch.responses]
    assert kinds == [None, messaging.UnregisteredError, exceptions.InvalidArgumentError]


def test_sdk_send_each_async_over_http2_tls(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = FcmFake(project_id="proj-2")
    server = FakeServer(fake.app, tls=True).start_in_thread()
    assert server.ca_file is not None
    monkeypatch.setenv("SSL_CERT_FILE", server.ca_file)
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", server.ca_file)
    monkeypatch.setattr(
        messaging._MessagingService, "FCM_URL", server.url + "/v1/projects/{0}/messages:send"
    )
    path = fake.write_credentials(tmp_path / "sa.json", server.url)
    app = firebase_admin.initialize_app(credentials.Certificate(path), name=f"t{next(_apps)}")
    try:
        fake.unregistered.add("dead-token-000000")

        async def send() -> messaging.BatchResponse:
            try:
                return await messaging.send_each_async(
                    [_message(), _message(token="dead-token-000000")], dry_run=False, app=app
                )
            finally:
                # the SDK's httpx client belongs to this loop: close it here (delete_app
                # would close it from another loop)
                await messaging._get_messaging_service(app)._async_client.aclose()

        batch = asyncio.run(send())
        assert batch.success_count == 1
        assert isinstance(batch.responses[1].exception, messaging.UnregisteredError)
        assert {r.http_version for r in fake.received} == {"2"}
    finally:
        firebase_admin.delete_app(app)
        server.stop_thread()


def test_forged_key_is_invalid_grant(fcm: Fixture, tmp_path: Path) -> None:
    other = FcmFake(project_id="proj-1")
    info = other.service_account(fcm.server.url)
    info["client_email"] = fcm.fake.client_email  # the right name, the wrong key
    forged = tmp_path / "forged.json"
    forged.write_text(json.dumps(info))
    app = firebase_admin.initialize_app(credentials.Certificate(str(forged)), name="forged")
    try:
        with pytest.raises(Exception, match="invalid_grant"):
            messaging.send(_message(), app=app)
        assert fcm.fake.token_rejections["invalid_grant"] == 1
        assert fcm.fake.delivered == 0
    finally:
        firebase_admin.delete_app(app)


def test_revoked_access_token_is_401_and_the_sdk_refreshes(fcm: Fixture) -> None:
    """google-auth's session answers a 401 by a new grant and one resend, as with Google."""
    messaging.send(_message(), app=fcm.app)
    fcm.fake.revoke_access_tokens()
    messaging.send(_message(), app=fcm.app)
    assert fcm.fake.unauthorized == 1
    assert fcm.fake.tokens_issued == 2
    assert fcm.fake.delivered == 2


def test_expired_access_token_is_401(fcm: Fixture) -> None:
    fcm.fake.access_token_ttl = 0  # every token is expired as soon as it is issued
    with pytest.raises(exceptions.UnauthenticatedError):
        messaging.send(_message(), app=fcm.app)
    assert fcm.fake.delivered == 0 and fcm.fake.unauthorized >= 1


def test_wrong_project_is_permission_denied(fcm: Fixture) -> None:
    body = _raw_send(fcm, {"message": {"token": TOKEN}})
    assert json.loads(body) == {"name": "projects/proj-1/messages/0:1%fake"}
    access = fcm.app.credential.get_access_token().access_token
    request = urllib.request.Request(
        fcm.server.url + "/v1/projects/other/messages:send",
        data=b'{"message": {"token": "' + TOKEN.encode() + b'"}}',
        headers={"authorization": f"Bearer {access}"},
    )
    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(request)
    with caught.value as error:
        assert error.code == 403
        assert json.loads(error.read())["error"]["status"] == "PERMISSION_DENIED"


def test_duplicates_and_summary(fcm: Fixture) -> None:
    messaging.send(_message(), app=fcm.app)
    messaging.send(_message(), app=fcm.app)
    assert fcm.fake.duplicates() == {(TOKEN, "k1"): 2}
    summary = fcm.fake.summary()
    assert summary["delivered"] == 2 and summary["duplicates"] == 1
    with urllib.request.urlopen(fcm.server.url + "/_fake/fcm/summary") as reply:
        assert json.load(reply)["duplicates"] == 1


def test_received_pages_receive_times_tokens_and_keys(fcm: Fixture) -> None:
    before = time.time()
    messaging.send(_message(), app=fcm.app)
    messaging.send(_message(tockwork_key="k2"), app=fcm.app)
    after = time.time()

    def page(query: str) -> Any:
        with urllib.request.urlopen(fcm.server.url + "/_fake/fcm/received" + query) as reply:
            return json.load(reply)

    whole = page("")
    assert whole["total"] == 2
    assert [(token, key) for _, token, key in whole["received"]] == [(TOKEN, "k1"), (TOKEN, "k2")]
    assert all(before <= at <= after for at, _, _ in whole["received"])
    assert whole["received"][0][0] <= whole["received"][1][0]
    second = page("?offset=1&limit=1")
    assert second == {"total": 2, "received": [whole["received"][1]]}
    with pytest.raises(urllib.error.HTTPError) as caught:
        page("?limit=0")
    with caught.value as error:
        assert error.code == 400
