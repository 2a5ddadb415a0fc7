"""ZooKeeper calls of discovery and consumer groups wait out a lost connection (kazoo's client.retry).

A real ZooKeeper behind a loopback proxy: the proxy loses a request (or its
answer) in flight and then drops the connection. Without ``client.retry`` the
call fails with ``ConnectionLoss``; with it, the call is replayed on the same
session after the reconnect and answers as if nothing happened. A replayed
create whose first attempt landed meets ``NodeExistsError``, which the
consumer tolerates for its own nodes.
"""
from __future__ import annotations

import json
import threading

import pytest

from ingest import znodes
from ingest.client import group_registry
from ingest.client.consumer_group import ConsumerConnector
from ingest.client.discovery import read_brokers, read_topic_partition_counts, start_kazoo, BrokerAddress
from ingest.client.producer import Producer
from tests.client.zk_proxy import ZkProxy

CUT_AFTER_S = 0.3   # the call is in flight (its request or answer swallowed) by then
HEAL_AFTER_S = 0.5  # the connection stays refused this long; the session (6 s) outlives it


@pytest.fixture
def proxy(zookeeper):
    p = ZkProxy(("127.0.0.1", zookeeper.port))
    yield p
    p.close()


def _chroot(zk_connect: str) -> str:
    return zk_connect[zk_connect.index("/"):]


def _lose_connection_during(proxy: ZkProxy, call, *, replies: bool = False):
    """Run ``call()`` while its request (or, with ``replies``, its answer) is lost and the connection drops."""
    out: dict = {}

    def run():
        try:
            out["value"] = call()
        except Exception as exc:  # reported to the test's thread
            out["error"] = exc

    proxy.stall(replies=replies)
    t = threading.Thread(target=run)
    t.start()
    threading.Event().wait(CUT_AFTER_S)
    proxy.cut()
    threading.Event().wait(HEAL_AFTER_S)
    proxy.heal()
    t.join(30)
    assert not t.is_alive(), "the call never returned after the reconnect"
    if "error" in out:
        raise out["error"]
    return out["value"]


def test_registry_reads_in_flight_when_the_connection_drops_are_replayed(proxy, zk_connect, zk):
    zk.create(znodes.broker_path(3), znodes.broker_value("10.0.0.3", 9093), makepath=True)
    zk.create(znodes.topic_path("clicks", 3), znodes.partition_count_value(4), makepath=True)
    zk.create(znodes.consumer_path("g", "c1"), json.dumps({"clicks": 2}).encode(), makepath=True)
    client = start_kazoo(f"127.0.0.1:{proxy.port}{_chroot(zk_connect)}")
    try:
        assert _lose_connection_during(proxy, lambda: read_brokers(client)) == {
            3: BrokerAddress(3, "10.0.0.3", 9093)}
        assert _lose_connection_during(proxy, lambda: read_topic_partition_counts(client, "clicks")) == {3: 4}
        assert _lose_connection_during(proxy, lambda: group_registry.group_subscriptions(client, "g")) == {
            "c1": {"clicks": 2}}
    finally:
        client.stop()
        client.close()


def test_offset_commit_in_flight_when_the_connection_drops_is_replayed(broker_factory, proxy, zk_connect, zk):
    brokers = broker_factory(n=1, zk_connect=zk_connect, num_partitions=1)
    with Producer({"zk.connect": zk_connect, "topic.format.default": "0.7"}) as p:
        p.send("retry-commit", [b"%d" % i for i in range(5)])
    c = ConsumerConnector({"zk.connect": f"127.0.0.1:{proxy.port}{_chroot(zk_connect)}", "groupid": "gr",
                           "autocommit.enable": False, "consumer.timeout.ms": 5000})
    try:
        stream = c.create_streams({"retry-commit": 1})["retry-commit"][0]
        for _ in range(3):
            next(stream)
        assert _lose_connection_during(proxy, c.commit_offsets) == 1
        path = znodes.offset_path("gr", "retry-commit", brokers[0].broker_id, 0)
        assert int(zk.get(path)[0]) == 3 * (10 + 1)   # three 1-byte messages, 10-byte headers
    finally:
        c.shutdown()


def test_replayed_registration_whose_first_create_landed_is_tolerated(proxy, zk_connect, zk):
    c = ConsumerConnector({"zk.connect": f"127.0.0.1:{proxy.port}{_chroot(zk_connect)}", "groupid": "gx",
                           "consumer.id": "m1"})
    try:
        c._subscription = {"clicks": 1}
        # the create reaches ZooKeeper, its answer is lost: the replay meets our own node
        _lose_connection_during(proxy, c._register, replies=True)
        data, stat = zk.get(znodes.consumer_path("gx", "m1"))
        assert json.loads(data) == {"clicks": 1}
        assert stat.ephemeralOwner == c.zk.client_id[0]
    finally:
        c.shutdown()
