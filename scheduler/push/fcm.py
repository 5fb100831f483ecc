"""The FCM HTTP v1 channel: one HTTP/2 request per message, many in flight.

:class:`FcmChannel` sends each :class:`~scheduler.push.message.PushMessage` as ``POST
/v1/projects/{project_id}/messages:send`` over :class:`~scheduler.push.http2.Http2Client`
(``connections`` HTTP/2 connections, up to ``max_in_flight`` requests at once, shared by
concurrent ``send`` calls). It authenticates with an OAuth 2.0 access token obtained from the
service-account file by the JWT-bearer grant (an RS256 assertion signed with the file's key,
posted to its ``token_uri`` over HTTP/2 as well), cached and refreshed before it expires (five
minutes early, or half its lifetime if shorter, by the ``clock`` the channel takes), one refresh
in flight at a time, whose failure (or cancellation) every request waiting for it shares.

The mapping of a message: ``notification`` {title, body}; ``data`` = ``message.data`` plus
``tockwork_key`` = ``message.key`` (the app can drop a duplicate on the device); ``android``
{``ttl`` = ``message.ttl(now)`` in whole seconds, ``collapse_key``, ``priority`` HIGH/NORMAL};
``apns.headers`` {``apns-expiration`` (epoch seconds of ``expires_at``), ``apns-collapse-id``
(the collapse key cut to 64 bytes), ``apns-priority`` 10/5}. FCM takes only string data values: a
message with another is ``permanent`` and is not sent.

Every answer maps to one status (the one table):

=============================================  ============  ================================
FCM answer                                     status        notes
=============================================  ============  ================================
200                                            delivered
404 ``UNREGISTERED``                           rejected      the token is dead
400 ``INVALID_ARGUMENT`` about the token       rejected      a field violation on
                                                             ``message.token``
429 (``QUOTA_EXCEEDED`` or any)                rate_limited  ``retry_after`` = Retry-After,
                                                             60 s if absent, within 1 s..1 h
500 ``INTERNAL``, 503 ``UNAVAILABLE``,         transient     ``retry_after`` from Retry-After
other 5xx, timeout, connection lost,                         when given
connect failed
stream refused / above a GOAWAY                (resent)      once, in the same call, on a
                                                             new stream; then transient
401 (bearer rejected)                          (resent)      after one token refresh shared
                                                             by the batch; then transient
401 ``THIRD_PARTY_AUTH_ERROR``                 permanent     APNs/Web Push credentials
403 ``SENDER_ID_MISMATCH``, 403 other,         permanent
other 400 (bad payload), 413, other 4xx
the token endpoint refuses the grant           permanent     ``invalid_grant`` (bad key)
the token endpoint unreachable / 5xx           transient
=============================================  ============  ================================

``PushResult.code`` is FCM's ``errorCode`` (else its ``status``, else ``http_<n>``, or
``timeout``, ``connection_lost``, ``connect_failed``, ``stream_refused``); ``error`` is a short
text naming the code, never the device token, the bearer token or key material.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import ssl
import urllib.parse
from collections import deque
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import jwt
import orjson

from jobs.internal import redaction
from scheduler.errors import InvalidPushConfig, SchedulerError
from scheduler.http_headers import retry_after
from scheduler.push.http2 import (
    ConnectFailed,
    ConnectionLost,
    Http2Client,
    Http2Error,
    RequestTimeout,
    Response,
    StreamRefused,
)
from scheduler.push.message import PushMessage, PushResult, PushStatus

log = logging.getLogger(__name__)

SCOPE = "https://www.googleapis.com/auth/firebase.messaging"
GRANT_TYPE = "urn:ietf:params:oauth:grant-type:jwt-bearer"
GOOGLE_TOKEN_AUDIENCE = "https://oauth2.googleapis.com/token"
FCM_ERROR = "type.googleapis.com/google.firebase.fcm.v1.FcmError"
BAD_REQUEST = "type.googleapis.com/google.rpc.BadRequest"
DEFAULT_RETRY_AFTER = timedelta(seconds=60)
MIN_RETRY_AFTER = timedelta(seconds=1)
MAX_RETRY_AFTER = timedelta(hours=1)
REFRESH_EARLY = 300.0  # seconds before expiry a token is replaced
_REQUIRED = ("type", "project_id", "private_key", "client_email", "token_uri")


class _TokenError(SchedulerError):
    """The token endpoint refused or failed (``permanent`` says which)."""

    def __init__(self, code: str, permanent: bool) -> None:
        super().__init__(code)
        self.code = code
        self.permanent = permanent


def load_service_account(path: str | os.PathLike[str]) -> dict[str, str]:
    """Read and check a service-account JSON; :class:`InvalidPushConfig` names the field."""
    shown = os.fspath(path)
    try:
        with open(path, "rb") as handle:
            raw = handle.read()
    except OSError as exc:
        raise InvalidPushConfig(
            "credentials_file", shown, f"cannot be read ({type(exc).__name__})"
        ) from None
    try:
        info = json.loads(raw)
    except ValueError:
        raise InvalidPushConfig("credentials_file", shown, "is not JSON") from None
    if not isinstance(info, dict):
        raise InvalidPushConfig("credentials_file", shown, "is not a JSON object")
    for name in _REQUIRED:
        value = info.get(name)
        if not isinstance(value, str) or not value:
            raise InvalidPushConfig(
                f"credentials_file.{name}", shown, "is missing or not a non-empty string"
            )
    if info["type"] != "service_account":
        raise InvalidPushConfig(
            "credentials_file.type", shown, f"must be 'service_account', not {info['type']!r}"
        )
    token_uri = urllib.parse.urlsplit(info["token_uri"])
    if token_uri.scheme not in ("http", "https") or not token_uri.hostname:
        raise InvalidPushConfig("credentials_file.token_uri", shown, "is not an http(s) URL")
    try:
        from cryptography.hazmat.primitives.serialization import load_pem_private_key

        load_pem_private_key(info["private_key"].encode(), password=None)
    except (ValueError, TypeError):
        # the reason from cryptography is not shown: it may quote the key's text
        raise InvalidPushConfig(
            "credentials_file.private_key", shown, "is not a PEM private key"
        ) from None
    return info


def _retry_after(response: Response, now: datetime) -> timedelta | None:
    after = retry_after(response.headers.get("retry-after"), now)
    return None if after is None else min(max(after, MIN_RETRY_AFTER), MAX_RETRY_AFTER)


def _parse_error(body: bytes) -> tuple[str | None, str | None, bool]:
    """(FCM errorCode, status, a field violation names the token) from an error body."""
    try:
        error = orjson.loads(body)["error"]
        status = error.get("status")
        fcm_code = None
        about_token = False
        for detail in error.get("details") or ():
            kind = detail.get("@type")
            if kind == FCM_ERROR:
                fcm_code = detail.get("errorCode")
            elif kind == BAD_REQUEST:
                for violation in detail.get("fieldViolations") or ():
                    if violation.get("field") in ("message.token", "message.fid"):
                        about_token = True
        message = error.get("message") or ""
        if isinstance(message, str) and "registration token" in message:
            about_token = True
        return (
            fcm_code if isinstance(fcm_code, str) else None,
            status if isinstance(status, str) else None,
            about_token,
        )
    except (orjson.JSONDecodeError, KeyError, TypeError, AttributeError):
        return None, None, False


def classify(message: PushMessage, response: Response, now: datetime) -> PushResult:
    """The result of one FCM answer (the module's table; 401 and refused streams are the
    caller's: it resends them)."""
    http = response.status
    if http == 200:
        return PushResult(message, PushStatus.DELIVERED)
    fcm_code, status, about_token = _parse_error(response.body)
    code = fcm_code or status or f"http_{http}"
    error = f"FCM {http} {status or ''}{' ' + fcm_code if fcm_code else ''}".rstrip()
    if http == 404 and fcm_code == "UNREGISTERED":
        return PushResult(message, PushStatus.REJECTED, error, code)
    if http == 400 and about_token:
        return PushResult(message, PushStatus.REJECTED, error, code)
    if http == 429:
        retry = _retry_after(response, now) or DEFAULT_RETRY_AFTER
        return PushResult(message, PushStatus.RATE_LIMITED, error, code, retry)
    if http >= 500:
        return PushResult(message, PushStatus.TRANSIENT, error, code, _retry_after(response, now))
    if http == 401 and fcm_code != "THIRD_PARTY_AUTH_ERROR":
        # a bearer still refused after a refresh: credentials may come back (clock, revocation)
        return PushResult(message, PushStatus.TRANSIENT, error, code)
    return PushResult(message, PushStatus.PERMANENT, error, code)


def fcm_message(
    message: PushMessage,
    now: datetime,
    expiries: dict[datetime, tuple[str, str]] | None = None,
) -> dict[str, Any]:
    """The FCM v1 ``message`` object of a push message (module docstring). ``expiries``: a
    cache of the ``ttl`` and ``apns-expiration`` texts by expiry, for one ``now`` (the
    messages of a batch share a few expiries)."""
    data = dict(message.data)
    data["tockwork_key"] = message.key
    high = message.priority == "high"
    android: dict[str, Any] = {"priority": "HIGH" if high else "NORMAL"}
    apns_headers = {"apns-priority": "10" if high else "5"}
    expires_at = message.expires_at
    if expires_at is not None:
        texts = expiries.get(expires_at) if expiries is not None else None
        if texts is None:
            ttl = message.ttl(now) or timedelta(0)
            texts = (f"{int(ttl.total_seconds())}s", str(max(int(expires_at.timestamp()), 0)))
            if expiries is not None:
                expiries[expires_at] = texts
        android["ttl"], apns_headers["apns-expiration"] = texts
    if message.collapse_key is not None:
        android["collapse_key"] = message.collapse_key
        apns_headers["apns-collapse-id"] = _cut(message.collapse_key, 64)
    return {
        "token": message.token,
        "notification": {"title": message.title, "body": message.body},
        "data": data,
        "android": android,
        "apns": {"headers": apns_headers},
    }


def _cut(text: str, limit: int) -> str:
    encoded = text.encode()
    if len(encoded) <= limit:
        return text
    return encoded[:limit].decode("utf-8", "ignore")


class _Slots:
    """At most ``n`` holders at once, first come first served: the channel's ``max_in_flight``.

    ``asyncio.Semaphore`` leaves a woken waiter in its queue until that waiter runs, and each
    release scans the queue from the front for one not yet woken: a read that answers 500
    requests at once releases 500 times before any woken waiter runs, a quadratic scan (3% of
    a delivery worker's CPU in a herd). Here a release hands its slot to the first waiter and
    takes it off the queue.
    """

    __slots__ = ("free", "waiters")

    def __init__(self, n: int) -> None:
        self.free = n
        self.waiters: deque[asyncio.Future[None]] = deque()

    async def acquire(self) -> None:
        if self.free > 0:
            self.free -= 1
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.waiters.append(waiter)
        try:
            await waiter
        except BaseException:
            if waiter.done() and not waiter.cancelled():
                self.release()  # handed a slot, then cancelled: pass it on
            else:
                with contextlib.suppress(ValueError):
                    self.waiters.remove(waiter)
            raise

    def release(self) -> None:
        waiters = self.waiters
        while waiters:
            waiter = waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)  # the slot goes to it directly
                return
        self.free += 1


class FcmChannel:
    """Push through FCM HTTP v1 (module docstring); implements
    :class:`~scheduler.push.channel.PushChannel`."""

    name = "fcm"

    def __init__(
        self,
        credentials_file: str | os.PathLike[str],
        *,
        url: str = "https://fcm.googleapis.com",
        connections: int = 4,
        max_in_flight: int = 2000,
        quota_per_minute: int | None = 600_000,
        connect_timeout: float = 10.0,
        request_timeout: float = 30.0,
        ssl_context: ssl.SSLContext | None = None,
        clock: Callable[[], datetime] | None = None,
    ) -> None:
        info = load_service_account(credentials_file)
        if max_in_flight < 1:
            raise InvalidPushConfig("max_in_flight", max_in_flight, "must be >= 1")
        if connections < 1:
            raise InvalidPushConfig("connections", connections, "must be >= 1")
        try:
            self._client = Http2Client(
                url,
                connections=connections,
                connect_timeout=connect_timeout,
                request_timeout=request_timeout,
                max_body=16384,
                ssl_context=ssl_context,
            )
        except ValueError as exc:
            raise InvalidPushConfig("url", url, str(exc)) from None
        self.project_id = info["project_id"]
        self._path = f"/v1/projects/{self.project_id}/messages:send"
        self._email = info["client_email"]
        self._key = info["private_key"]
        self._key_id = info.get("private_key_id")
        redaction.register(self._key)
        redaction.register(self._key_id)
        token_uri = urllib.parse.urlsplit(info["token_uri"])
        self._token_path = token_uri.path or "/"
        # the grant goes over HTTP/2 too (Google's token endpoint speaks it; so does the fake)
        self._token_client = Http2Client(
            f"{token_uri.scheme}://{token_uri.netloc}",
            connections=1,
            connect_timeout=connect_timeout,
            request_timeout=request_timeout,
            ssl_context=ssl_context,
        )
        self._quota = quota_per_minute
        self._max_in_flight = max_in_flight
        self._slots = _Slots(max_in_flight)  # shared by concurrent sends
        self._clock = clock or (lambda: datetime.now(UTC))
        self._access: str | None = None
        self._refresh_at = 0.0  # the clock's epoch seconds after which the token is replaced
        self._refreshing: asyncio.Future[str] | None = None
        self.refreshes = 0  # access tokens obtained (tests, bench)
        self._closed = False

    @property
    def quota_per_minute(self) -> int | None:
        return self._quota

    @property
    def client(self) -> Http2Client:
        return self._client

    # -- access token --------------------------------------------------------------------

    async def _token(self, stale: str | None = None, at: float | None = None) -> str:
        """The current access token; a new one if it is due at ``at`` (epoch seconds, default
        the channel's clock now) or is ``stale`` (just refused)."""
        access = self._access
        if access is not None and stale is None:
            if (self._clock().timestamp() if at is None else at) < self._refresh_at:
                return access
        elif access is not None and stale is not None and access != stale:
            return access  # another request refreshed it already
        if self._refreshing is None:
            future: asyncio.Future[str] = asyncio.get_running_loop().create_future()
            self._refreshing = future
            try:
                token, lifetime = await self._grant()
            except BaseException as exc:
                # the waiters share this refresh: they get its error, a cancelled refresh
                # included (else they would wait for a token that never comes)
                shared = exc
                if not isinstance(exc, _TokenError):
                    shared = _TokenError("token_refresh_interrupted", permanent=False)
                future.set_exception(shared)
                future.exception()  # retrieved here: the waiters re-raise it
                raise
            finally:
                self._refreshing = None
            self._access = token
            issued = self._clock().timestamp()
            self._refresh_at = issued + lifetime - min(REFRESH_EARLY, lifetime / 2)
            self.refreshes += 1
            future.set_result(token)
            return token
        return await asyncio.shield(self._refreshing)

    async def _grant(self) -> tuple[str, float]:
        now = int(self._clock().timestamp())
        headers = {"kid": self._key_id} if self._key_id else None
        assertion = jwt.encode(
            {
                "iss": self._email,
                "scope": SCOPE,
                "aud": GOOGLE_TOKEN_AUDIENCE,
                "iat": now,
                "exp": now + 3600,
            },
            self._key,
            algorithm="RS256",
            headers=headers,
        )
        form = urllib.parse.urlencode({"grant_type": GRANT_TYPE, "assertion": assertion})
        try:
            response = await self._token_client.request(
                "POST",
                self._token_path,
                [("content-type", "application/x-www-form-urlencoded")],
                form.encode(),
            )
        except Http2Error as exc:
            log.warning("FCM token endpoint unreachable: %s", type(exc).__name__)
            raise _TokenError(f"token_endpoint_{type(exc).__name__}", permanent=False) from None
        status, body = response.status, response.body
        if status != 200:
            try:
                code = str(json.loads(body).get("error") or f"http_{status}")
            except (ValueError, AttributeError):
                code = f"http_{status}"
            # 400/401/403: the grant itself is refused (bad key, disabled account)
            raise _TokenError(code, permanent=status in (400, 401, 403))
        try:
            answer = json.loads(body)
            token = str(answer["access_token"])
            redaction.register(token)  # never in a message or a log line (jobs/redaction.py)
            return token, float(answer.get("expires_in", 3600))
        except (ValueError, KeyError, TypeError):
            raise _TokenError("token_response_malformed", permanent=False) from None

    # -- sending -------------------------------------------------------------------------

    async def send(self, messages: Sequence[PushMessage], *, now: datetime) -> list[PushResult]:
        """One result per message, in order (module docstring for the table)."""
        for message in messages:
            if message.channel != self.name:
                raise ValueError(
                    f"message for channel {message.channel!r} sent to the 'fcm' channel"
                )
        if self._closed:
            raise RuntimeError("the FCM channel is closed")
        if not messages:
            return []
        results: list[PushResult | None] = [None] * len(messages)
        at = self._clock().timestamp()  # the token's freshness, judged once a call
        try:
            await self._token(at=at)
        except _TokenError as exc:
            status = PushStatus.PERMANENT if exc.permanent else PushStatus.TRANSIENT
            error = f"FCM access token not granted: {exc.code}"
            return [PushResult(m, status, error, exc.code) for m in messages]
        expiries: dict[datetime, tuple[str, str]] = {}
        queue = iter(enumerate(messages))
        slots = self._slots

        async def worker() -> None:
            for index, message in queue:
                await slots.acquire()
                try:
                    results[index] = await self._send_one(message, now, at, expiries)
                finally:
                    slots.release()

        workers = min(len(messages), self._max_in_flight)
        await asyncio.gather(*(worker() for _ in range(workers)))
        return [r for r in results if r is not None]

    async def _send_one(
        self,
        message: PushMessage,
        now: datetime,
        at: float,
        expiries: dict[datetime, tuple[str, str]],
    ) -> PushResult:
        for name, value in message.data.items():
            if not isinstance(value, str):
                return PushResult(
                    message,
                    PushStatus.PERMANENT,
                    f"data value of {name!r} is a {type(value).__name__}: FCM takes strings",
                    "invalid_data",
                )
        body = orjson.dumps({"message": fcm_message(message, now, expiries)})
        refused = refreshed = False
        while True:
            try:
                token = self._access
                if token is None or at >= self._refresh_at:
                    token = await self._token(at=at)
            except _TokenError as exc:
                status = PushStatus.PERMANENT if exc.permanent else PushStatus.TRANSIENT
                return PushResult(
                    message, status, f"FCM access token not granted: {exc.code}", exc.code
                )
            try:
                response = await self._client.request(
                    "POST",
                    self._path,
                    [
                        ("authorization", "Bearer " + token),
                        ("content-type", "application/json; charset=UTF-8"),
                    ],
                    body,
                )
            except StreamRefused:
                if not refused:
                    refused = True
                    continue
                return PushResult(
                    message, PushStatus.TRANSIENT, "FCM stream refused twice", "stream_refused"
                )
            except RequestTimeout:
                return PushResult(message, PushStatus.TRANSIENT, "FCM request timed out", "timeout")
            except ConnectionLost:
                return PushResult(
                    message, PushStatus.TRANSIENT, "FCM connection lost", "connection_lost"
                )
            except ConnectFailed:
                return PushResult(
                    message, PushStatus.TRANSIENT, "FCM connect failed", "connect_failed"
                )
            except Http2Error:
                return PushResult(message, PushStatus.TRANSIENT, "FCM HTTP/2 error", "http2")
            if response.status == 401 and not refreshed:
                fcm_code, _, _ = _parse_error(response.body)
                if fcm_code != "THIRD_PARTY_AUTH_ERROR":
                    refreshed = True
                    # a failed refresh: the resend carries the old token and ends transient
                    with contextlib.suppress(_TokenError):
                        await self._token(stale=token)
                    continue
            return classify(message, response, now)

    async def aclose(self) -> None:
        self._closed = True
        await self._client.aclose()
        await self._token_client.aclose()


__all__ = ["FcmChannel", "classify", "fcm_message", "load_service_account"]
