"""kcat (Debian's package: a C command-line tool on librdkafka) produces and consumes from the command line.

Messages come from stdin, one a line, the key before a tab (``-K``), headers from ``-H`` options, with
each acks (``-X acks=``) and codec (``-z``); kcat reads them back by partition (``-C -p``, no group) from
the beginning and from a timestamp (``-o s@ms``), printing partition, offset, key, value, headers and
timestamp with ``-f``. Against one broker without ZooKeeper and a replicated topic on three brokers with
it: every message byte-exact, in order, none twice; ``-L`` shows the brokers and the partitions' leader,
replicas and in-sync replicas. ``-G`` (the balanced consumer, auto-commit) reads every message once
and commits the partitions' ends.
"""
from __future__ import annotations

import json
import os

import pytest

from tests.kafka.conftest import PARTITIONS
from tests.kafka.other_clients import ClientUnavailable, check_read, kcat, kcat_binary, wait_for_ends

pytestmark = pytest.mark.processes

PER_ROUND = 100      # messages per partition and (acks, codec) round
ROUNDS = [(acks, codec) for acks in ("0", "1", "all") for codec in ("none", "gzip", "snappy", "lz4", "zstd")]
FORMAT = r"%p\t%o\t%k\t%s\t%h\t%T\n"


@pytest.fixture(scope="module", autouse=True)
def kcat_present():
    try:
        kcat_binary()
    except ClientUnavailable as exc:
        pytest.skip(str(exc))


def _read(bootstrap: str, topic: str, partition: int, start: str = "beginning") -> list[tuple]:
    """``(offset, key, value, headers, timestamp)`` of every message from ``start`` to the end."""
    out = kcat("-C", "-b", bootstrap, "-t", topic, "-p", str(partition), "-o", start, "-e", "-q", "-f", FORMAT)
    rows = []
    for line in out.decode().splitlines():
        part, offset, key, value, headers, ts = line.split("\t")
        assert int(part) == partition
        pairs = tuple((h.split("=", 1)[0], h.split("=", 1)[1].encode()) for h in headers.split(",")) if headers else ()
        rows.append((int(offset), key.encode(), value.encode(), pairs, int(ts)))
    return rows


def test_kcat_produces_keys_and_headers_and_reads_every_message_back_in_order_once(kafka_cluster):
    bootstrap = kafka_cluster.bootstrap
    topic = kafka_cluster.topic("kcat")
    want: dict[int, list[tuple]] = {p: [] for p in range(PARTITIONS)}
    for r, (acks, codec) in enumerate(ROUNDS):
        headers = (("round", str(r).encode()), ("codec", codec.encode()))
        for p in range(PARTITIONS):
            batch = [(f"k-{r}-{p}-{i}".encode(), f"value {r} {p} {i} {os.urandom(8).hex()} ü".encode())
                     for i in range(PER_ROUND)]
            kcat("-P", "-b", bootstrap, "-t", topic, "-p", str(p), "-K", "\t", "-z", codec, "-X", f"acks={acks}",
                 *[a for h, v in headers for a in ("-H", f"{h}={v.decode()}")],
                 stdin=b"".join(k + b"\t" + v + b"\n" for k, v in batch))
            want[p] += [(k, v, headers, None) for k, v in batch]
            if acks == "0":       # appended before the next kcat's connection can overtake it
                wait_for_ends(bootstrap, topic, {p: len(want[p])})

    got = {p: _read(bootstrap, topic, p) for p in range(PARTITIONS)}
    check_read(got, want, timestamps=False)

    # from a timestamp: the first offset whose (producer-set) timestamp is at or after it
    rows = got[0]
    ts = rows[len(rows) // 2][4]
    first = next(o for o, _k, _v, _h, t in rows if t >= ts)
    assert _read(bootstrap, topic, 0, f"s@{ts}") == rows[first:]

    md = json.loads(kcat("-L", "-J", "-b", bootstrap, "-t", topic))
    assert {b["id"] for b in md["brokers"]} == {b.broker_id for b in kafka_cluster.brokers}
    replicas = len(kafka_cluster.brokers)
    for pm in md["topics"][0]["partitions"]:
        assert pm["leader"] in {b.broker_id for b in kafka_cluster.brokers}
        assert len(pm["replicas"]) == replicas and len(pm["isrs"]) == replicas, pm


def _committed(bootstrap: str, group: str, topic: str) -> dict[int, int]:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        return {tp.partition: tp.offset
                for tp in c.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=30)}
    finally:
        c.close()


def test_kcat_balanced_consumer_reads_every_message_once_and_commits(kafka_cluster):
    """``kcat -G group topic`` (librdkafka's group consumer, auto-commit) from the earliest offset to the end
    (``-e``): every message once, byte-exact; the group's committed offsets are the partitions' ends, so the
    same group started again reads nothing."""
    bootstrap = kafka_cluster.bootstrap
    topic = kafka_cluster.topic("kcat-group")
    group = f"kcat-{kafka_cluster.kind}"
    want: dict[int, list[tuple]] = {p: [] for p in range(PARTITIONS)}
    for p in range(PARTITIONS):
        batch = [(f"k-{p}-{i}".encode(), f"group {p} {i} {os.urandom(8).hex()}".encode()) for i in range(PER_ROUND)]
        kcat("-P", "-b", bootstrap, "-t", topic, "-p", str(p), "-K", "\t", "-X", "acks=all",
             stdin=b"".join(k + b"\t" + v + b"\n" for k, v in batch))
        want[p] += [(k, v, (), None) for k, v in batch]

    def group_read() -> dict[int, list[tuple]]:
        out = kcat("-b", bootstrap, "-G", group, "-X", "auto.offset.reset=earliest", "-e", "-q", "-f", FORMAT,
                   topic)
        rows: dict[int, list[tuple]] = {p: [] for p in range(PARTITIONS)}
        for line in out.decode().splitlines():
            part, offset, key, value, _headers, ts = line.split("\t")
            rows[int(part)].append((int(offset), key.encode(), value.encode(), (), int(ts)))
        return rows

    check_read(group_read(), want, timestamps=False)
    assert _committed(bootstrap, group, topic) == {p: len(want[p]) for p in range(PARTITIONS)}
    assert group_read() == {p: [] for p in range(PARTITIONS)}, "the group read again what it had committed"
