"""What to do with local times that do not exist (gap) or happen twice (fold).

=============  ==========================================  ==================================
policy         value                                        default
=============  ==========================================  ==================================
gap            ``shift_forward``, ``at_transition``,        ``shift_forward``; ``at_transition``
               ``skip``                                     for fixed-time cron (Vixie)
fold           ``first``, ``second``, ``both``              ``first``
cron wildcard  ``wall_clock``, ``anchored``                 ``wall_clock`` (Vixie)
=============  ==========================================  ==================================
"""

from __future__ import annotations

from enum import StrEnum

from timezones.errors import InvalidPolicy, shown

__all__ = ["Adjustment", "CronWildcard", "FoldPolicy", "GapPolicy", "fold_policy", "gap_policy"]


class GapPolicy(StrEnum):
    """A nominal local time inside a gap (clocks jump forward over it)."""

    SHIFT_FORWARD = "shift_forward"  # by the gap's length: 02:30 -> 03:30 (RFC 5545, PEP 495)
    AT_TRANSITION = "at_transition"  # the first instant after the jump: 03:00 (Vixie cron)
    SKIP = "skip"  # no fire that day (systemd, Quartz)


class FoldPolicy(StrEnum):
    """A nominal local time that happens twice (clocks go back over it)."""

    FIRST = "first"  # the earlier instant (RFC 5545, PEP 495 fold=0, Vixie)
    SECOND = "second"  # the later instant
    BOTH = "both"  # both instants; the second one's key ends in "#1"


class CronWildcard(StrEnum):
    """How cron jobs whose minute or hour field starts with ``*`` treat transitions."""

    WALL_CLOCK = "wall_clock"  # fire whenever the observed wall clock matches (Vixie)
    ANCHORED = "anchored"  # per nominal slot, with the gap and fold policies, like fixed jobs


class Adjustment(StrEnum):
    """Which policy changed an occurrence (``Occurrence.adjusted``)."""

    GAP_SHIFTED = "gap_shifted"
    GAP_AT_TRANSITION = "gap_at_transition"
    FOLD_FIRST = "fold_first"
    FOLD_SECOND = "fold_second"


def gap_policy(value: GapPolicy | str | None, default: GapPolicy) -> GapPolicy:
    """Validate a gap policy given as enum, string or ``None`` (the rule kind's default)."""
    if value is None:
        return default
    try:
        return GapPolicy(value)
    except ValueError:
        allowed = ", ".join(p.value for p in GapPolicy)
        raise InvalidPolicy(
            "gap", value, f"unknown policy {shown(value)} (use one of {allowed})"
        ) from None


def fold_policy(
    value: FoldPolicy | str | None, default: FoldPolicy = FoldPolicy.FIRST
) -> FoldPolicy:
    """Validate a fold policy given as enum, string or ``None`` (``first``)."""
    if value is None:
        return default
    try:
        return FoldPolicy(value)
    except ValueError:
        allowed = ", ".join(p.value for p in FoldPolicy)
        raise InvalidPolicy(
            "fold", value, f"unknown policy {shown(value)} (use one of {allowed})"
        ) from None
