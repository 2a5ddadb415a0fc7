"""Broker registration in a real ZooKeeper: nodes, refusal of a taken id, session expiry."""
from __future__ import annotations

import re
import time

import pytest
from kazoo.client import KazooClient

from ingest.wire import protocol as p
from ingest.records.message_set import encode_message_set
from ingest.broker.broker import BrokerServer
from ingest.broker.server_config import SERVER_CONFIG
from ingest.broker.zk_registry import BrokerRegistry
from ingest.errors import BrokerIdTakenError, CoordinationError
from ingest.znodes import broker_path, topic_path
from tests.harness.wait import wait_until
from tests.harness.brokers import RawClient
from tests.harness.zookeeper import expire_session


def v07(host: str, port: int) -> str:
    """Kafka 0.7's broker value ``creator:host:port`` with creator ``host-<epoch ms>``, as a regex."""
    return re.escape(host) + r"-\d{13}:" + re.escape(f"{host}:{port}")


def registry(zk_connect, broker_id=1, port=9000, **kw) -> BrokerRegistry:
    return BrokerRegistry(zk_connect, broker_id, "127.0.0.1", port, session_timeout_ms=2000, **kw)


def test_registers_broker_and_topics_as_ephemeral_nodes(zk_connect, zk):
    r = registry(zk_connect).start({"clicks": 4})
    try:
        data, stat = zk.get(broker_path(1))
        assert re.fullmatch(v07("127.0.0.1", 9000), data.decode())
        creator_ms = int(data.decode().split(":")[0].rsplit("-", 1)[1])
        assert abs(creator_ms - time.time() * 1000) < 600_000      # the registration time, in epoch ms
        assert stat.ephemeralOwner == r.client.client_id[0]
        assert zk.get(topic_path("clicks", 1))[0] == b"4"
        r.register_topic("views", 2)     # written in the background
        wait_until(lambda: zk.exists(topic_path("views", 1)) is not None, what="topic node")
        assert zk.get(topic_path("views", 1))[0] == b"2"
        assert zk.get(topic_path("views", 1))[1].ephemeralOwner == r.client.client_id[0]
    finally:
        r.close()
    # clean close deletes the nodes at once (no session timeout to wait for)
    assert zk.exists(broker_path(1)) is None
    assert zk.exists(topic_path("clicks", 1)) is None
    assert zk.exists("/brokers/topics/clicks") is not None   # the persistent parent stays


def test_taken_broker_id_is_refused_with_a_clear_message(zk_connect, zk):
    first = registry(zk_connect, port=9000).start()
    try:
        with pytest.raises(BrokerIdTakenError, match=r"broker id 1 is already registered.*127.0.0.1:9000.*unique brokerid"):
            registry(zk_connect, port=9001).start()
        assert re.fullmatch(v07("127.0.0.1", 9000), zk.get(broker_path(1))[0].decode())   # the live owner is untouched
    finally:
        first.close()


def test_unreachable_zookeeper_is_a_coordination_error():
    from tests.harness.net import free_port

    r = BrokerRegistry(f"127.0.0.1:{free_port()}", 1, "127.0.0.1", 1, connection_timeout_ms=500)
    with pytest.raises(CoordinationError, match="cannot connect to ZooKeeper"):
        r.start()


def test_re_registers_after_a_real_session_expiry(zk_connect, zk):
    r = registry(zk_connect).start({"clicks": 4})
    try:
        old_session = r.client.client_id[0]
        expire_session(r.client, zk_connect)
        wait_until(lambda: r.client.connected and r.client.client_id[0] != old_session, what="new session")
        wait_until(lambda: r.registrations == 2, what="re-registration")
        data, stat = zk.get(broker_path(1))
        assert re.fullmatch(v07("127.0.0.1", 9000), data.decode()) and stat.ephemeralOwner == r.client.client_id[0] != old_session
        wait_until(lambda: zk.exists(topic_path("clicks", 1)) is not None, what="topic node")
        assert zk.get(topic_path("clicks", 1))[1].ephemeralOwner == r.client.client_id[0]
    finally:
        r.close()


def test_stale_node_of_a_dead_predecessor_at_our_address_is_waited_out(zk_connect, zk):
    # a predecessor at the same host:port whose session is still open (it "crashed" without closing)
    ghost = KazooClient(hosts=zk_connect, timeout=2.0)
    ghost.start(timeout=15)
    ghost.ensure_path("/brokers/ids")
    ghost.create(broker_path(1), b"127.0.0.1:9000", ephemeral=True)
    # the session goes away mid-wait, as a crashed process's session would expire
    import threading
    threading.Timer(0.5, lambda: (ghost.stop(), ghost.close())).start()
    r = registry(zk_connect, port=9000).start()
    try:
        assert zk.get(broker_path(1))[1].ephemeralOwner == r.client.client_id[0]
    finally:
        r.close()


def test_broker_server_registers_new_topics_when_first_produced(tmp_path, zk_connect, zk):
    cfg = SERVER_CONFIG.parse({"brokerid": 7, "port": 0, "listeners": "PLAINTEXT://127.0.0.1:0", "log.dir": str(tmp_path / "l"), "log.flush.interval": 1,
                               "num.partitions": 3, "enable.zookeeper": "true", "zk.connect": zk_connect,
                               "zk.sessiontimeout.ms": 2000})
    b = BrokerServer(cfg).start()
    try:
        assert re.fullmatch(v07("127.0.0.1", b.port), zk.get(broker_path(7))[0].decode())
        assert zk.exists(topic_path("fresh", 7)) is None
        with RawClient(b.host, b.port) as c:
            resp = p.ProduceAckResponse.decode(c.request(p.ProduceAckRequest("fresh", 2, encode_message_set([b"x"]))))
            assert resp.error == 0
        wait_until(lambda: zk.exists(topic_path("fresh", 7)) is not None, what="topic node")
        assert zk.get(topic_path("fresh", 7))[0] == b"3"
    finally:
        b.stop()
    assert zk.exists(broker_path(7)) is None and zk.exists(topic_path("fresh", 7)) is None
    # topics found on disk at start-up are registered at once
    b = BrokerServer(cfg).start()
    try:
        assert zk.get(topic_path("fresh", 7))[0] == b"3"
    finally:
        b.stop()


def test_running_broker_re_registers_itself_and_its_topics_after_session_expiry(tmp_path, zk_connect, zk):
    cfg = SERVER_CONFIG.parse({"brokerid": 4, "port": 0, "listeners": "PLAINTEXT://127.0.0.1:0", "log.dir": str(tmp_path / "l"), "log.flush.interval": 1,
                               "enable.zookeeper": "true", "zk.connect": zk_connect, "zk.sessiontimeout.ms": 2000})
    b = BrokerServer(cfg).start()
    try:
        with RawClient(b.host, b.port) as c:
            assert p.ProduceAckResponse.decode(c.request(p.ProduceAckRequest("t", 0, encode_message_set([b"a"])))).error == 0
            wait_until(lambda: zk.exists(topic_path("t", 4)) is not None, what="topic node")
            old = b.registry.client.client_id[0]
            expire_session(b.registry.client, zk_connect)
            def owner(path):
                stat = zk.exists(path)
                return None if stat is None else stat.ephemeralOwner

            new = lambda: (b.registry.client.client_id or (None,))[0]  # noqa: E731
            wait_until(lambda: new() not in (None, old) and owner(broker_path(4)) == new() == owner(topic_path("t", 4)),
                       what="broker and topic nodes owned by the new session")
            # serving never stopped, on the same connection
            assert p.ProduceAckResponse.decode(c.request(p.ProduceAckRequest("t", 0, encode_message_set([b"b"])))).error == 0
    finally:
        b.stop()
