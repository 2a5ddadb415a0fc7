"""One bench script run from two checkouts alternately, in one run: the rows of its tables compared.

For a change that must not make a path slower (a refactoring, a new codec): check the old code out
beside the new (``git worktree add --detach /tmp/old-tree COMMIT``), then::

    .venv/bin/python bench/ab_trees.py --old /tmp/old-tree --rounds 3 -- bench/bench_consumer.py --count 1000000

Each round runs the script once from each tree (``cwd`` and ``PYTHONPATH`` that tree, so client,
broker and harness all come from it), the order alternating from round to round, as the machine is
shared and its load drifts. The script's markdown tables are read: every row of a table with a
``msg/s`` column (its first cell names it) gives one rate per run. Printed: per row the best rate of
each tree over the rounds and their ratio new / old, every round's rates, the load average at
start and end, and the rows one tree printed and the other did not. The script's own arguments
follow ``--`` and are the same for both trees (a script of the old tree that lacks one fails,
and says so).
"""
from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def rates(output: str) -> dict[str, float]:
    """Row name -> msg/s of every markdown table in ``output`` that has a ``msg/s`` column."""
    found: dict[str, float] = {}
    column = None
    for line in output.splitlines():
        if not line.startswith("|"):
            column = None
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if column is None:
            column = cells.index("msg/s") if "msg/s" in cells else -1
            continue
        if column < 0 or set(cells[0]) <= set("-: "):
            continue
        try:
            value = float(cells[column].replace(",", ""))
        except (ValueError, IndexError):
            continue
        found[cells[0]] = value
    return found


def run(tree: Path, script: str, args: list[str], timeout_s: float) -> tuple[dict[str, float], str]:
    env = dict(os.environ, PYTHONPATH=str(tree))
    proc = subprocess.run([sys.executable, script, *args], cwd=tree, env=env, capture_output=True, text=True,
                          timeout=timeout_s)
    if proc.returncode != 0:
        raise SystemExit(f"{script} in {tree} exited {proc.returncode}:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")
    return rates(proc.stdout), proc.stdout


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    cut = argv.index("--") if "--" in argv else len(argv)
    ours, theirs = argv[:cut], argv[cut + 1:]
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--old", required=True, help="checkout of the old code")
    ap.add_argument("--new", default=str(REPO), help="checkout of the new code (default: this one)")
    ap.add_argument("--rounds", type=int, default=3, help="runs per tree; the best rate of each row is kept")
    ap.add_argument("--timeout", type=float, default=1800.0, help="seconds one run may take")
    ap.add_argument("--show", action="store_true", help="print each run's own output too")
    args = ap.parse_args(ours)
    if not theirs:
        ap.error("give the bench script and its arguments after --")
    script, script_args = theirs[0], theirs[1:]
    trees = {"old": Path(args.old).resolve(), "new": Path(args.new).resolve()}
    for tree in trees.values():
        if not (tree / script).is_file():
            ap.error(f"{tree / script} does not exist")
    print(f"machine: {os.cpu_count()} CPUs, {platform.platform()}, Python {platform.python_version()}")
    print(f"load average at start: {Path('/proc/loadavg').read_text().split()[:3]}; {script} {' '.join(script_args)}")
    best: dict[str, dict[str, float]] = {"old": {}, "new": {}}
    for r in range(args.rounds):
        order = ("old", "new") if r % 2 == 0 else ("new", "old")
        for name in order:
            start = time.monotonic()
            found, output = run(trees[name], script, script_args, args.timeout)
            if args.show:
                print(output)
            for row, value in found.items():
                best[name][row] = max(value, best[name].get(row, 0.0))
            print(f"  round {r + 1}, {name} ({time.monotonic() - start:.0f} s): "
                  + ", ".join(f"{row}: {value:,.0f}" for row, value in found.items()))
    print(f"load average at end: {Path('/proc/loadavg').read_text().split()[:3]}")
    print()
    print(f"| row | old msg/s (best of {args.rounds}) | new msg/s (best of {args.rounds}) | new / old |")
    print("| --- | ---: | ---: | ---: |")
    for row in best["new"]:
        if row in best["old"]:
            old, new = best["old"][row], best["new"][row]
            print(f"| {row} | {old:,.0f} | {new:,.0f} | {new / old:.2f} |" if old else f"| {row} | 0 | {new:,.0f} | |")
    only = sorted(set(best["old"]) ^ set(best["new"]))
    if only:
        print(f"\nrows of one tree only: {only}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
