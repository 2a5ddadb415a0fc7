"""samsa 0.3.11's ZooKeeper side against real brokers: broker discovery and its balanced consumer.

samsa reads ``/brokers/ids/<id>`` as Kafka 0.7 wrote it, ``creator:host:port`` (it splits on
``:`` into exactly three parts), and ``/brokers/topics/<topic>/<id>`` as a partition count.
Two samsa consumer processes in one group split the four partitions of a topic (2 brokers x
2 partitions) and together read every message this project wrote in 0.7 format exactly once.
"""
from __future__ import annotations

import contextlib

from kazoo.client import KazooClient

from ingest import znodes
from ingest.client.producer import Producer
from ingest.client.producer_config import PRODUCER_CONFIG
from tests.harness.py27 import Py27Process, unb64
from tests.harness.wait import wait_until
from tests.kafka07.helpers import ok, read_partition, samsa, topic

ALL = [[0, 0], [0, 1], [1, 0], [1, 1]]


@contextlib.contextmanager
def kazoo(zk_connect: str):
    client = KazooClient(hosts=zk_connect)
    client.start(timeout=15)
    try:
        yield client
    finally:
        client.stop()
        client.close()


def _wait_registered(zk_connect: str, t: str, brokers) -> None:
    """Until both brokers registered ``t`` with 2 partitions (they write it in the background)."""
    with kazoo(zk_connect) as zk:
        def both():
            return all(zk.exists(znodes.topic_path(t, b.broker_id))
                       and zk.get(znodes.topic_path(t, b.broker_id))[0] == b"2" for b in brokers)
        wait_until(both, what=f"topic {t} registered by both brokers")


def test_samsa_discovers_the_brokers_in_zookeeper_and_produces_through_them(py27, cluster07):
    t = topic("zk-disc")
    brokers = cluster07.brokers
    with kazoo(cluster07.zk_connect) as zk:   # the registration 0.7 clients parse: creator:host:port
        for b in brokers:
            creator, host, port = zk.get(znodes.broker_path(b.broker_id))[0].decode().split(":")
            assert (host, int(port)) == (b.host, b.port) and creator.startswith(f"{b.host}-")
    samsa(py27, *({"op": "produce", "topic": t, "partition": 0, "payloads": [b"seed"], "magic": 0,
                   **cluster07.hp(i)} for i in (0, 1)))
    _wait_registered(cluster07.zk_connect, t, brokers)
    [found] = samsa(py27, {"op": "discover", "zk": cluster07.zk_connect, "topic": t, "publish": "via-zk"})
    assert ok(found) == {"brokers": {str(b.broker_id): [b.host, b.port] for b in brokers}, "partitions": ALL}
    for b in brokers:
        assert [p for _, p in read_partition(b, t, 0)] == [b"seed", b"via-zk-%d-0" % b.broker_id]
        assert [p for _, p in read_partition(b, t, 1)] == [b"via-zk-%d-1" % b.broker_id]


def _produce_0_7(cluster07, t: str) -> dict[tuple[int, int], list[bytes]]:
    """This project's producer, message.format=0.7: the topic on both brokers, then 40 keyed messages."""
    written: dict[tuple[int, int], list[bytes]] = {}

    def send(broker_list: str, payload: bytes, key: str) -> None:
        def record(r):
            assert r.error is None, r
            written.setdefault((r.broker_id, r.partition), []).append(payload)
        with Producer(PRODUCER_CONFIG.parse({"broker.list": broker_list, "message.format": "0.7"})) as producer:
            producer.send(t, [payload], key=key, callback=record)

    for b in cluster07.brokers:          # creates the topic (2 partitions) on each broker
        send(b.address, b"init-%d" % b.broker_id, "init")
    _wait_registered(cluster07.zk_connect, t, cluster07.brokers)
    with Producer(PRODUCER_CONFIG.parse({"broker.list": cluster07.broker_list, "message.format": "0.7"})) as producer:
        for i in range(40):
            payload = b"group-msg-%02d" % i
            producer.send(t, [payload], key=f"k{i}",
                          callback=lambda r, payload=payload: written.setdefault((r.broker_id, r.partition), [])
                          .append(payload))
    return written


def test_samsa_balanced_consumer_group_of_two_reads_every_partition_exactly_once(py27, cluster07):
    t, group = topic("zk-group"), topic("samsa-group")
    written = _produce_0_7(cluster07, t)
    assert sum(map(len, written.values())) == 42 and len(written) == 4   # every partition has data
    members = [Py27Process(py27, "samsa_group.py", cluster07.zk_connect, t, group) for _ in range(2)]
    try:
        owned = [None, None]

        def split():            # each member owns two partitions, together all four
            for i, m in enumerate(members):
                for line in m.drain():
                    assert "owned" in line, line
                    owned[i] = line["owned"]
            return (owned[0] is not None and owned[1] is not None and len(owned[0]) == len(owned[1]) == 2
                    and sorted(owned[0] + owned[1]) == ALL)
        wait_until(split, timeout=60, what="the two samsa members to split the 4 partitions")
        for m, mine in zip(members, owned):
            m.send({"consume": sum(len(written[tuple(p)]) for p in mine)})
        results = [m.read(timeout=60) for m in members]
    finally:
        for m in members:
            m.stop()
    got = [[unb64(p) for p in r["payloads"]] for r in results]
    for mine, payloads, r in zip(owned, got, results):
        expected = [x for p in mine for x in written[tuple(p)]]
        assert sorted(payloads) == sorted(expected)          # its own partitions, every message once
        assert r["extra"] is None                             # and nothing more
        assert r["offsets"] == {f"{b}-{p}": _end(written[(b, p)]) for b, p in mine}
    assert sorted(got[0] + got[1]) == sorted(x for v in written.values() for x in v)
    with kazoo(cluster07.zk_connect) as zk:                   # as committed in ZooKeeper by samsa
        for b, p in ALL:
            assert int(zk.get(znodes.offset_path(group, t, b, p))[0]) == _end(written[(b, p)])


def _end(payloads: list[bytes]) -> int:
    """The end offset of a partition holding these magic-1 messages (10 bytes of header each)."""
    return sum(10 + len(x) for x in payloads)
