"""No secret in anything Tockwork prints (issue 26): a series of commands and services run as
real processes with planted secrets (the database password, the dashboard's token, a webhook
signing secret and a bearer token in a handler's error, a push credential's key), and ALL their
output (stdout, stderr, text and JSON logs at debug level, the error summaries stored and then
shown) is searched for them."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import psycopg
from psycopg.conninfo import make_conninfo

from tests.acceptance.apps_secrets import BEARER, WEBHOOK_SECRET
from tests.acceptance.cli_harness import run
from tests.processes import TRACEBACK, wait_for

ROOT = Path(__file__).resolve().parents[2]
# A service's start line (not psycopg's "connection started").
STARTED = re.compile(r"\b(?:scheduler|relay|worker) \S+ started\b|serving /metrics|listening on")
PASSWORD = "Planted-DbPw-5e1a9c"  # the test server trusts local connections: any password goes
DASHBOARD_TOKEN = "Planted-DashToken-4c3b2a190817"
KEY_MATERIAL = "PlantedKeyMaterialAAAABBBBCCCCDDDD"
SECRETS = (PASSWORD, DASHBOARD_TOKEN, WEBHOOK_SECRET.removeprefix("whsec_"), BEARER, KEY_MATERIAL)


class Run:
    """Every command's output, kept for the final search."""

    def __init__(self, url: str) -> None:
        self.env = {
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "DATABASE_URL": url,
            "TOCKWORK_DASHBOARD_TOKEN": DASHBOARD_TOKEN,
            "PGCONNECT_TIMEOUT": "2",
        }
        self.outputs: list[tuple[str, str]] = []

    def command(self, *args: str, env: dict[str, str] | None = None, code: int = 0) -> str:
        """A one-shot command, in this process (cheap): its stdout, stderr and log lines."""
        names = ("DATABASE_URL", "TOCKWORK_DASHBOARD_TOKEN", "PGCONNECT_TIMEOUT")
        result = run(list(args), {**{n: self.env[n] for n in names}, **(env or {})})
        output = result.out + result.err
        self.outputs.append((" ".join(args), output))
        assert result.code == code, f"{args}: exit {result.code}\n{output}"
        return output

    def start(self, *args: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [sys.executable, "-m", "scheduler.cli", *args], cwd=ROOT, env=self.env, text=True,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        )  # fmt: skip

    @staticmethod
    def read_until_started(proc: subprocess.Popen[str]) -> str:
        """A service's output up to its start line (read, not slept for)."""
        assert proc.stdout is not None
        lines = []
        for line in proc.stdout:
            lines.append(line)
            if STARTED.search(line):
                break
        return "".join(lines)

    def stop(self, proc: subprocess.Popen[str], name: str, head: str = "") -> None:
        """After its SIGTERM (a second one would find the default handler back): it must exit
        0; its whole output is kept."""
        rest, _ = proc.communicate(timeout=60)
        output = head + rest
        self.outputs.append((name, output))
        assert proc.returncode == 0, f"{name}: exit {proc.returncode}\n{output}"


def test_no_planted_secret_is_ever_printed(db_url: str, tmp_path: Path) -> None:
    url = make_conninfo(db_url, password=PASSWORD)
    as_url = (
        f"postgresql://postgres:{PASSWORD}@/{psycopg.conninfo.conninfo_to_dict(db_url)['dbname']}"
    )
    params = psycopg.conninfo.conninfo_to_dict(db_url)
    as_url += f"?host={params.get('host', '')}&port={params.get('port', 5432)}"
    tockwork = Run(as_url)

    # One-shot commands, the URL given in the environment and as a flag.
    tockwork.command("migrate")
    tockwork.command("migrate", "--database-url", url)
    for args in (
        ["stats"],
        ["jobs", "list", "--status", "dead"],
        ["schedules", "list"],
        ["outbox", "dead"],
        ["limits", "list"],
        ["healthz", "--max-scheduler-lag", "0"],
    ):
        tockwork.command(*args)
    # A URL that cannot be used, in every way it can fail.
    for bad, code in ((f"mysql://u:{PASSWORD}@y/z", 2),
                      (f"postgresql://u:{PASSWORD}@h:notaport/db", 2),
                      (f"host=x password={PASSWORD} port=abc", 2),
                      (f"postgresql://u:{PASSWORD}@127.0.0.1:1/db", 1)):  # fmt: skip
        tockwork.command("stats", env={"DATABASE_URL": bad}, code=code)
        tockwork.command("healthz", "--database-url", bad, code=code)
        tockwork.command("healthz", "--read-url", bad, code=code)

    # The services, all at once (each start costs a second of imports), at debug level: two
    # workers whose handler's error carries secrets (text and JSON logs), each until its jobs
    # are dead; the others until they say they started.
    workers = {
        "leak_text": ["--log-level", "debug"],
        "leak_json": ["--log-level", "debug", "--log-json"],
    }
    services = [
        ["scheduler", "--log-level", "debug"],
        ["relay", "--app", "tests.integration.outbox.apps:projections", "--log-level", "debug"],
        ["metrics-server", "--port", "0"],
        ["dashboard", "--port", "0"],
        ["dashboard", "--port", "0", "--token", DASHBOARD_TOKEN],
    ]
    with psycopg.connect(db_url, autocommit=True) as conn:
        for queue in workers:
            conn.execute(
                "INSERT INTO jobs (job_type, queue, payload) VALUES ('leak', %s, '{}')", [queue]
            )
        started = [
            (f"worker {extra}", tockwork.start("worker", "--app", app, "--queue", f"{q}=1",
                                               "--poll", "0.05", *extra))
            for q, extra in workers.items()
            for app in ["tests.acceptance.apps_secrets:handlers"]
        ] + [(" ".join(args), tockwork.start(*args)) for args in services]  # fmt: skip
        heads = {name: tockwork.read_until_started(proc) for name, proc in started[2:]}
        try:
            wait_for(conn, "SELECT bool_and(status = 'dead') FROM jobs_all WHERE job_type = 'leak'")
        finally:
            for _name, proc in started:
                proc.send_signal(signal.SIGTERM)
            for name, proc in started:
                tockwork.stop(proc, name, heads.get(name, ""))
        stored = conn.execute(
            "SELECT string_agg(coalesce(last_error_summary, ''), ' ') FROM jobs_all"
        ).fetchone()
        (job_id,) = conn.execute("SELECT min(id) FROM jobs_all").fetchone() or (None,)
    tockwork.outputs.append(("jobs.last_error_summary (stored)", str(stored)))
    assert "webhook refused" in tockwork.outputs[-1][1]  # the summary is there, masked
    tockwork.command("jobs", "dead")
    shown = tockwork.command("jobs", "show", str(job_id))
    assert "webhook refused" in shown and "***" in shown

    # A push credential whose key is not usable: the refusal names the file, not the key.
    credentials = tmp_path / "fcm.json"
    credentials.write_text(json.dumps({
        "type": "service_account", "project_id": "p", "client_email": "a@p.example",
        "token_uri": "http://127.0.0.1:1/token", "private_key_id": "PlantedKeyId0123456789",
        "private_key": f"-----BEGIN PRIVATE KEY-----\n{KEY_MATERIAL}\n-----END PRIVATE KEY-----\n",
    }))  # fmt: skip
    tockwork.command("worker", "--app", "scheduler.delivery:app",
                env={"TOCKWORK_FCM_CREDENTIALS": str(credentials)}, code=2)  # fmt: skip

    everything = "\n".join(f"$ tockwork {name}\n{out}" for name, out in tockwork.outputs)
    assert len(tockwork.outputs) >= 25
    leaks = [(name, s) for name, out in tockwork.outputs for s in SECRETS if s in out]
    assert not leaks, f"secrets printed: {leaks}\n{everything}"
    # The workers log the failing handler's traceback (masked, as checked); nothing else does.
    assert not [name for name, out in tockwork.outputs if TRACEBACK in out and "worker" not in name]
    assert "***" in everything  # something was masked (the test saw the secrets go by)
