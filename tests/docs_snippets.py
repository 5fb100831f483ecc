"""The fenced blocks of README.md and docs/*.md, as the docs test runs them.

Conventions (docs/development.md, "Code blocks in the docs"):

- Every fence names its language. ```` ```python ```` blocks run; ```` ```sh ```` and
  ```` ```console ```` lines that start with ``tockwork`` (or ``.venv/bin/tockwork``, or a ``$``
  prompt before either) run through the real CLI; ``toml``, ``json``, ``yaml``, ``sql``,
  ``mermaid`` and ``text`` are shown only (``text`` for output, synopses and diagrams).
- A block whose first line is a comment naming a relative file (``# myapp/handlers.py``,
  ``# definitions.toml``) is also a file of the user's project: it is written there before the
  page runs, so the commands of the page find it.
- An HTML comment right above a block gives the runner directives, which the rendered page does
  not show: ``<!-- snippet: continues -->`` (run in the namespace of the previous python block
  of the page), ``<!-- snippet: given-sql STATEMENTS -->`` (the application's own tables and rows
  the block assumes, run before it), ``<!-- snippet: expect-sql QUERY -->`` (true after the
  block ran), ``<!-- snippet: exit N -->`` (the documented exit code of the block's commands),
  ``<!-- snippet: foreign WHOSE -->`` (another library's code, shown for comparison),
  ``<!-- snippet: requires MODULE -->`` (a python block needing an optional dependency: not run,
  and said, where it is missing), ``<!-- snippet: tested-by PATH -->`` (a python block another
  test runs, e.g. a pytest file through pytester; PATH must name the page),
  ``<!-- snippet: process -->`` (a service run as a real process of the installed script).
  ``<!-- snippet: database empty -->`` on a line of its own starts a page on a database with no
  schema (the quickstart migrates it itself); other pages start migrated.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# The user's project folder the pages' commands run in (copied for each page).
PROJECT = ROOT / "examples" / "quickstart"

RUN = frozenset({"python"})
CLI = frozenset({"sh", "console"})
SQL = frozenset({"sql"})  # run on the page's database
PARSED = frozenset({"toml", "json", "ini"})  # must parse
SHOWN = frozenset({"yaml", "mermaid", "text"})
LANGUAGES = RUN | CLI | SQL | PARSED | SHOWN

_FENCE = re.compile(r"^(?P<indent> *)(?P<fence>```+)(?P<info>.*)$")
_DIRECTIVE = re.compile(r"^<!--\s*snippet:\s*(?P<body>.*?)\s*-->$", re.DOTALL)
_FILE_COMMENT = re.compile(r"^(?:#|//|--)\s*(?P<path>[\w.-]+(?:/[\w.-]+)*\.\w+)\s*$")
# How the CLI is spelled in a shell block.
_TOCKWORK = re.compile(r"^(?:\$\s+)?(?:\.venv/bin/)?tockwork(?:\s|$)")


@dataclass
class Block:
    """One fenced block: where it is, its language, its text and the directives above it."""

    doc: Path
    line: int  # 1-based line of the opening fence
    lang: str
    text: str
    directives: list[str] = field(default_factory=list)

    @property
    def where(self) -> str:
        return f"{self.doc.relative_to(ROOT)}:{self.line}"

    @property
    def file(self) -> str | None:
        """The project file this block is (its first line names it), if any."""
        first = self.text.split("\n", 1)[0].strip()
        match = _FILE_COMMENT.match(first)
        return match["path"] if match else None

    def directive(self, name: str) -> list[str]:
        """The arguments of this block's directives called ``name``."""
        found = []
        for d in self.directives:
            head, _, rest = d.partition(" ")
            if head == name:
                found.append(rest.strip())
        return found

    @property
    def continues(self) -> bool:
        return bool(self.directive("continues"))

    @property
    def expected_exit(self) -> int:
        (code,) = self.directive("exit") or ["0"]
        return int(code)

    def commands(self) -> list[Command]:
        """The ``tockwork`` commands of a shell block (continuation lines joined, comments
        and prompts dropped); other lines (``make demo``) are not the CLI's."""
        if self.lang not in CLI:
            return []
        found = []
        lines = self.text.split("\n")
        i = 0
        while i < len(lines):
            start = i
            line = lines[i]
            while line.rstrip().endswith("\\") and i + 1 < len(lines):
                i += 1
                line = line.rstrip()[:-1] + " " + lines[i].strip()
            i += 1
            for segment in _segments(line.strip()):
                words = segment[1:] if segment[0] == "$" else segment
                if words and _TOCKWORK.match(words[0] + " "):
                    found.append(Command(self, self.line + 1 + start, words[1:]))
        return found


def _segments(line: str) -> list[list[str]]:
    """The simple commands of a shell line: split at ``;``, ``&&`` and ``||``; after a ``|``
    the rest of a pipeline is not ours (``tockwork zones | head``)."""
    lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|")
    lexer.whitespace_split = True
    segments: list[list[str]] = [[]]
    piped = False
    for token in lexer:
        if token in (";", "&&", "||"):
            segments.append([])
            piped = False
        elif token == "|":
            piped = True
        elif not piped:
            segments[-1].append(token)
    return [s for s in segments if s]


@dataclass
class Command:
    """One ``tockwork`` command line of a shell block: its arguments after ``tockwork``."""

    block: Block
    line: int
    args: list[str]

    @property
    def where(self) -> str:
        return f"{self.block.doc.relative_to(ROOT)}:{self.line}"

    def __str__(self) -> str:
        return "tockwork " + shlex.join(self.args)


def collect(doc: Path) -> list[Block]:
    """Every fenced block of ``doc``, in order, with the directives right above each."""
    blocks: list[Block] = []
    lines = doc.read_text("utf-8").split("\n")
    pending: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        fence = _FENCE.match(line)
        if fence is None:
            comment = _directive_at(lines, i)
            if comment is not None:
                body, i = comment
                pending.append(body)
                continue
            if line.strip():
                pending = []  # a directive applies to the block right below it
            i += 1
            continue
        marker = fence["fence"]
        lang = fence["info"].strip().split(" ")[0]
        body_lines = []
        j = i + 1
        indent = len(fence["indent"])
        while j < len(lines) and lines[j].strip() != marker:
            body_lines.append(lines[j][indent:] if lines[j][:indent].isspace() else lines[j])
            j += 1
        if j == len(lines):
            raise AssertionError(f"{doc.relative_to(ROOT)}:{i + 1}: unclosed fence")
        blocks.append(Block(doc, i + 1, lang, "\n".join(body_lines), pending))
        pending = []
        i = j + 1
    return blocks


def _directive_at(lines: list[str], i: int) -> tuple[str, int] | None:
    """The body of a ``<!-- snippet: ... -->`` comment starting at line ``i`` (it may span
    lines), and the index of the line after it."""
    if not lines[i].lstrip().startswith("<!--"):
        return None
    j = i
    text = lines[i].strip()
    while not text.endswith("-->") and j + 1 < len(lines):
        j += 1
        text += "\n" + lines[j].strip()
    match = _DIRECTIVE.match(text)
    if match is None:
        return None
    return " ".join(match["body"].split("\n")), j + 1


def page_directives(doc: Path) -> set[str]:
    """The page-wide directives of ``doc`` (``database empty``)."""
    return {
        " ".join(m.split())
        for m in re.findall(
            r"^<!--\s*snippet:\s*(database \w+)\s*-->$", doc.read_text("utf-8"), re.M
        )
    }


def inline_commands(doc: Path) -> list[tuple[int, list[str]]]:
    """``tockwork ...`` spans in the prose (outside fences), as (line, words)."""
    found = []
    inside = False
    for number, line in enumerate(doc.read_text("utf-8").split("\n"), 1):
        if _FENCE.match(line):
            inside = not inside
            continue
        if inside:
            continue
        for span in re.findall(r"`(tockwork [^`]+)`", line):
            try:
                found.append((number, shlex.split(span)))
            except ValueError:
                found.append((number, span.split()))
    return found


OURS = ("jobs", "scheduler", "timezones")


def unimported_modules(sources: list[tuple[str, str]]) -> list[str]:
    """The modules of ours that python ``sources`` (``(where, text)``) use as attributes of a
    package (``scheduler.reminders.still_due``) without importing them.

    The docs test runs blocks in forks of a process that has imported everything, where such a
    use works by accident; in a reader's fresh interpreter it fails unless the package imports
    the module itself. Call this in a fresh interpreter: what importing the packages makes
    available is read from it.
    """
    import ast
    import importlib
    import importlib.util
    import types

    # What importing the packages makes available: each module's names, before any block.
    names: dict[str, set[str]] = {}

    def walk(module: types.ModuleType, path: str) -> None:
        if path in names:
            return
        names[path] = set(vars(module))
        for name, value in vars(module).items():
            if isinstance(value, types.ModuleType) and value.__name__ == f"{path}.{name}":
                walk(value, f"{path}.{name}")

    for top in OURS:
        walk(importlib.import_module(top), top)

    def is_module(path: str) -> bool:
        try:
            return importlib.util.find_spec(path) is not None
        except (ImportError, ValueError):
            return False

    def prefixes(path: str) -> set[str]:
        parts = path.split(".")
        return {".".join(parts[:i]) for i in range(1, len(parts) + 1)}

    bad = []
    for where, text in sources:
        tree = ast.parse(text)
        bound: dict[str, str] = {}  # a name in the script -> the module it is
        imported: set[str] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    imported |= prefixes(alias.name)
                    bound[alias.asname or alias.name.split(".")[0]] = (
                        alias.name if alias.asname else alias.name.split(".")[0]
                    )
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                imported |= prefixes(node.module)
                for alias in node.names:
                    full = f"{node.module}.{alias.name}"
                    if node.module.split(".")[0] in OURS and is_module(full):
                        imported.add(full)
                        bound[alias.asname or alias.name] = full
        for node in ast.walk(tree):
            if not isinstance(node, ast.Attribute):
                continue
            chain = []
            base: ast.expr = node
            while isinstance(base, ast.Attribute):
                chain.append(base.attr)
                base = base.value
            if not isinstance(base, ast.Name) or base.id not in bound:
                continue
            path = bound[base.id]
            if path.split(".")[0] not in OURS:
                continue
            for attr in reversed(chain):
                if path not in names and path in imported:
                    names[path] = set(vars(importlib.import_module(path)))
                if attr in names.get(path, ()):
                    value = getattr(importlib.import_module(path), attr)
                    if not isinstance(value, types.ModuleType):
                        break  # a function, a class: what it does is checked by running it
                    path = f"{path}.{attr}"
                elif f"{path}.{attr}" in imported:
                    path = f"{path}.{attr}"
                else:
                    if is_module(f"{path}.{attr}"):
                        bad.append(f"{where}: {path}.{attr} is used but not imported")
                    break
    return sorted(set(bad))
