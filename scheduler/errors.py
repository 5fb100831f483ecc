"""The scheduler's errors: one class per failure a caller can act on.

Every error derives from :class:`timezones.errors.TockworkError`; bad input derives from
:class:`timezones.errors.InvalidInput` (``field``, ``value``), which ``scheduler`` re-exports.
"""

from __future__ import annotations

from typing import Any

from timezones.errors import InvalidInput, TockworkError, shown


class SchedulerError(TockworkError):
    """Base class of every error raised by ``scheduler``."""


class InvalidSchedule(SchedulerError, InvalidInput):
    """A schedule argument is invalid (unknown zone, malformed rule, bad policy...).

    ``field`` names the argument and ``value`` holds what was given; nothing was written.
    A reason taken from a wrapped error does not repeat what the message already says: the
    prefixes ``"rule: "``, ``"invalid rule '...': "`` and ``"'...' is not a valid rule: "`` are
    dropped (else: ``invalid rule 'x': invalid rule 'x': rule: 'x' is not a valid rule: ...``).
    """

    def __init__(self, field: str, value: Any = None, reason: str | None = None) -> None:
        if reason is not None:
            prefixes = (
                f"{field}: ",
                f"invalid {field} {shown(value)}: ",
                f"{shown(value)} is not a valid {field}: ",
            )
            before = None
            while before != reason:
                before = reason
                for prefix in prefixes:
                    reason = reason.removeprefix(prefix)
        super().__init__(field, value, reason)


class ScheduleNotFound(SchedulerError, LookupError):
    def __init__(self, what: Any) -> None:
        self.what = what
        super().__init__(f"no schedule {what}")


class ScheduleExists(SchedulerError, InvalidInput):
    """A named definition with this key already exists in the organization."""

    def __init__(self, key: str) -> None:
        self.key = key
        super().__init__("key", key, "a schedule with this key already exists")


class InvalidPushConfig(SchedulerError, InvalidInput):
    """A push channel's configuration is missing or malformed (a setting, a credentials file).

    ``field`` names the setting (``TOCKWORK_FCM_CREDENTIALS``, ``key_id``...); ``value`` is what
    was given, never key material: a path, a name, or a redacted form.
    """


class InvalidDevice(SchedulerError, InvalidInput):
    """A device registry argument is invalid (scheduler.devices): an empty subject, a bad
    channel name, an empty or overlong token, a malformed organization id...

    ``field`` names the argument and ``value`` holds what was given, except for a token, whose
    ``value`` is its redacted form (:func:`scheduler.push.redact_token`): a token is a
    credential and never appears in full in an error. Nothing was written.
    """


class InvalidWebhook(SchedulerError, InvalidInput):
    """A webhook argument is invalid (scheduler.webhooks): a malformed URL, a bad event-type
    filter, a malformed signing secret, a rate limit out of bounds...

    ``field`` names the argument and ``value`` holds what was given, except for a secret, whose
    ``value`` is never shown (``<secret>``): a secret is a credential. Nothing was written.
    """


class UnsafeWebhookUrl(InvalidWebhook):
    """A webhook URL points where the server must not send requests: a loopback, private,
    link-local, unique-local, multicast or cloud-metadata address (or a name resolving to one),
    outside the allow-list (``TOCKWORK_WEBHOOK_ALLOW``). ``field`` is ``url``."""


class WebhookEndpointNotFound(SchedulerError, LookupError):
    """No webhook endpoint has this id."""

    def __init__(self, endpoint_id: Any) -> None:
        self.endpoint_id = endpoint_id
        super().__init__(f"no webhook endpoint {endpoint_id}")


class ReadReplicaUnavailable(SchedulerError):
    """The read replica (``--read-url``) cannot be reached when a command starts."""
