"""The settings of a long-running service, declared once: default, bounds and help line.

A service's configuration is a frozen dataclass (River's ``*Config``, as in
:mod:`jobs.maintenance`): :class:`jobs.WorkerConfig`, :class:`jobs.RelayConfig`. Each field is
declared with :func:`setting`, which gives it its default and a :class:`Setting`: the help line,
the command-line flag that sets it (when the CLI offers one) and the flag's bounds. The
service's constructor takes its values from the config (its keyword arguments, kept for
callers, override single fields: :func:`merged`), the config's ``__post_init__`` checks what the
API refuses, and ``tockwork`` builds its options from the fields
(``scheduler/cli/common.py``, ``config_args``), so neither the defaults nor the help are typed
again.

The flag's bounds are those the CLI has always had; the API's checks (``__post_init__``) stay
what they were, which for some settings is less strict (the API takes any positive
``max_attempts`` for the relay, the CLI 1 to 1000).
"""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass
from typing import Any, TypeVar


@dataclass(frozen=True, slots=True)
class Setting:
    """What a config field says about itself besides its default.

    ``help`` is the line ``tockwork --help`` shows; ``flag`` the option that sets it (``None``:
    no option); ``minimum``, ``positive`` (above ``minimum``, not at it) and ``maximum`` bound
    the option's value (seconds for a ``timedelta``); ``metavar`` names the value in the usage.
    """

    help: str
    flag: str | None = None
    minimum: float = 0
    positive: bool = False
    maximum: float | None = None
    metavar: str | None = None


def setting(
    default: Any = dataclasses.MISSING,
    *,
    help: str,
    flag: str | None = None,
    minimum: float = 0,
    positive: bool = False,
    maximum: float | None = None,
    metavar: str | None = None,
    default_factory: Any = dataclasses.MISSING,
) -> Any:
    """A config field with its default and its :class:`Setting`."""
    meta = {"setting": Setting(help, flag, minimum, positive, maximum, metavar)}
    if default_factory is not dataclasses.MISSING:
        return dataclasses.field(default_factory=default_factory, metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def settings(config: type[Any]) -> list[tuple[dataclasses.Field[Any], Setting]]:
    """The fields of a config class with their :class:`Setting`, in declaration order."""
    return [(f, f.metadata["setting"]) for f in dataclasses.fields(config)]


class Unset(enum.Enum):
    """The default of a service's keyword argument: "take the config's value"."""

    UNSET = 0


UNSET = Unset.UNSET

C = TypeVar("C")


def merged(config: C | None, config_type: type[C], **given: Any) -> C:
    """``config`` (else the defaults) with the keyword arguments that were given (not UNSET).

    The result is built anew, so the config's checks run on the merged values and name the
    keyword argument that is wrong.
    """
    base = config if config is not None else config_type()
    changes = {k: v for k, v in given.items() if v is not UNSET}
    return dataclasses.replace(base, **changes) if changes else base  # type: ignore[type-var]
