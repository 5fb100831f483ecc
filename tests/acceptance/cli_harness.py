"""Run ``tockwork ARGV`` in this process, as a user would see it: exit code, stdout, stderr.

``main(argv)`` runs with stdout and stderr captured; argparse's ``SystemExit`` becomes the exit
code. Whatever a command changes in the process (``os.environ``, the ``tockwork`` logger's
handlers) is put back, so thousands of runs do not leak into the other tests.
"""

from __future__ import annotations

import io
import logging
import os
from collections.abc import Mapping, Sequence
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass

from scheduler.cli import main


@dataclass(frozen=True)
class Result:
    code: int
    out: str
    err: str


def run(argv: Sequence[str], env: Mapping[str, str | None] | None = None) -> Result:
    """``tockwork ARGV`` in-process; ``env`` sets (or, with ``None``, unsets) variables."""
    saved_env = dict(os.environ)
    logger = logging.getLogger("tockwork")
    saved_log = (list(logger.handlers), logger.level, logger.propagate)
    out, err = io.StringIO(), io.StringIO()
    try:
        for name, value in (env or {}).items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        with redirect_stdout(out), redirect_stderr(err):
            try:
                code = main(list(argv))
            except SystemExit as exc:  # argparse: usage errors, --help, --version
                code = exc.code if isinstance(exc.code, int) else 1
    finally:
        os.environ.clear()
        os.environ.update(saved_env)
        logger.handlers[:] = saved_log[0]
        logger.setLevel(saved_log[1])
        logger.propagate = saved_log[2]
    return Result(code, out.getvalue(), err.getvalue())
