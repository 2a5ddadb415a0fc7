"""One bench script run from two checkouts alternately, in one run: the rows of its tables compared.

For a change that must not make a path slower (a refactoring, a new codec): check the old code out
beside the new (``git worktree add --detach /tmp/old-tree COMMIT``), then::

    .venv/bin/python bench/ab_trees.py --old /tmp/old-tree --rounds 3 -- bench/bench_consumer.py --count 1000000

Each round runs the script once from each tree (``cwd`` and ``PYTHONPATH`` that tree, so client,
broker and harness all come from it), the order alternating from round to round, as the machine is
shared and its load drifts. The script's markdown tables are read: every row of a table with a
``msg/s`` column (``--column``; its first cell names the row) gives one rate per run. Printed: per
row the best rate of each tree over the rounds and their ratio new / old, every round's rates, the
load average at start and end, and the rows one tree printed and the other did not. The script's
own arguments follow ``--`` and are the same for both trees (a script of the old tree that lacks
one fails, and says so). ``--same-script`` runs the new tree's script file in both trees, for a
script the old tree does not have (it must import only what both trees have).
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


def cells_of(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def number(cell: str) -> float | None:
    """The first number of a cell (``0.55 (0.30)`` -> 0.55), None when it has none."""
    word = cell.replace(",", "").split(" ")[0]
    try:
        return float(word)
    except ValueError:
        return None


def table_values(output: str, header: str) -> dict[str, float]:
    """Row name -> the ``header`` column of every markdown table in ``output`` that has one."""
    found: dict[str, float] = {}
    column = None
    for line in output.splitlines():
        if not line.startswith("|"):
            column = None
            continue
        cells = cells_of(line)
        if column is None:
            column = cells.index(header) if header in cells else -1
            continue
        if column < 0 or set(cells[0]) <= set("-: ") or column >= len(cells):
            continue
        value = number(cells[column])
        if value is not None:
            found[cells[0]] = value
    return found


def run(tree: Path, script: str, args: list[str], timeout_s: float) -> str:
    env = dict(os.environ, PYTHONPATH=str(tree))
    proc = subprocess.run([sys.executable, script, *args], cwd=tree, env=env, capture_output=True, text=True,
                          timeout=timeout_s)
    if proc.returncode != 0:
        raise SystemExit(f"{script} in {tree} exited {proc.returncode}:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")
    return proc.stdout


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
    ap.add_argument("--column", action="append",
                    help="a column header to compare, repeatable (default msg/s); a rate, higher is better, unless "
                         "it ends in ':lower' (a cost such as CPU µs/msg)")
    ap.add_argument("--same-script", action="store_true", help="run the new tree's script file in both trees")
    args = ap.parse_args(ours)
    if not theirs:
        ap.error("give the bench script and its arguments after --")
    script, script_args = theirs[0], theirs[1:]
    trees = {"old": Path(args.old).resolve(), "new": Path(args.new).resolve()}
    scripts = {name: str((trees["new"] if args.same_script else tree) / script) for name, tree in trees.items()}
    for path in scripts.values():
        if not Path(path).is_file():
            ap.error(f"{path} does not exist")
    print(f"machine: {os.cpu_count()} CPUs, {platform.platform()}, Python {platform.python_version()}")
    print(f"load average at start: {Path('/proc/loadavg').read_text().split()[:3]}; {script} {' '.join(script_args)}")
    columns = [(c.removesuffix(":lower"), c.endswith(":lower")) for c in (args.column or ["msg/s"])]
    best: dict[tuple[str, str], dict[str, float]] = {(c, name): {} for c, _ in columns for name in trees}
    for r in range(args.rounds):
        order = ("old", "new") if r % 2 == 0 else ("new", "old")
        for name in order:
            start = time.monotonic()
            output = run(trees[name], scripts[name], script_args, args.timeout)
            if args.show:
                print(output)
            for column, lower in columns:
                found = table_values(output, column)
                kept = best[column, name]
                for row, value in found.items():
                    kept[row] = (min if lower else max)(value, kept.get(row, value))
                print(f"  round {r + 1}, {name} ({time.monotonic() - start:.0f} s), {column}: "
                      + ", ".join(f"{row}: {value:,.2f}" for row, value in found.items()))
    print(f"load average at end: {Path('/proc/loadavg').read_text().split()[:3]}")
    for column, lower in columns:
        old, new = best[column, "old"], best[column, "new"]
        print()
        print(f"| row | old {column} ({'lowest' if lower else 'best'} of {args.rounds}) "
              f"| new {column} ({'lowest' if lower else 'best'} of {args.rounds}) | new / old |")
        print("| --- | ---: | ---: | ---: |")
        for row in new:
            if row in old:
                ratio = f"{new[row] / old[row]:.2f}" if old[row] else ""
                print(f"| {row} | {old[row]:,.2f} | {new[row]:,.2f} | {ratio} |")
        only = sorted(set(old) ^ set(new))
        if only:
            print(f"\nrows of one tree only ({column}): {only}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
