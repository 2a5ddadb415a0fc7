"""SimpleConsumer.fetch_batch / LeaderConsumer.fetch_batch against a real broker process, and bench_consumer.py."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ingest.client.leader_consumer import LeaderConsumer, static_metadata
from ingest.client.producer import Producer
from ingest.client.simple_consumer import SimpleConsumer
from ingest.errors import OffsetOutOfRangeError
from ingest.records.message import HEADER_SIZE
from ingest.records.message_batch import MessageBatch

pytestmark = pytest.mark.processes  # broker processes, bench/bench_consumer.py

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    from tests.harness.brokers import broker_cluster, stop_all

    brokers = broker_cluster(tmp_path_factory, n=1, num_partitions=1)
    yield brokers[0]
    stop_all(brokers)


def _produce(broker, topic, batches, **cfg):
    with Producer({"broker.list": broker.address, "request.required.acks": 1, **cfg}) as p:
        for batch in batches:
            p.send(topic, batch)
        assert p.stats["failed"] == 0


def test_fetch_batch_equals_fetch_on_plain_and_compressed_sets(broker):
    payloads = [os.urandom(n) for n in range(0, 400, 7)]
    _produce(broker, "fb-plain", [payloads[i:i + 10] for i in range(0, len(payloads), 10)])
    _produce(broker, "fb-gzip", [payloads[:20], payloads[20:]], **{"compression.codec": "gzip"})
    with SimpleConsumer(broker.host, broker.port) as c:
        for topic in ("fb-plain", "fb-gzip"):
            for max_bytes in (64, 1000, 300 * 1024):  # cut-off tails, a too-small pull, everything
                offset, got = 0, []
                while offset < c.latest_offset(topic, 0):
                    old = c.fetch(topic, 0, offset, max_bytes)
                    batch = c.fetch_batch(topic, 0, offset, max_bytes)
                    assert isinstance(batch, MessageBatch)
                    assert list(batch) == old.messages
                    assert (batch.next_offset, batch.bytes_read, batch.needed) == (
                        old.next_offset, old.bytes_read, old.needed)
                    if not len(batch):
                        max_bytes = batch.needed  # grow, as fetch_growing does
                        continue
                    got += batch.payloads_arrow().to_pylist()
                    offset = batch.next_offset
                assert got == payloads, (topic, max_bytes)


def test_fetch_batch_zero_copy_views_and_errors(broker):
    _produce(broker, "fb-views", [[b"a" * 100, b"b" * 200, b"c"]])
    with SimpleConsumer(broker.host, broker.port) as c:
        batch = c.fetch_batch("fb-views", 0, 0)
        assert [bytes(batch.payload(i)) for i in range(len(batch))] == [b"a" * 100, b"b" * 200, b"c"]
        assert batch.header_size == HEADER_SIZE and isinstance(batch.payload(0).obj, bytearray)
        assert list(batch.offsets) == [0, HEADER_SIZE + 100, 2 * HEADER_SIZE + 300]
        with pytest.raises(OffsetOutOfRangeError):
            c.fetch_batch("fb-views", 0, 5)  # not a message boundary
        with LeaderConsumer(static_metadata(f"{broker.host}:{broker.port}")) as lc:
            lc.leader = lambda topic, partition, refresh=False: c  # the broker leads it (the topic is not replicated)
            assert list(lc.fetch_batch("fb-views", 0, 0)) == list(batch)


def test_bench_consumer_runs_and_counts_exactly(tmp_path):
    out = tmp_path / "r.json"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, str(REPO / "bench" / "bench_consumer.py"), "--count", "3000",
                           "--rounds", "1", "--previous", "HEAD", "--json", str(out)], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = json.loads(out.read_text())
    assert set(res["results"]) == {"fetch_batch", "fetch_batch + arrow", "fetch_batch + payloads()",
                                   "fetch_batch + payload(i)", "fetch", "previous fetch"}
    for r in res["results"].values():
        assert (r["messages"], r["payload_bytes"]) == (3000, 3000 * 200)
    for row in ("| fetch_batch |", "| previous fetch |", "| physical limit"):
        assert row in proc.stdout
    assert "load average at start" in proc.stdout and "load average at end" in proc.stdout
