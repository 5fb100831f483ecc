"""An ``--app`` module that calls ``sys.exit`` while it is imported (a script, not a module)."""

from __future__ import annotations

import sys

sys.exit("run me as a script")
