"""What input validation costs enqueue_many: this tree against a baseline tree, in one run.

``python -m bench.validate_cost [--baseline-ref REF] [--n 100000]`` times the part of
``jobs.enqueue_many`` that runs before the first statement (the per-spec checks: job type,
payload encoding, queue, idempotency key, organization, priority, attempts), for the same
specs, in a fresh interpreter per tree (the baseline's ``jobs`` and this tree's never share a
process; the baseline is REF, by default where this branch left ``main``, exported with
``git archive`` to a temporary folder). The connection is a stand-in whose ``cursor()``
stops the call: no database is involved, the figure is the validation alone. Prints specs/s
for each tree and the ratio.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

_HERE = Path(__file__).resolve().parent.parent


# Run in a fresh interpreter with the tree under test first on sys.path (its ``jobs``); kept
# as text so that the child imports nothing of this tree.
_CHILD = """
import json, sys, time
sys.path.insert(0, TREE)
import jobs
import psycopg

class Stop(Exception):
    pass

class StopConnection(psycopg.Connection):
    # Stops enqueue_many at its first use of the connection (its cursor, or its transaction
    # state), once every spec has been validated. A psycopg.Connection by type, so that the
    # check that ``conn`` is one passes; never initialised, every attribute stops the call.
    def __init__(self):
        pass

    def __getattribute__(self, name):
        raise Stop

    def __del__(self):
        pass

kinds = {
    "plain": [jobs.JobSpec("noop", {"i": i}) for i in range(N)],
    "keys": [
        jobs.JobSpec("noop", {"i": i, "name": "caf\\u00e9"}, idempotency_key=f"k:{i}")
        for i in range(N)
    ],
}
out = {}
for name, specs in kinds.items():
    best = float("inf")
    for _ in range(ROUNDS):
        start = time.perf_counter()
        try:
            jobs.enqueue_many(StopConnection(), specs)
        except Stop:
            pass
        best = min(best, time.perf_counter() - start)
    out[name] = N / best
print(json.dumps(out))
"""


def _run(tree: Path, n: int, rounds: int) -> dict[str, float]:
    code = f"TREE = {str(tree)!r}; N = {n}; ROUNDS = {rounds}\n" + _CHILD
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=tree
    )
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline-ref", default=None, help="default: git merge-base HEAD main")
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        baseline = Path(folder)
        ref = args.baseline_ref or _git("merge-base", "HEAD", "main")
        archive = subprocess.run(
            ["git", "archive", ref, "jobs", "timezones"], cwd=_HERE, capture_output=True, check=True
        ).stdout
        subprocess.run(["tar", "-x", "-C", folder], input=archive, check=True)
        _compare(baseline, ref, args.n, args.rounds)


def _git(*args: str) -> str:
    done = subprocess.run(["git", *args], cwd=_HERE, capture_output=True, text=True, check=True)
    return done.stdout.strip()


def _compare(baseline: Path, ref: str, n: int, rounds: int) -> None:
    # Alternate the trees so that a slow moment of a shared machine hits both.
    figures: dict[str, list[dict[str, float]]] = {"baseline": [], "this tree": []}
    for _ in range(2):
        figures["baseline"].append(_run(baseline, n, rounds))
        figures["this tree"].append(_run(_HERE, n, rounds))
    print(f"enqueue_many validation, {n:,} specs, best of {rounds} x 2 processes")
    print(f"baseline: {ref[:12]}")
    print(f"{'specs':8} {'baseline/s':>14} {'this tree/s':>14} {'ratio':>7}")
    for kind in ("plain", "keys"):
        base = max(f[kind] for f in figures["baseline"])
        mine = max(f[kind] for f in figures["this tree"])
        print(f"{kind:8} {base:14,.0f} {mine:14,.0f} {mine / base:7.2f}")


if __name__ == "__main__":
    main()
