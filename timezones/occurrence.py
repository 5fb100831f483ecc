"""``Occurrence``: one fire of a rule, as an instant, a local time and the slot it came from.

Three kinds of time meet here, each under its own name (docs/time-zones.md, "Glossary"):

* ``instant`` (alias ``at``): the aware UTC instant of the fire, what is persisted;
* ``local``: the same instant as an aware datetime in the rule's zone (for display);
* ``nominal``: the naive local wall time the rule named; it differs from ``local`` when a gap
  policy moved the fire.

The class is small and immutable rather than a pydantic model, and builds its datetimes on first
access: ``next_after`` creates one per call on the scheduler's hot path.
"""

from __future__ import annotations

from datetime import UTC, datetime, tzinfo

from timezones.epoch import wall_time
from timezones.policy import Adjustment

__all__ = ["Occurrence"]


class Occurrence:
    """One fire of a rule (immutable; the datetimes are built on first access).

    ``instant`` (also ``at``) is the aware UTC instant; ``local`` the same instant as an aware
    local time in the zone; ``nominal`` the naive local slot the rule named (it differs from
    ``local`` when a gap policy moved the fire); ``adjusted`` which policy touched it (``None``
    if none); ``fold_index`` is 1 for the second instant of a repeated wall time (fold ``both``,
    or a wildcard cron job firing again in the repeated hour), else 0; ``key`` the stable text
    key.
    """

    __slots__ = ("_adjusted", "_at", "_fold_index", "_instant", "_local", "_slot", "_tz", "_utc")

    def __init__(
        self,
        instant: int,
        slot: int,
        zone: tzinfo,
        adjusted: Adjustment | None = None,
        fold_index: int = 0,
        utc_key: bool = False,
    ) -> None:
        self._instant = instant
        self._slot = slot
        self._tz = zone
        self._adjusted = adjusted
        self._fold_index = fold_index
        self._utc = utc_key
        self._at: datetime | None = None
        self._local: datetime | None = None

    @property
    def instant(self) -> datetime:
        """The instant of the fire, aware, in UTC."""
        at = self._at
        if at is None:
            at = self._at = datetime.fromtimestamp(self._instant, UTC)
        return at

    # The original name, kept: ``occ.at`` is ``occ.instant``.
    at = instant

    @property
    def local(self) -> datetime:
        """The instant as an aware local time in the rule's zone (``fold`` set correctly)."""
        local = self._local
        if local is None:
            local = self._local = datetime.fromtimestamp(self._instant, self._tz)
        return local

    @property
    def nominal(self) -> datetime:
        """The naive local wall time the rule named."""
        return wall_time(self._slot)

    @property
    def adjusted(self) -> Adjustment | None:
        """``None``, or which gap/fold policy decided this fire."""
        return self._adjusted

    @property
    def fold_index(self) -> int:
        """1 for the second instant of a repeated wall time, else 0."""
        return self._fold_index

    @property
    def zone(self) -> tzinfo:
        """The zone the rule was evaluated in."""
        return self._tz

    @property
    def key(self) -> str:
        """Stable text key of the slot: ``2026-03-08T02:30`` (``#1`` for a second fold fire).

        Interval rules have no local slot: their key is the UTC instant ``...Z``.
        """
        if self._utc:
            return self.at.strftime("%Y-%m-%dT%H:%M:%SZ")
        nominal = self.nominal
        text = nominal.isoformat(timespec="seconds" if nominal.second else "minutes")
        return f"{text}#1" if self._fold_index else text

    def _identity(self) -> tuple[int, int, str, Adjustment | None, int]:
        return (self._instant, self._slot, str(self._tz), self._adjusted, self._fold_index)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Occurrence):
            return NotImplemented
        return self._identity() == other._identity()

    def __hash__(self) -> int:
        return hash(self._identity())

    def __repr__(self) -> str:
        adjusted = None if self._adjusted is None else self._adjusted.value
        return (
            f"Occurrence(at={self.at.isoformat()!r}, local={self.local.isoformat()!r}, "
            f"adjusted={adjusted!r}, key={self.key!r})"
        )
