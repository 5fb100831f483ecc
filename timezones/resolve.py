"""Local wall time -> instant: classify once, then resolve by policy, in this one place.

A local slot ``L`` (a naive wall time, see ``timezones.epoch``) has the instants ``u`` with
``u + offset(u) == L``. Near an offset change there may be none or two, so every conversion
takes two steps (the shape of whenever's ``_tz/ambiguity.py``):

1. :func:`classify` says what the wall time is in the zone, from the zone's transition table:

   * :class:`Unambiguous` - exactly one instant shows it;
   * :class:`Gap` - none (clocks jumped forward over it): the transition instant and the
     offsets before and after it;
   * :class:`Fold` - two (clocks went back over it): the earlier and the later instant.

2. :func:`resolve` turns the class into instants with a ``match`` on the policy
   (docs/dst-semantics.md, sections "Gap policy" and "Fold policy"):

   =============  =================================================================
   gap policy     ``shift_forward``: ``L - offset_before`` (02:30 -> 03:30);
                  ``at_transition``: the transition instant (03:00); ``skip``: none
   fold policy    ``first``: the earlier; ``second``: the later; ``both``: the two
   =============  =================================================================

Recurrences (``timezones.engine``) then apply their own rules on top (the same-local-date rule,
deduplication); :func:`resolve_local` is the public conversion of one naive datetime, used for
example for the end of a quiet-hours window.
"""

from __future__ import annotations

import bisect
from datetime import UTC, datetime, tzinfo

from timezones.epoch import local_seconds
from timezones.errors import InvalidPolicy, TimezoneError, shown
from timezones.policy import Adjustment, FoldPolicy, GapPolicy, fold_policy, gap_policy
from timezones.zones import MAX_OFFSET, ZoneTable, zone_entry

__all__ = [
    "Ambiguity",
    "Fold",
    "Gap",
    "Resolved",
    "Unambiguous",
    "classify",
    "classify_near",
    "resolve",
    "resolve_local",
]


class Unambiguous:
    """Exactly one instant shows the wall time."""

    __slots__ = ("instant",)
    __match_args__ = ("instant",)

    def __init__(self, instant: int) -> None:
        self.instant = instant

    def __repr__(self) -> str:
        return f"Unambiguous({self.instant})"


class Gap:
    """No instant shows the wall time: clocks jumped from ``offset_before`` to the larger
    ``offset_after`` at the instant ``transition``."""

    __slots__ = ("offset_after", "offset_before", "transition")
    __match_args__ = ("transition", "offset_before", "offset_after")

    def __init__(self, transition: int, offset_before: int, offset_after: int) -> None:
        self.transition = transition
        self.offset_before = offset_before
        self.offset_after = offset_after

    def __repr__(self) -> str:
        return f"Gap({self.transition}, {self.offset_before}, {self.offset_after})"


class Fold:
    """Two instants show the wall time (clocks went back): ``earlier < later``."""

    __slots__ = ("earlier", "later")
    __match_args__ = ("earlier", "later")

    def __init__(self, earlier: int, later: int) -> None:
        self.earlier = earlier
        self.later = later

    def __repr__(self) -> str:
        return f"Fold({self.earlier}, {self.later})"


Ambiguity = Unambiguous | Gap | Fold
# (instant, the policy that decided it or None, fold index: 1 for the second instant of a fold)
Resolved = tuple[int, Adjustment | None, int]


def classify(table: ZoneTable, local: int) -> Ambiguity:
    """What the local slot ``local`` is in the zone of ``table``."""
    table.ensure(local)
    trans, offs = table.trans, table.offs
    lo = bisect.bisect_right(trans, local - MAX_OFFSET)
    hi = bisect.bisect_right(trans, local + MAX_OFFSET)
    if lo == hi:
        # No offset change within a day of the slot (the common case): one offset applies.
        return Unambiguous(local - offs[lo])
    return classify_near(table, local, lo, hi)


def classify_near(table: ZoneTable, local: int, lo: int, hi: int) -> Ambiguity:
    """:func:`classify` when ``trans[lo:hi]`` are the offset changes within ``MAX_OFFSET`` of
    the slot (the caller has bisected already; the table is final that far)."""
    trans, offs = table.trans, table.offs
    n = len(trans)
    candidates = []
    for k in range(lo, hi + 1):
        u = local - offs[k]
        if (k == 0 or trans[k - 1] <= u) and (k == n or u < trans[k]):
            candidates.append(u)
    if len(candidates) == 1:
        return Unambiguous(candidates[0])
    if candidates:
        return Fold(candidates[0], candidates[-1])
    for j in range(lo, hi):
        t, before, after = trans[j], offs[j], offs[j + 1]
        if t + before <= local < t + after:
            return Gap(t, before, after)
    # A slot with no instant lies in some gap.
    raise AssertionError(f"slot {local} has no instant and no gap")  # pragma: no cover


def resolve(ambiguity: Ambiguity, local: int, gap: GapPolicy, fold: FoldPolicy) -> list[Resolved]:
    """The instants the policies give for a classified slot: none, one or (fold ``both``) two."""
    match ambiguity:
        case Unambiguous(instant):
            return [(instant, None, 0)]
        case Fold(earlier, later):
            match fold:
                case FoldPolicy.FIRST:
                    return [(earlier, Adjustment.FOLD_FIRST, 0)]
                case FoldPolicy.SECOND:
                    return [(later, Adjustment.FOLD_SECOND, 0)]
                case FoldPolicy.BOTH:
                    return [(earlier, Adjustment.FOLD_FIRST, 0), (later, Adjustment.FOLD_SECOND, 1)]
        case Gap(transition, offset_before, _):
            match gap:
                case GapPolicy.SHIFT_FORWARD:
                    return [(local - offset_before, Adjustment.GAP_SHIFTED, 0)]
                case GapPolicy.AT_TRANSITION:
                    return [(transition, Adjustment.GAP_AT_TRANSITION, 0)]
                case GapPolicy.SKIP:
                    return []
    raise AssertionError(f"unhandled {ambiguity!r} with {gap!r}, {fold!r}")  # pragma: no cover


def resolve_local(
    local: datetime,
    zone: str | tzinfo,
    *,
    gap: GapPolicy | str = GapPolicy.SHIFT_FORWARD,
    fold: FoldPolicy | str = FoldPolicy.FIRST,
) -> datetime | None:
    """The aware UTC instant of the naive wall time ``local`` in ``zone``, by policy.

    ``gap`` decides a wall time the zone skips (default ``shift_forward``: 02:30 on a 02:00 ->
    03:00 night is 03:30 new time), ``fold`` one it shows twice (default ``first``: the earlier
    instant). Returns ``None`` only for ``gap="skip"`` in a gap. ``fold="both"`` names two
    instants and is refused here (:class:`InvalidPolicy`); seconds are kept, microseconds
    dropped.
    """
    if not isinstance(local, datetime):
        raise TimezoneError("local", local, f"expected a naive datetime, got {shown(local)}")
    if local.tzinfo is not None:
        raise TimezoneError(
            "local",
            local,
            f"expected a naive local wall time, got {local.isoformat()!r} (the zone is given "
            "separately)",
        )
    gap_p = gap_policy(gap, GapPolicy.SHIFT_FORWARD)
    fold_p = fold_policy(fold)
    if fold_p is FoldPolicy.BOTH:
        raise InvalidPolicy("fold", fold, "'both' names two instants; use 'first' or 'second'")
    slot = local_seconds(local)
    fires = resolve(classify(zone_entry(zone).table, slot), slot, gap_p, fold_p)
    if not fires:
        return None
    return datetime.fromtimestamp(fires[0][0], UTC)
