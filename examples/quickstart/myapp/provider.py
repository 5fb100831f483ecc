"""A stand-in for your push provider's client (FCM, APNs, ...): it prints instead of sending.

It fails the way a real client does, so the handlers show how each failure becomes an outcome:
the token of user 13 is invalid (the job goes dead), user 429 is rate limited for 30 seconds.
"""

from datetime import timedelta


class Timeout(Exception):
    """The provider did not answer in time: worth retrying."""


class RateLimited(Exception):
    """The provider asked us to slow down (HTTP 429 with Retry-After)."""

    def __init__(self, retry_after: timedelta) -> None:
        super().__init__(f"rate limited, retry after {retry_after}")
        self.retry_after = retry_after


class InvalidToken(Exception):
    """The device token is dead: retrying cannot help."""


def send(user: int, *, idempotency_key: str) -> None:
    """Send a push to ``user``; the provider drops a second request with the same key."""
    if user == 13:
        raise InvalidToken(f"device token of user {user} rejected")
    if user == 429:
        raise RateLimited(timedelta(seconds=30))
    print(f"push to user {user} (idempotency key {idempotency_key})", flush=True)
