"""Property tests: the engine against the brute-force oracle (tests/oracle) and the invariants.

Instants are drawn near the offset changes of every zone of the tz database (found by the
oracle, not by the engine) and uniformly. ``N(a)`` is ``next_after(rule, zone, a)``, ``F`` the
fire set, ``loc(u)`` the wall clock of ``u``. Every docstring names the invariants it checks
by their numbers in docs/dst-semantics.md, section 10 ("Invariants").
"""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import UTC, date, datetime, time, timedelta, timezone
from functools import lru_cache
from itertools import pairwise
from pathlib import Path

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import timezones
from tests.oracle import brute
from timezones import available_zones, next_after, occurrences

ROOT = Path(__file__).resolve().parents[3]
ZONES = sorted(z for z in available_zones() if z not in ("Factory",))
SETTINGS = settings(
    max_examples=60,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)

# (engine rule, oracle spec, oracle window in days after `after`)
RULES: list[tuple[str, brute.Spec, int]] = [
    ("daily@00:00", brute.Spec("daily", at=time(0, 0)), 3),
    ("daily@00:30", brute.Spec("daily", at=time(0, 30)), 3),
    ("daily@01:30", brute.Spec("daily", at=time(1, 30)), 3),
    ("daily@02:30", brute.Spec("daily", at=time(2, 30)), 3),
    ("daily@03:00", brute.Spec("daily", at=time(3, 0)), 3),
    ("daily@23:30", brute.Spec("daily", at=time(23, 30)), 3),
    ("weekdays@01:00", brute.Spec("weekly", at=time(1, 0), weekdays=frozenset(range(5))), 5),
    ("weekly:fri,sun@00:30", brute.Spec("weekly", at=time(0, 30), weekdays=frozenset({4, 6})), 8),
    ("cron:30 1 * * *", brute.Spec("cron", expr="30 1 * * *"), 3),
    ("cron:0 0,1,2,3 * * *", brute.Spec("cron", expr="0 0,1,2,3 * * *"), 3),
    ("cron:30 2,3 * * *", brute.Spec("cron", expr="30 2,3 * * *"), 3),
    ("cron:0 * * * *", brute.Spec("cron", expr="0 * * * *"), 2),
    ("cron:*/15 * * * *", brute.Spec("cron", expr="*/15 * * * *"), 2),
    ("cron:*/20 2 * * *", brute.Spec("cron", expr="*/20 2 * * *"), 3),
    ("cron+anchored:*/20 2 * * *", brute.Spec("cron", expr="*/20 2 * * *", anchored=True), 3),
    ("cron:45 0 * * 0,5", brute.Spec("cron", expr="45 0 * * 0,5"), 8),
    (
        "rrule:FREQ=DAILY;BYHOUR=0,2;BYMINUTE=30",
        brute.Spec("rrule", rrule="FREQ=DAILY;BYHOUR=0,2;BYMINUTE=30"),
        3,
    ),
]
GAPS = ["shift_forward", "at_transition", "skip"]
FOLDS = ["first", "second", "both"]


@lru_cache(maxsize=4096)
def _transitions(zone: str, year: int) -> tuple[datetime, ...]:
    start = datetime(year, 1, 1, tzinfo=UTC)
    return tuple(brute.find_transitions(zone, start, start.replace(year=year + 1)))


@st.composite
def zone_and_instant(
    draw: st.DrawFn, first_year: int = 1975, last_year: int = 2037
) -> tuple[str, datetime]:
    """A zone and an instant: near one of its offset changes in a random year, or anywhere."""
    zone = draw(st.sampled_from(ZONES))
    year = draw(st.integers(first_year, last_year))
    changes = _transitions(zone, year)
    if changes and draw(st.integers(0, 3)) > 0:
        base = draw(st.sampled_from(changes))
        shift = timedelta(seconds=draw(st.integers(-36 * 3600, 36 * 3600)))
    else:
        base = datetime(year, 1, 1, tzinfo=UTC)
        shift = timedelta(seconds=draw(st.integers(0, 365 * 86400)))
    return zone, base + shift


def _whole_minute_offsets(zone: str, start: datetime, end: datetime) -> bool:
    tz = brute.zone(zone)
    for t in (start, end):
        offset = t.astimezone(tz).utcoffset()
        if offset is None or offset.total_seconds() % 60:
            return False
    return True


@SETTINGS
@given(
    zone_and_instant(),
    st.integers(0, len(RULES) - 1),
    st.sampled_from(GAPS),
    st.sampled_from(FOLDS),
)
def test_next_after_matches_the_brute_force_oracle(
    zone_instant: tuple[str, datetime], rule_index: int, gap: str, fold: str
) -> None:
    """N(a) equals the oracle's first fire after a, with the same nominal slot and fold index.

    Invariants: (1) N(a) > a, UTC, whole minute; (5) no element of F lies in (a, N(a)) - the
    oracle scans every minute; (11) a uniquely existing slot fires at its wall time; (13) fold
    first/second/both pick the earlier/later/both instants; (14) shift_forward fires at
    slot - offset_before; (15) at_transition fires at the transition instant; (16) skip gives no
    fire that local date; (18) every fire's local date is a date the rule names; (20) equal
    instants fire once; (23) a fixed-time cron job fires once per slot, never twice in a fold;
    (24) every fire is a real instant whose wall clock exists; (25) a wildcard cron job's F is
    the brute-force set of minutes whose observed wall clock matches; (27) a fixed job whose
    `after` lies between the two instants of its slot fires the next day.
    """
    zone, after = zone_instant
    rule, spec, days = RULES[rule_index]
    start, end = after - timedelta(days=2), after + timedelta(days=days + 1)
    assume(_whole_minute_offsets(zone, start, end))
    walk = brute.Walk(zone, start, end)
    default_gap = "at_transition" if rule.startswith("cron") else "shift_forward"
    expected = brute.next_fire(walk.fires(spec, gap or default_gap, fold), after)
    got = next_after(rule, zone, after, gap=gap, fold=fold)
    horizon = after + timedelta(days=days)
    if expected is None or expected.at > horizon:
        assert got is None or got.at > horizon
        return
    assert got is not None, (zone, after, rule)
    assert got.at == expected.at, (zone, after.isoformat(), rule, gap, fold, got, expected)
    assert got.at > after
    assert got.at.utcoffset() == timedelta(0)
    assert got.at.second == 0
    assert got.nominal == expected.nominal
    assert got.fold_index == int(expected.second)
    assert got.local.astimezone(UTC) == got.at
    # (24) round trip: the local wall time of the fire maps back to the same instant.
    wall = got.local.replace(tzinfo=None)
    assert got.at in walk.seen.get(wall, [])


@SETTINGS
@given(zone_and_instant(), st.integers(0, len(RULES) - 1), st.integers(1, 5 * 86400))
def test_order_chaining_and_step_function(
    zone_instant: tuple[str, datetime], rule_index: int, step: int
) -> None:
    """The engine alone: ordering and consistency of successive answers.

    Invariants: (2) monotone: a <= b implies N(a) <= N(b); (3) chaining: S(a, n)[k+1] ==
    N(S(a, n)[k]); (4) step function: N(t) == N(a) for t in [a, N(a)); (7) an exact hit is
    excluded, N(u) != u, and N(u - 1 us) == u; (8) N(a) == N(floor_minute(a)) unless
    floor_minute(a) is itself a fire.
    """
    zone, a = zone_instant
    rule = RULES[rule_index][0]
    b = a + timedelta(seconds=step)
    na, nb = next_after(rule, zone, a), next_after(rule, zone, b)
    assert na is not None and nb is not None
    assert na.at <= nb.at
    chain = list(occurrences(rule, zone, a, count=4))
    for k in range(3):
        nxt = next_after(rule, zone, chain[k].at)
        assert nxt is not None and nxt.at == chain[k + 1].at
        assert chain[k].at < chain[k + 1].at
    mid = a + (na.at - a) / 2
    again = next_after(rule, zone, mid)
    assert again is not None and again.at == na.at
    before = next_after(rule, zone, na.at - timedelta(microseconds=1))
    assert before is not None and before.at == na.at
    floor = a.replace(second=0, microsecond=0)
    from_floor = next_after(rule, zone, floor)
    assert from_floor is not None
    if from_floor.at != a.replace(second=0, microsecond=0) and floor != a:
        assert from_floor.at == na.at or from_floor.at <= a


@SETTINGS
@given(zone_and_instant(), st.integers(0, len(RULES) - 1), st.sampled_from(ZONES))
def test_representation_independence_and_links(
    zone_instant: tuple[str, datetime], rule_index: int, other_zone: str
) -> None:
    """(6) N(a) is the same whether a is given in UTC, in the rule zone (either fold) or any
    other zone; (9) determinism: a second evaluation in the same process agrees (the subprocess
    test below covers host TZ); (29) link names give identical results (checked on US/Eastern,
    Europe/Kiev in a separate test)."""
    zone, a = zone_instant
    rule = RULES[rule_index][0]
    base = next_after(rule, zone, a)
    assert base is not None
    tz = brute.zone(zone)
    variants = [
        a.astimezone(tz),
        a.astimezone(tz).replace(fold=1).astimezone(tz),
        a.astimezone(brute.zone(other_zone)),
        a.astimezone(timezone(timedelta(hours=-3, minutes=-30))),
    ]
    # The fold=1 spelling names another instant unless the wall time is repeated: keep only
    # spellings of `a` itself (the rule-zone one always is).
    same = [v for v in variants if v.astimezone(UTC) == a.astimezone(UTC)]
    assert len(same) >= 3
    for variant in same:
        got = next_after(rule, zone, variant)
        assert got is not None and got.at == base.at and got.key == base.key


@settings(max_examples=40, deadline=None, derandomize=True)
@given(st.integers(0, 7 * 365 * 86400), st.integers(0, len(RULES) - 1))
def test_equivalent_zones_and_links_agree(offset: int, rule_index: int) -> None:
    """(28) zones with identical offset history give identical results: Europe/Dublin (negative
    dst() in tzdata) and Europe/London over 2024-2030; (29) link names give identical results:
    Europe/Kiev == Europe/Kyiv, US/Eastern == America/New_York."""
    a = datetime(2024, 1, 1, tzinfo=UTC) + timedelta(seconds=offset)
    rule = RULES[rule_index][0]
    for left, right in (
        ("Europe/Dublin", "Europe/London"),
        ("Europe/Kiev", "Europe/Kyiv"),
        ("US/Eastern", "America/New_York"),
    ):
        x = list(occurrences(rule, left, a, count=3, fold="both"))
        y = list(occurrences(rule, right, a, count=3, fold="both"))
        assert [o.at for o in x] == [o.at for o in y]
        assert [o.key for o in x] == [o.key for o in y]


@settings(max_examples=30, deadline=None, derandomize=True)
@given(
    st.sampled_from(
        [
            "America/New_York",
            "Europe/London",
            "Europe/Berlin",
            "Australia/Sydney",
            "America/Chicago",
        ]
    ),
    st.integers(2024, 2030),
    st.sampled_from([1, 5, 15, 30, 60]),
)
def test_wildcard_cadence_is_exact_across_transitions(zone: str, year: int, k: int) -> None:
    """(26) `*/k * * * *` (k divides 60) in whole-hour-DST zones fires exactly k minutes apart
    across both transitions, and `0 * * * *` exactly 3600 s apart (nothing lost in a fold)."""
    expr = "0 * * * *" if k == 60 else f"*/{k} * * * *"
    for change in _transitions(zone, year):
        start = change - timedelta(hours=3)
        fires = [
            o.at
            for o in occurrences(f"cron:{expr}", zone, start, until=change + timedelta(hours=3))
        ]
        gaps = {(b - a).total_seconds() for a, b in pairwise(fires)}
        assert gaps == {k * 60.0}


@settings(max_examples=30, deadline=None, derandomize=True)
@given(
    st.sampled_from(["Asia/Kathmandu", "Pacific/Kiritimati", "UTC", "Etc/GMT+5", "Asia/Kolkata"]),
    st.integers(0, 6 * 365 * 86400),
    st.sampled_from(
        ["daily@00:00", "cron:*/7 3-5 * * 1-5", "weekly:mon@23:59", "monthly:31@12:00"]
    ),
)
def test_fixed_offset_zones_are_plain_arithmetic(zone: str, offset: int, rule: str) -> None:
    """(31) in fixed-offset zones (Asia/Kathmandu, Pacific/Kiritimati 2024-2030) N equals naive
    wall-clock arithmetic shifted by the constant offset; (32) in UTC, N is the arithmetic on
    UTC wall time; no fire is ever marked adjusted."""
    a = datetime(2024, 1, 1, tzinfo=UTC) + timedelta(seconds=offset)
    tz = brute.zone(zone)
    fixed = a.astimezone(tz).utcoffset()
    assert fixed is not None
    got = list(occurrences(rule, zone, a, count=3))
    for occ in got:
        assert occ.adjusted is None
        assert occ.local.utcoffset() == fixed
        assert occ.at == (occ.nominal - fixed).replace(tzinfo=UTC)


@settings(max_examples=25, deadline=None, derandomize=True)
@given(
    st.sampled_from(ZONES), st.integers(1976, 2035), st.sampled_from(["00:00", "02:30", "12:00"])
)
def test_one_fire_per_local_date(zone: str, year: int, at: str) -> None:
    """(12) a daily rule fires once per existing local date (gap policies other than skip),
    on consecutive local dates; (19) the count over a local year is the number of local dates
    that exist (365 or 366; Pacific/Apia 2011 has 364); (17) between consecutive unshifted fires
    the elapsed time is 24 h minus the change of offset."""
    tz = brute.zone(zone)
    start = datetime(year, 1, 1, tzinfo=tz).astimezone(UTC) - timedelta(seconds=1)
    end = datetime(year + 1, 1, 1, tzinfo=tz).astimezone(UTC) - timedelta(seconds=1)
    assume(_whole_minute_offsets(zone, start, end))
    got = list(occurrences(f"daily@{at}", zone, start, until=end))
    dates = [o.local.date() for o in got]
    assert len(dates) == len(set(dates))
    assert all(o.local.year == year for o in got)
    missing = {d for d in _all_dates(year) if d not in set(dates)}
    for d in missing:  # a missing date never shows on the wall clock at all
        noon = datetime.combine(d, time(12))
        assert not brute.Walk(
            zone,
            datetime.combine(d, time(0), tzinfo=UTC) - timedelta(days=1),
            datetime.combine(d, time(0), tzinfo=UTC) + timedelta(days=1),
        ).seen.get(noon)
    for x, y in pairwise(got):
        if x.adjusted is None and y.adjusted is None:
            ox, oy = x.local.utcoffset(), y.local.utcoffset()
            assert ox is not None and oy is not None
            assert y.at - x.at == (y.local.date() - x.local.date()) - (oy - ox)


def _all_dates(year: int) -> list[date]:
    d, out = date(year, 1, 1), []
    while d.year == year:
        out.append(d)
        d += timedelta(days=1)
    return out


def test_apia_2011_has_364_dates() -> None:
    """(19) Pacific/Apia 2011 skipped 2011-12-30: a daily rule fires 364 times that year."""
    tz = brute.zone("Pacific/Apia")
    start = datetime(2011, 1, 1, tzinfo=tz).astimezone(UTC) - timedelta(seconds=1)
    end = datetime(2012, 1, 1, tzinfo=tz).astimezone(UTC) - timedelta(seconds=1)
    assert len(list(occurrences("daily@09:00", "Pacific/Apia", start, until=end))) == 364


@settings(max_examples=40, deadline=None, derandomize=True)
@given(zone_and_instant(2000, 2035), st.sampled_from(["00:00", "00:30", "01:30", "02:30", "02:00"]))
def test_policy_order_and_locality(zone_instant: tuple[str, datetime], at: str) -> None:
    """(34) for one slot in a gap, at_transition <= shift_forward (equal iff the slot is the gap
    start); (35) changing only the fold policy never changes fires outside folds, changing only
    the gap policy never changes fires outside gaps."""
    zone, a = zone_instant
    rule = f"daily@{at}"
    by_gap = {g: list(occurrences(rule, zone, a, count=3, gap=g)) for g in GAPS}
    by_fold = {f: list(occurrences(rule, zone, a, count=3, fold=f)) for f in FOLDS}
    shifted = {o.key: o for o in by_gap["shift_forward"]}
    for occ in by_gap["at_transition"]:
        other = shifted.get(occ.key)
        if occ.adjusted is not None and other is not None:
            assert occ.at <= other.at
    for name, seq in by_gap.items():
        plain = {o.key: o.at for o in seq if o.adjusted is None}
        base = {o.key: o.at for o in by_gap["shift_forward"] if o.adjusted is None}
        common = plain.keys() & base.keys()
        assert all(plain[k] == base[k] for k in common), name
    for name, seq in by_fold.items():
        plain = {o.key: o.at for o in seq if o.adjusted is None}
        base = {o.key: o.at for o in by_fold["first"] if o.adjusted is None}
        common = plain.keys() & base.keys()
        assert all(plain[k] == base[k] for k in common), name


def test_rrule_invalid_dates_do_not_count_but_gap_times_do() -> None:
    """(21) RRULE invalid dates (BYMONTHDAY=31 in 30-day months) produce no fire and do not
    count toward COUNT; nonexistent times do count (errata 4271); (22) the result with a naive
    DTSTART expanded then resolved equals resolving dateutil's aware output as instants."""
    after = datetime(2026, 1, 1, tzinfo=UTC)
    got = list(
        occurrences(
            timezones.parse_rule(
                {
                    "kind": "rrule",
                    "rrule": "FREQ=MONTHLY;BYMONTHDAY=31;COUNT=4",
                    "dtstart": "2026-01-31T09:00",
                }
            ),
            "Europe/Paris",
            after,
        )
    )
    assert [o.key for o in got] == [
        "2026-01-31T09:00",
        "2026-03-31T09:00",
        "2026-05-31T09:00",
        "2026-07-31T09:00",
    ]
    skip = list(
        occurrences(
            timezones.parse_rule(
                {"kind": "rrule", "rrule": "FREQ=DAILY;COUNT=3", "dtstart": "2026-03-07T02:30"}
            ),
            "America/New_York",
            after,
            gap="skip",
        )
    )
    assert [o.key for o in skip] == ["2026-03-07T02:30", "2026-03-09T02:30"]
    from dateutil import rrule as du

    aware = du.rrulestr(
        "FREQ=DAILY;COUNT=5",
        dtstart=datetime(2026, 3, 6, 2, 30, tzinfo=brute.zone("America/New_York")),
    )
    ours = occurrences(
        timezones.parse_rule(
            {"kind": "rrule", "rrule": "FREQ=DAILY;COUNT=5", "dtstart": "2026-03-06T02:30"}
        ),
        "America/New_York",
        after,
    )
    assert [o.at for o in ours] == [d.astimezone(UTC) for d in aware]


@settings(max_examples=30, deadline=None, derandomize=True)
@given(st.integers(0, 3 * 365 * 86400))
def test_cron_dom_dow_union(offset: int) -> None:
    """(30) cron DOM/DOW: both restricted means union; one `*` means the other alone; 7 == 0 ==
    Sunday."""
    a = datetime(2025, 1, 1, tzinfo=UTC) + timedelta(seconds=offset)
    union = list(occurrences("cron:0 12 13 * 5", "UTC", a, count=6))
    assert all(o.local.day == 13 or o.local.weekday() == 4 for o in union)
    assert any(o.local.day != 13 for o in union)
    only_dow = list(occurrences("cron:0 12 * * 5", "UTC", a, count=4))
    assert all(o.local.weekday() == 4 for o in only_dow)
    seven = [o.at for o in occurrences("cron:0 12 * * 7", "UTC", a, count=3)]
    zero = [o.at for o in occurrences("cron:0 12 * * 0", "UTC", a, count=3)]
    assert seven == zero and all(t.weekday() == 6 for t in seven)


@settings(max_examples=30, deadline=None, derandomize=True)
@given(zone_and_instant(2010, 2035), st.sampled_from(ZONES), st.integers(0, len(RULES) - 1))
def test_zone_change_recomputes_from_max_of_change_and_last_fire(
    zone_instant: tuple[str, datetime], new_zone: str, rule_index: int
) -> None:
    """(37) zone change at T: fires <= T are unchanged, and the first fire after T is
    N_newzone(max(T, last_fire)) - the scheduler's rule, exercised through timezones.testing."""
    from timezones.testing import fires_across_zone_change

    zone, t = zone_instant
    rule = RULES[rule_index][0]
    start = t - timedelta(days=3)
    history, nxt = fires_across_zone_change(rule, zone, new_zone, start, t)
    assert all(o.at <= t for o in history)
    assert history == list(occurrences(rule, zone, start, until=t))
    last = history[-1].at if history else start
    expected = next_after(rule, new_zone, max(t, last))
    assert nxt is not None and expected is not None and nxt.at == expected.at


def test_dense_wildcard_across_a_fold_terminates_and_loses_nothing() -> None:
    """(10) termination: a dense rule answers in bounded work; (42) `* * * * *` yields 1000
    distinct, strictly increasing minutes across a fold (the 60 repeated minutes included)."""
    start = datetime(2026, 11, 1, 4, 0, tzinfo=UTC)
    got = [o.at for o in occurrences("cron:* * * * *", "America/New_York", start, count=1000)]
    assert len(set(got)) == 1000
    assert all(b - a == timedelta(minutes=1) for a, b in pairwise(got))
    keys = [o.key for o in occurrences("cron:* * * * *", "America/New_York", start, count=1000)]
    assert len(set(keys)) == 1000
    assert sum(k.endswith("#1") for k in keys) == 60


def test_vancouver_2026_dst_only_change_changes_nothing() -> None:
    """(33) a dst()/abbreviation-only change (America/Vancouver 2026-11-01 under 2026f) changes
    nothing: fires keep their UTC time and are not marked as adjusted."""
    a = datetime(2026, 10, 25, tzinfo=UTC)
    got = list(occurrences("cron:*/30 * * * *", "America/Vancouver", a, count=48 * 14))
    assert all(b.at - x.at == timedelta(minutes=30) for x, b in pairwise(got))
    assert all(o.fold_index == 0 and o.adjusted is None for o in got)


def test_determinism_across_processes_and_host_tz() -> None:
    """(9) same inputs and tz database give the same output regardless of the host TZ variable
    and the process (keys are identical, so idempotency keys match across workers)."""
    code = (
        "from datetime import datetime, UTC; import timezones as t;"
        "print([(o.at.isoformat(), o.key) for o in t.occurrences('daily@01:30', "
        "'America/New_York', datetime(2026, 10, 31, tzinfo=UTC), count=3, fold='both')])"
    )
    outputs = set()
    for host_tz in ("UTC", "Asia/Tokyo", "America/Los_Angeles"):
        env = {**os.environ, "TZ": host_tz, "PYTHONPATH": str(ROOT)}
        result = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
        )
        outputs.add(result.stdout)
    assert len(outputs) == 1
    assert "2026-11-01T01:30#1" in outputs.pop()
