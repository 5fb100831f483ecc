"""The channel seam: how a batch of push messages leaves Tockwork.

A :class:`PushChannel` sends a batch of :class:`~scheduler.push.message.PushMessage` and returns
one :class:`~scheduler.push.message.PushResult` per message, in order. It is async (the work is
network I/O: many requests in flight over a few HTTP/2 connections) and holds no database
connection: effect-once records, device invalidation and job outcomes are the delivery
handler's (:mod:`scheduler.delivery`), in one place for every channel.

The contract every channel keeps (the channel contract suite checks it against each one):

- ``send`` returns exactly one result per message, ``results[i].message is messages[i]``;
- a failure of one message never fails the others; ``send`` raises only for a programming
  error (a message for another channel), never for a provider's answer, a timeout or a lost
  connection: those are results (``transient``);
- a message is sent at most once per call; nothing is retried inside ``send`` except what the
  protocol says was not processed (a stream refused or above a GOAWAY's last stream id) and a
  401 after one credential refresh;
- no token, credential or signing key appears in a result's ``error``, a log line or an
  exception text;
- ``aclose`` releases connections; a closed channel is not used again.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Protocol, runtime_checkable

from scheduler.push.message import PushMessage, PushResult


@runtime_checkable
class PushChannel(Protocol):
    """A way to a device (module docstring for the contract)."""

    @property
    def name(self) -> str:
        """The channel's name, as in ``PushMessage.channel`` and the device registry."""
        ...

    @property
    def quota_per_minute(self) -> int | None:
        """The provider's send quota for this project/key (messages a minute), None if none:
        the delivery app paces the ``reminder`` job type to it with a global rate limit."""
        ...

    async def send(self, messages: Sequence[PushMessage], *, now: datetime) -> list[PushResult]:
        """Send ``messages`` (all of this channel); one result each, in order. ``now`` is the
        instant expiries are measured from (FCM ``ttl``)."""
        ...

    async def aclose(self) -> None:
        """Close the channel's connections."""
        ...


__all__ = ["PushChannel"]
