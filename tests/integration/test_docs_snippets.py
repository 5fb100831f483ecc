"""Every code block of README.md and docs/ runs as written, against a real PostgreSQL.

Each page runs top to bottom the way a reader follows it: in a fresh database of its own (migrated,
or empty for a page that says ``<!-- snippet: database empty -->``), in a copy of the user's
project folder (``examples/quickstart``, where ``myapp/`` lives), with ``DATABASE_URL`` set.
A ```` ```python ```` block runs as a script (so it must bring its own imports and its own
``url``), and a chain of blocks marked ``<!-- snippet: continues -->`` runs as one script; every
``tockwork`` line of a shell block runs as the installed ``tockwork`` command would, with a
timeout, and must exit with the documented code (0 unless the block says
``<!-- snippet: exit N -->``). Both run in forks of this process (milliseconds, where a new
interpreter costs a second or two of imports), laid out as the real thing: the project folder
as working directory, the script's folder (or the ``tockwork`` script's) first on the import
path, the page's environment, default warning filters. What a fork cannot tell (a module used
but not imported) is checked in a fresh interpreter. A service (``worker``, ``scheduler``,
``relay``, ``metrics-server``) has no flag that makes it stop, so it runs until it logs that it
started (a worker also until it drained the jobs of its queues), then gets SIGTERM and must exit
0; ``<!-- snippet: process -->`` runs it as a real process of the installed script instead.

The conventions are in ``tests/docs_snippets.py`` and docs/development.md.
"""

from __future__ import annotations

import configparser
import contextlib
import importlib.util
import json
import logging
import os
import re
import runpy
import select
import shutil
import signal
import subprocess
import sys
import threading
import time
import tomllib
import traceback
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, NoReturn

import psycopg
import pytest

from scheduler.cli import build_parser
from scheduler.devdb import throwaway_database
from tests.docs_snippets import (
    CLI,
    DOCS,
    LANGUAGES,
    PARSED,
    PROJECT,
    ROOT,
    RUN,
    SQL,
    Block,
    Command,
    collect,
    inline_commands,
    page_directives,
)

TOCKWORK = str(Path(sys.executable).with_name("tockwork"))
TIMEOUT = 60.0  # seconds any one command or script may take: nothing a user types may hang
SERVICES = {"worker", "scheduler", "relay", "metrics-server", "dashboard"}
STARTED = re.compile(r"\b(started|serving /metrics|listening on)\b")
# A worker, scheduler or relay logs "<kind> <name> started" once its SIGTERM handler is in place;
# its "serving /metrics" line comes before that (a SIGTERM then ends it by the default action).
SERVICE_STARTED = re.compile(r"\b(worker|scheduler|relay) \S+ started\b")

DRAINED = """
SELECT NOT EXISTS (
    SELECT FROM jobs_all WHERE queue = ANY(%(queues)s::text[])
    AND (status = 'leased' OR (status IN ('pending', 'retrying') AND run_at <= now())))
"""

PAGES = [doc for doc in DOCS if any(b.lang in RUN | SQL or b.commands() for b in collect(doc))]


def _id(doc: Path) -> str:
    return str(doc.relative_to(ROOT))


# -- the conventions themselves (no database) -------------------------------------------------


def test_every_fence_names_a_known_language() -> None:
    bad = [
        f"{b.where}: {b.lang or '(none)'}"
        for doc in DOCS
        for b in collect(doc)
        if b.lang not in LANGUAGES
    ]
    assert bad == [], "mark illustrative blocks ```text; runnable ones ```python or ```sh"


def test_no_python_hides_in_a_block_that_does_not_run() -> None:
    """Python that is not in a ```python block would escape testing: a shown block that
    compiles as Python and imports or defines something is refused."""
    hidden = []
    for doc in DOCS:
        for b in collect(doc):
            if b.lang in RUN | CLI | SQL:
                continue
            if b.directive("foreign"):  # another library's code, shown for comparison
                assert all(b.directive("foreign")), f"{b.where}: say whose code it is"
                continue
            try:
                compile(b.text, b.where, "exec")
            except SyntaxError:
                continue
            if re.search(r"^\s*(import |from \S+ import |def |class |\w+ = \w+\()", b.text, re.M):
                hidden.append(b.where)
    assert hidden == []


def test_toml_and_json_blocks_parse() -> None:
    parsed = 0
    for doc in DOCS:
        for b in collect(doc):
            if b.lang in PARSED:
                parsed += 1
                try:
                    if b.lang == "toml":
                        tomllib.loads(b.text)
                    elif b.lang == "json":
                        json.loads(b.text)
                    else:
                        configparser.ConfigParser().read_string(b.text)
                except (ValueError, configparser.Error) as exc:
                    raise AssertionError(f"{b.where}: {exc}") from None
    assert parsed >= 2


def test_the_pages_with_code_are_all_run() -> None:
    assert {_id(d) for d in PAGES} >= {"README.md", "docs/quickstart.md", "docs/jobs.md"}
    assert sum(1 for d in PAGES for b in collect(d) if b.lang in RUN) >= 20


def test_project_files_shown_are_the_example_files() -> None:
    """A block that shows a file of examples/quickstart shows it exactly as it is there."""
    shown = 0
    for doc in DOCS:
        for b in collect(doc):
            if b.file and (PROJECT / b.file).exists():
                shown += 1
                assert (PROJECT / b.file).read_text("utf-8") == b.text + "\n", b.where
    assert shown >= 1


def test_every_inline_command_names_a_real_command() -> None:
    """A ``tockwork ...`` span in the prose names a command (and sub-command) that exists."""
    parser = build_parser()
    commands = parser._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    assert isinstance(commands, dict)
    checked = 0
    bad = []
    for doc in DOCS:
        for line, words in inline_commands(doc):
            name = words[1] if len(words) > 1 else ""
            checked += 1
            if name.startswith("-"):
                continue  # tockwork --version, --help
            sub = commands.get(name)
            if sub is None:
                bad.append(f"{_id(doc)}:{line}: {' '.join(words)}")
                continue
            group = sub._subparsers
            nested = len(words) > 2 and not words[2].startswith("-")
            if group is not None and nested and words[2] not in group._group_actions[0].choices:
                bad.append(f"{_id(doc)}:{line}: {' '.join(words)}")
    assert checked > 10
    assert bad == []


def test_python_blocks_name_nothing_undefined(tmp_path: Path) -> None:
    """Names used inside functions fail only when the function runs; ruff's F821 finds them
    in every block (a chain of continued blocks is checked as one script)."""
    scripts = []
    for doc in DOCS:
        for n, (blocks, _) in enumerate(_chains(collect(doc))):
            path = tmp_path / f"{doc.stem}_{n}.py"
            path.write_text(_script(blocks), "utf-8")
            scripts.append(str(path))
    assert scripts
    ruff = Path(sys.executable).with_name("ruff")
    result = subprocess.run(
        [str(ruff), "check", "--no-cache", "--isolated", "--select", "F821,F822,F823,E9",
         "--output-format", "concise", "-q",
         *scripts],
        capture_output=True, text=True, timeout=TIMEOUT, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr


def test_python_blocks_import_what_they_use() -> None:
    """``import scheduler`` then ``scheduler.reminders.still_due`` works in the docs test's
    forks (everything is imported there) but not in a reader's fresh interpreter; checked in
    a fresh interpreter."""
    sources = [
        (chain[0].where, _script(chain)) for doc in DOCS for chain, _ in _chains(collect(doc))
    ]
    # A canary the check must catch (the scheduler package does not import its devdb module).
    canary = ("canary", "import scheduler\nscheduler.devdb.database_url()\n")
    code = (
        "import json, sys; from tests.docs_snippets import unimported_modules; "
        "print(json.dumps(unimported_modules(json.load(sys.stdin))))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], input=json.dumps([canary, *sources]), cwd=ROOT,
        capture_output=True, text=True, timeout=TIMEOUT, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == ["canary: scheduler.devdb is used but not imported"]


# -- running the pages ------------------------------------------------------------------------


def _chains(blocks: list[Block]) -> Iterator[tuple[list[Block], Block]]:
    """The python blocks grouped into scripts: a block and the ones that continue it. Yields
    (chain, the block after which the chain runs)."""
    chain: list[Block] = []
    for b in blocks:
        if b.lang not in RUN:
            continue
        if chain and not b.continues:
            yield chain, chain[-1]
            chain = []
        if not chain and b.continues:
            raise AssertionError(f"{b.where}: 'continues' with no python block before it")
        chain.append(b)
    if chain:
        yield chain, chain[-1]


def _script(chain: list[Block]) -> str:
    return "\n".join(f"# {b.where}\n{b.text}\n" for b in chain)


class Page:
    """A page being run: its database, its project folder and what ran."""

    def __init__(self, doc: Path, url: str, workdir: Path) -> None:
        self.doc = doc
        self.url = url
        self.workdir = workdir
        self.env = {**os.environ, "DATABASE_URL": url}
        self.env.pop("PYTHONPATH", None)  # the user's shell: only the installed packages
        self.ran: list[str] = []
        self.timings: list[tuple[str, float]] = []

    def given(self, block: Block) -> None:
        for statements in block.directive("given-sql"):
            with psycopg.connect(self.url, autocommit=True) as conn:
                conn.execute(statements.encode())

    def sql(self, block: Block) -> None:
        with psycopg.connect(self.url) as conn:
            try:
                conn.execute(block.text.encode())
            except psycopg.Error as exc:
                raise AssertionError(f"{block.where}: {exc}") from None
        self.ran.append(block.where)

    def expect(self, block: Block) -> None:
        for check in block.directive("expect-sql"):
            with psycopg.connect(self.url) as conn:
                row = conn.execute(check.encode()).fetchone()
            assert row is not None and row[0] is True, f"{block.where}: expected {check}"

    def python(self, chain: list[Block]) -> None:
        for b in chain:
            for path in b.directive("tested-by"):
                # Run by another test (a pytest file run through pytester, say): that test
                # exists and names this page.
                test = ROOT / path
                assert test.is_file(), f"{b.where}: tested-by {path}: no such file"
                assert _id(self.doc) in test.read_text("utf-8"), f"{b.where}: {path} ignores it"
        if any(b.directive("tested-by") for b in chain):
            self.ran.extend(b.where for b in chain)
            return
        missing = [m for b in chain for m in b.directive("requires") if not _importable(m)]
        if missing:
            # An optional dependency (an extra) that this environment does not have: said, and
            # counted as accounted for; environments with the extra run the block.
            print(f"\n  not run, needs {', '.join(missing)}: {chain[0].where}")
            self.ran.extend(b.where for b in chain)
            return
        script = self.workdir / f"snippet_{chain[0].line}.py"
        script.write_text(_script(chain), "utf-8")
        try:

            def run() -> None:
                runpy.run_path(script.name, run_name="__main__")

            code, output = self._forked(run, self.workdir)
        finally:
            script.unlink()
        where = ", ".join(b.where for b in chain)
        assert code == 0, f"{where} failed ({code}):\n{output}"
        self.ran.extend(b.where for b in chain)

    def command(self, command: Command) -> None:
        args = _free_ports(command.args)
        if args[0] in SERVICES or "--watch" in args:
            self._service(command, args)
            return
        from scheduler.cli import main

        def tockwork() -> int:
            sys.argv = [TOCKWORK, *args]
            return main()

        code, output = self._forked(tockwork, Path(TOCKWORK).parent, _env(command))
        expected = command.block.expected_exit
        assert code == expected, (
            f"{command.where}: `{command}` exited {code}, expected {expected}:\n{output}"
        )
        assert "Traceback" not in output, f"{command.where}: `{command}`:\n{output}"

    def _forked(
        self, run: Callable[[], int | None], path0: Path, env: dict[str, str] | None = None
    ) -> tuple[int, str]:
        """Run ``run()`` in a forked child (:meth:`_fork`), killed after TIMEOUT; return its
        exit code and its output (stdout and stderr together)."""
        pid, stream = self._fork(run, path0, env)
        output: list[str] = []
        reader = threading.Thread(target=lambda: output.extend(stream), daemon=True)
        reader.start()
        code = _wait(pid, TIMEOUT)
        reader.join(TIMEOUT)
        stream.close()
        if code is None:
            output.append(f"\n(killed after {TIMEOUT} s)")
            code = _wait(pid, None) or -signal.SIGKILL
        return code, "".join(output)

    def _fork(
        self, run: Callable[[], int | None], path0: Path, env: dict[str, str] | None = None
    ) -> tuple[int, IO[str]]:
        """Fork a child that runs ``run()`` as ``python script.py`` or the ``tockwork`` script
        would: in the project folder, with this page's environment, ``path0`` first on the
        import path, default warning filters and signal handlers. A fork costs milliseconds
        where a new interpreter costs a second of imports, and still isolates every block.
        Returns the child's pid and a text stream of its stdout and stderr."""
        read_end, write_end = os.pipe()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child
            os.close(read_end)
            _child(run, write_end, self.workdir, {**self.env, **(env or {})}, path0)
        os.close(write_end)
        return pid, open(read_end, encoding="utf-8", errors="replace")

    def _service(self, command: Command, args: list[str]) -> None:
        """Run a service until it says it started (a worker: until it drained its queues),
        then SIGTERM it: it must exit 0. Forked, or a real process of the installed script
        when the block says ``<!-- snippet: process -->``."""
        from scheduler.cli import main

        def tockwork() -> int:
            sys.argv = [TOCKWORK, *args]
            return main()

        proc: subprocess.Popen[str] | None = None
        stream: IO[str]
        if command.block.directive("process"):
            proc = subprocess.Popen(
                [TOCKWORK, *args], cwd=self.workdir, env={**self.env, **_env(command)},
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            )  # fmt: skip
            assert proc.stdout is not None
            pid, stream = proc.pid, proc.stdout
        else:
            pid, stream = self._fork(tockwork, Path(TOCKWORK).parent, _env(command))
        output: list[str] = []
        started = threading.Event()
        ready = SERVICE_STARTED if args[0] in {"worker", "scheduler", "relay"} else STARTED

        def read() -> None:
            for line in stream:
                output.append(line)
                if ready.search(line):
                    started.set()
            started.set()  # the stream closed: the process ended (checked below)

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        code: int | None = None
        try:
            started.wait(TIMEOUT)
            code = _wait(pid, 0)
            log = "".join(output)
            assert code is None, f"{command.where}: `{command}` ended early ({code}):\n{log}"
            if args[0] == "worker":
                self._drained(_queues(args))
            os.kill(pid, signal.SIGTERM)
            code = _wait(pid, TIMEOUT)
        finally:
            if code is None:
                os.kill(pid, signal.SIGKILL)
                code = _wait(pid, None)
            reader.join(TIMEOUT)
            if proc is not None:
                proc.returncode = code  # reaped above: Popen must not wait for it again
            stream.close()
        text = "".join(output)
        # A service logs the tracebacks of the handlers that failed; what it must not do is end
        # otherwise than cleanly on SIGTERM.
        assert code == 0, f"{command.where}: `{command}` exited {code} on SIGTERM:\n{text}"

    def _drained(self, queues: list[str]) -> None:
        """Wait until the worker left no job of its queues ready or running (an event the
        worker causes in the database, not a time)."""
        deadline = time.monotonic() + TIMEOUT
        with psycopg.connect(self.url, autocommit=True) as conn:
            while True:
                row = conn.execute(DRAINED, {"queues": queues}).fetchone()
                if row is not None and row[0]:
                    return
                assert time.monotonic() < deadline, f"the worker did not drain {queues}"
                time.sleep(0.02)


def _importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def _wait(pid: int, timeout: float | None) -> int | None:
    """The exit code of child ``pid`` once it ended, waiting up to ``timeout`` seconds for it
    (the kernel says when: a pidfd becomes readable), or None if it still runs."""
    if timeout is None:
        return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    pidfd = os.pidfd_open(pid)
    try:
        ready, _, _ = select.select([pidfd], [], [], timeout)
    finally:
        os.close(pidfd)
    if not ready:
        return None
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


def _child(
    run: Callable[[], int | None], out: int, cwd: Path, env: dict[str, str], path0: Path
) -> NoReturn:
    code: object = 1
    try:
        os.dup2(out, 1)
        os.dup2(out, 2)
        sys.stdout = open(1, "w", encoding="utf-8", closefd=False)  # noqa: SIM115
        # Line-buffered, as Python's stderr always is (a service's "started" line must show).
        sys.stderr = open(2, "w", encoding="utf-8", closefd=False, buffering=1)  # noqa: SIM115
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGALRM):
            signal.signal(sig, signal.SIG_DFL)
        signal.alarm(0)
        os.chdir(cwd)
        os.environ.clear()
        os.environ.update(env)
        sys.path[:] = [str(path0), *(p for p in sys.path if p not in ("", str(ROOT)))]
        warnings.resetwarnings()
        logging.getLogger().handlers.clear()
        code = run()
    except SystemExit as exc:
        code = exc.code
    except BaseException:
        traceback.print_exc()
        code = 1
    finally:
        with contextlib.suppress(BaseException):
            sys.stdout.flush()
            sys.stderr.flush()
    if code is None:
        code = 0
    if not isinstance(code, int):
        print(code, file=sys.stderr)
        sys.stderr.flush()
        code = 1
    os._exit(code)


def _env(command: Command) -> dict[str, str]:
    """What ``<!-- snippet: env NAME=value -->`` above the block sets for its commands (the
    block's own ``export`` lines are shown, not run)."""
    out: dict[str, str] = {}
    for assignment in command.block.directive("env"):
        name, _, value = assignment.partition("=")
        out[name] = value
    return out


def _free_ports(args: list[str]) -> list[str]:
    """Fixed ports in the docs (``--metrics-port 9464``) become 0 (any free port), so runs in
    parallel do not collide."""
    out = list(args)
    for i, a in enumerate(out[:-1]):
        if a in ("--port", "--metrics-port"):
            out[i + 1] = "0"
    return out


def _queues(args: list[str]) -> list[str]:
    names = [args[i + 1].partition("=")[0] for i, a in enumerate(args[:-1]) if a == "--queue"]
    return names or ["default"]


@pytest.fixture
def page_database(
    request: pytest.FixtureRequest, server_url: str, template_db: str
) -> Iterator[str]:
    doc: Path = request.param
    name = f"tockwork_docs_{os.getpid()}_{doc.stem.replace('-', '_').lower()}"
    template = None if "database empty" in page_directives(doc) else template_db
    with throwaway_database(server_url, name, template=template) as url:
        yield url


@pytest.mark.db
@pytest.mark.parametrize("page_database", PAGES, ids=_id, indirect=True)
def test_page_runs_as_written(
    page_database: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    doc: Path = request.node.callspec.params["page_database"]
    workdir = tmp_path / "project"
    shutil.copytree(PROJECT, workdir, ignore=shutil.ignore_patterns("__pycache__"))
    blocks = collect(doc)
    for b in blocks:
        if b.file:
            target = workdir / b.file
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(b.text + "\n", "utf-8")
    page = Page(doc, page_database, workdir)
    chains = {last.line: chain for chain, last in _chains(blocks)}
    for b in blocks:
        started = time.monotonic()
        page.given(b)
        if b.line in chains:
            page.python(chains[b.line])
        if b.lang in SQL:
            page.sql(b)
        for command in b.commands():
            page.command(command)
        page.expect(b)
        page.timings.append((b.where, time.monotonic() - started))
    print("".join(f"\n  {where}: {seconds:.2f} s" for where, seconds in page.timings))
    runnable = [b.where for b in blocks if b.lang in RUN | SQL]
    assert sorted(page.ran) == sorted(runnable), "a python or SQL block did not run"
