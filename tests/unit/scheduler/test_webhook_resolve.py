"""The SSRF guard's resolution of a webhook URL's host is bounded, and the async check never
blocks its event loop (scheduler/webhooks/ssrf.py): no name a user types can hang a call.

Resolvers are stand-ins that answer, fail or hang on an event the test releases; the async
check's system path is the loop's own ``getaddrinfo``, replaced on the test's loop by one that
never answers. No DNS server is asked.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from typing import Any

import pytest

from scheduler.errors import InvalidWebhook, UnsafeWebhookUrl
from scheduler.webhooks.ssrf import DEFAULT_RESOLVE_TIMEOUT, Guard, system_resolver

TIMEOUT = 0.3


class Hanging:
    """A resolver that answers only when released (or after a minute)."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.calls = 0

    def __call__(self, host: str, port: int) -> list[str]:
        self.calls += 1
        self.release.wait(60)
        return ["8.8.8.8"]


def test_a_hanging_resolver_is_refused_after_the_timeout_naming_the_url() -> None:
    resolver = Hanging()
    guard = Guard(resolver=resolver, resolve_timeout=TIMEOUT)
    started = time.monotonic()
    try:
        with pytest.raises(InvalidWebhook) as caught:
            guard.check_url("https://slow.example/hook")
    finally:
        resolver.release.set()
    assert time.monotonic() - started < TIMEOUT + 5  # bounded (generously, on a busy machine)
    assert caught.value.field == "url" and caught.value.value == "https://slow.example/hook"
    assert "does not resolve within 0.3 s" in str(caught.value)
    assert not isinstance(caught.value, UnsafeWebhookUrl)


def test_the_async_check_resolves_on_the_loop_and_times_out_without_blocking_it() -> None:
    """The system path: ``loop.getaddrinfo`` that never answers. Meanwhile a ticker on the same
    loop keeps running (the loop is not blocked), and the check ends with a typed error."""

    async def never(*args: Any, **kwargs: Any) -> list[Any]:
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    async def scenario() -> tuple[InvalidWebhook, int]:
        loop = asyncio.get_running_loop()
        loop.getaddrinfo = never  # type: ignore[method-assign]
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                await asyncio.sleep(0.01)
                ticks += 1

        task = asyncio.create_task(ticker())
        try:
            await Guard(resolve_timeout=TIMEOUT).check_url_async("https://slow.example/hook")
        except InvalidWebhook as exc:
            return exc, ticks
        finally:
            task.cancel()
        raise AssertionError("the check passed")

    error, ticks = asyncio.run(scenario())
    assert error.field == "url" and "does not resolve within 0.3 s" in str(error)
    assert ticks >= 5  # the loop ran the ticker while the resolution waited


def test_the_async_check_uses_the_loops_getaddrinfo_and_checks_every_answer() -> None:
    asked: list[tuple[str, int]] = []

    def answers(*addresses: str) -> Any:
        async def getaddrinfo(host: str, port: int, **kwargs: Any) -> list[Any]:
            asked.append((host, port))
            assert kwargs["type"] == socket.SOCK_STREAM
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (a, port)) for a in addresses]

        return getaddrinfo

    async def check(*addresses: str) -> Any:
        asyncio.get_running_loop().getaddrinfo = answers(*addresses)  # type: ignore[method-assign]
        return await Guard().check_url_async("https://hooks.example:8443/in")

    url, pinned = asyncio.run(check("93.184.216.34"))
    assert (url.host, url.port) == ("hooks.example", 8443)
    assert asked == [("hooks.example", 8443)]
    # The guard handed back answers that name from what was just checked: no second lookup.
    assert pinned.resolver("hooks.example", 8443) == ["93.184.216.34"]
    assert [str(a) for a in pinned.addresses(url)] == ["93.184.216.34"]
    assert len(asked) == 1
    with pytest.raises(UnsafeWebhookUrl, match=r"resolves to 10\.0\.0\.7, a private address"):
        asyncio.run(check("93.184.216.34", "10.0.0.7"))


def test_an_injected_resolver_runs_off_the_loop_within_the_timeout() -> None:
    resolver = Hanging()

    async def scenario() -> InvalidWebhook:
        try:
            await Guard(resolver=resolver, resolve_timeout=TIMEOUT).check_url_async(
                "https://slow.example/"
            )
        except InvalidWebhook as exc:
            return exc
        finally:
            resolver.release.set()  # the executor's thread ends before the loop closes
        raise AssertionError("the check passed")

    assert "does not resolve within" in str(asyncio.run(scenario()))
    assert resolver.calls == 1


def test_a_failing_resolution_names_the_host() -> None:
    def fails(host: str, port: int) -> list[str]:
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    with pytest.raises(InvalidWebhook, match=r"'nowhere\.example' does not resolve"):
        Guard(resolver=fails).check_url("https://nowhere.example/")


def test_the_system_resolver_answers_or_fails_within_the_bound() -> None:
    """A reserved name (RFC 2606 ``.invalid``) through the real resolver: refused with a typed
    error whether the resolver says so at once or never answers here."""
    started = time.monotonic()
    with pytest.raises(InvalidWebhook) as caught:
        Guard(resolve_timeout=1.0).check_url("https://tockwork-test.invalid/")
    assert caught.value.field == "url"
    assert time.monotonic() - started < 1.0 + 5
    assert Guard().resolver is system_resolver and Guard().resolve_timeout == 5.0
    assert DEFAULT_RESOLVE_TIMEOUT == 5.0


@pytest.mark.parametrize("bad", [0, -1, 61, float("nan"), "5", True, None])
def test_a_bad_resolve_timeout_is_a_typed_error(bad: Any) -> None:
    with pytest.raises(InvalidWebhook) as caught:
        Guard(resolve_timeout=bad)
    assert caught.value.field == "resolve_timeout"


def test_add_endpoint_async_takes_the_parameters_of_add_endpoint() -> None:
    """The async form is written apart (it resolves on the loop first): its parameters must
    stay those of the sync form, the one written as steps."""
    import inspect

    from scheduler.webhooks import add_endpoint, add_endpoint_async

    def shape(function: Any) -> list[tuple[str, Any, Any]]:
        params = list(inspect.signature(function).parameters.values())[1:]  # after conn
        return [(p.name, p.kind, p.default) for p in params]

    assert shape(add_endpoint_async) == shape(add_endpoint)
    assert [name for name, _, _ in shape(add_endpoint)][:2] == ["url", "organization_id"]
