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
  ``<!-- snippet: foreign WHOSE -->`` (another library's code, shown for comparison).
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
PARSED = frozenset({"toml", "json"})  # must parse
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
            stripped = line.strip()
            if not _TOCKWORK.match(stripped):
                continue
            words = shlex.split(stripped, comments=True)
            if words[0] == "$":
                words = words[1:]
            found.append(Command(self, self.line + 1 + start, words[1:]))
        return found


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
