"""The documentation is self-contained: every link and path it cites resolves inside the repository.

Users get the repository, not the workplace it was written in: a reference such as
``../shared/reference/...`` or a link to a file that moved is a broken promise.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SOURCES = [
    *DOCS,
    *(
        p
        for pkg in ("jobs", "scheduler", "timezones", "tests", "bench", "examples")
        for p in (ROOT / pkg).rglob("*.py")
    ),
]
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def test_nothing_points_outside_the_repository() -> None:
    offenders = [
        str(path.relative_to(ROOT))
        for path in SOURCES
        if re.search(r"\.\./shared|shared/reference", path.read_text("utf-8"))
        and path != Path(__file__).resolve()
    ]
    assert offenders == []


def test_every_relative_link_in_the_docs_resolves() -> None:
    assert len(DOCS) > 3
    broken = []
    checked = 0
    for doc in DOCS:
        for target in LINK.findall(doc.read_text("utf-8")):
            if "://" in target or target.startswith("mailto:"):
                continue
            checked += 1
            if not (doc.parent / target).resolve().exists():
                broken.append(f"{doc.relative_to(ROOT)} -> {target}")
    assert checked > 5, "no links found: the check would be vacuous"
    assert broken == []


def test_the_development_map_names_every_module() -> None:
    """docs/development.md's map matches the tree: each module (or its sub-package) is named in
    its package's rows, and nothing named there is missing."""
    text = (ROOT / "docs" / "development.md").read_text("utf-8")
    rows: dict[str, set[str]] = {}
    package = ""
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 3 or not line.startswith("|") or set(cells[1]) <= {"-"}:
            continue
        if cells[0].startswith("`"):
            package = cells[0].split("`")[1].rstrip("/")
        if package:
            names = set(re.findall(r"`([\w/]+(?:\.py|/))`", cells[1]))
            rows.setdefault(package, set()).update(names)
    assert set(rows) == {"timezones", "jobs", "scheduler"}
    for pkg, named in rows.items():
        folder = ROOT / pkg
        modules = {
            p.name if p.parent == folder else p.relative_to(folder).parts[0] + "/"
            for p in folder.rglob("*.py")
            if p.name not in ("__init__.py", "__main__.py") or p.parent != folder
        }
        modules.discard("__init__.py")
        assert sorted(modules - named) == [], f"{pkg}: modules the map does not name"
        assert sorted(named - modules) == [], f"{pkg}: the map names what is not there"
