"""bench/bench_tls.py runs end to end with a tiny N: one real broker with a PLAINTEXT and an SSL listener,
then three 3-broker clusters (PLAINTEXT, SSL, SASL_SSL) for acks=all.

No rate is asserted (the machine is shared): only that every protocol moved exactly N messages each
round (the benchmark checks its counts and fails otherwise), that the ratios are printed, and that the
brokers it started are stopped.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.processes  # runs bench/bench_tls.py

REPO = Path(__file__).resolve().parents[2]


def test_bench_tls_prints_both_ratios_and_stops_its_broker():
    out = subprocess.run([sys.executable, str(REPO / "bench" / "bench_tls.py"), "--count", "3000", "--rounds", "2",
                          "--replicated-count", "300"],
                         capture_output=True, text=True, timeout=300, cwd=REPO,
                         env={**os.environ, "PYTHONPATH": str(REPO)})
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    assert len(re.findall(r"^round \d (PLAINTEXT|SSL) ", out.stdout, re.M)) == 4, out.stdout
    for kind in ("produce", "consume"):
        assert re.search(rf"^{kind} .* SSL/PLAINTEXT \d+\.\d\d$", out.stdout, re.M), out.stdout
    assert len(re.findall(r"^replicated round \d (PLAINTEXT|SSL|SASL_SSL) ", out.stdout, re.M)) == 6, out.stdout
    assert re.search(r"^acks=all .* SSL/PLAINTEXT \d+\.\d\d   SASL_SSL/PLAINTEXT \d+\.\d\d$", out.stdout, re.M), \
        out.stdout
    pids = [int(re.search(r"^broker pid (\d+) stopped$", out.stdout, re.M).group(1))]
    pids += [int(p) for p in re.search(r"^replicated broker pids ([\d ]+) stopped$", out.stdout, re.M).group(1).split()]
    assert len(pids) == 10
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
