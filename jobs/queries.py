"""Named SQL queries, loaded from the ``.sql`` files shipped inside a package: the one loader.

A package keeps its queries beside the tables they touch: ``<package>/sql/<table>.sql`` (for
example ``jobs/sql/job.sql``, ``scheduler/sql/schedule.sql``), plus ``pg_misc.sql`` for the
statements that touch no table. A file holds blocks that start with ``-- name: <query_name>``;
the text up to the next such line is the query. Names start with their table, as in River's
``river_job.sql`` (``job_claim``, ``outbox_event_claim``, ``schedule_due_lock``), so a name says
what it touches, and a name is defined once across all the files of a package.
``schema.sql`` and ``migrations/`` are not named queries and are not loaded here.

Variants are composed, not copied (River's ``sqlctemplate``, Oban's composed fetch). Two more
kinds of block do it, expanded once, when the queries load:

- ``-- fragment: <name>`` is a piece of SQL written once and included where it is needed as
  ``{{name}}``. ``-- fragment: <name> if <condition>`` is one alternative of a fragment: the
  condition is flags joined by ``and``, each maybe with ``not`` (``if limited and not fair``);
  a fragment none of whose alternatives holds expands to nothing. An include may pass
  arguments, ``{{job_ready_scan queue=w.queue limit=w.n scope=}}``: inside the fragment,
  ``{{queue}}`` is the argument's text (a value that names a fragment is that fragment,
  expanded; a value may be empty; a value has no spaces). An include that stands alone on its
  line is indented like that line; an argument's value that names an argument of the fragment
  it is written in passes that one on. ``{{package.name}}`` includes a fragment of another
  package (the scheduler's dashboard reads the queue's ready index as the claim does). A
  fragment's leading comment documents it in the file and is not included. Fragments are not
  queries: ``query()`` does not know them.
- ``-- template: <name> (<flag>, ...)`` is followed by one ``-- variant: <query_name> <flag> ...``
  line per combination of the flags (the flags it sets; every combination exactly once, so the
  table has no hole), then the text, which is expanded under each row's flags into the named
  query of that row. Comments before the table's last row document the template in its file
  and are not sent. :func:`variant` picks a row's query by its flags.

What the expansion checks, at load: every include names a fragment or an argument, no fragment
includes itself, a condition names only the flags of the template it is expanded in, two
alternatives of a fragment never hold at once, and a template's table is complete.

SQL never lives in Python strings and is never assembled from user input: fragments, arguments
and templates all come from the package's own files. The loaded mapping is read-only
(:class:`types.MappingProxyType`): a query is what its files say, for the life of the process (a
benchmark measures through a cursor wrapper, it does not swap query text).
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from importlib import resources
from importlib.resources.abc import Traversable
from types import MappingProxyType
from typing import LiteralString

_BLOCK = re.compile(r"^-- (name|fragment|template): (.*?)\s*$", re.MULTILINE)
_NAME = re.compile(r"^\w+$")
_FRAGMENT = re.compile(r"^(\w+)(?:\s+if\s+(.+))?$")
_TEMPLATE = re.compile(r"^(\w+)\s*\(\s*(\w+(?:\s*,\s*\w+)*)\s*\)$")
_VARIANT = re.compile(r"^-- variant: (\w+)((?:[ \t]+\w+)*)[ \t]*$", re.MULTILINE)
_INCLUDE = re.compile(r"\{\{\s*((?:\w+\.)?\w+)((?:\s+\w+=\S*?)*)\s*\}\}")
_ARGUMENT = re.compile(r"(\w+)=(\S*)")

SCHEMA_FILE = "schema.sql"
"""The schema a package's migrations must reproduce: not named queries."""

Flags = frozenset[str]
_DROP = "\x00"  # marks the line of an include that expanded to nothing


@dataclass(frozen=True, slots=True)
class Fragment:
    """One alternative of a fragment: its text, and the flags that must be set (``when``) and
    unset (``unless``) for it to be the one."""

    text: str
    when: Flags = frozenset()
    unless: Flags = frozenset()

    def holds(self, flags: Mapping[str, bool], name: str, context: str) -> bool:
        for flag in self.when | self.unless:
            if flag not in flags:
                raise ValueError(
                    f"fragment {name!r} depends on flag {flag!r}, which {context} does not have"
                )
        return all(flags[f] for f in self.when) and not any(flags[f] for f in self.unless)


@dataclass(frozen=True, slots=True)
class Template:
    """A statement written once and expanded into one named query per row of its table."""

    text: str
    flags: tuple[str, ...]
    rows: tuple[tuple[str, Flags], ...]


@dataclass(slots=True)
class Parsed:
    """What one file holds: named queries (unexpanded), fragments, templates."""

    queries: dict[str, str]
    fragments: dict[str, list[Fragment]]
    templates: dict[str, Template]


def _condition(text: str, where: str) -> tuple[Flags, Flags]:
    when: set[str] = set()
    unless: set[str] = set()
    for term in re.split(r"\s+and\s+", text.strip()):
        words = term.split()
        if len(words) == 1 and _NAME.match(words[0]):
            when.add(words[0])
        elif len(words) == 2 and words[0] == "not" and _NAME.match(words[1]):
            unless.add(words[1])
        else:
            raise ValueError(f"{where}: bad condition {text!r} (flags joined by 'and', 'not flag')")
    return frozenset(when), frozenset(unless)


def _template(header: str, body: str) -> tuple[str, Template]:
    found = _TEMPLATE.match(header)
    if found is None:
        raise ValueError(f"bad template header {header!r}: '-- template: name (flag, ...)'")
    name = found.group(1)
    flags = tuple(f.strip() for f in found.group(2).split(","))
    if len(set(flags)) != len(flags):
        raise ValueError(f"template {name!r} names a flag twice")
    rows: list[tuple[str, Flags]] = []
    for row in _VARIANT.finditer(body):
        set_flags = frozenset(row.group(2).split())
        unknown = set_flags - set(flags)
        if unknown:
            raise ValueError(f"template {name!r}: variant {row.group(1)!r} sets unknown flags "
                             f"{sorted(unknown)}")  # fmt: skip
        rows.append((row.group(1), set_flags))
    wanted = {frozenset(c) for n in range(len(flags) + 1) for c in itertools.combinations(flags, n)}
    given = [r[1] for r in rows]
    missing = wanted - set(given)
    if missing or len(given) != len(set(given)):
        holes = ", ".join("(" + ", ".join(sorted(m)) + ")" for m in sorted(missing, key=sorted))
        raise ValueError(
            f"template {name!r}: its variant table must have each combination of "
            f"{', '.join(flags)} once" + (f"; missing: {holes}" if holes else "; one is repeated")
        )
    # What comes before the table's last row documents the template in its file; the statement
    # is what follows it.
    last = list(_VARIANT.finditer(body))[-1]
    return name, Template(body[last.end() :].strip(), flags, tuple(rows))


def parse_file(text: str) -> Parsed:
    """Split a named-query file into its queries, fragments and templates (not expanded)."""
    parsed = Parsed({}, {}, {})
    blocks = list(_BLOCK.finditer(text))
    for block, following in zip(blocks, [*blocks[1:], None], strict=True):
        end = following.start() if following else len(text)
        kind, header, body = block.group(1), block.group(2), text[block.end() : end].strip()
        if kind == "name":
            if not _NAME.match(header):
                raise ValueError(f"bad query name {header!r}")
            if header in parsed.queries:
                raise ValueError(f"query {header!r} is defined twice")
            parsed.queries[header] = body
        elif kind == "fragment":
            found = _FRAGMENT.match(header)
            if found is None:
                raise ValueError(f"bad fragment header {header!r}: '-- fragment: name [if ...]'")
            when, unless = (
                _condition(found.group(2), f"fragment {found.group(1)!r}")
                if found.group(2)
                else (frozenset(), frozenset())
            )
            # A fragment's leading comment documents it in its file; the statements it is
            # included in carry only its SQL (and the comments inside it).
            lines = body.split("\n")
            while lines and lines[0].lstrip().startswith("--"):
                lines.pop(0)
            sql = "\n".join(lines).strip()
            parsed.fragments.setdefault(found.group(1), []).append(Fragment(sql, when, unless))
        else:
            name, template = _template(header, body)
            if name in parsed.templates:
                raise ValueError(f"template {name!r} is defined twice")
            parsed.templates[name] = template
    return parsed


def expand(
    text: str,
    fragments: Mapping[str, list[Fragment]],
    flags: Mapping[str, bool],
    context: str,
    arguments: Mapping[str, str] | None = None,
    _stack: tuple[str, ...] = (),
) -> str:
    """``text`` with every ``{{include}}`` replaced, under ``flags`` (see the module doc)."""

    def fragment(name: str, args: Mapping[str, str]) -> str:
        if name in _stack:
            raise ValueError(f"{context}: fragment {name!r} includes itself")
        scope = fragments
        if "." in name:  # another package's fragment: package.fragment
            package, _, own = name.partition(".")
            scope = package_fragments(package)
            alternatives = scope.get(own)
        else:
            alternatives = fragments.get(name)
        if alternatives is None:
            raise ValueError(f"{context}: no fragment or argument named {name!r}")
        holding = [f for f in alternatives if f.holds(flags, name, context)]
        if len(holding) > 1:
            raise ValueError(f"{context}: two alternatives of fragment {name!r} hold at once")
        if not holding:
            return ""
        return expand(holding[0].text, scope, flags, context, args, (*_stack, name))

    def include(match: re.Match[str]) -> str:
        name = match.group(1)
        if arguments is not None and name in arguments and not match.group(2):
            replaced = arguments[name]
        else:
            args = {}
            for key, value in _ARGUMENT.findall(match.group(2)):
                if arguments is not None and value in arguments:
                    args[key] = arguments[value]  # passed on: the caller's own argument
                elif value in fragments:
                    args[key] = fragment(value, {})
                else:
                    args[key] = value
            replaced = fragment(name, args)
        # An include alone on its line: the fragment's lines keep that line's indentation.
        line_start = text.rfind("\n", 0, match.start()) + 1
        before = text[line_start : match.start()]
        if before.strip() == "":
            if not replaced:
                return _DROP  # the include's line goes (see the end of expand)
            replaced = replaced.replace("\n", "\n" + before)
        return replaced

    expanded = _INCLUDE.sub(include, text)
    if _stack:
        return expanded
    # The lines of includes that expanded to nothing go (a marker that ended up beside other
    # text, a nested empty include, just goes), and no line ends in spaces.
    return "\n".join(
        line.replace(_DROP, "").rstrip()
        for line in expanded.split("\n")
        if not (_DROP in line and not line.replace(_DROP, "").strip())
    )


def parse_named(text: str) -> dict[str, LiteralString]:
    """Split a named-query file into ``{name: sql}``: its queries and its templates' variants,
    expanded with the file's own fragments."""
    return dict(_expanded([("<text>", parse_file(text))]))


def _expanded(files: list[tuple[str, Parsed]]) -> dict[str, LiteralString]:
    fragments: dict[str, list[Fragment]] = {}
    for _, parsed in files:
        for name, alternatives in parsed.fragments.items():
            fragments.setdefault(name, []).extend(alternatives)
    queries: dict[str, LiteralString] = {}
    origin: dict[str, str] = {}

    def add(name: str, text: str, where: str) -> None:
        if name in queries:
            raise ValueError(f"query {name!r} is defined in both {origin[name]} and {where}")
        # The files are part of the package, not user input.
        queries[name], origin[name] = text, where

    for where, parsed in files:
        for name, body in parsed.queries.items():
            add(name, expand(body, fragments, {}, f"query {name!r}"), where)
        for name, template in parsed.templates.items():
            for query_name, on in template.rows:
                flags = {f: f in on for f in template.flags}
                context = f"variant {query_name!r} of template {name!r}"
                add(query_name, expand(template.text, fragments, flags, context), where)
    return queries


def query_files(package: str) -> list[Traversable]:
    """The named-query files of ``package`` (``sql/*.sql`` but ``schema.sql``), by name."""
    folder = resources.files(package).joinpath("sql")
    return sorted(
        (f for f in folder.iterdir() if f.name.endswith(".sql") and f.name != SCHEMA_FILE),
        key=lambda f: f.name,
    )


@cache
def _parsed(package: str) -> tuple[tuple[str, Parsed], ...]:
    return tuple((f.name, parse_file(f.read_text(encoding="utf-8"))) for f in query_files(package))


@cache
def package_fragments(package: str) -> Mapping[str, list[Fragment]]:
    """Every fragment of ``package``'s files, by name (for ``{{package.fragment}}``)."""
    fragments: dict[str, list[Fragment]] = {}
    for _, parsed in _parsed(package):
        for name, alternatives in parsed.fragments.items():
            fragments.setdefault(name, []).extend(alternatives)
    return MappingProxyType(fragments)


@cache
def load(package: str) -> Mapping[str, LiteralString]:
    """All the named queries of ``package``, expanded, read-only; a name defined in two files
    is an error. Fragments are shared by the files of a package."""
    return MappingProxyType(_expanded(list(_parsed(package))))


@cache
def templates(package: str) -> Mapping[str, Mapping[Flags, str]]:
    """Every template of ``package``: its name -> its variant table (the flags a row sets ->
    the row's query)."""
    return MappingProxyType(
        {
            name: MappingProxyType({on: query_name for query_name, on in template.rows})
            for _, parsed in _parsed(package)
            for name, template in parsed.templates.items()
        }
    )


def variants(package: str, template: str) -> Mapping[Flags, str]:
    """The variant table of ``template`` in ``package``: the flags a row sets -> its query."""
    table = templates(package).get(template)
    if table is None:
        raise KeyError(f"no template {template!r} in {package}")
    return table


@cache
def variant(template: str, **flags: bool) -> LiteralString:
    """The jobs component's variant of ``template`` for ``flags`` (each of its flags given)."""
    table = variants("jobs", template)
    known = frozenset().union(*table)
    if set(flags) != known:
        raise TypeError(
            f"template {template!r} takes the flags {sorted(known)}, not {sorted(flags)}"
        )
    on = frozenset(f for f, value in flags.items() if value)
    return load("jobs")[table[on]]


def query(name: str) -> LiteralString:
    """The jobs component's query ``name``."""
    return load("jobs")[name]
