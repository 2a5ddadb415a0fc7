"""bench/bench_peers.py runs end to end with a tiny N against real RabbitMQ and ActiveMQ processes.

No rate is asserted (the machine is shared): only that every system produced and consumed exactly
N messages with the bytes that were sent, that every table row is printed, and that no server
process the benchmark started is left behind -- also when it is interrupted (SIGINT) midway.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.harness.leftovers import alive, own_tmp, own_tmpdir_env, running_from  # noqa: F401 (fixture)

# One RabbitMQ node at a time on this machine: the benchmarks that start one share a worker.
pytestmark = [pytest.mark.processes, pytest.mark.xdist_group("rabbitmq")]  # runs bench/bench_peers.py

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / "bench" / "bench_peers.py"

have_rabbitmq = Path("/usr/lib/rabbitmq/bin/rabbitmq-server").exists() and shutil.which("runuser")
have_activemq = Path("/usr/share/activemq/bin/activemq.jar").exists() and shutil.which("java")
needs_peers = pytest.mark.skipif(not (have_rabbitmq and have_activemq),
                                 reason="Debian packages rabbitmq-server and activemq (scripts/bootstrap.sh)")


def _env(tmp: Path | None = None) -> dict:
    """The benchmark's environment; with ``tmp``, its temporary directories are made under the test's own
    ``tmp`` (tests/harness/leftovers.py), so the check for leftovers looks at this run's processes only."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return env if tmp is None else own_tmpdir_env(tmp, env)


@pytest.mark.slow
@needs_peers
def test_every_system_moves_exactly_n_messages_and_no_server_is_left(tmp_path, own_tmp):
    out = tmp_path / "peers.json"
    n, peer_n = 2000, 300
    r = subprocess.run([sys.executable, str(BENCH), "--count", str(n), "--peer-count", str(peer_n),
                        "--verify", "--json", str(out)], capture_output=True, text=True, timeout=240,
                       cwd=str(REPO), env=_env(own_tmp))
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    data = json.loads(out.read_text())
    results = data["results"]
    assert set(results) == {"ours", "rabbitmq", "activemq"}
    for key, count in (("ours", n), ("rabbitmq", peer_n), ("activemq", peer_n)):
        rows = results[key]["rows"]
        expected = {"p1", "p50a", "p1a", "consume"} | ({"p50"} if key == "ours" else {"p50tx"})
        assert expected <= set(rows), (key, sorted(rows))
        for name in expected:
            assert rows[name]["messages"] == (count // 10 if name == "p1a" else count), (key, name)
        assert rows["consume"]["payload_bytes"] == count * 200, key
        assert rows["consume"]["verified"] is True, key
        assert results[key]["pids"] and results[key]["left"] == [], key
        assert not [p for p in results[key]["pids"] if alive(p)], key
    # RabbitMQ ran as beam.smp with its own epmd, both stopped by PID
    assert len(results["rabbitmq"]["pids"]) >= 2
    # every table and every row was printed, and the aims were evaluated
    for title in ("### this product", "### RabbitMQ", "### ActiveMQ", "### Comparison", "### The issue's aims"):
        assert title in r.stdout, title
    for label in ("produce, batch 1, no ack", "produce, batch 50, no ack", "produce, batch 50, acknowledged",
                  "produce, batch 50, one transaction each", "produce, batch 1, acknowledged",
                  "consume, pulls of ~200 KB / 1,000 messages"):
        assert r.stdout.count(f"| {label} |") == 4, label  # three system tables + the comparison
    assert len(data["aims"]) == 4 and all(re.search(r": (MET|NOT MET)$", a) for a in data["aims"])
    assert "load average" in r.stdout and "nproc" in r.stdout
    assert not running_from(own_tmp)


@pytest.mark.slow
@needs_peers
def test_ctrl_c_midway_stops_the_peer_it_started(own_tmp):
    proc = subprocess.Popen([sys.executable, str(BENCH), "--only", "activemq", "--peer-count", "200000"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=str(REPO), env=_env(own_tmp))
    try:
        pids = []
        deadline = time.monotonic() + 90
        for line in proc.stdout:
            m = re.search(r"server PIDs \[([\d, ]+)\]", line)
            if m:
                pids = [int(x) for x in m.group(1).split(",")]
                break
            assert time.monotonic() < deadline, "ActiveMQ did not come up"
        assert pids and all(alive(p) for p in pids)
        time.sleep(1.0)  # into the first producer experiment
        proc.send_signal(signal.SIGINT)  # SIGTERM and SIGHUP take the same path
        rest = proc.communicate(timeout=60)[0]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode != 0
    assert "left running: none" in rest, rest[-2000:]
    assert not [p for p in pids if alive(p)]
    assert not running_from(own_tmp)


def test_unknown_system_is_refused_naming_what_is_allowed():
    r = subprocess.run([sys.executable, str(BENCH), "--only", "ours,kafka"], capture_output=True, text=True,
                       timeout=60, cwd=str(REPO), env=_env())
    assert r.returncode == 2
    assert "--only: unknown system(s) ['kafka']; allowed: ours, rabbitmq, activemq" in r.stderr
