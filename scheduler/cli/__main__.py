"""``python -m scheduler.cli``: the ``tockwork`` command."""

from scheduler.cli import main

raise SystemExit(main())
