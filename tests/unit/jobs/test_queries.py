"""The named-query loader: one loader, every package's files, read-only, names defined once."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from jobs.queries import load, parse_named, query_files, variant, variants


def test_every_query_is_loaded_by_name() -> None:
    queries = load("jobs")
    assert {"job_enqueue", "job_claim", "job_complete", "job_heartbeat", "job_reap",
            "job_release"} <= set(queries)  # fmt: skip
    assert (
        queries["job_claim"].lstrip().startswith("-- Lease")
        or "SKIP LOCKED" in queries["job_claim"]
    )
    assert all(q.strip() for q in queries.values())


def test_the_loader_reads_every_query_file_of_a_package_but_the_schema() -> None:
    files = {f.name for f in query_files("jobs")}
    assert {"job.sql", "job_attempt.sql", "job_effect.sql", "outbox_event.sql"} <= files
    assert "schema.sql" not in files
    assert "outbox_event_claim" in load("jobs")  # from outbox_event.sql
    assert "schedule_due_lock" in load("scheduler")  # from scheduler/sql/schedule.sql
    assert "schedule_due_lock" not in load("jobs")


def test_loaded_queries_are_read_only() -> None:
    queries = load("jobs")
    with pytest.raises(TypeError):
        queries["job_claim"] = "SELECT 1"  # type: ignore[index]
    assert load("jobs") is queries  # loaded once


def test_blocks_split_at_name_lines() -> None:
    parsed = parse_named("-- name: a\nSELECT 1;\n-- name: b\nSELECT 2;\n")
    assert parsed == {"a": "SELECT 1;", "b": "SELECT 2;"}


def test_duplicate_names_are_an_error() -> None:
    with pytest.raises(ValueError, match="twice"):
        parse_named("-- name: a\nSELECT 1;\n-- name: a\nSELECT 2;\n")


def test_a_name_in_two_files_of_a_package_is_an_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "twofiles_pkg"
    (root / "sql").mkdir(parents=True)
    (root / "__init__.py").write_text("")
    (root / "sql" / "a.sql").write_text("-- name: thing_get\nSELECT 1;\n")
    (root / "sql" / "b.sql").write_text("-- name: thing_get\nSELECT 2;\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ValueError, match=r"'thing_get' is defined in both a\.sql and b\.sql"):
        load("twofiles_pkg")


def test_a_fragment_is_written_once_and_included_by_name() -> None:
    text = """
-- fragment: cols
-- The columns (this leading comment documents the fragment and is not included).
id, name
-- name: a_get
SELECT {{cols}} FROM a;
-- name: a_list
SELECT {{cols}}
FROM a ORDER BY id;
"""
    assert parse_named(text) == {
        "a_get": "SELECT id, name FROM a;",
        "a_list": "SELECT id, name\nFROM a ORDER BY id;",
    }


TEMPLATE = """
-- fragment: scan if not fast
SELECT id FROM t
WHERE q = {{queue}}
  {{extra}}
LIMIT {{limit}}
-- fragment: scan if fast
SELECT id FROM t_fast WHERE q = {{queue}} LIMIT {{limit}}
-- fragment: held if capped
AND kind <> 'slow'
-- fragment: capped_only if capped and not fast
-- capped, loose scan
-- template: t_claim (capped, fast)
-- variant: t_claim              capped
-- variant: t_claim_fast         capped fast
-- variant: t_claim_free
-- variant: t_claim_free_fast    fast
-- Claim.
WITH c AS (
    {{scan queue=w.q extra=held limit=w.n}}
)
SELECT * FROM c;
"""


def test_a_template_expands_into_one_query_per_row_of_its_table() -> None:
    """Each row's flags pick the alternatives; arguments fill the fragment's holes (a value
    that names a fragment is that fragment); an include alone on its line takes its indent;
    the line of an include that expands to nothing goes."""
    queries = parse_named(TEMPLATE)
    assert set(queries) == {"t_claim", "t_claim_fast", "t_claim_free", "t_claim_free_fast"}
    assert queries["t_claim"] == (
        "-- Claim.\nWITH c AS (\n    SELECT id FROM t\n    WHERE q = w.q\n"
        "      AND kind <> 'slow'\n    LIMIT w.n\n)\nSELECT * FROM c;"
    )
    assert queries["t_claim_free"] == (
        "-- Claim.\nWITH c AS (\n    SELECT id FROM t\n    WHERE q = w.q\n    LIMIT w.n\n)\n"
        "SELECT * FROM c;"
    )
    assert "t_fast WHERE q = w.q LIMIT w.n" in queries["t_claim_fast"]
    assert "variant" not in queries["t_claim_fast"]


def test_the_variant_table_of_a_template_has_no_hole() -> None:
    holed = TEMPLATE.replace("-- variant: t_claim_free_fast    fast\n", "")
    with pytest.raises(
        ValueError, match=r"each combination of capped, fast once; missing: \(fast\)"
    ):
        parse_named(holed)
    repeated = TEMPLATE.replace("t_claim_free_fast    fast", "t_claim_free_fast    capped")
    with pytest.raises(ValueError, match=r"repeated|missing"):
        parse_named(repeated)
    with pytest.raises(ValueError, match="unknown flags"):
        parse_named(TEMPLATE.replace("t_claim_free_fast    fast", "t_claim_free_fast  fats"))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("-- name: a\nSELECT {{nothing}};", "no fragment or argument named 'nothing'"),
        ("-- fragment: f\n{{f}}\n-- name: a\nSELECT {{f}};", "'f' includes itself"),
        ("-- fragment: f if x\n1\n-- name: a\nSELECT {{f}};", "depends on flag 'x'"),
        (
            "-- fragment: f if x\n1\n-- fragment: f\n2\n"
            "-- template: a (x)\n-- variant: a x\n-- variant: a0\nSELECT {{f}};",
            "two alternatives of fragment 'f' hold at once",
        ),
        ("-- fragment: f if x or y\n1\n", "bad condition"),
        ("-- template: a x\nSELECT 1;", "bad template header"),
    ],
)
def test_what_the_expansion_refuses(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        parse_named(text)


def test_variant_picks_a_row_of_the_claim_table_by_its_flags() -> None:
    queries = load("jobs")
    table = variants("jobs", "job_claim")
    assert (
        variant("job_claim", fair=True, limited=False, skip_scan=True)
        is queries[table[frozenset({"fair", "skip_scan"})]]
    )
    assert table[frozenset({"limited"})] == "job_claim"
    with pytest.raises(TypeError, match="takes the flags"):
        variant("job_claim", fair=True)


def test_an_argument_passes_on_and_a_package_names_its_fragment() -> None:
    """``{{inner q=q}}`` inside a fragment passes the caller's ``q`` on; ``{{jobs.name}}``
    includes a fragment of the jobs package (the dashboard reads the claim's priority scan)."""
    text = """
-- fragment: inner
WHERE queue = {{q}}
-- fragment: outer
SELECT 1 FROM t {{inner q=q}}
-- name: a_get
{{outer q=w.queue}};
"""
    assert parse_named(text) == {"a_get": "SELECT 1 FROM t WHERE queue = w.queue;"}
    levels = parse_named("-- name: b_get\nWITH RECURSIVE {{jobs.job_ready_levels queue=x scope=}}")
    assert "lv.queue = x" in levels["b_get"] and "levels AS (" in levels["b_get"]
    with pytest.raises(ValueError, match=r"no fragment or argument named 'jobs\.nothing'"):
        parse_named("-- name: c_get\n{{jobs.nothing}}")
    assert "{{" not in load("scheduler")["dashboard_queue_stats"]


def test_a_nested_empty_include_leaves_no_marker_behind() -> None:
    """An include alone on its line that expands to nothing removes its line, also when the
    fragment it is in is included beside other text."""
    text = """
-- fragment: empty if x
1
-- fragment: wrap
{{empty}}
a
-- template: q (x)
-- variant: q
-- variant: q_x x
SELECT {{wrap}};
"""
    assert parse_named(text) == {"q": "SELECT\na;", "q_x": "SELECT 1\na;"}
