"""bench/bench_wire.py and bench/ab_trees.py run end to end with tiny counts (no timing asserted):
the codec table is printed, and the A/B runner reads it from both trees and prints the comparison."""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.processes  # runs the bench scripts as subprocesses

REPO = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("ab_trees", REPO / "bench" / "ab_trees.py")
ab_trees = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ab_trees)


def _run(*args: str) -> str:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=300, cwd=REPO, env=env)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    return proc.stdout


def test_bench_wire_prints_one_row_per_hot_path_call():
    out = _run("bench/bench_wire.py", "--number", "50", "--repeat", "1")
    rows = ab_trees.table_values(out, "ns per call")
    assert "PRODUCE decode (broker)" in rows and "REPLICA_FETCH answer header (leader)" in rows
    assert len(rows) == 12 and all(v > 0 for v in rows.values())


def test_ab_trees_compares_both_columns_of_two_trees_and_refuses_a_missing_script(tmp_path):
    out = _run("bench/ab_trees.py", "--old", str(REPO), "--rounds", "2", "--column", "calls/s",
               "--column", "ns per call:lower", "--", "bench/bench_wire.py", "--number", "50", "--repeat", "1")
    assert "| row | old calls/s (best of 2) | new calls/s (best of 2) | new / old |" in out
    assert "| row | old ns per call (lowest of 2) | new ns per call (lowest of 2) | new / old |" in out
    assert "| FETCH decode (broker) |" in out and "load average at end" in out
    with pytest.raises(AssertionError, match="does not exist"):
        _run("bench/ab_trees.py", "--old", str(tmp_path), "--", "bench/bench_wire.py")


def test_table_values_reads_the_named_column_of_every_table_and_skips_the_rest():
    out = ("text\n| a | msg/s | x |\n| --- | ---: | --- |\n| one | 1,000 | y |\n| two | 2.5 (0.3) | z |\n\n"
           "| b | other |\n| --- | --- |\n| three | 7 |\n| c | msg/s |\n| --- | --- |\n| four | n/a |\n")
    assert ab_trees.table_values(out, "msg/s") == {"one": 1000.0, "two": 2.5}
    assert ab_trees.number("0.55 (0.30)") == 0.55 and ab_trees.number("") is None
