"""Real broker processes and a real ZooKeeper: a cluster, SIGKILL, restart, graceful SIGTERM."""
from __future__ import annotations

import re

import pytest

from ingest.wire import protocol as p
from ingest.records.message_batch import iter_messages
from ingest.records.message_set import encode_message_set
from ingest.znodes import broker_path, topic_path
from tests.harness.wait import wait_until
from tests.harness.brokers import BrokerProcess, BrokerStartError, RawClient, broker_factory  # noqa: F401

pytestmark = pytest.mark.slow


def produce(b: BrokerProcess, topic: str, partition: int, payloads) -> int:
    with RawClient(b.host, b.port) as c:
        resp = p.ProduceAckResponse.decode(c.request(p.ProduceAckRequest(topic, partition, encode_message_set(payloads))))
    assert resp.error == 0, resp
    return resp.offset


def fetch_all(b: BrokerProcess, topic: str, partition: int) -> list[bytes]:
    with RawClient(b.host, b.port) as c:
        resp = p.FetchResponse.decode(c.request(p.FetchRequest(topic, partition, 0, 1 << 20)))
    assert resp.error == 0, resp
    return [m.payload for m in iter_messages(resp.message_set)]


def test_three_brokers_register_as_one_cluster(broker_factory, zk_connect, zk):
    brokers = broker_factory(n=3, zk_connect=zk_connect, num_partitions=4)
    assert sorted(zk.get_children("/brokers/ids")) == ["0", "1", "2"]
    for b in brokers:
        assert re.fullmatch(rf"127\.0\.0\.1-\d{{13}}:127\.0\.0\.1:{b.port}", zk.get(broker_path(b.broker_id))[0].decode())
        produce(b, "events", b.broker_id, [f"from-{b.broker_id}".encode()])
    # topic znodes are written by the broker's background registrar: absent at first is "not yet"
    wait_until(lambda: zk.exists("/brokers/topics/events")
               and sorted(zk.get_children("/brokers/topics/events")) == ["0", "1", "2"],
               what="3 brokers under /brokers/topics/events")
    assert {zk.get(topic_path("events", b.broker_id))[0] for b in brokers} == {b"4"}
    for b in brokers:
        assert fetch_all(b, "events", b.broker_id) == [f"from-{b.broker_id}".encode()]


def test_sigkill_nodes_vanish_after_session_timeout_and_reappear_on_restart(broker_factory, zk_connect, zk):
    (b,) = broker_factory(n=1, zk_connect=zk_connect, zk_sessiontimeout_ms=2000)
    produce(b, "t", 0, [b"before"])
    owner = zk.get(broker_path(b.broker_id))[1].ephemeralOwner
    b.kill()
    wait_until(lambda: zk.exists(broker_path(b.broker_id)) is None, what="broker node to expire")
    wait_until(lambda: zk.exists(topic_path("t", b.broker_id)) is None, what="topic node to expire")
    b.start()
    data, stat = zk.get(broker_path(b.broker_id))
    assert data.decode().endswith(f":127.0.0.1:{b.port}") and stat.ephemeralOwner != owner
    assert zk.get(topic_path("t", b.broker_id))[0] == b"1"   # topics on disk registered at start-up
    assert fetch_all(b, "t", 0) == [b"before"]                # flushed before the kill, so kept


def test_restart_right_after_sigkill_waits_out_its_own_stale_registration(broker_factory, zk_connect, zk):
    (b,) = broker_factory(n=1, zk_connect=zk_connect, zk_sessiontimeout_ms=2000)
    owner = zk.get(broker_path(b.broker_id))[1].ephemeralOwner
    b.kill()
    b.start()       # the old session still holds /brokers/ids/0 with our own host:port
    assert zk.get(broker_path(b.broker_id))[1].ephemeralOwner != owner
    assert "waiting for it to expire" in b.output()


def test_a_second_broker_with_a_taken_id_refuses_to_start(broker_factory, zk_connect, zk, tmp_path):
    (first,) = broker_factory(n=1, zk_connect=zk_connect)
    twin = BrokerProcess(first.broker_id, tmp_path / "twin", zk_connect=zk_connect)
    with pytest.raises(BrokerStartError, match="exited with code 2"):
        twin.start()
    assert "broker id 0 is already registered" in twin.output()
    assert zk.get(broker_path(0))[0].decode().endswith(f":127.0.0.1:{first.port}")
    assert first.ping()


def test_sigterm_exits_0_flushes_and_deregisters_at_once(broker_factory, zk_connect, zk):
    # nothing is flushed by policy during the test: only the shutdown can flush
    (b,) = broker_factory(n=1, zk_connect=zk_connect, zk_sessiontimeout_ms=10000,
                          overrides={"log.flush.interval": 1_000_000, "log.default.flush.interval.ms": 3_600_000})
    with RawClient(b.host, b.port) as c:
        for i in range(100):
            c.send(p.ProduceRequest("t", 0, encode_message_set([b"m%d" % i])))
        c.request(p.MetadataRequest())      # served after every produce on this connection
    assert fetch_all(b, "t", 0) == []        # not flushed, so not visible yet
    assert b.stop() == 0
    # deregistered on the way out, not 10 s later by session expiry
    assert zk.exists(broker_path(b.broker_id)) is None
    assert "broker 0 stopped" in b.output()
    b.start()
    assert fetch_all(b, "t", 0) == [b"m%d" % i for i in range(100)]


def test_sigint_stops_gracefully_too(broker_factory):
    import signal

    (b,) = broker_factory(n=1)
    produce(b, "t", 0, [b"x"])
    b.proc.send_signal(signal.SIGINT)
    assert b.proc.wait(30) == 0
    assert "received SIGINT" in b.output() and "broker 0 stopped" in b.output()
