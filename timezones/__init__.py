"""DST-correct recurrence engine: rules, zones, gap and fold policies. Pure: no I/O, no clock.

See docs/time-zones.md for the policy table and the choice of tz database, and
docs/dst-semantics.md for the rules the engine implements. Where each concept lives:

- ``epoch``: the integer clocks (UTC instants, local slots) everything computes on;
- ``zones``: which tz database answers, zone lookup, per-zone transition tables;
- ``resolve``: local wall time -> instant (unambiguous, gap or fold, then the policy);
- ``slots`` and ``rrule_plan``: the compiled form of each rule kind, yielding local slots;
- ``rules``: the rule models and their text/JSON forms; ``cron``: Vixie expressions;
- ``occurrence``: one fire; ``engine``: ``next_after`` and ``occurrences``;
- ``policy``: the gap/fold/wildcard policies; ``errors``; ``clock``; ``testing``.
"""

from timezones.clock import Clock, FrozenClock, SystemClock
from timezones.engine import next_after, occurrences
from timezones.errors import (
    InvalidInput,
    InvalidPolicy,
    InvalidRule,
    NaiveDatetimeError,
    TimezoneError,
    TockworkError,
    UnknownZone,
)
from timezones.occurrence import Occurrence
from timezones.policy import Adjustment, CronWildcard, FoldPolicy, GapPolicy
from timezones.resolve import resolve_local
from timezones.rules import (
    CronRule,
    DailyRule,
    IntervalRule,
    MonthlyRule,
    OnceRule,
    RRuleRule,
    Rule,
    WeekdaysRule,
    WeeklyRule,
    parse_rule,
    rule_to_json,
)
from timezones.zones import (
    Transition,
    available_zones,
    get_zone,
    transitions,
    tz_database,
    tzdb_version,
    use_tz_database,
)

__all__ = [
    "Adjustment",
    "Clock",
    "CronRule",
    "CronWildcard",
    "DailyRule",
    "FoldPolicy",
    "FrozenClock",
    "GapPolicy",
    "IntervalRule",
    "InvalidInput",
    "InvalidPolicy",
    "InvalidRule",
    "MonthlyRule",
    "NaiveDatetimeError",
    "Occurrence",
    "OnceRule",
    "RRuleRule",
    "Rule",
    "SystemClock",
    "TimezoneError",
    "TockworkError",
    "Transition",
    "UnknownZone",
    "WeekdaysRule",
    "WeeklyRule",
    "available_zones",
    "get_zone",
    "next_after",
    "occurrences",
    "parse_rule",
    "resolve_local",
    "rule_to_json",
    "transitions",
    "tz_database",
    "tzdb_version",
    "use_tz_database",
]
