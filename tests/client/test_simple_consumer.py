"""SimpleConsumer against a real broker process: fetch, multifetch, offsets, metadata, big messages."""
from __future__ import annotations

import zlib

import pytest

from ingest.client.producer import Producer
from ingest.client.simple_consumer import SimpleConsumer
from ingest.errors import FetchSizeTooSmallError, OffsetOutOfRangeError
from ingest.records.message import HEADER_SIZE
from ingest.wire.protocol import PartitionMetadata

pytestmark = pytest.mark.processes  # broker processes


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    from tests.harness.brokers import broker_cluster, stop_all

    brokers = broker_cluster(tmp_path_factory, n=1, num_partitions=2,
                             overrides={"max.message.size": 4_000_000})
    yield brokers[0]
    stop_all(brokers)


# a key that hashes to partition 0 of 2, the partition an unknown topic is created through,
# so every send of a test lands in one partition
KEY0 = next(f"k{i}" for i in range(100) if zlib.crc32(f"k{i}".encode()) % 2 == 0)


def _produce(broker, topic, payloads, key=KEY0, **cfg):
    results = []
    with Producer({"broker.list": broker.address, **cfg}) as p:
        for batch in payloads:
            p.send(topic, batch, key=key, callback=results.append)
    return results


def test_fetch_returns_messages_with_offsets_matching_acks(broker):
    results = _produce(broker, "sc-a", [[b"a", b"bb"], [b"ccc"]])
    part = results[0].partition
    assert all(r.error is None and r.partition == part for r in results)
    with SimpleConsumer(broker.host, broker.port) as c:
        r = c.fetch("sc-a", part, 0)
        assert [m.payload for m in r.messages] == [b"a", b"bb", b"ccc"]
        assert [m.offset for m in r.messages] == [0, HEADER_SIZE + 1, 2 * HEADER_SIZE + 3]
        assert results[1].first_offset == r.messages[2].offset
        assert r.next_offset == c.latest_offset("sc-a", part) == 3 * HEADER_SIZE + 6
        assert c.earliest_offset("sc-a", part) == 0


def test_cut_off_last_message_is_detected_by_size(broker):
    results = _produce(broker, "sc-cut", [[b"x" * 100, b"y" * 100]])
    part = results[0].partition
    with SimpleConsumer(broker.host, broker.port) as c:
        r = c.fetch("sc-cut", part, 0, max_bytes=HEADER_SIZE + 100 + 50)
        assert [m.payload for m in r.messages] == [b"x" * 100]
        assert r.bytes_read > HEADER_SIZE + 100
        assert r.next_offset == HEADER_SIZE + 100


def test_multifetch_answers_each_fetch_in_order(broker):
    r0 = _produce(broker, "sc-m", [[b"p0"]], key=None)
    r1 = _produce(broker, "sc-m2", [[b"q0", b"q1"]], key=None)
    with SimpleConsumer(broker.host, broker.port) as c:
        out = c.multifetch([("sc-m", r0[0].partition, 0, 1000), ("sc-m2", r1[0].partition, 0, 1000)])
        assert [m.payload for m in out[0].messages] == [b"p0"]
        assert [m.payload for m in out[1].messages] == [b"q0", b"q1"]


def test_fetch_not_on_a_boundary_is_out_of_range(broker):
    results = _produce(broker, "sc-b", [[b"hello world"]])
    with SimpleConsumer(broker.host, broker.port) as c, pytest.raises(OffsetOutOfRangeError):
        c.fetch("sc-b", results[0].partition, 3)


def test_metadata_lists_partitions_with_offsets(broker):
    results = _produce(broker, "sc-meta", [[b"m"]])
    with SimpleConsumer(broker.host, broker.port) as c:
        meta = c.metadata(["sc-meta"])
    assert meta.broker_id == broker.broker_id and meta.port == broker.port
    parts = {p.partition: p for p in meta.topics["sc-meta"]}
    assert len(parts) == 2
    assert all(type(p) is PartitionMetadata for p in parts.values())   # the protocol's type, no copy
    assert parts[results[0].partition].latest == HEADER_SIZE + 1


def test_iter_range_yields_exactly_start_to_end(broker):
    payloads = [b"%05d" % i for i in range(500)]
    results = _produce(broker, "sc-range", [payloads[i:i + 50] for i in range(0, 500, 50)])
    part = results[0].partition
    size = HEADER_SIZE + 5
    with SimpleConsumer(broker.host, broker.port, fetch_size=1000) as c:
        got = list(c.iter_range("sc-range", part, 10 * size, 400 * size))
        assert [m.payload for m in got] == payloads[10:400]
        assert got[0].offset == 10 * size and got[-1].next_offset == 400 * size
        assert list(c.iter_range("sc-range", part, 7 * size, 7 * size)) == []
        with pytest.raises(OffsetOutOfRangeError):
            list(c.iter_range("sc-range", part, 0, 600 * size))


def test_large_message_grows_fetch_size_then_ceiling_error(broker):
    big = bytes(range(256)) * 4000  # 1,024,000 bytes
    results = _produce(broker, "sc-big", [[b"small"], [big], [b"after"]], **{"max.message.size": 2_000_000})
    part = results[0].partition
    end = results[2].first_offset + HEADER_SIZE + 5
    with SimpleConsumer(broker.host, broker.port, fetch_size=4096, max_fetch_size=2_000_000) as c:
        got = list(c.iter_range("sc-big", part, 0, end))
        assert [m.payload for m in got] == [b"small", big, b"after"]
    with SimpleConsumer(broker.host, broker.port, fetch_size=4096, max_fetch_size=100_000) as c:
        with pytest.raises(FetchSizeTooSmallError) as err:
            list(c.iter_range("sc-big", part, 0, end))
    msg = str(err.value)
    assert str(len(big) + HEADER_SIZE) in msg and "100000" in msg and f"offset {HEADER_SIZE + 5}" in msg
