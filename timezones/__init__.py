"""DST-correct recurrence engine: rules, zones, gap and fold policies. Pure: no I/O, no clock.

See docs/time-zones.md for the policy table and the choice of tz database.
"""

from timezones.clock import Clock, FrozenClock, SystemClock
from timezones.engine import Occurrence, next_after, occurrences
from timezones.errors import (
    InvalidInput,
    InvalidPolicy,
    InvalidRule,
    NaiveDatetimeError,
    TimezoneError,
    TockworkError,
    UnknownZone,
)
from timezones.policy import Adjustment, CronWildcard, FoldPolicy, GapPolicy
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
    "rule_to_json",
    "transitions",
    "tz_database",
    "tzdb_version",
    "use_tz_database",
]
