"""The replication throttle (docs/replication.md, "Replication throttle"): a replica catching up on a large
partition is held to the throttled rate while an unthrottled partition on the same brokers is replicated and
produced to as usual; cleared, the replica catches up; the configs round-trip through DescribeConfigs.

Real ZooKeeper, two real broker processes, Kafka topics ``moving`` (partition 0 on brokers 0 and 1, broker 0
leading) and ``steady`` (the same, ``min.insync.replicas=2``, so an acks=all write needs broker 1 in sync).
Broker 1 is stopped while ``moving`` gets about 1 MB; the throttle is set as a reassignment that adds broker 1
to ``moving``-0 sets it (:func:`ingest.broker.replication_throttle.apply`: ``0:0`` leader-throttled, ``0:1``
follower-throttled); broker 1 starts again and catches up. A confluent-kafka AdminClient then sets a rate
(IncrementalAlterConfigs on the BROKER resource), appends to and subtracts from a throttled-replicas list, and
is refused a value that is not a rate and a broker config that is not dynamic.

The lower bound on the catch-up time comes from bytes only. With the quota measured over ``window.num`` = 3
samples of 1 s (``replication.quota.window.*``), a throttled fetch is sent only while the bytes recorded in
the last 2 s are at most ``3 * rate``, and a fetch adds at most ``F`` = ``replica.fetch.max.bytes`` (the
batches are smaller). So any 2 s copy at most ``3 * rate + F`` bytes, and ``B`` bytes take more than
``2 * (B / (3 * rate + F) - 1)`` seconds. Without the throttle they take a fraction of that.
"""
from __future__ import annotations

import time

import pytest

from ingest import znodes
from ingest.broker import replication_quota as rq
from ingest.broker import replication_throttle
from tests.harness import replicated as r
from tests.harness.brokers import broker_factory  # noqa: F401  (fixture)
from tests.harness.wait import wait_until

pytestmark = pytest.mark.processes

FETCH = 8192          # replica.fetch.max.bytes
SAMPLES, WINDOW_S = 3, 1
RATE = 100_000        # bytes/s while the catch-up is measured
CRAWL = 2_000         # bytes/s: 1 MB would take minutes
VALUE = 1000
MESSAGES = 1000       # about 1 MB of batches in "moving"


def copy_bound_s(nbytes: int, rate: int) -> float:
    """The least time ``nbytes`` can take to copy at ``rate`` (the module docstring)."""
    return (SAMPLES - 1) * WINDOW_S * (nbytes / (SAMPLES * WINDOW_S * rate + FETCH) - 1)


def log_bytes(broker, topic: str, partition: int) -> int:
    d = broker.log_dir / f"{topic}-{partition}"
    return sum(f.stat().st_size for f in d.glob("*.log")) if d.exists() else 0


def produce(bootstrap: str, topic: str, count: int, acks) -> None:
    from confluent_kafka import Producer   # heavy third-party import, only for the tests that produce

    failed = []
    p = Producer({"bootstrap.servers": bootstrap, "acks": acks, "linger.ms": 5, "batch.size": FETCH - 200,
                  "message.timeout.ms": 60_000})
    for i in range(count):
        while True:
            try:
                p.produce(topic, value=(f"{i:08d}".encode() * (VALUE // 8)), partition=0,
                          on_delivery=lambda err, _m: err is not None and failed.append(str(err)))
                break
            except BufferError:
                p.poll(0.05)
        p.poll(0)
    assert p.flush(60) == 0
    assert not failed, failed[:3]


def describe(bootstrap: str, resources) -> dict:
    """{(type, name): {config: (value, source)}} from a confluent-kafka AdminClient's DescribeConfigs."""
    from confluent_kafka.admin import AdminClient   # heavy third-party import

    admin = AdminClient({"bootstrap.servers": bootstrap})
    out = {}
    for res, fut in admin.describe_configs(resources).items():
        out[(res.restype, res.name)] = {k: (v.value, v.source) for k, v in fut.result(30).items()}
    return out


def in_sync(zk, topic: str, timeout: float, what: str):
    return r.wait_for_state(zk, topic, 0, lambda s: set(s.isr) == {0, 1}, timeout, what)


def test_a_throttled_replica_catches_up_no_faster_than_the_rate_and_other_partitions_are_not_held(
        broker_factory, zk_connect, zk):
    from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource,
                                       ConfigSource, ResourceType)   # heavy third-party import

    brokers = broker_factory(2, zk_connect, overrides=r.replication_overrides(min_isr=1, **{
        "replica.fetch.max.bytes": FETCH, "replication.quota.window.num": SAMPLES,
        "replication.quota.window.size.seconds": WINDOW_S}))
    zk.retry(zk.create, znodes.topic_config_path("steady"), znodes.topic_config_value({"min.insync.replicas": "2"}),
             makepath=True)
    for topic in ("moving", "steady"):
        zk.retry(zk.create, znodes.topic_dir(topic), znodes.assignment_value({0: [0, 1]}, znodes.KAFKA_FORMAT),
                 makepath=True)
        r.wait_for_state(zk, topic, 0, lambda s: s.leader == 0 and set(s.isr) == {0, 1}, 60, f"{topic} in sync")
    bootstrap = f"127.0.0.1:{brokers[0].kafka_port}"

    # --- the throttle at RATE: broker 1's catch-up on "moving" takes at least the bound -----------
    brokers[1].stop()
    r.wait_for_state(zk, "moving", 0, lambda s: s.isr == (0,), 60, "broker 1 out of moving's isr")
    produce(bootstrap, "moving", MESSAGES, 1)
    size = log_bytes(brokers[0], "moving", 0)
    assert size > 900_000
    written = replication_throttle.apply(zk, {("moving", 0): [0, 1]}, RATE, current={("moving", 0): [0]})
    assert written == {"brokers": [0, 1], "topics": {"moving": {rq.LEADER_REPLICAS: "0:0",
                                                                 rq.FOLLOWER_REPLICAS: "0:1"}}}
    dynamic_broker, dynamic_topic = ConfigSource.DYNAMIC_BROKER_CONFIG.value, ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    expected = {(ResourceType.BROKER, "0"): {rq.LEADER_RATE: (str(RATE), dynamic_broker),
                                             rq.FOLLOWER_RATE: (str(RATE), dynamic_broker)},
                (ResourceType.TOPIC, "moving"): {rq.LEADER_REPLICAS: ("0:0", dynamic_topic),
                                                 rq.FOLLOWER_REPLICAS: ("0:1", dynamic_topic)}}
    seen: dict = {}

    def described(expected: dict) -> bool:   # broker 0 applies the nodes when its watches fire
        got = describe(bootstrap, [ConfigResource(ResourceType.BROKER, "0"),
                                   ConfigResource(ResourceType.TOPIC, "moving")])
        seen.update({k: {name: got[k].get(name) for name in v} for k, v in expected.items()})
        return seen == expected
    try:
        wait_until(lambda: described(expected), 30, what="the throttle described by broker 0")
    except AssertionError as exc:
        raise AssertionError(f"{exc}; last described {seen}") from None

    brokers[1].start()
    # the first bytes broker 1 copies of "moving": from here on the bound applies
    b0 = wait_until(lambda: log_bytes(brokers[1], "moving", 0), 60, what="broker 1's first bytes of moving",
                    interval=0.02)
    t0 = time.monotonic()
    in_sync(zk, "moving", 180, "moving caught up on broker 1")
    took = time.monotonic() - t0
    assert log_bytes(brokers[1], "moving", 0) == size
    least = copy_bound_s(size - b0, RATE)
    print(f"throttled at {RATE} bytes/s: {size - b0} bytes in {took:.1f} s (bound {least:.1f} s)")
    assert took >= least, f"{size - b0} bytes copied in {took:.1f} s; at {RATE} bytes/s that takes at least {least:.1f} s"

    # --- a Kafka admin client sets and deletes a rate; DescribeConfigs shows both -------------------
    admin = AdminClient({"bootstrap.servers": bootstrap})
    res = ConfigResource(ResourceType.BROKER, "0", incremental_configs=[
        ConfigEntry(rq.FOLLOWER_RATE, "12345", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([res])[res].result(30)
    wait_until(lambda: describe(bootstrap, [ConfigResource(ResourceType.BROKER, "0")])[(ResourceType.BROKER, "0")]
               [rq.FOLLOWER_RATE] == ("12345", ConfigSource.DYNAMIC_BROKER_CONFIG.value), 30, what="the rate set")
    bad = ConfigResource(ResourceType.BROKER, "0", incremental_configs=[
        ConfigEntry(rq.FOLLOWER_RATE, "fast", incremental_operation=AlterConfigOpType.SET)])
    with pytest.raises(Exception, match="fast"):
        admin.incremental_alter_configs([bad])[bad].result(30)
    def lists() -> dict:
        return znodes.parse_topic_config(zk.retry(zk.get, znodes.topic_config_path("moving"))[0])

    grow = ConfigResource(ResourceType.TOPIC, "moving", incremental_configs=[
        ConfigEntry(rq.LEADER_REPLICAS, "0:5", incremental_operation=AlterConfigOpType.APPEND)])
    admin.incremental_alter_configs([grow])[grow].result(30)
    assert lists() == {rq.LEADER_REPLICAS: "0:0,0:5", rq.FOLLOWER_REPLICAS: "0:1"}
    shrink = ConfigResource(ResourceType.TOPIC, "moving", incremental_configs=[
        ConfigEntry(rq.LEADER_REPLICAS, "0:0,0:5", incremental_operation=AlterConfigOpType.SUBTRACT)])
    admin.incremental_alter_configs([shrink])[shrink].result(30)
    assert lists() == {rq.FOLLOWER_REPLICAS: "0:1"}   # an emptied list is the default: gone
    static = ConfigResource(ResourceType.BROKER, "0", incremental_configs=[
        ConfigEntry("log.retention.ms", "1", incremental_operation=AlterConfigOpType.SET)])
    with pytest.raises(Exception, match="log.retention.ms"):
        admin.incremental_alter_configs([static])[static].result(30)

    # --- crawling: "steady" is replicated and takes acks=all writes; cleared, "moving" catches up ----
    brokers[1].stop()
    r.wait_for_state(zk, "steady", 0, lambda s: s.isr == (0,), 60, "broker 1 out of steady's isr")
    produce(bootstrap, "moving", MESSAGES, 1)
    size = log_bytes(brokers[0], "moving", 0)
    replication_throttle.apply(zk, {("moving", 0): [0, 1]}, CRAWL, current={("moving", 0): [0]})
    brokers[1].start()
    t0 = time.monotonic()
    b0 = log_bytes(brokers[1], "moving", 0)
    in_sync(zk, "steady", 60, "steady back in sync while moving crawls")
    produce(bootstrap, "steady", 20, "all")   # min.insync.replicas=2: needs broker 1 in sync
    copied = log_bytes(brokers[1], "moving", 0) - b0
    assert copy_bound_s(copied, CRAWL) <= time.monotonic() - t0
    assert log_bytes(brokers[1], "moving", 0) < size, "moving caught up while throttled to a crawl"

    replication_throttle.clear(zk, ["moving"])
    default = ConfigSource.DEFAULT_CONFIG.value
    expected = {(ResourceType.BROKER, "0"): {rq.LEADER_RATE: (str(rq.UNLIMITED), default),
                                             rq.FOLLOWER_RATE: (str(rq.UNLIMITED), default)},
                (ResourceType.TOPIC, "moving"): {rq.LEADER_REPLICAS: ("", default),
                                                 rq.FOLLOWER_REPLICAS: ("", default)}}
    try:
        wait_until(lambda: described(expected), 30, what="the throttle cleared on broker 0")
    except AssertionError as exc:
        raise AssertionError(f"{exc}; last described {seen}") from None
    # at CRAWL, the rest would take minutes (copy_bound_s); cleared, it comes at once
    remaining = size - log_bytes(brokers[1], "moving", 0)
    assert copy_bound_s(remaining, CRAWL) > 60
    in_sync(zk, "moving", 60, "moving caught up once the throttle is cleared")
    assert log_bytes(brokers[1], "moving", 0) == size
