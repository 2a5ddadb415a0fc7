"""The producer on replicated topics: acks levels, routing by partition number, failover.

Units (no processes): the ``request.required.acks`` / ``request.timeout.ms`` keys, the
request frame per acks level, routing a key to a replicated partition, the back-off and
the retry accounting of a failover.

Integration (real ZooKeeper, three real broker processes with ``enable.zookeeper=true``;
topics created by writing their assignment znode, :mod:`tests.harness.replication_topics`):
every acks level to a replication-factor-3 topic with keyed messages on their hashed
partition, a new topic auto-created replicated, a SIGKILL of a partition's leader during
a sync acks=-1 send loop, acks=-1 on unreplicated topics, and the min.insync refusal.
"""
from __future__ import annotations

import logging
import subprocess
import sys
import threading
import time

import pytest

from ingest.broker.assignment import assign
from ingest.client.cluster import ClusterView, replicated_partition
from ingest.client.discovery import StaticDiscovery
from ingest.client.partitioner import DefaultPartitioner, stable_hash
from ingest.client.producer import Producer
from ingest.client.producer_config import PRODUCER_CONFIG
from ingest.client.send_batch import backoff_s, counts_as_retry, produce_frame
from ingest.client.simple_consumer import SimpleConsumer
from ingest.errors import (BrokerUnavailableError, ConfigError, LeaderNotAvailableError,
                           NotEnoughReplicasError, NotLeaderForPartitionError, RequestTimedOutError)
from ingest.records.message_set import encode_message_set
from tests.harness.brokers import RawClient, broker_factory  # noqa: F401  (pytest fixture)
from ingest.wire import protocol
from tests.harness.replication_topics import create_replicated_topic, metadata_of, partition_info, wait_for_leaders
from tests.harness.wait import wait_until

# --- configuration ---------------------------------------------------------------------------


@pytest.mark.parametrize("raw, value", [("-1", -1), ("0", 0), ("1", 1), (-1, -1), (" 1 ", 1)])
def test_acks_accepts_exactly_minus_one_zero_and_one(raw, value):
    assert PRODUCER_CONFIG.parse({"request.required.acks": raw})["request.required.acks"] == value


@pytest.mark.parametrize("raw", ["2", "-2", "all", "", "1.0", 5, True])
def test_acks_outside_the_three_levels_is_refused_naming_the_value_and_the_allowed_set(raw):
    with pytest.raises(ConfigError) as exc:
        PRODUCER_CONFIG.parse({"request.required.acks": raw}, source="producer.properties")
    message = str(exc.value)
    assert "\n" not in message
    assert f"invalid value {str(raw)!r} for 'request.required.acks'" in message
    assert message.endswith("allowed is one of -1, 0, 1")


def test_defaults_keep_acks_one_and_add_the_kafka_08_request_timeout():
    cfg = PRODUCER_CONFIG.parse({})
    assert cfg["request.required.acks"] == 1
    assert cfg["request.timeout.ms"] == 10_000
    with pytest.raises(ConfigError, match="'request.timeout.ms'"):
        PRODUCER_CONFIG.parse({"request.timeout.ms": "0"})


@pytest.mark.processes
def test_console_producer_refuses_acks_2_with_one_line_and_the_config_error_exit_code():
    # docs/operations.md: a product error (ConfigError included) prints one line and exits 2
    r = subprocess.run([sys.executable, "-m", "ingest.cli", "console-producer", "--brokers", "0:127.0.0.1:1",
                        "--topic", "t", "--set", "request.required.acks=2"],
                       input=b"never sent\n", capture_output=True, timeout=60)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.decode().strip().splitlines()
    assert lines == ["ingest console-producer: error: console-producer: invalid value '2' for "
                     "'request.required.acks': allowed is one of -1, 0, 1"]


def test_acks_all_stretches_the_socket_timeout_over_the_request_timeout():
    def view(**keys):
        cfg = PRODUCER_CONFIG.parse({"broker.list": "0:127.0.0.1:1", "socket.timeout.ms": 3000, **keys})
        discovery = StaticDiscovery(cfg["broker.list"])
        try:
            return ClusterView(cfg, discovery).timeout_s
        finally:
            discovery.close()

    assert view() == 3.0
    assert view(**{"request.required.acks": -1, "request.timeout.ms": 20_000}) == 25.0
    with pytest.raises(ConfigError, match=r"allowed is an integer in \[1, 300000\]"):  # the broker's cap
        PRODUCER_CONFIG.parse({"request.timeout.ms": 300_001})
    assert view(**{"request.required.acks": -1, "request.timeout.ms": 100}) == 5.1


# --- requests per acks level --------------------------------------------------------------


def test_each_acks_level_sends_its_request_type():
    ms = b"message set bytes"
    zero = protocol.decode_request(produce_frame(0, 500, "t", 2, ms))
    one = protocol.decode_request(produce_frame(1, 500, "t", 2, ms))
    every = protocol.decode_request(produce_frame(-1, 500, "t", 2, ms))
    assert type(zero) is protocol.ProduceRequest and (zero.topic, zero.partition, zero.message_set) == ("t", 2, ms)
    assert type(one) is protocol.ProduceAckRequest and (one.topic, one.partition) == ("t", 2)
    assert type(every) is protocol.ProduceAcksRequest
    assert (every.required_acks, every.timeout_ms, every.topic, every.partition, every.message_set) == (
        -1, 500, "t", 2, ms)


# --- routing ------------------------------------------------------------------------------


def _topic(leaders: list[int], epoch: int = 0) -> protocol.ReplicatedTopic:
    parts = [protocol.PartitionReplicas(p, leader, epoch, (p % 3, (p + 1) % 3, (p + 2) % 3), (leader,))
             for p, leader in enumerate(leaders)]
    parts.reverse()  # the answer's order must not matter
    return protocol.ReplicatedTopic("clicks", 0, tuple(parts))


def test_a_key_maps_to_its_hashed_partition_number_whoever_leads():
    before = _topic([0, 1, 2, 0, 1])
    after = _topic([1, 2, -1, 1, 2], epoch=3)  # leaders moved, one partition without a leader
    partitioner = DefaultPartitioner()
    for i in range(50):
        key = f"user-{i}"
        p = replicated_partition(partitioner, None, before, key)
        assert p == stable_hash(key) % 5
        assert replicated_partition(partitioner, None, after, key) == p


def test_keyless_messages_spread_over_every_partition():
    partitioner = DefaultPartitioner(seed=7)
    seen = {replicated_partition(partitioner, None, _topic([0, 1, 2, 0]), None) for _ in range(200)}
    assert seen == {0, 1, 2, 3}


class _Minus:
    def partition(self, key, num_partitions):
        return -1


def test_a_custom_partitioner_out_of_range_is_refused_for_a_replicated_topic_too():
    with pytest.raises(ConfigError, match=r"'x:Minus' returned -1 for topic 'clicks'; allowed is an int in \[0, 2\]"):
        replicated_partition(_Minus(), "x:Minus", _topic([0, 1, 2]), b"k")


# --- retries -------------------------------------------------------------------------------


def test_backoff_doubles_from_retry_backoff_up_to_its_cap():
    assert [backoff_s(n, 0.1, 1.0) for n in range(1, 7)] == [0.1, 0.2, 0.4, 0.8, 1.0, 1.0]
    assert backoff_s(10_000, 0.1, 2.0) == 2.0  # no overflow for long waits


def test_one_leaders_failure_costs_one_retry_however_long_the_election_takes():
    leader = (2, 7)
    dead = BrokerUnavailableError("connection refused")
    # the first failure against a leader counts
    assert counts_as_retry(dead, leader, None)
    # the same leader (same epoch) failing the same way again: the same failover, not counted
    for exc in (dead, NotLeaderForPartitionError("x"), LeaderNotAvailableError("x")):
        assert not counts_as_retry(exc, leader, leader)
    # a new leader, or a new epoch of the same broker, failing: counted
    assert counts_as_retry(dead, (1, 8), leader)
    assert counts_as_retry(dead, (2, 8), leader)
    # errors that are no leader change count every time
    for exc in (NotEnoughReplicasError("x"), RequestTimedOutError("x")):
        assert counts_as_retry(exc, leader, leader)
    # unreplicated partitions: every failure counts, as before
    assert counts_as_retry(dead, None, None)


# --- integration: real ZooKeeper, three real brokers ------------------------------------------

# fast failover in tests: the harness's 3 s ZooKeeper sessions; followers drop out of the in-sync set in 3 s
REPLICATION = {"replica.lag.time.max.ms": 3000, "replica.fetch.wait.max.ms": 100}


def _read(broker, topic: str, partition: int) -> list[bytes]:
    """Every message of a replicated partition its leader serves now (up to the high watermark)."""
    with SimpleConsumer(broker.host, broker.port, timeout_s=10) as c:
        start, end = c.earliest_offset(topic, partition), c.latest_offset(topic, partition)
        return [m.payload for m in c.iter_range(topic, partition, start, end)]


def _replicated(zk, brokers, topic: str, partitions: int):
    """Create ``topic`` with replication factor 3 over ``brokers``, wait until every replica is in
    sync; its ReplicaMetadata."""
    create_replicated_topic(zk, topic, assign([b.broker_id for b in brokers], partitions, 3))
    md = metadata_of(brokers)
    wait_for_leaders(md, topic, partitions, isr=3)
    return md


def _leader(brokers, md, topic: str, partitions: int, partition: int, *, not_broker: int | None = None):
    """The running BrokerProcess leading ``topic``-``partition`` (waiting for one other than ``not_broker``)."""
    exclude = () if not_broker is None else (not_broker,)
    leader = wait_for_leaders(md, topic, partitions, exclude=exclude)[partition]
    return next(b for b in brokers if b.broker_id == leader)


def _producer(zk_connect: str, **keys) -> Producer:
    return Producer({"zk.connect": zk_connect, "topic.format.default": "0.7", **keys})   # replicated 0.7 topics


def test_every_acks_level_reaches_the_leader_of_the_keys_hashed_partition(broker_factory, zk_connect, zk):
    brokers = broker_factory(n=3, zk_connect=zk_connect, overrides=REPLICATION)
    leaders = wait_for_leaders(_replicated(zk, brokers, "rt", 3), "rt", 3)
    sent: dict[int, list[bytes]] = {0: [], 1: [], 2: []}
    for acks in (-1, 1, 0):
        results = []
        with _producer(zk_connect, **{"request.required.acks": acks}) as producer:
            assert producer.partitions("rt") == [(leaders[p], p) for p in range(3)]
            for i in range(20):
                key = f"user-{i}"
                payload = f"{acks}:{key}".encode()
                producer.send("rt", [payload], key=key, callback=results.append)
                sent[stable_hash(key) % 3].append(payload)
        assert len(results) == 20 and all(r.error is None for r in results), results
        for i, r in enumerate(results):
            assert r.partition == stable_hash(f"user-{i}") % 3            # the hashed partition number
            assert r.broker_id == leaders[r.partition]                     # acknowledged by its leader
            assert (r.first_offset is None) == (acks == 0)
    by_id = {b.broker_id: b for b in brokers}
    for p in range(3):  # every message once, in order, on its partition (acks=0 ones may lag a little)
        wait_until(lambda: _read(by_id[leaders[p]], "rt", p) == sent[p], timeout=30,
                   what=f"rt-{p} on its leader {leaders[p]} to hold exactly the messages sent to it")


def test_a_new_topic_on_brokers_with_replication_factor_3_waits_for_its_leader(broker_factory, zk_connect):
    brokers = broker_factory(n=3, zk_connect=zk_connect, overrides={
        **REPLICATION, "default.replication.factor": 3, "num.partitions": 2})
    results = []
    with _producer(zk_connect, **{"request.required.acks": -1}) as producer:
        producer.send("fresh", [b"first"], key="k", callback=results.append)
        producer.send("fresh", [b"second"], key="k", callback=results.append)
    md = metadata_of(brokers)
    wait_for_leaders(md, "fresh", 2)
    assert [len(partition_info(md, "fresh", p).replicas) for p in (0, 1)] == [3, 3]  # created replicated
    part = stable_hash("k") % 2
    assert [(r.error, r.partition) for r in results] == [(None, part), (None, part)]
    leader = _leader(brokers, md, "fresh", 2, part)
    assert results[-1].broker_id == leader.broker_id
    assert _read(leader, "fresh", part) == [b"first", b"second"]


def test_sigkill_of_the_leader_during_an_acks_all_send_loop(broker_factory, zk_connect, zk, caplog):
    """The producer carries on on the new leader; every acknowledged message is on it, each
    exactly once unless its send was retried (at-least-once: a retry after the old leader's
    followers had copied the batch appends it again, see ingest/client/send_batch.py)."""
    brokers = broker_factory(n=3, zk_connect=zk_connect, overrides={**REPLICATION, "min.insync.replicas": 2})
    md = _replicated(zk, brokers, "fo", 1)
    old = _leader(brokers, md, "fo", 1, 0)
    caplog.set_level(logging.INFO, logger="ingest.client")
    killed = threading.Event()
    acked: list[tuple[bytes, int]] = []          # (payload, broker that acknowledged)
    retried: set[bytes] = set()

    def kill_when_busy():
        wait_until(lambda: len(acked) >= 30 or killed.is_set(), timeout=60, what="30 acknowledged sends")
        old.kill()                                # SIGKILL, most likely while a send is in flight
        killed.set()

    killer = threading.Thread(target=kill_when_busy, daemon=True)
    killer.start()
    # generous budget: a slow election on a loaded machine must not fail a send (or the test)
    with _producer(zk_connect, **{"request.required.acks": -1, "delivery.timeout.ms": 120_000,
                                  "retry.backoff.max.ms": 500}) as producer:
        i = 0
        after_kill = 0
        while after_kill < 30:
            payload = b"m%05d" % i
            before = producer.stats["retries"]
            results = []
            producer.send("fo", [payload], callback=results.append)   # raises if the send failed
            acked.append((payload, results[0].broker_id))
            if producer.stats["retries"] != before:
                retried.add(payload)
            if killed.is_set():
                after_kill += 1
            i += 1
            assert i < 100_000, "the leader was never killed"
    killer.join(timeout=60)
    new = _leader(brokers, md, "fo", 1, 0, not_broker=old.broker_id)
    assert acked[-1][1] == new.broker_id                                       # carried on on the new leader
    assert {b for _, b in acked[:30]} == {old.broker_id}
    payloads = [p for p, _ in acked]
    wait_until(lambda: set(payloads) <= set(_read(new, "fo", 0)), timeout=60,
               what="every acknowledged message on the new leader (below its high watermark)")
    log = _read(new, "fo", 0)
    first_seen = list(dict.fromkeys(log))
    assert first_seen == payloads                                              # nothing lost, in order
    for p in payloads:
        assert log.count(p) == 1 or (p in retried and log.count(p) == 2), (p, log.count(p), p in retried)
    changes = [r for r in caplog.records if r.levelno == logging.INFO and "leader moved" in r.getMessage()]
    assert len(changes) == 1 and f"fo-0: leader moved from broker {old.broker_id}" in changes[0].getMessage()


def test_acks_all_on_unreplicated_topics_behaves_as_acks_one(broker_factory, zk_connect):
    """No replicas, so every in-sync replica is the broker itself: static brokers (no ZooKeeper) and
    ZooKeeper brokers with default.replication.factor 1 both acknowledge with the first offset."""
    static = broker_factory(n=1)
    zk_broker = broker_factory(n=1, zk_connect=zk_connect)
    for config in ({"broker.list": static[0].address}, {"zk.connect": zk_connect, "topic.format.default": "0.7"}):
        results = []
        with Producer({**config, "request.required.acks": -1}) as producer:
            producer.send("plain", [b"a", b"b"], key="k", callback=results.append)
            producer.send("plain", [b"c"], key="k", callback=results.append)
            assert producer.partitions("plain") == [(results[0].broker_id, 0)]
        assert [(r.error, r.partition, r.first_offset is not None) for r in results] == [(None, 0, True)] * 2
        broker = static[0] if "broker.list" in config else zk_broker[0]
        assert _read(broker, "plain", 0) == [b"a", b"b", b"c"]


def test_min_insync_refusal_reaches_the_producer_as_not_enough_replicas(broker_factory, zk_connect, zk):
    brokers = broker_factory(n=3, zk_connect=zk_connect, overrides={**REPLICATION, "min.insync.replicas": 3})
    md = _replicated(zk, brokers, "strict", 1)
    leader = _leader(brokers, md, "strict", 1, 0)
    follower = next(b for b in brokers if b is not leader)
    with _producer(zk_connect, **{"request.required.acks": -1}) as producer:
        producer.send("strict", [b"while all three are in sync"])
    follower.kill()
    wait_until(lambda: len(partition_info(md, "strict", 0).isr) == 2, timeout=60,
               what="the killed follower to leave the in-sync set")
    before = _read(leader, "strict", 0)
    with _producer(zk_connect, **{"request.required.acks": -1, "message.send.max.retries": 1,
                                  "retry.backoff.ms": 10}) as producer:
        with pytest.raises(NotEnoughReplicasError, match="strict/0") as exc:
            producer.send("strict", [b"refused"])
        assert "\n" not in str(exc.value) and producer.stats["retries"] == 1
    with _producer(zk_connect, **{"request.required.acks": 1}) as producer:
        producer.send("strict", [b"acks 1 still taken by the leader"])
    wait_until(lambda: len(_read(leader, "strict", 0)) == len(before) + 1, timeout=30,
               what="the acks=1 message below the high watermark")
    assert b"refused" not in _read(leader, "strict", 0)                       # nothing was appended


def test_without_retries_failed_sends_are_unacknowledged_and_the_next_send_finds_the_new_leader(
        broker_factory, zk_connect, zk):
    """message.send.max.retries=0: a send that meets the leader's death fails (nothing re-sent, so
    nothing duplicated); later sends re-read the leader: every acknowledged message is on the new
    leader exactly once."""
    brokers = broker_factory(n=3, zk_connect=zk_connect, overrides={**REPLICATION, "min.insync.replicas": 2})
    md = _replicated(zk, brokers, "once", 1)
    old = _leader(brokers, md, "once", 1, 0)
    acked, failed = [], []
    with _producer(zk_connect, **{"request.required.acks": -1, "message.send.max.retries": 0}) as producer:
        def send(i: int) -> bool:
            payload = b"n%05d" % i
            try:
                producer.send("once", [payload])
            except (BrokerUnavailableError, NotLeaderForPartitionError, LeaderNotAvailableError):
                failed.append(payload)
                return False
            acked.append(payload)
            return True

        for i in range(20):
            assert send(i)
        old.kill()
        counter = iter(range(20, 1_000_000))
        wait_until(lambda: send(next(counter)), timeout=90, interval=0.02, what="a send acknowledged after the kill")
        for _ in range(20):
            assert send(next(counter))
        assert producer.stats["retries"] == 0
    new = _leader(brokers, md, "once", 1, 0, not_broker=old.broker_id)
    assert failed, "no send met the dead leader"
    wait_until(lambda: set(acked) <= set(_read(new, "once", 0)), timeout=60,
               what="every acknowledged message on the new leader")
    log = _read(new, "once", 0)
    assert [p for p in log if p in set(acked)] == acked                          # each exactly once, in order


def test_produce_to_a_non_leader_is_counted_and_closes_the_connection(broker_factory, zk_connect, zk):
    """A refusal about where the partition is served (not its content) closes the connection, the
    one signal that makes a fire-and-forget client re-discover the leader; logged and counted alike."""
    brokers = broker_factory(n=2, zk_connect=zk_connect, overrides=REPLICATION)
    create_replicated_topic(zk, "led", assign([b.broker_id for b in brokers], 1, 2))
    (leader,) = wait_for_leaders(metadata_of(brokers), "led", 1).values()
    other = next(b for b in brokers if b.broker_id != leader)
    with RawClient(other.host, other.port) as c:
        addr = "%s:%d" % c.sock.getsockname()[:2]
        c.send(protocol.ProduceRequest("led", 0, encode_message_set([b"to the wrong broker"])))
        assert c.closed_by_peer()
    summary = f"client {addr}: connection closed after 1 refused produce request(s) (PRODUCE NOT_LEADER_FOR_PARTITION: 1)"
    deadline = time.monotonic() + 30
    while summary not in other.output() and time.monotonic() < deadline:
        time.sleep(0.05)  # the summary is written when the broker closes the connection
    lines = [line for line in other.output().splitlines() if f"client {addr}:" in line]
    assert len(lines) == 2 and summary in lines[1], lines
    assert "PRODUCE refused (NOT_LEADER_FOR_PARTITION)" in lines[0] and "the connection is closed" in lines[0]
