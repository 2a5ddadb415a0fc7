"""A copier process SIGKILLed at random moments while a producer publishes, then restarted: exactly once.

The copier runs in its own process (tests/mirror/copier_driver.py). After every kill a new process
resumes from the checkpoint by the rule ``source_offset + (target end - target_offset)``; at the end
the target partition holds the source partition's bytes exactly (no loss, no duplicate), and the
mirror tier's count (restored from the checkpoint + re-counted) equals the source's message count.
"""
from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time

import pytest

from ingest.client.simple_consumer import SimpleConsumer
from ingest.mirror.checkpoint import CheckpointStore
from ingest.mirror.mapping import ensure_mapping
from ingest.records.message_batch import iter_messages
from tests.harness.brokers import REPO_ROOT, broker_factory  # noqa: F401  (fixture)
from tests.harness.wait import wait_until
from tests.mirror.copier_support import acked, payload, produce_07, read_all
from tests.mirror.copier_support import Mirror, target_zk_connect  # noqa: F401  (fixture)
from tests.harness import reaper

KILLS = 8


def start_driver(source_zk, target_zk, unit, out_path):
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = open(out_path, "ab")
    proc = subprocess.Popen([sys.executable, "-m", "tests.mirror.copier_driver", source_zk, target_zk, "g",
                             unit.topic, str(unit.broker_id), str(unit.partition), str(unit.target_partition), "1024"],
                            stdout=subprocess.PIPE, stderr=out, cwd=str(REPO_ROOT), env=env,
                            start_new_session=True)
    reaper.watch(proc)  # stopped even if pytest itself is killed
    assert proc.stdout.readline().strip() == b"ready", open(out_path, "rb").read()[-2000:]
    return proc


@pytest.mark.slow
def test_sigkilled_copier_restarted_leaves_target_equal_to_source(broker_factory, zk_connect, target_zk_connect,
                                                                  tmp_path):
    (src,) = broker_factory(n=1, zk_connect=zk_connect, num_partitions=1, log_file_size=16384)
    broker_factory(n=1, zk_connect=target_zk_connect)
    for i in range(600):  # a backlog, so that the kills hit a busy copier
        produce_07(src, "k", 0, [payload("pre", 10 * i + j, size=60) for j in range(10)], codec=1 if i % 5 == 0 else 0)
    m = Mirror(zk_connect, target_zk_connect)
    procs = []
    try:
        (unit,) = ensure_mapping(m.zk, "g", "k", ["dc1"], {"dc1": [(0, 0)]}).units
        sent = [6000]
        stop = threading.Event()

        def produce():
            i = 0
            while not stop.is_set():
                k = 1 + i % 7
                produce_07(src, "k", 0, [payload("p", sent[0] + j) for j in range(k)], codec=1 if i % 4 == 0 else 0)
                sent[0] += k
                i += 1
                time.sleep(0.005)

        producer = threading.Thread(target=produce, daemon=True)
        producer.start()
        rng = random.Random(1313)
        log = tmp_path / "driver.log"
        for _ in range(KILLS):
            proc = start_driver(zk_connect, target_zk_connect, unit, log)
            procs.append(proc)
            time.sleep(rng.uniform(0.05, 0.6))
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(10)
        stop.set()
        producer.join(10)
        with SimpleConsumer(src.host, src.port) as sc:
            source = read_all(lambda o, mx: sc.fetch_raw("k", 0, o, mx))
        proc = start_driver(zk_connect, target_zk_connect, unit, log)
        procs.append(proc)
        store = CheckpointStore(m.zk, "g", unit)
        wait_until(lambda: (cp := store.read()) is not None and cp.source_offset == len(source), 90,
                   "the restarted copier to checkpoint the source end")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
        addr = m.target_md.leader("k", 0, refresh=True)
        with SimpleConsumer(addr.host, addr.port) as tc:
            target = read_all(lambda o, mx: tc.fetch_raw("k", 0, o, mx))
        assert len(target) == len(source) and target == source
        total = sum(1 for _ in iter_messages(source))
        assert total == sent[0]
        cp = store.read()
        assert (cp.source_offset, cp.target_offset, acked(cp)) == (len(source), len(source), total)
    finally:
        for p in procs:
            if p.poll() is None:
                os.kill(p.pid, signal.SIGKILL)
                p.wait(10)
        m.close()
