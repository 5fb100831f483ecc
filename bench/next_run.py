"""next_after throughput (calls per second, one core) beside croniter and dateutil.

10,000 random (zone, rule, instant) triples per rule kind over every zone of the tz database
and instants in 2024-2030, the same triples for the engine and for the peer it replaces:

* cron: ``croniter(expr, after_in_zone).get_next(datetime)`` (construction included: that is
  what answering "next fire after T" costs with croniter);
* rrule: ``rrule.after(after)`` on a dateutil rule with an aware DTSTART in the zone, built
  once per (zone, rule) outside the timing, like our parsed rules.

Figures, not a test: ``python bench/next_run.py [--n 10000] [--seed 1]``.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from croniter import croniter
from dateutil import rrule as du_rrule

import timezones

RULES: dict[str, list[str]] = {
    "daily": ["daily@08:00", "daily@02:30", "daily@00:00", "daily@23:45"],
    "weekly": ["weekly:mon,wed,fri@18:30", "weekdays@07:15", "weekly:sun@01:30"],
    "monthly": ["monthly:1@09:00", "monthly:31@12:00", "monthly:last@02:30"],
    "cron": ["cron:30 2 * * *", "cron:0 9 * * 1-5", "cron:*/15 * * * *", "cron:0 0 1,15 * *"],
    "rrule": [
        "rrule:DTSTART=2024-01-01T08:00;FREQ=WEEKLY;BYDAY=MO,WE",
        "rrule:DTSTART=2024-01-01T02:30;FREQ=DAILY",
        "rrule:DTSTART=2024-01-31T09:00;FREQ=MONTHLY;BYMONTHDAY=-1",
    ],
}


def _rate(calls: int, func: Callable[[], None]) -> float:
    func()  # warm caches (zone tables, compiled rules)
    start = time.perf_counter()
    func()
    return calls / (time.perf_counter() - start)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    rnd = random.Random(args.seed)
    zones = sorted(z for z in timezones.available_zones() if z != "Factory")
    span = int(
        (datetime(2031, 1, 1, tzinfo=UTC) - datetime(2024, 1, 1, tzinfo=UTC)).total_seconds()
    )
    print(
        f"tz database {timezones.tzdb_version()}, {len(zones)} zones, n={args.n}, seed={args.seed}"
    )
    print(f"{'kind':8} {'timezones/s':>12} {'peer':>26} {'peer/s':>10} {'ratio':>7}")
    for kind, texts in RULES.items():
        rules = [timezones.parse_rule(t) for t in texts]
        triples = [
            (
                rnd.choice(zones),
                rnd.randrange(len(rules)),
                datetime(2024, 1, 1, tzinfo=UTC) + timedelta(seconds=rnd.randrange(span)),
            )
            for _ in range(args.n)
        ]

        def ours(
            rules: list[timezones.Rule] = rules, triples: list[tuple[str, int, datetime]] = triples
        ) -> None:
            next_after = timezones.next_after
            for zone, index, after in triples:
                next_after(rules[index], zone, after)

        rate = _rate(len(triples), ours)
        peer_name, peer_rate = "-", 0.0
        if kind == "cron":
            exprs = [t.removeprefix("cron:") for t in texts]
            local = [(exprs[i], a.astimezone(timezones.get_zone(z))) for z, i, a in triples]

            def peer_cron(local: list[tuple[str, datetime]] = local) -> None:
                for expr, after in local:
                    croniter(expr, after).get_next(datetime)

            peer_name, peer_rate = "croniter.get_next", _rate(len(local), peer_cron)
        elif kind == "rrule":
            built: dict[tuple[str, int], du_rrule.rrule] = {}
            for zone, index, _ in triples:
                if (zone, index) not in built:
                    rule = rules[index]
                    assert isinstance(rule, timezones.RRuleRule) and rule.dtstart is not None
                    dtstart = rule.dtstart.replace(tzinfo=timezones.get_zone(zone))
                    made = du_rrule.rrulestr(rule.rrule, dtstart=dtstart)
                    assert isinstance(made, du_rrule.rrule)
                    built[(zone, index)] = made
            calls = [(built[(z, i)], a) for z, i, a in triples]

            def peer_rrule(calls: list[tuple[du_rrule.rrule, datetime]] = calls) -> None:
                for rule, after in calls:
                    rule.after(after)

            peer_name, peer_rate = "dateutil rrule.after", _rate(len(calls), peer_rrule)
        ratio = f"{rate / peer_rate:6.1f}x" if peer_rate else "      -"
        peer_text = f"{peer_rate:10.0f}" if peer_rate else f"{'-':>10}"
        print(f"{kind:8} {rate:12.0f} {peer_name:>26} {peer_text} {ratio}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
