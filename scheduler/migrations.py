"""Which migration components an application applies, in order (dependencies first).

``jobs`` and ``scheduler`` are the core. ``scheduler.simulated`` (the simulated push
provider's table) is opt-in: ``tockwork migrate --with simulated``, or implicitly when the
provider is used (:func:`scheduler.simulated.install`).
"""

from __future__ import annotations

from scheduler.simulated import COMPONENT as SIMULATED

# The core components, applied by `tockwork migrate` and `--migrate`.
COMPONENTS: tuple[str, ...] = ("jobs", "scheduler")

# Opt-in components by the name `tockwork migrate --with NAME` takes.
OPTIONAL: dict[str, str] = {"simulated": SIMULATED}

# Everything: what the test suite's template database and the demos apply.
ALL_COMPONENTS: tuple[str, ...] = (*COMPONENTS, *OPTIONAL.values())
