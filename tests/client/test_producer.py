"""Producer against real broker processes: acks, async batching, compression, queue policy, failover."""
from __future__ import annotations

import socket
import threading

import pytest

from ingest.client.producer import Producer, SendResult
from ingest.client.simple_consumer import SimpleConsumer
from ingest.errors import (BrokerUnavailableError, ConfigError, InvalidTopicError, MessageTooLargeError,
                           ProducerQueueFullError)
from tests.client.conftest import create_topic, wait_until


def read_all(brokers, topic) -> dict[tuple[int, int], list]:
    """Every message of ``topic`` on every (running) broker, per (broker_id, partition)."""
    out = {}
    for b in brokers:
        with SimpleConsumer(b.host, b.port) as c:
            for info in c.metadata([topic]).topics.get(topic, []):
                if info.latest > info.earliest:
                    out[(b.broker_id, info.partition)] = list(
                        c.iter_range(topic, info.partition, info.earliest, info.latest))
    return out


def payloads_of(brokers, topic) -> list[bytes]:
    return [m.payload for msgs in read_all(brokers, topic).values() for m in msgs]


def test_sync_send_is_acknowledged_with_exact_first_offsets(broker_factory):
    brokers = broker_factory(n=1, num_partitions=3)
    create_topic(brokers, "p-sync")
    results: list[SendResult] = []
    with Producer({"broker.list": brokers[0].address}) as p:
        for i in range(30):
            p.send("p-sync", [b"m%02d-a" % i, b"m%02d-b" % i], key=f"user{i % 5}", callback=results.append)
    assert len(results) == 30 and all(r.error is None and r.count == 2 for r in results)
    logs = read_all(brokers, "p-sync")
    by_offset = {(bp, m.offset): m.payload for bp, msgs in logs.items() for m in msgs}
    for i, r in enumerate(results):
        assert by_offset[((r.broker_id, r.partition), r.first_offset)] == b"m%02d-a" % i
    # same key, same partition
    per_key = {}
    for i, r in enumerate(results):
        per_key.setdefault(i % 5, set()).add(r.partition)
    assert all(len(v) == 1 for v in per_key.values())


def test_async_batches_and_reports_every_message_exactly_once(broker_factory):
    brokers = broker_factory(n=2, num_partitions=2)
    create_topic(brokers, "p-async")
    results: list[SendResult] = []
    lock = threading.Lock()

    def cb_for(payload):
        def cb(r):
            with lock:
                results.append((payload, r))
        return cb

    cfg = {"broker.list": ",".join(b.address for b in brokers), "producer.type": "async",
           "batch.size": 50, "queue.time": 20}
    with Producer(cfg) as p:
        for i in range(1000):
            p.send("p-async", [b"%04d" % i], callback=cb_for(b"%04d" % i))
        p.flush(30)
        assert sum(r.count for _, r in results) == 1000
        for i in range(1000, 1100):
            p.send("p-async", [b"%04d" % i], callback=cb_for(b"%04d" % i))
    assert sum(r.count for _, r in results) == 1100 and all(r.error is None for _, r in results)
    assert p.stats["acked"] == 1100 and p.stats["failed"] == 0
    got = payloads_of(brokers, "p-async")
    assert sorted(got) == sorted([b"init"] * 2 + [b"%04d" % i for i in range(1100)])
    # each callback's first_offset points at the message of its own send call
    logs = read_all(brokers, "p-async")
    by_offset = {(bp, m.offset): m.payload for bp, msgs in logs.items() for m in msgs}
    for payload, r in results:
        assert by_offset[((r.broker_id, r.partition), r.first_offset)] == payload


def test_gzip_batches_round_trip(broker_factory):
    brokers = broker_factory(n=1, num_partitions=1)
    payloads = [b"event %d " % i * 20 for i in range(300)]
    cfg = {"broker.list": brokers[0].address, "compression.codec": "gzip"}
    with Producer(cfg) as p:
        for i in range(0, 300, 100):
            p.send("p-gzip", payloads[i:i + 100])
    with SimpleConsumer(brokers[0].host, brokers[0].port) as c:
        latest = c.latest_offset("p-gzip", 0)
        got = list(c.iter_range("p-gzip", 0, 0, latest))
    assert [m.payload for m in got] == payloads
    assert latest < sum(len(x) for x in payloads) / 5, "stored compressed"


def test_oversized_payload_is_refused_before_sending(broker_factory):
    brokers = broker_factory(n=1)
    with Producer({"broker.list": brokers[0].address, "max.message.size": 100}) as p:
        with pytest.raises(MessageTooLargeError, match="101 bytes"):
            p.send("p-big", [b"x" * 101])


@pytest.fixture
def black_hole():
    """A listener that accepts connections and never answers: a hung broker."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(16)
    yield srv.getsockname()[1]
    srv.close()


def test_full_queue_block_policy_raises_after_timeout(black_hole):
    results = []
    cfg = {"broker.list": f"0:127.0.0.1:{black_hole}", "producer.type": "async", "queue.size": 5,
           "batch.size": 1, "queue.enqueue.timeout.ms": 50, "socket.timeout.ms": 1000,
           "message.send.max.retries": 0}
    p = Producer(cfg)
    with pytest.raises(ProducerQueueFullError, match="queue full"):
        for i in range(100):
            p.send("q", [b"%d" % i], callback=results.append)
    p.close()
    # every message is accounted for: failed on the hung broker or refused by the full queue
    assert sum(r.count for r in results) == p.stats["sent"] == i + 1
    assert p.stats["failed"] == p.stats["sent"] and p.stats["acked"] == 0
    assert all(r.error is not None for r in results)


def test_full_queue_drop_policy_counts_drops(black_hole):
    results = []
    cfg = {"broker.list": f"0:127.0.0.1:{black_hole}", "producer.type": "async", "queue.size": 5,
           "batch.size": 1, "queue.full.policy": "drop", "socket.timeout.ms": 1000,
           "message.send.max.retries": 0}
    p = Producer(cfg)
    for i in range(100):
        p.send("q", [b"%d" % i], callback=results.append)
    dropped = p.stats["dropped"]
    assert dropped >= 100 - 5 - 2
    p.close()
    assert sum(r.count for r in results) == 100
    assert sum(r.count for r in results if isinstance(r.error, ProducerQueueFullError)) == dropped
    assert p.stats["failed"] == 100


@pytest.mark.slow
def test_producer_keeps_working_while_a_broker_dies_and_returns(broker_factory):
    brokers = broker_factory(n=3, num_partitions=2)
    create_topic(brokers, "p-fail")
    cfg = {"broker.list": ",".join(b.address for b in brokers), "retry.backoff.ms": 10,
           "reconnect.backoff.max.ms": 300, "topic.metadata.refresh.interval.ms": 200}
    sent = []
    with Producer(cfg) as p:
        def send(i):
            p.send("p-fail", [b"%05d" % i])
            sent.append(b"%05d" % i)
        for i in range(100):
            send(i)
        brokers[1].kill()
        for i in range(100, 300):
            send(i)  # raises if a batch fails after retries
        assert p.stats["failed"] == 0
        brokers[1].start()
        n = 300

        def broker1_used():
            nonlocal n
            results = []
            p.send("p-fail", [b"%05d" % n], callback=results.append)
            sent.append(b"%05d" % n)
            n += 1
            return results[0].broker_id == 1
        wait_until(broker1_used, 30, "the producer to use the restarted broker again")
    got = payloads_of(brokers, "p-fail")
    assert sorted(x for x in got if x != b"init") == sorted(sent)


def test_no_live_broker_fails_with_clear_error():
    cfg = {"broker.list": "0:127.0.0.1:1", "message.send.max.retries": 1, "retry.backoff.ms": 1}
    results = []
    with Producer(cfg) as p, pytest.raises(BrokerUnavailableError):
        p.send("t", [b"x"], callback=results.append)
    assert results[0].error is not None and results[0].count == 1


def test_zookeeper_discovery_finds_brokers_and_follows_changes(broker_factory, zk_connect):
    brokers = broker_factory(n=1, zk_connect=zk_connect, num_partitions=2)
    with Producer({"zk.connect": zk_connect, "topic.format.default": "0.7", "topic.metadata.refresh.interval.ms": 100}) as p:
        p.send("p-zk", [b"one"])
        assert set(p.discovery.brokers()) == {brokers[0].broker_id}
        more = broker_factory(n=1, zk_connect=zk_connect, num_partitions=2)
        wait_until(lambda: set(p.discovery.brokers()) == {brokers[0].broker_id, more[0].broker_id}, 20,
                   "the new broker to appear through the ZooKeeper watch")
        results = []
        wait_until(lambda: (p.send("p-zk", [b"x"], callback=results.append), results[-1].broker_id)[1]
                   == more[0].broker_id, 20, "a send to the new broker")
        more[0].kill()
        wait_until(lambda: more[0].broker_id not in p.discovery.brokers(), 20, "the dead broker to vanish")
        for _ in range(20):
            p.send("p-zk", [b"y"])
    assert p.stats["failed"] == 0


def test_broker_refusal_is_not_retried_and_names_the_topic(broker_factory):
    brokers = broker_factory(n=1)
    results = []
    with Producer({"broker.list": brokers[0].address, "retry.backoff.ms": 1}) as p:
        with pytest.raises(InvalidTopicError) as err:
            p.send("bad topic/..", [b"x"], callback=results.append)
        assert p.stats["retries"] == 0 and p.stats["failed"] == 1
    assert "bad topic/.." in str(err.value) or "INVALID_TOPIC" in str(err.value)
    assert results[0].error is err.value and results[0].count == 1


class OutOfRangeForBadKey:
    """A buggy custom partitioner: an index past the end for key 'bad', -1 for key 'neg'."""

    def partition(self, key, num_partitions):
        return {"bad": num_partitions, "neg": -1}.get(key, 0)


@pytest.mark.parametrize("key", ["bad", "neg"])
def test_custom_partitioner_out_of_range_is_refused_clearly_and_the_async_sender_survives(broker_factory, key):
    brokers = broker_factory(n=1, num_partitions=2)
    create_topic(brokers, "p-badpart")
    spec = "tests.client.test_producer:OutOfRangeForBadKey"
    with Producer({"broker.list": brokers[0].address, "partitioner.class": spec}) as p:
        with pytest.raises(ConfigError, match=r"returned -?\d+ .*allowed is an int in \[0, 1\]") as exc:
            p.send("p-badpart", [b"x"], key=key)
        assert spec in str(exc.value)
    results: list[SendResult] = []
    cfg = {"broker.list": brokers[0].address, "partitioner.class": spec, "producer.type": "async",
           "queue.time": 10, "message.send.max.retries": 0}
    with Producer(cfg) as p:
        p.send("p-badpart", [b"refused"], key=key, callback=results.append)
        p.flush(30)
        p.send("p-badpart", [b"good"], key="ok", callback=results.append)  # the sender thread is alive
        p.flush(30)
    assert [(r.count, type(r.error)) for r in results] == [(1, ConfigError), (1, type(None))]
    assert sorted(payloads_of(brokers, "p-badpart")) == [b"good", b"init"]
