"""The APNs channel: reminders to Apple devices over HTTP/2 with token-based authentication.

One request per notification, ``POST /3/device/<token>`` on a few HTTP/2 connections
(:mod:`scheduler.push.http2`), all of a batch in flight at once up to ``max_in_flight`` (one
semaphore for every call of the channel). Apple's provider API is HTTP/2 only.

Authentication: a provider token, an ES256 JWT (header ``alg`` ES256, ``kid`` the key id;
claims ``iss`` the team id, ``iat``) signed with the team's ``.p8`` key. Apple rejects a token
older than an hour (403 ``ExpiredProviderToken``) and one renewed less than 20 minutes after the
previous one (429 ``TooManyProviderTokenUpdates``), so :class:`ProviderToken` signs one token for
the whole channel and renews it after 50 minutes, never within 20 minutes of the last one, even
when a thousand requests want one at once: signing never awaits, so on the event loop the check
and the renewal are one step. Across processes (replicas, a restart) the token is shared
through the database: the processes of one key agree on its issue time
(``apns_provider_tokens``, one row per team and key, renewed by exactly one of them) and sign
with deterministic ECDSA, so all of them send the same token; the token itself is not stored.
That renewal is a short blocking statement (every 50 minutes, not awaited: still one step). A
403 ``ExpiredProviderToken`` (a clock that jumped, a host that slept) renews the token once, if
it is at least 20 minutes old, and resends the message once; younger, the answer is
``transient``.

The request (:func:`request_headers`, :func:`payload`): ``apns-topic`` (the bundle id),
``apns-push-type: alert``, ``apns-priority`` 10 (``high``) or 5 (``normal``),
``apns-expiration`` (the epoch second of ``expires_at``; 0 once it has passed: one attempt, no
storage; absent without an expiry), ``apns-collapse-id`` (the collapse key cut to 64 bytes of
UTF-8, never inside a character), ``apns-id`` (a UUID derived from the message key: a resend
carries the same id); the body ``{"aps": {"alert": {"title", "body"}, "sound": "default"},
**data, "tockwork_key": key}``, at most 4096 bytes. A malformed device token (not hex, or not
64 to 200 hex digits), a body over 4096 bytes, a ``data`` key ``aps`` or an unknown priority are
answered without a request.

The error table (Apple's documented reasons; the result's ``code`` is the reason, else
``http_<status>``, or the transport failure's name):

=======================================================  ========================================
status and reason                                        result
=======================================================  ========================================
200                                                      ``delivered``
400 ``BadDeviceToken``, ``DeviceTokenNotForTopic``       ``rejected`` (the token is dead here)
410 ``Unregistered``, ``ExpiredToken`` (any 410)         ``rejected``
400 any other reason (``BadCollapseId``,                 ``permanent`` (the request is wrong)
``BadExpirationDate``, ``BadMessageId``,
``BadPriority``, ``BadTopic``, ``MissingTopic``,
``PayloadEmpty``, ``TopicDisallowed``, ...)
403 ``ExpiredProviderToken``                             renew the token and resend once; if the
                                                         token is younger than 20 minutes, or
                                                         the resend gets it too: ``transient``
403 any other (``InvalidProviderToken``,                 ``permanent`` (configuration)
``MissingProviderToken``, ``BadCertificate``,
``BadCertificateEnvironment``, ``Forbidden``)
404 ``BadPath``, 405 ``MethodNotAllowed``,                ``permanent``
413 ``PayloadTooLarge``, any other 4xx
429 ``TooManyRequests``,                                 ``rate_limited``, ``retry_after`` from
``TooManyProviderTokenUpdates``                          ``Retry-After`` (seconds or an HTTP
                                                         date), else :data:`DEFAULT_RETRY_AFTER`
500 ``InternalServerError``, 503                         ``transient`` (``retry_after`` if the
``ServiceUnavailable``, ``Shutdown``, any other status   server sent ``Retry-After``)
timeout, connection lost, connect failed                 ``transient``
stream refused (or above a GOAWAY's last stream id)      resent once in the same call, then
                                                         ``transient``
=======================================================  ========================================

No device token, provider token or key material appears in a result's ``error``, a log line or
an exception text: errors name the reason and the status; logs show :func:`redact_token`.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import os
import re
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from ssl import SSLContext
from time import time
from typing import Final
from urllib.parse import urlsplit

import orjson
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature

from jobs.internal import redaction
from scheduler.errors import InvalidPushConfig
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
from scheduler.push.message import PushMessage, PushResult, PushStatus, redact_token
from timezones.errors import InvalidInput

logger = logging.getLogger(__name__)
PRODUCTION_URL: Final = "https://api.push.apple.com"
SANDBOX_URL: Final = "https://api.sandbox.push.apple.com"
URLS: Final[Mapping[str, str]] = {"production": PRODUCTION_URL, "sandbox": SANDBOX_URL}

# Apple's limits (Sending notification requests to APNs; Establishing a token-based connection).
MAX_PAYLOAD: Final = 4096  # bytes of JSON body
MAX_COLLAPSE_ID: Final = 64  # bytes of UTF-8
TOKEN_MIN_AGE: Final = 20 * 60.0  # seconds: a newer token is refused (TooManyProviderTokenUpdates)
TOKEN_MAX_AGE: Final = 60 * 60.0  # seconds: an older token is refused (ExpiredProviderToken)
TOKEN_REFRESH_AFTER: Final = 50 * 60.0  # seconds: renewed here, with ten minutes to spare
# A 429 without Retry-After (Apple sends none): retry after a minute.
DEFAULT_RETRY_AFTER: Final = timedelta(seconds=60)

PRIORITIES: Final[Mapping[str, str]] = {"high": "10", "normal": "5"}
# Device tokens are 32 bytes today; Apple warns they may grow, so up to 100 bytes is accepted.
DEVICE_TOKEN = re.compile(r"[0-9a-fA-F]{64,200}")
_ID = re.compile(r"[A-Z0-9]{10}")
_TOPIC = re.compile(r"[A-Za-z0-9][A-Za-z0-9.\-_]{0,254}")
_REASON = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,63}")
# apns-id = uuid5(this namespace, message key): the same message always carries the same id.
APNS_ID_NAMESPACE: Final = uuid.UUID("6b1f8f38-3f44-4b8e-9a55-5c1c0e4e7a11")
_MAX_KEY_FILE = 64 * 1024

_REJECTED_400: Final = frozenset({"BadDeviceToken", "DeviceTokenNotForTopic"})


# -- provider token ----------------------------------------------------------------------------


def load_key(key_file: str | os.PathLike[str]) -> ec.EllipticCurvePrivateKey:
    """The ``.p8`` signing key (PKCS#8 PEM, EC P-256) at ``key_file``.

    Raises :class:`InvalidPushConfig` naming the path, never the content.
    """
    path = os.fspath(key_file)

    def invalid(reason: str) -> InvalidPushConfig:
        return InvalidPushConfig("key_file", path, reason)

    try:
        size = Path(path).stat().st_size
        if size > _MAX_KEY_FILE:
            raise invalid(f"is {size} bytes: not an APNs .p8 key")
        data = Path(path).read_bytes()
    except OSError as exc:
        raise invalid(f"cannot be read ({exc.strerror or type(exc).__name__})") from None
    if b"-----BEGIN PRIVATE KEY-----" not in data:
        raise invalid("is not a PKCS#8 PEM private key (an APNs .p8 key)")
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError, UnsupportedAlgorithm):
        # The library's message is not forwarded: nothing of the file goes into an error.
        raise invalid("is not a readable unencrypted PKCS#8 private key") from None
    if not isinstance(key, ec.EllipticCurvePrivateKey) or not isinstance(key.curve, ec.SECP256R1):
        raise invalid("is not an EC P-256 key (APNs signs with ES256)")
    return key


SharedIssue = Callable[[int, int], int]
"""Where the processes of one key agree on their token: ``(now, refresh_after) -> iat``, the
stored issue time unless it is at least ``refresh_after`` seconds older than ``now``, else
``now``, stored (:func:`database_issue`)."""


def sign_provider_token(
    key: ec.EllipticCurvePrivateKey, *, key_id: str, team_id: str, issued_at: int
) -> str:
    """The provider token of ``issued_at``: an ES256 JWT (header ``alg``, ``kid``, ``typ``; claims
    ``iss``, ``iat``) signed with deterministic ECDSA (RFC 6979), so every process that signs
    the same claims with the same key makes the same token."""
    header = _b64url(orjson.dumps({"alg": "ES256", "kid": key_id, "typ": "JWT"}))
    claims = _b64url(orjson.dumps({"iss": team_id, "iat": issued_at}))
    signing_input = header + b"." + claims
    der = key.sign(signing_input, ec.ECDSA(hashes.SHA256(), deterministic_signing=True))
    r, s = decode_dss_signature(der)
    return (signing_input + b"." + _b64url(r.to_bytes(32, "big") + s.to_bytes(32, "big"))).decode()


def _b64url(data: bytes) -> bytes:
    return base64.urlsafe_b64encode(data).rstrip(b"=")


def database_issue(conninfo: str, *, team_id: str, key_id: str) -> SharedIssue:
    """The :data:`SharedIssue` of the processes sharing a database: the issue time of each
    (team, key) in ``apns_provider_tokens`` (no token is stored: :func:`sign_provider_token`
    makes the same one in every process). A short connection per renewal (every 50 minutes);
    the statement is ``apns_provider_token_claim``."""
    import jobs
    from scheduler.queries import query

    def claim(now: int, refresh_after: int) -> int:
        with jobs.connect(conninfo, autocommit=True, connect_timeout=10) as conn:
            params = {"team_id": team_id, "key_id": key_id, "now": now,
                      "refresh_after": refresh_after}  # fmt: skip
            row = conn.execute(query("apns_provider_token_claim"), params).fetchone()
        assert row is not None
        return int(row[0])

    return claim


class ProviderToken:
    """The channel's provider authentication token (module docstring).

    ``clock`` returns the wall-clock time in epoch seconds: it gives ``iat`` and the token's age.
    ``shared``, when given, is where the processes of this key agree on the token's issue time
    (:func:`database_issue`): a renewal takes the stored one unless it is due, so a second
    process (a replica, a restart) sends the same token instead of a new one that Apple would
    answer ``TooManyProviderTokenUpdates`` within 20 minutes of the last. If ``shared`` fails
    (the database is down), the process signs a token of its own and says so in the log.
    ``signed`` counts the tokens signed (a test reads it).
    """

    def __init__(
        self,
        key: ec.EllipticCurvePrivateKey,
        *,
        key_id: str,
        team_id: str,
        clock: Callable[[], float] = time,
        shared: SharedIssue | None = None,
    ) -> None:
        self._key = key
        self._key_id = key_id
        self._team_id = team_id
        self._clock = clock
        self._shared = shared
        self._token: str | None = None
        self._issued_at = 0.0
        self.signed = 0

    def __repr__(self) -> str:
        return f"ProviderToken(key_id={self._key_id!r}, team_id={self._team_id!r})"

    @property
    def issued_at(self) -> float | None:
        """When the current token was signed (epoch seconds), None before the first."""
        return self._issued_at if self._token is not None else None

    def current(self) -> str:
        """The token to send now: the cached one, renewed once it is 50 minutes old."""
        now = self._clock()
        if self._token is None or now - self._issued_at >= TOKEN_REFRESH_AFTER:
            return self._renew(now, TOKEN_REFRESH_AFTER)
        return self._token

    def expired(self, token: str) -> bool:
        """APNs answered ``ExpiredProviderToken`` to ``token``: is there a newer one to resend with?

        Renews the token if ``token`` is still the current one and is at least 20 minutes old;
        True when the current token now differs from ``token`` (renewed here or before).
        """
        if token != self._token:
            return self._token is not None
        now = self._clock()
        if now - self._issued_at < TOKEN_MIN_AGE:
            return False
        return self._renew(now, TOKEN_MIN_AGE) != token

    def _renew(self, now: float, refresh_after: float) -> str:
        issued_at = int(now)
        if self._shared is not None:
            try:
                issued_at = self._shared(issued_at, int(refresh_after))
            except Exception as exc:  # the database is down: a token of this process's own
                logger.warning(
                    "apns: the shared provider token of key %s could not be read (%s); "
                    "signing one for this process",
                    self._key_id,
                    type(exc).__name__,
                )
        if self._token is not None and issued_at == self._issued_at:
            return self._token  # the same claims: the same token
        token = sign_provider_token(
            self._key, key_id=self._key_id, team_id=self._team_id, issued_at=issued_at
        )
        redaction.register(token)  # never in a message or a log line (jobs/redaction.py)
        self._token, self._issued_at = token, float(issued_at)
        self.signed += 1
        logger.debug("apns: provider token signed for key %s", self._key_id)
        return token


# -- the request -------------------------------------------------------------------------------


def apns_id(key: str) -> str:
    """The ``apns-id`` of the message whose key is ``key`` (the same for every resend)."""
    return str(uuid.uuid5(APNS_ID_NAMESPACE, key))


def collapse_id(collapse_key: str) -> str:
    """``collapse_key`` cut to 64 bytes of UTF-8, never inside a character."""
    return collapse_key.encode()[:MAX_COLLAPSE_ID].decode(errors="ignore")


def valid_device_token(token: str) -> bool:
    """Whether ``token`` looks like an APNs device token (64 to 200 hex digits, whole bytes)."""
    return DEVICE_TOKEN.fullmatch(token) is not None and len(token) % 2 == 0


def expiration(message: PushMessage, now: datetime) -> str | None:
    """``apns-expiration``: the epoch second of ``expires_at``, 0 once past, None without one."""
    ttl = message.ttl(now)
    if ttl is None or message.expires_at is None:
        return None
    if ttl <= timedelta(0):
        return "0"
    return str(int(message.expires_at.timestamp()))


def payload(message: PushMessage) -> bytes:
    """The JSON body: ``aps`` (alert title and body, default sound), ``data``, ``tockwork_key``.

    Raises :class:`ValueError` for a ``data`` key ``aps`` (it would replace the alert).
    """
    if "aps" in message.data:
        raise ValueError("data key 'aps' is reserved for the alert")
    body: dict[str, object] = {
        "aps": {"alert": {"title": message.title, "body": message.body}, "sound": "default"},
        **message.data,
        "tockwork_key": message.key,
    }
    return orjson.dumps(body)


def request_headers(message: PushMessage, *, topic: str, now: datetime) -> list[tuple[str, str]]:
    """The request's headers, ``authorization`` aside (it is added at each send).

    Raises :class:`ValueError` for an unknown priority.
    """
    priority = PRIORITIES.get(message.priority)
    if priority is None:
        raise ValueError(f"priority {message.priority!r} is not one of {sorted(PRIORITIES)}")
    headers = [
        ("apns-topic", topic),
        ("apns-push-type", "alert"),
        ("apns-priority", priority),
        ("apns-id", apns_id(message.key)),
    ]
    expires = expiration(message, now)
    if expires is not None:
        headers.append(("apns-expiration", expires))
    if message.collapse_key:
        headers.append(("apns-collapse-id", collapse_id(message.collapse_key)))
    return headers


# -- the answer --------------------------------------------------------------------------------


def reason_of(body: bytes) -> tuple[str | None, int | None]:
    """The ``reason`` and ``timestamp`` (ms) of an APNs error body, None where absent or odd.

    A reason is kept only if it looks like one (a word of at most 64 characters): whatever a
    server answers, nothing else of it reaches a result.
    """
    try:
        parsed = orjson.loads(body) if body else None
    except orjson.JSONDecodeError:
        return None, None
    if not isinstance(parsed, dict):
        return None, None
    reason = parsed.get("reason")
    timestamp = parsed.get("timestamp")
    ok_reason = reason if isinstance(reason, str) and _REASON.fullmatch(reason) else None
    ok_time = timestamp if isinstance(timestamp, int) and not isinstance(timestamp, bool) else None
    return ok_reason, ok_time


def classify(message: PushMessage, response: Response, now: datetime) -> PushResult:
    """The result of APNs' answer ``response`` to ``message`` (the module's error table)."""
    status = response.status
    if status == 200:
        return PushResult(message, PushStatus.DELIVERED)
    reason, timestamp = reason_of(response.body)
    code = reason or f"http_{status}"
    error = f"APNs answered {status} {reason}" if reason else f"APNs answered {status}"
    wait = retry_after(response.headers.get("retry-after"), now)
    if status == 410:
        if timestamp is not None:
            since = datetime.fromtimestamp(timestamp / 1000, UTC).isoformat(timespec="seconds")
            error += f" (invalid since {since})"
        return PushResult(message, PushStatus.REJECTED, error, code)
    if status == 400 and reason in _REJECTED_400:
        return PushResult(message, PushStatus.REJECTED, error, code)
    if status == 403 and reason == "ExpiredProviderToken":
        return PushResult(message, PushStatus.TRANSIENT, error, code, wait)
    if status == 429:
        return PushResult(
            message, PushStatus.RATE_LIMITED, error, code, wait or DEFAULT_RETRY_AFTER
        )
    if 400 <= status < 500:
        return PushResult(message, PushStatus.PERMANENT, error, code)
    return PushResult(message, PushStatus.TRANSIENT, error, code, wait)


def _failure(message: PushMessage, exc: Http2Error) -> PushResult:
    # The exception's text is not used: it may name the path, which holds the device token.
    codes: list[tuple[type[Http2Error], str, str]] = [
        (StreamRefused, "stream_refused", "stream refused twice"),
        (RequestTimeout, "timeout", "request timed out"),
        (ConnectFailed, "connect_failed", "could not connect to APNs"),
        (ConnectionLost, "connection_lost", "connection lost"),
    ]
    for cls, code, error in codes:
        if isinstance(exc, cls):
            return PushResult(message, PushStatus.TRANSIENT, error, code)
    return PushResult(
        message, PushStatus.TRANSIENT, f"HTTP/2 error ({type(exc).__name__})", "http2"
    )


# -- the channel -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Request:
    path: str
    headers: list[tuple[str, str]]
    body: bytes


class ApnsChannel:
    """APNs as a :class:`~scheduler.push.channel.PushChannel` (module docstring).

    ``url`` is ``"production"``, ``"sandbox"`` or a base URL (``http://`` is HTTP/2 without TLS,
    for a local fake). ``clock`` (epoch seconds, default :func:`time.time`) dates the provider
    tokens. ``conninfo``: the database through which every process of this key shares its
    provider token (:func:`database_issue`; ``tockwork worker`` passes it), else the channel
    signs its own. ``quota_per_minute``: Apple publishes none, so None unless the operator
    sets one. Every setting is checked here: :class:`~scheduler.errors.InvalidPushConfig`
    names the one that is wrong.
    """

    name = "apns"

    def __init__(
        self,
        *,
        key_file: str | os.PathLike[str],
        key_id: str,
        team_id: str,
        topic: str,
        url: str = "production",
        connections: int = 2,
        max_in_flight: int = 1000,
        quota_per_minute: int | None = None,
        connect_timeout: float = 10.0,
        request_timeout: float = 30.0,
        ssl_context: SSLContext | None = None,
        clock: Callable[[], float] | None = None,
        conninfo: str | None = None,
    ) -> None:
        if not isinstance(key_id, str) or not _ID.fullmatch(key_id):
            raise InvalidPushConfig("key_id", key_id, "must be 10 characters, A-Z and 0-9")
        if not isinstance(team_id, str) or not _ID.fullmatch(team_id):
            raise InvalidPushConfig("team_id", team_id, "must be 10 characters, A-Z and 0-9")
        if not isinstance(topic, str) or not _TOPIC.fullmatch(topic):
            raise InvalidPushConfig("topic", topic, "must be the app's bundle id (com.example.app)")
        base_url = _base_url(url)
        for field, count in (("connections", connections), ("max_in_flight", max_in_flight)):
            if isinstance(count, bool) or not isinstance(count, int) or count < 1:
                raise InvalidPushConfig(field, count, "must be a positive integer")
        if quota_per_minute is not None and (
            isinstance(quota_per_minute, bool)
            or not isinstance(quota_per_minute, int)
            or quota_per_minute < 1
        ):
            raise InvalidPushConfig("quota_per_minute", quota_per_minute, "must be None or >= 1")
        for field, seconds in (
            ("connect_timeout", connect_timeout),
            ("request_timeout", request_timeout),
        ):
            if isinstance(seconds, bool) or not isinstance(seconds, int | float) or seconds <= 0:
                raise InvalidPushConfig(field, seconds, "must be a positive number of seconds")
        key = load_key(key_file)
        self._topic = topic
        self._quota = quota_per_minute
        shared = (
            database_issue(conninfo, team_id=team_id, key_id=key_id)
            if conninfo is not None
            else None
        )
        self.provider_token = ProviderToken(
            key, key_id=key_id, team_id=team_id, clock=clock or time, shared=shared
        )
        self._slots = asyncio.Semaphore(max_in_flight)
        self._client = Http2Client(
            base_url,
            connections=connections,
            connect_timeout=float(connect_timeout),
            request_timeout=float(request_timeout),
            max_body=MAX_PAYLOAD,
            ssl_context=ssl_context,
        )

    def __repr__(self) -> str:
        return f"ApnsChannel(topic={self._topic!r}, provider_token={self.provider_token!r})"

    @property
    def quota_per_minute(self) -> int | None:
        return self._quota

    async def send(self, messages: Sequence[PushMessage], *, now: datetime) -> list[PushResult]:
        """One result per message, in order (the channel contract, module docstring)."""
        for message in messages:
            if message.channel != self.name:
                raise InvalidInput("message.channel", message.channel, "not an apns message")
        results = await asyncio.gather(*(self._send_one(m, now) for m in messages))
        return list(results)

    async def aclose(self) -> None:
        await self._client.aclose()

    def _prepare(self, message: PushMessage, now: datetime) -> _Request | PushResult:
        if not valid_device_token(message.token):
            error = "malformed device token (APNs tokens are 64 to 200 hex digits)"
            return PushResult(message, PushStatus.REJECTED, error, "BadDeviceToken")
        try:
            headers = request_headers(message, topic=self._topic, now=now)
            body = payload(message)
        except ValueError as exc:
            return PushResult(message, PushStatus.PERMANENT, str(exc), "invalid_message")
        if len(body) > MAX_PAYLOAD:
            error = f"payload is {len(body)} bytes, over APNs' {MAX_PAYLOAD}"
            return PushResult(message, PushStatus.PERMANENT, error, "PayloadTooLarge")
        return _Request(f"/3/device/{message.token}", headers, body)

    async def _send_one(self, message: PushMessage, now: datetime) -> PushResult:
        request = self._prepare(message, now)
        if isinstance(request, PushResult):
            result = request
        else:
            async with self._slots:
                result = await self._exchange(message, request, now)
        logger.debug(
            "apns %s -> %s: %s %s",
            message.key,
            redact_token(message.token),
            result.status,
            result.code or "",
        )
        return result

    async def _exchange(self, message: PushMessage, request: _Request, now: datetime) -> PushResult:
        refused_resent = token_resent = False
        while True:
            token = self.provider_token.current()
            headers = [("authorization", f"bearer {token}"), *request.headers]
            try:
                response = await self._client.request("POST", request.path, headers, request.body)
            except StreamRefused as exc:
                # Not processed: the protocol says it is safe to send again, once.
                if refused_resent:
                    return _failure(message, exc)
                refused_resent = True
                continue
            except Http2Error as exc:
                return _failure(message, exc)
            if (
                response.status == 403
                and not token_resent
                and reason_of(response.body)[0] == "ExpiredProviderToken"
                and self.provider_token.expired(token)
            ):
                token_resent = True
                continue
            return classify(message, response, now)


def _base_url(url: str) -> str:
    if not isinstance(url, str):
        raise InvalidPushConfig("url", url, "must be 'production', 'sandbox' or a URL")
    if url in URLS:
        return URLS[url]
    parts = urlsplit(url)
    if parts.username is not None or parts.password is not None:
        # Shown without the user part: it may hold a password.
        shown = parts._replace(netloc=parts.hostname or "").geturl()
        raise InvalidPushConfig("url", shown, "must not hold credentials")
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise InvalidPushConfig("url", url, "must be 'production', 'sandbox' or an http(s) URL")
    return url.rstrip("/")


__all__ = [
    "DEFAULT_RETRY_AFTER",
    "MAX_PAYLOAD",
    "PRODUCTION_URL",
    "SANDBOX_URL",
    "ApnsChannel",
    "ProviderToken",
    "SharedIssue",
    "apns_id",
    "classify",
    "collapse_id",
    "database_issue",
    "load_key",
    "payload",
    "request_headers",
    "retry_after",
    "sign_provider_token",
    "valid_device_token",
]
