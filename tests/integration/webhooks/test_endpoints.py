"""Webhook endpoints in the database: the API (sync and async forms of one implementation),
secrets shown once and never again, rotation, bad input as typed errors naming the field, the
CLI, and the SSRF guard at delivery against the address a name resolves to *then* (DNS
rebinding: a receiver that the name pointed at later gets nothing)."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from datetime import timedelta
from typing import Any

import psycopg
import pytest

import jobs
from scheduler.errors import InvalidWebhook, WebhookEndpointNotFound
from scheduler.push.fakes.server import FakeRequest, FakeResponse, FakeServer
from scheduler.webhooks import (
    Fanout,
    WebhookHandler,
    add_endpoint,
    add_endpoint_async,
    disable_endpoint,
    endpoint_secrets,
    get_endpoint,
    get_endpoint_async,
    list_endpoints,
    recent_attempts,
    remove_endpoint,
    rotate_secret,
)
from scheduler.webhooks.signing import generate_secret
from scheduler.webhooks.ssrf import Guard, networks
from tests.acceptance.cli_harness import run
from timezones.errors import InvalidInput

ORG = uuid.UUID("0193a8e4-0000-7000-8000-000000000002")
PUBLIC = Guard(resolver=lambda host, port: ["93.184.216.34"])


def test_add_list_show_disable_remove_and_the_secret_is_shown_once(
    conn: psycopg.Connection[Any],
) -> None:
    created = add_endpoint(
        conn, "https://hooks.example/in", organization_id=ORG, description="billing",
        event_types=["order.*", "invoice.paid"], rate_limit=50, guard=PUBLIC,
    )  # fmt: skip
    conn.commit()
    assert created.secret.startswith("whsec_") and created.secret not in repr(created)
    endpoint = created.endpoint
    assert (endpoint.enabled, endpoint.event_types, endpoint.rate_limit) == (
        True, ["invoice.paid", "order.*"], 50,
    )  # fmt: skip
    assert endpoint.subscribes("order.paid") and not endpoint.subscribes("refund.paid")
    assert created.secret not in repr(endpoint)
    assert [e.id for e in list_endpoints(conn, organization_id=ORG)] == [endpoint.id]
    assert list_endpoints(conn, organization_id=None) == []
    [info] = endpoint_secrets(conn, endpoint.id)
    assert info.expires_at is None and created.secret not in repr(info)
    off = disable_endpoint(conn, endpoint.id, reason="customer asked")
    assert (off.enabled, off.disabled_reason) == (False, "customer asked")
    # Disabling twice records one fact.
    disable_endpoint(conn, endpoint.id)
    facts = conn.execute(
        "SELECT payload FROM outbox_events WHERE event_type = 'endpoint.disabled'"
    ).fetchall()
    assert [f[0]["reason"] for f in facts] == ["customer asked"]
    assert list_endpoints(conn, include_disabled=False) == []
    assert remove_endpoint(conn, endpoint.id) and not remove_endpoint(conn, endpoint.id)
    assert get_endpoint(conn, endpoint.id) is None
    with pytest.raises(WebhookEndpointNotFound):
        disable_endpoint(conn, endpoint.id)


def test_rotation_keeps_the_old_secret_for_the_overlap(conn: psycopg.Connection[Any]) -> None:
    endpoint = add_endpoint(conn, "https://8.8.8.8/h", guard=PUBLIC).endpoint
    rotated = rotate_secret(conn, endpoint.id, overlap=timedelta(hours=2))
    assert rotated.secret not in repr(rotated)
    infos = endpoint_secrets(conn, endpoint.id)
    assert len(infos) == 2 and infos[0].expires_at == rotated.others_expire_at
    assert infos[1].expires_at is None
    rotate_secret(conn, endpoint.id, overlap=timedelta(0))
    assert len(endpoint_secrets(conn, endpoint.id)) == 1


def test_the_async_forms_are_the_same_operations(db_url: str) -> None:
    async def scenario() -> tuple[Any, Any]:
        async with await psycopg.AsyncConnection.connect(db_url) as aconn:
            created = await add_endpoint_async(aconn, "https://8.8.8.8/a", guard=PUBLIC)
            return created, await get_endpoint_async(aconn, created.endpoint.id)

    created, read = asyncio.run(scenario())
    assert read == created.endpoint


def test_add_endpoint_async_resolves_once_on_the_loop_and_refuses_a_silent_name(
    db_url: str,
) -> None:
    """The async form resolves the host before any statement, through the guard's resolver
    off the event loop, and checks the URL in its steps against those answers (asked once);
    a name that does not answer within the guard's timeout is refused, nothing written."""
    asked: list[str] = []

    def resolver(host: str, port: int) -> list[str]:
        asked.append(host)
        if host == "silent.example":
            time.sleep(2)  # longer than the timeout below; the thread ends on its own
        return ["93.184.216.34"]

    guard = Guard(resolver=resolver, resolve_timeout=0.3)

    async def scenario() -> tuple[Any, InvalidWebhook]:
        async with await psycopg.AsyncConnection.connect(db_url) as aconn:
            created = await add_endpoint_async(aconn, "https://hooks.example/in", guard=guard)
            await aconn.commit()
            try:
                await add_endpoint_async(aconn, "https://silent.example/in", guard=guard)
            except InvalidWebhook as exc:
                return created, exc
            raise AssertionError("a silent name was registered")

    created, refused = asyncio.run(scenario())
    assert created.endpoint.url == "https://hooks.example/in"
    assert asked == ["hooks.example", "silent.example"]
    assert refused.field == "url" and "does not resolve within 0.3 s" in str(refused)
    with psycopg.connect(db_url) as conn:
        assert [e.url for e in list_endpoints(conn)] == ["https://hooks.example/in"]


BAD_INPUT: list[tuple[dict[str, Any], str]] = [
    ({"url": "ftp://8.8.8.8/"}, "url"),
    ({"url": "https://user:pw@8.8.8.8/"}, "url"),
    ({"url": "http://127.0.0.1:9/"}, "url"),
    ({"url": "https://8.8.8.8/", "event_types": ["bad type"]}, "event_types"),
    ({"url": "https://8.8.8.8/", "event_types": []}, "event_types"),
    ({"url": "https://8.8.8.8/", "event_types": "order.paid"}, "event_types"),
    ({"url": "https://8.8.8.8/", "event_types": ["a.*.b"]}, "event_types"),
    ({"url": "https://8.8.8.8/", "secret": "not-a-secret"}, "secret"),
    ({"url": "https://8.8.8.8/", "secret": "whsec_c2hvcnQ="}, "secret"),
    ({"url": "https://8.8.8.8/", "rate_limit": 0}, "rate_limit"),
    ({"url": "https://8.8.8.8/", "organization_id": "nope"}, "organization_id"),
    ({"url": "https://8.8.8.8/", "description": "x" * 501}, "description"),
]


def test_bad_input_is_a_typed_error_naming_the_field_and_writes_nothing(
    conn: psycopg.Connection[Any],
) -> None:
    for kwargs, field in BAD_INPUT:
        with pytest.raises(InvalidWebhook) as caught:
            add_endpoint(conn, guard=Guard(), **kwargs)
        assert isinstance(caught.value, InvalidInput) and caught.value.field == field, kwargs
        if field == "secret":
            assert "not-a-secret" not in str(caught.value)
    assert conn.execute("SELECT count(*) FROM webhook_endpoints").fetchone() == (0,)


def test_a_given_secret_is_kept(conn: psycopg.Connection[Any]) -> None:
    secret = generate_secret()
    assert add_endpoint(conn, "https://8.8.8.8/", secret=secret, guard=PUBLIC).secret == secret


def test_dns_rebinding_is_refused_at_delivery(db_url: str) -> None:
    """The name resolved to a public address at registration, and to 127.0.0.1 (where a
    receiver listens) at delivery: nothing reaches the receiver, the attempt says why."""
    received: list[FakeRequest] = []

    def receiver(request: FakeRequest) -> FakeResponse:
        received.append(request)
        return FakeResponse(200)

    server = FakeServer(receiver).start_in_thread()
    answers = iter([["93.184.216.34"]])

    def rebinding(host: str, port: int) -> list[str]:
        return next(answers, ["127.0.0.1"])

    guard = Guard(resolver=rebinding)
    handler = WebhookHandler(db_url, guard=guard)
    fanout = Fanout(db_url, refresh=timedelta(0))
    try:
        with psycopg.connect(db_url) as conn:
            endpoint = add_endpoint(
                conn, f"http://rebind.example:{server.port}/hook", organization_id=ORG, guard=guard
            ).endpoint
            jobs.outbox.record(conn, aggregate_type="o", aggregate_id="1", event_type="order.paid",
                               payload={}, organization_id=ORG)  # fmt: skip
        projection = jobs.outbox.Projection("webhooks", frozenset({"order.paid"}), fanout)
        jobs.Relay(db_url, [projection], listen=False).run_until_idle()
        jobs.Worker(
            db_url, {"webhook.deliver": handler}, {"webhooks": 2}, listen=False
        ).run_until_idle()
        with psycopg.connect(db_url) as conn:
            [attempt] = recent_attempts(conn, endpoint.id)
        assert attempt.outcome == "failed" and "refused" in (attempt.error or "")
        assert "loopback" in (attempt.error or "")
        assert received == []
        # The same receiver behind an allow-list is reached: the refusal above was the guard's.
        allowed = Guard(allow=networks(["127.0.0.1/32"]), resolver=rebinding)
        assert asyncio.run(_post(allowed, server.url)) == 200
    finally:
        server.stop_thread()
        fanout.close()


async def _post(guard: Guard, url: str) -> int:
    from scheduler.webhooks.http import HttpClient
    from scheduler.webhooks.ssrf import parse_url

    client = HttpClient(guard)
    try:
        return (await client.post(parse_url(url + "/x"), [], b"{}")).status
    finally:
        await client.aclose()


def test_the_cli_prints_the_secret_once_and_refuses_bad_input(db_url: str) -> None:
    added = run(["webhooks", "add", "https://8.8.8.8/in", "--org", str(ORG), "--event-type",
                 "order.*", "--json", "--database-url", db_url])  # fmt: skip
    assert added.code == 0, added.err
    view = json.loads(added.out)
    secret = view["secret"]
    assert secret.startswith("whsec_")
    endpoint_id = str(view["id"])
    for argv in (
        ["show", endpoint_id],
        ["show", endpoint_id, "--json"],
        ["list"],
        ["list", "--json"],
    ):
        shown = run(["webhooks", *argv, "--database-url", db_url])
        assert shown.code == 0 and secret not in shown.out + shown.err
        assert "8.8.8.8" in shown.out
    rotated = run(["webhooks", "rotate-secret", endpoint_id, "--overlap", "60", "--json",
                   "--database-url", db_url])  # fmt: skip
    assert rotated.code == 0 and json.loads(rotated.out)["secret"] != secret
    assert run(["webhooks", "disable", endpoint_id, "--database-url", db_url]).code == 0
    assert run(["webhooks", "enable", endpoint_id, "--database-url", db_url]).code == 0
    for bad in (["add", "http://127.0.0.1/x"], ["add", "ftp://8.8.8.8/"],
                ["add", "https://8.8.8.8/", "--event-type", "no spaces"],
                ["add", "https://u:p@8.8.8.8/"], ["redeliver"]):  # fmt: skip
        result = run(["webhooks", *bad, "--database-url", db_url])
        assert result.code == 2, (bad, result.err)
        assert len(result.err.strip().splitlines()) == 1 and "Traceback" not in result.err
    assert run(["webhooks", "remove", endpoint_id, "--database-url", db_url]).code == 0
    assert run(["webhooks", "show", endpoint_id, "--database-url", db_url]).code == 1


def test_retention_deletes_old_attempts_but_keeps_held_ones(db_url: str) -> None:
    from scheduler import maintenance

    with psycopg.connect(db_url, autocommit=True) as conn:
        endpoint = add_endpoint(conn, "https://8.8.8.8/", guard=PUBLIC).endpoint
        for job_id, outcome in enumerate(("delivered", "failed", "held"), start=1):
            conn.execute(
                "INSERT INTO webhook_attempts (endpoint_id, event_id, job_id, attempt, "
                "attempted_at, outcome) VALUES (%s, %s, %s, 1, now() - interval '40 days', %s)",
                (endpoint.id, uuid.uuid4(), job_id, outcome),
            )
        counts = maintenance.retention(conn)
        assert counts["webhook_attempts"] == 2
        assert [a.outcome for a in recent_attempts(conn, endpoint.id)] == ["held"]


def test_health_writes_a_healthy_endpoints_success_at_most_once_a_second(
    conn: psycopg.Connection[Any],
) -> None:
    """webhook_endpoint_record_health: a batch of successes on an endpoint with no failure
    streak leaves its row alone within SUCCESS_EVERY of its last written success; a failure
    in between is still reset by the next success, at once."""
    from datetime import UTC, datetime

    from scheduler.queries import query
    from scheduler.webhooks.delivery import SUCCESS_EVERY

    endpoint = add_endpoint(conn, "https://hooks.example/h", organization_id=ORG, guard=PUBLIC)
    endpoint_id = endpoint.endpoint.id
    t0 = datetime(2026, 12, 3, 8, 0, tzinfo=UTC)

    def record(at: timedelta, *, succeeded: bool, failures: int) -> None:
        conn.execute(
            query("webhook_endpoint_record_health"),
            {"ids": [endpoint_id], "succeeded": [succeeded], "failures": [failures],
             "gone": [False], "threshold": 20, "period": timedelta(hours=24),
             "success_every": SUCCESS_EVERY, "now": t0 + at},
        ).fetchall()  # fmt: skip

    def health() -> tuple[Any, ...]:
        row = conn.execute(
            "SELECT last_success_at, consecutive_failures, failing_since, xmin::text"
            " FROM webhook_endpoints WHERE id = %s",
            (endpoint_id,),
        ).fetchone()
        assert row is not None
        return tuple(row)

    record(timedelta(0), succeeded=True, failures=0)
    first = health()
    assert first[:3] == (t0, 0, None)
    conn.commit()
    record(timedelta(milliseconds=500), succeeded=True, failures=0)
    assert health() == first  # not written: the same row version
    record(timedelta(milliseconds=600), succeeded=False, failures=1)
    assert health()[:3] == (t0, 1, t0 + timedelta(milliseconds=600))
    record(timedelta(milliseconds=700), succeeded=True, failures=0)  # within the second: reset
    assert health()[:3] == (t0 + timedelta(milliseconds=700), 0, None)
    record(timedelta(milliseconds=700) + SUCCESS_EVERY, succeeded=True, failures=0)
    assert health()[0] == t0 + timedelta(milliseconds=700) + SUCCESS_EVERY


def test_the_client_writes_the_whole_request_and_refuses_a_header_that_would_split_it() -> None:
    """The client writes the request head itself (h11 only parses the answer): the receiver
    gets every header and the body; a value with CR or LF is a protocol error, nothing sent
    on that connection; the connections are kept and reused across requests."""
    from scheduler.webhooks.http import HttpClient, SendError
    from scheduler.webhooks.ssrf import parse_url

    received: list[FakeRequest] = []

    def receiver(request: FakeRequest) -> FakeResponse:
        received.append(request)
        return FakeResponse(200, [("content-type", "application/json")], b'{"ok":true}')

    server = FakeServer(receiver).start_in_thread()

    async def run() -> tuple[list[int], str, int]:
        client = HttpClient(Guard(allow=networks(["127.0.0.1/32"])))
        url = parse_url(server.url + "/in?x=1")
        try:
            statuses = []
            for n in range(3):
                body = b'{"n":%d}' % n
                response = await client.post(url, [("webhook-id", f"msg_{n}")], body)
                statuses.append(response.status)
            try:
                await client.post(url, [("webhook-id", "a\r\nx-injected: 1")], b"{}")
            except SendError as exc:
                kind = exc.kind
            else:
                kind = "sent"
            return statuses, kind, client.connections_opened
        finally:
            await client.aclose()

    try:
        statuses, kind, opened = asyncio.run(run())
    finally:
        server.stop_thread()
    assert statuses == [200, 200, 200] and kind == "protocol" and opened == 1
    assert [r.body for r in received] == [b'{"n":0}', b'{"n":1}', b'{"n":2}']
    first = received[0]
    assert first.path == "/in?x=1"
    assert first.headers["webhook-id"] == "msg_0"
    assert first.headers["content-type"] == "application/json"
    assert first.headers["user-agent"] == "tockwork-webhooks/1"
    assert first.headers["host"] == f"127.0.0.1:{server.port}"
    assert "x-injected" not in {k for r in received for k in r.headers}
