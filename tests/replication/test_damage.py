"""A leader serving damaged bytes to a replica that must copy them: no busy loop, a visible state, a repair.

Real ZooKeeper, three real broker processes with ``metrics.port=0``, the real
``ingest topics describe``. A byte is flipped in an old segment of the running
leader (it verified its segments at start-up, and appended these itself), and a
replica that must copy that range is a replacement broker started with an empty
log dir (the documented way to replace a dead broker).

While no other in-sync replica has good bytes (the third replica is stopped), the
replacement must not spin: the leader answers CORRUPT_RANGE naming the damaged
range, the follower backs off, logs the state once, and shows it in its metrics and
in ``ingest topics describe``. Once the third replica is back in the in-sync set,
the leader repairs the range from it and the replacement catches up and joins.

On the code before, the leader served the damaged bytes as they were, the follower
got zero valid bytes and asked again at once (thousands of fetches per second, no
log line on either broker), and it never joined the in-sync set.
"""
from __future__ import annotations

import json
import logging
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.harness import replicated as r
from tests.harness.brokers import broker_factory  # noqa: F401  (fixture)
from tests.harness.metrics import METRICS_LINE, metrics_url, scrape, scrape_until, value

log = logging.getLogger(__name__)
pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]
TOPIC = "damaged"
WINDOW_S = 10.0


def _fetches(url: str) -> float:
    """Follower fetches the broker answered: REPLICA_FETCHES (a fetcher thread's) and REPLICA_FETCH."""
    s = scrape(url)
    return sum(value(s, "ingest_broker_requests_total", type=t) or 0.0 for t in ("REPLICA_FETCHES", "REPLICA_FETCH"))


def _describe(zk_connect: str, *, text: bool = False) -> dict | str:
    out = subprocess.run([sys.executable, "-m", "ingest.cli", "topics", "describe", "--zookeeper", zk_connect,
                          "--topic", TOPIC, *(() if text else ("--json",))], cwd=REPO, capture_output=True,
                         text=True, timeout=90)
    assert out.returncode == 0, out.stderr
    return out.stdout if text else json.loads(out.stdout.splitlines()[0])


def test_a_replacement_replica_backs_off_on_a_leaders_damaged_bytes_and_catches_up_after_the_repair(
        broker_factory, zk_connect, zk):  # noqa: F811
    brokers = broker_factory(n=3, zk_connect=zk_connect,
                             overrides={**r.replication_overrides(min_isr=1, **{"log.file.size": 4096}),
                                        "metrics.port": 0})
    urls = {b.broker_id: metrics_url(b.output) for b in brokers}
    r.create_topic(zk, TOPIC, {0: [0, 1, 2]})
    r.wait_for_state(zk, TOPIC, 0, lambda s: s.leader == 0 and len(s.isr) == 3, 60, "broker 0 leading, full isr")
    client = r.AcksClient(brokers)
    for k in range(20):                                   # ~21 KB: several sealed 4 KB segments
        assert client.send(TOPIC, 0, [r.payload(i) for i in range(10 * k, 10 * k + 10)]).status == r.ACKED
    leader, replacement, third = (r.by_id(brokers, i) for i in (0, 1, 2))
    end = r.high_watermark(leader, TOPIC, 0)

    third.stop()
    replacement.stop()
    r.wait_for_state(zk, TOPIC, 0, lambda s: tuple(s.isr) == (0,), 30, "the isr down to the leader")
    shutil.rmtree(replacement.log_dir)                    # a replacement machine: an empty log dir
    base, path = r.segments(leader, TOPIC, 0)[2]          # an old, sealed segment of the running leader
    victim = next(off for off, _, _ in r.read_committed(leader, TOPIC, 0) if off >= base + 500)
    with open(path, "r+b") as f:                          # one byte of the victim's payload
        f.seek(victim - base + 40)
        byte = f.read(1)
        f.seek(victim - base + 40)
        f.write(bytes([byte[0] ^ 0x5A]))

    replacement.start(timeout=60)
    urls[1] = r.wait_for(lambda: (found := METRICS_LINE.findall(replacement.output()))[1:] and found[-1][0], 30,
                         "the restarted replacement's metrics line")
    r.wait_for(lambda: r.log_end(replacement, TOPIC, 0) >= victim, 60, "the replacement to copy up to the damage")
    # No busy loop: over a 10 s window the leader answers a bounded number of the replacement's fetches
    # (back-off doubling to 30 s; the code before sent thousands per second).
    before = _fetches(urls[0])
    time.sleep(WINDOW_S)
    fetches = _fetches(urls[0]) - before
    log.info("replica fetches answered by the leader in %.0f s while the replacement was stalled: %d", WINDOW_S,
             fetches)
    assert fetches <= 20, f"{fetches} replica fetches in {WINDOW_S} s while stalled on the damaged range"
    assert r.log_end(replacement, TOPIC, 0) == victim
    scrape_until(urls[1], lambda s: value(s, "ingest_broker_replica_fetch_stalled", topic=TOPIC, partition=0,
                                          leader=0) == 1, "the replacement to report its stalled fetch")
    # The state is visible: metrics of both brokers, the describe command, one log line on each side.
    assert value(scrape(urls[0]), "ingest_broker_log_damaged_ranges", topic=TOPIC, partition=0) == 1
    rec = _describe(zk_connect)
    assert rec["isr"] == [0]
    stalled = rec["stalled_replicas"]
    assert [(s["broker"], s["offset"], s["damaged_start"], s["leader"]) for s in stalled] == [(1, victim, victim, 0)]
    assert "damaged" in stalled[0]["reason"]
    assert f"{TOPIC}-0: replica 1 stalled at offset {victim}: the leader's bytes there are damaged (leader 0, " \
           f"range {victim}..{stalled[0]['damaged_end']})" in _describe(zk_connect, text=True)
    warned = [line for line in replacement.output().splitlines() if "WARNING" in line and f"{victim}" in line
              and "damaged" in line]
    assert len(warned) == 1, warned
    found = [line for line in leader.output().splitlines() if "ERROR" in line and f"damaged range {victim}" in line]
    assert len(found) == 1, found
    assert r.partition_state(zk, TOPIC, 0).isr == (0,)

    # A replica with good bytes rejoins the in-sync set: the leader repairs the range from it, and the
    # replacement copies past it and joins.
    third.start(timeout=60)
    began = time.monotonic()
    r.wait_for_state(zk, TOPIC, 0, lambda s: set(s.isr) == {0, 1, 2}, 120, "the replacement in the isr")
    log.info("the replacement joined the in-sync set %.1f s after the third replica was started",
             time.monotonic() - began)
    r.assert_replicas_identical(brokers, TOPIC, 0, end)
    assert [r.payload_id(m[2]) for m in r.read_committed(leader, TOPIC, 0)] == list(range(200))
    assert "repaired" in leader.output()
    scrape_until(urls[1], lambda s: not value(s, "ingest_broker_replica_fetch_stalled", topic=TOPIC, partition=0,
                                              leader=0), "the stall to clear")
    assert value(scrape(urls[0]), "ingest_broker_log_damaged_ranges", topic=TOPIC, partition=0) in (None, 0)
    r.wait_for(lambda: not _describe(zk_connect)["stalled_replicas"], 30, "describe to show no stalled replica")
    assert not path.with_suffix(".damaged").exists()
