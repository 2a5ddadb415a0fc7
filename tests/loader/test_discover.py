"""Broker discovery for the plan: through ZooKeeper's /brokers/ids (real ZooKeeper, real broker)."""
from __future__ import annotations

import pytest

from ingest.errors import BrokerUnavailableError, ConfigError
from ingest.loader.config import LOADER_CONFIG
from ingest.loader.discover import broker_addresses, discover
from tests.harness.brokers import broker_cluster, stop_all

pytestmark = pytest.mark.processes  # broker processes


def test_zookeeper_discovery_finds_every_partition_with_offsets(zk_connect, tmp_path_factory):
    brokers = broker_cluster(tmp_path_factory, n=1, zk_connect=zk_connect, num_partitions=3, first_id=7)
    try:
        from ingest.client.producer import Producer

        with Producer({"zk.connect": zk_connect, "topic.format.default": "0.7"}) as p:
            p.send("zk-topic", [b"a", b"b"], key="x")
        cfg = LOADER_CONFIG.parse({"destination": "/tmp/unused", "zk.connect": zk_connect,
                                   "registry.url": "http://127.0.0.1:1"})
        assert broker_addresses(cfg) == [(brokers[0].host, brokers[0].port)]
        snaps = [s for s in discover(cfg) if s.topic == "zk-topic"]
        assert sorted(s.partition for s in snaps) == [0, 1, 2] and {s.broker_id for s in snaps} == {7}
        assert sum(s.latest - s.earliest for s in snaps) > 0
    finally:
        stop_all(brokers)


def test_a_zookeeper_loader_also_finds_the_kafka_format_topics_through_the_registered_listeners(
        zk_connect, tmp_path_factory):
    """Without ``bootstrap.servers``, the listeners under /brokers/endpoints: a ZooKeeper-configured loader
    misses none of the cluster's topics, whichever kind its producers created."""
    from confluent_kafka import Producer as KafkaProducer

    brokers = broker_cluster(tmp_path_factory, n=1, zk_connect=zk_connect, num_partitions=2, first_id=3)
    try:
        p = KafkaProducer({"bootstrap.servers": f"{brokers[0].host}:{brokers[0].kafka_port}"})
        for i in range(10):
            p.produce("kafka-topic", value=b"v%d" % i, partition=i % 2)
        assert p.flush(30) == 0
        cfg = LOADER_CONFIG.parse({"destination": "/tmp/unused", "zk.connect": zk_connect,
                                   "registry.url": "http://127.0.0.1:1"})
        snaps = [s for s in discover(cfg) if s.topic == "kafka-topic"]
        assert sorted((s.partition, s.kind, s.earliest, s.latest) for s in snaps) == [
            (0, "kafka", 0, 5), (1, "kafka", 0, 5)]
    finally:
        stop_all(brokers)


def test_no_broker_source_is_a_config_error(zk_connect):
    with pytest.raises(ConfigError, match="needs 'brokers'"):
        broker_addresses(LOADER_CONFIG.parse({"destination": "/x", "registry.url": "http://r"}))
    with pytest.raises(BrokerUnavailableError, match="no broker registered"):
        broker_addresses(LOADER_CONFIG.parse({"destination": "/x", "registry.url": "http://r", "zk.connect": zk_connect}))


def test_a_broker_that_does_not_answer_is_left_out_and_only_no_answer_at_all_fails(tmp_path_factory):
    from ingest.loader.discover import discover_all
    from tests.harness.net import free_port
    from tests.harness.wire import WireClient

    brokers = broker_cluster(tmp_path_factory, n=1, num_partitions=1)
    dead = f"127.0.0.1:{free_port()}"     # nothing listens there
    try:
        with WireClient(brokers[0].host, brokers[0].port) as c:
            assert c.produce_ack("static-topic", [b"a"]).error == 0
        cfg = LOADER_CONFIG.parse({"destination": "/tmp/unused", "registry.url": "http://127.0.0.1:1",
                                   "brokers": f"{dead},{brokers[0].host}:{brokers[0].port}"})
        found = discover_all(cfg)
        assert [(s.topic, s.partition) for s in found.snapshots] == [("static-topic", 0)]
        (left,) = found.left_out
        assert (left.broker, left.broker_id, left.topic) == (dead, None, None) and "METADATA" in left.reason
        with pytest.raises(BrokerUnavailableError, match=f"reset-offsets needs every partition.*broker {dead}"):
            found.complete("reset-offsets")
    finally:
        stop_all(brokers)
    with pytest.raises(BrokerUnavailableError, match="no broker answered METADATA"):
        discover_all(cfg)
