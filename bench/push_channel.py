"""The FCM channel alone (no database) beside the HTTP limit and Google's own SDK.

``python -m bench.push_channel [--n 20000] [--transport h2c,tls] [--rounds 2]`` starts the FCM
fake (``scheduler.push.fakes.fcm``) in a process of its own (the client and the server each get
a core of a 2-core machine) and sends ``n`` messages to it, for each transport, with:

(a) ``h2load`` (Debian's ``nghttp2-client``): the same request body and headers (a valid
    bearer), 4 connections x 500 streams: what the fake can serve, the HTTP limit;
(b) Tockwork's :class:`~scheduler.push.fcm.FcmChannel`, one ``send`` of all ``n`` messages (its
    defaults: 4 connections, 2,000 in flight);
(c) firebase-admin's ``send_each_for_multicast`` in batches of 500 (its documented maximum; a
    pool of threads over HTTP/1.1 with ``requests``);
(d) firebase-admin's ``send_each_async`` in batches of 500 (httpx; HTTP/2 over TLS, HTTP/1.1
    over cleartext since httpx does not speak h2c).

Phases alternate over ``--rounds`` rounds so that the machine's load hits them alike; the best
round of each is printed (messages/s; and the CPU time per message of the client process and of
the fake's, the least over the rounds: figures a loaded machine moves less than the rates),
with the ratios ours / max(c, d) (target >= 1) and ours /
h2load (target >= 0.7). The fake's counts check that each side's messages were all accepted.
Figures, not a test: nothing is asserted on time; the exit code is 1 when a target is missed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson

from scheduler.push.fcm import FcmChannel, fcm_message
from scheduler.push.message import PushMessage, PushStatus

NOW = datetime.now(UTC)
BATCH = 500  # firebase-admin's most messages per send_each* call


@dataclass
class Fake:
    process: subprocess.Popen[str]
    url: str
    credentials: str
    ca_file: str | None

    def control(self, path: str, body: dict[str, Any] | None = None) -> Any:
        import ssl

        context = ssl.create_default_context(cafile=self.ca_file) if self.ca_file else None
        request = urllib.request.Request(
            self.url + path,
            data=None if body is None else json.dumps(body).encode(),
            method="GET" if body is None else "POST",
        )
        with urllib.request.urlopen(request, context=context) as reply:
            return json.load(reply)

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()


def server_cpu(pid: int) -> float:
    """CPU seconds (user + system) the fake's process has used."""
    with open(f"/proc/{pid}/stat") as handle:
        fields = handle.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def client_cpu() -> float:
    """CPU seconds of this process (all threads) and of its waited-for children (h2load)."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


def start_fake(tls: bool, directory: str) -> Fake:
    command = [
        sys.executable,
        "-m",
        "scheduler.push.fakes.fcm",
        "--dir",
        directory,
        "--max-concurrent-streams",
        "1000",
    ]
    if tls:
        command.append("--tls")
    # the fake's closing summary (stderr) is of the last phase only: kept out of the report
    log_path = os.path.join(directory, "fake.log")
    with open(log_path, "w") as log_file:
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=log_file, text=True)
    assert process.stdout is not None
    line = process.stdout.readline()
    if not line:
        with open(log_path) as log_file:
            raise SystemExit("the FCM fake did not start:\n" + log_file.read())
    info = json.loads(line)
    return Fake(process, info["url"], info["credentials"], info["ca_file"])


def messages(n: int, offset: int) -> list[PushMessage]:
    return [
        PushMessage(
            key=f"bench-{offset + i}",
            channel="fcm",
            token=f"bench-device-token-{offset + i:08d}:APA91bBenchmark",
            title="Take your medicine",
            body="It is 08:00 in Europe/Paris",
            data={"schedule": "s-42"},
            collapse_key="s-42",
            expires_at=NOW + timedelta(hours=1),
        )
        for i in range(n)
    ]


def client_context(fake: Fake) -> Any:
    import ssl

    return ssl.create_default_context(cafile=fake.ca_file) if fake.ca_file else None


async def bearer(fake: Fake) -> str:
    fcm = FcmChannel(fake.credentials, url=fake.url, ssl_context=client_context(fake))
    try:
        return await fcm._token()
    finally:
        await fcm.aclose()


def run_h2load(fake: Fake, n: int, token: str, directory: str) -> tuple[float | None, str]:
    exe = shutil.which("h2load")
    if exe is None:
        return None, "h2load not installed (apt-get install nghttp2-client)"
    body_file = os.path.join(directory, "body.json")
    with open(body_file, "wb") as handle:
        handle.write(orjson.dumps({"message": fcm_message(messages(1, 0)[0], NOW)}))
    with open(fake.credentials) as handle:
        project = json.load(handle)["project_id"]
    command = [
        exe,
        "-n",
        str(n),
        "-c",
        "4",
        "-m",
        "500",
        "-t",
        "1",
        "-H",
        f"authorization: Bearer {token}",
        "-H",
        "content-type: application/json; charset=UTF-8",
        "-d",
        body_file,
        f"{fake.url}/v1/projects/{project}/messages:send",
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)
    # the command line carries the bearer: never print it, only the figures
    match = re.search(r"finished in ([\d.]+)(m?s), ([\d.]+) req/s", done.stdout)
    codes = re.search(r"status codes: (\d+) 2xx, (\d+) 3xx, (\d+) 4xx, (\d+) 5xx", done.stdout)
    if match is None or codes is None:
        return None, f"h2load failed (exit {done.returncode})"
    if int(codes.group(1)) != n:
        return None, f"h2load: only {codes.group(1)} of {n} answered 2xx"
    seconds = float(match.group(1)) / (1000 if match.group(2) == "ms" else 1)
    return n / seconds, "4 connections x 500 streams, 1 thread"


async def run_ours(fake: Fake, n: int, offset: int) -> tuple[float, str]:
    fcm = FcmChannel(fake.credentials, url=fake.url, ssl_context=client_context(fake))
    try:
        await fcm.send(messages(10, -1_000_000 - offset), now=NOW)  # token and connections
        batch = messages(n, offset)
        start = time.perf_counter()
        results = await fcm.send(batch, now=NOW)
        seconds = time.perf_counter() - start
        bad = sum(1 for r in results if r.status is not PushStatus.DELIVERED)
        note = f"{fcm.client.stats.connections_opened} connections"
        if bad:
            note += f", {bad} not delivered"
        return n / seconds, note
    finally:
        await fcm.aclose()


def sdk_app(fake: Fake) -> Any:
    import firebase_admin
    from firebase_admin import credentials, messaging

    if fake.ca_file:
        os.environ["REQUESTS_CA_BUNDLE"] = fake.ca_file
        os.environ["SSL_CERT_FILE"] = fake.ca_file
    messaging._MessagingService.FCM_URL = fake.url + "/v1/projects/{0}/messages:send"
    name = f"bench-{time.monotonic_ns()}"
    return firebase_admin.initialize_app(credentials.Certificate(fake.credentials), name=name)


def sdk_messages(batch: list[PushMessage]) -> list[Any]:
    from firebase_admin import messaging

    return [
        messaging.Message(
            token=m.token,
            notification=messaging.Notification(title=m.title, body=m.body),
            data={**m.data, "tockwork_key": m.key},
            android=messaging.AndroidConfig(ttl=3600, collapse_key=m.collapse_key, priority="high"),
            apns=messaging.APNSConfig(
                headers={"apns-priority": "10", "apns-collapse-id": m.collapse_key or ""}
            ),
        )
        for m in batch
    ]


def run_multicast(fake: Fake, n: int, offset: int) -> tuple[float, str]:
    import firebase_admin
    from firebase_admin import messaging

    app = sdk_app(fake)
    try:
        first = messages(1, -2_000_000 - offset)[0]
        messaging.send(sdk_messages([first])[0], app=app)  # token, connection pool
        batch = messages(n, offset)
        start = time.perf_counter()
        failures = 0
        for i in range(0, n, BATCH):
            part = batch[i : i + BATCH]
            multicast = messaging.MulticastMessage(
                tokens=[m.token for m in part],
                notification=messaging.Notification(title=first.title, body=first.body),
                data={**first.data, "tockwork_key": f"multicast-{offset + i}"},
                android=messaging.AndroidConfig(
                    ttl=3600, collapse_key=first.collapse_key, priority="high"
                ),
            )
            failures += messaging.send_each_for_multicast(multicast, app=app).failure_count
        seconds = time.perf_counter() - start
        note = "threads, HTTP/1.1 (requests)" + (f", {failures} failed" if failures else "")
        return n / seconds, note
    finally:
        firebase_admin.delete_app(app)


def run_async_sdk(fake: Fake, n: int, offset: int) -> tuple[float, str]:
    import firebase_admin
    from firebase_admin import messaging

    app = sdk_app(fake)
    protocol = "HTTP/2 (httpx)" if fake.ca_file else "HTTP/1.1 (httpx has no h2c)"

    async def go() -> tuple[float, int]:
        service = messaging._get_messaging_service(app)
        try:
            warm = sdk_messages(messages(1, -3_000_000 - offset))
            await messaging.send_each_async(warm, dry_run=False, app=app)
            batch = messages(n, offset)
            start = time.perf_counter()
            failures = 0
            for i in range(0, n, BATCH):
                answer = await messaging.send_each_async(
                    sdk_messages(batch[i : i + BATCH]), dry_run=False, app=app
                )
                failures += answer.failure_count
            return time.perf_counter() - start, failures
        finally:
            await service._async_client.aclose()

    try:
        seconds, failures = asyncio.run(go())
    finally:
        firebase_admin.delete_app(app)
    return n / seconds, protocol + (f", {failures} failed" if failures else "")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=20_000, help="messages per phase")
    parser.add_argument("--transport", default="h2c,tls", help="h2c, tls or both")
    parser.add_argument("--rounds", type=int, default=2, help="alternated rounds")
    parser.add_argument("--no-peers", action="store_true", help="skip firebase-admin")
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore", DeprecationWarning)  # the SDK's Message.token

    missed = False
    for transport in [t.strip() for t in args.transport.split(",") if t.strip()]:
        missed |= run_transport(transport, args)
    sys.exit(1 if missed else 0)


def run_transport(transport: str, args: argparse.Namespace) -> bool:
    """One transport's phases, alternated over the rounds; True when a target is missed."""
    tls = transport == "tls"
    directory = tempfile.mkdtemp(prefix="bench-push-")
    fake = start_fake(tls, directory)
    missed = False
    try:
        token = asyncio.run(bearer(fake))
        phases: dict[str, Callable[[int], tuple[float | None, str]]] = {
            "(a) h2load": lambda offset: run_h2load(fake, args.n, token, directory),
            "(b) FcmChannel": lambda offset: asyncio.run(run_ours(fake, args.n, offset)),
        }
        if not args.no_peers:
            phases["(c) send_each_for_multicast"] = lambda offset: run_multicast(
                fake, args.n, offset
            )
            phases["(d) send_each_async"] = lambda offset: run_async_sdk(fake, args.n, offset)
        best: dict[str, tuple[float | None, str]] = {}
        cpu: dict[str, tuple[float, float]] = {}  # least client, server CPU µs per message
        for round_ in range(args.rounds):
            order = list(phases) if round_ % 2 == 0 else list(reversed(phases))
            for offset, name in enumerate(order):
                fake.control("/_fake/fcm/reset", {})
                client0, server0 = client_cpu(), server_cpu(fake.process.pid)
                rate, note = phases[name]((round_ * 10 + offset) * args.n)
                client1, server1 = client_cpu(), server_cpu(fake.process.pid)
                per = ((client1 - client0) * 1e6 / args.n, (server1 - server0) * 1e6 / args.n)
                old = cpu.get(name)
                cpu[name] = per if old is None else (min(old[0], per[0]), min(old[1], per[1]))
                summary = fake.control("/_fake/fcm/summary")
                if name != "(a) h2load" and summary["delivered"] < args.n:
                    note += f"; fake accepted {summary['delivered']} of {args.n}"
                previous = best.get(name)
                if previous is None or (rate is not None and (previous[0] or 0) < rate):
                    best[name] = (rate, note)
        print(f"\n== transport {transport}: {args.n} messages, best of {args.rounds} rounds ==")
        print(f"{'':32} {'rate':>16}   {'client CPU':>12} {'fake CPU':>10}   notes")
        for name, (rate, note) in best.items():
            shown = f"{rate:10,.0f} msg/s" if rate is not None else "             n/a"
            client, server = cpu[name]
            print(f"{name:32} {shown}   {client:9.0f} µs {server:7.0f} µs   {note}")
        ours = best["(b) FcmChannel"][0] or 0.0
        limit = best["(a) h2load"][0]
        peers = [best[k][0] or 0.0 for k in best if k.startswith(("(c)", "(d)"))]
        if peers and max(peers) > 0:
            ratio = ours / max(peers)
            missed |= ratio < 1.0
            print(f"ours / max(c, d)                 {ratio:10.2f}x   target >= 1")
        if limit:
            ratio = ours / limit
            missed |= ratio < 0.7
            print(f"ours / h2load                    {ratio:10.2f}x   target >= 0.7")
        else:
            print("ours / h2load                           n/a   (no h2load figure)")
    finally:
        fake.stop()
        shutil.rmtree(directory, ignore_errors=True)
    return missed


if __name__ == "__main__":
    main()
