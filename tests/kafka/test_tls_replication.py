"""Three brokers whose inter-broker listener is SSL (with ``ssl.client.auth=required``: a follower must
present the broker's own certificate): an acks=all produce over SSL is acknowledged only once the
followers, fetching over TLS, have it; after the leader is SIGKILLed, the new leader serves every
acknowledged message back over SSL."""
from __future__ import annotations

import pytest

from ingest import znodes
from tests.harness import replicated as r
from tests.harness.brokers import BrokerProcess, stop_all
from tests.harness.net import free_port
from tests.harness.tls import handshake_refusals, make_pki
from tests.harness.zookeeper import fresh_chroot
from tests.kafka.test_tls import N, confluent_roundtrip, expected, librdkafka_settings

pytestmark = pytest.mark.processes

TOPIC = "tls-replicated"


def test_acks_all_is_replicated_over_an_ssl_inter_broker_listener(zookeeper, tmp_path_factory):
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
    from kazoo.client import KazooClient

    pki = make_pki(tmp_path_factory.mktemp("pki"))
    zk_connect = fresh_chroot(zookeeper, "/tls")
    brokers = []
    zk = KazooClient(hosts=zk_connect)
    zk.start(timeout=15)
    try:
        for i in range(3):
            b = BrokerProcess(i, tmp_path_factory.mktemp(f"tls-broker{i}"), zk_connect=zk_connect)
            b.ssl_port = free_port()
            b.overrides = r.replication_overrides(min_isr=2, **{
                "listeners": f"PLAINTEXT://127.0.0.1:{b.kafka_port},SSL://127.0.0.1:{b.ssl_port}",
                "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL",
                "inter.broker.listener.name": "SSL",
                "ssl.keystore.location": str(pki.server), "ssl.truststore.location": str(pki.ca),
                "ssl.client.auth": "required"})
            brokers.append(b.start())
        zk.retry(zk.create, znodes.topic_dir(TOPIC), znodes.assignment_value({0: [0, 1, 2]}, znodes.KAFKA_FORMAT),
                 makepath=True)
        r.wait_for_state(zk, TOPIC, 0, lambda s: s.leader in (0, 1, 2) and set(s.isr) == {0, 1, 2}, 120,
                         "all three replicas in the isr")
        client = pki.client("producer")
        bootstrap = ",".join(f"127.0.0.1:{b.ssl_port}" for b in brokers)
        assert confluent_roundtrip(bootstrap, TOPIC, librdkafka_settings(pki, client)) == expected("confluent")
        # the followers are in sync again at the end (they fetched everything over TLS)
        state = r.wait_for_state(zk, TOPIC, 0, lambda s: set(s.isr) == {0, 1, 2}, 60, "the isr full again")
        r.by_id(brokers, state.leader).kill()
        new = r.wait_for_state(zk, TOPIC, 0, lambda s: s.leader not in (-1, state.leader), 60, "a new leader")
        live = [b for b in brokers if b.broker_id != state.leader]
        c = Consumer({"bootstrap.servers": ",".join(f"127.0.0.1:{b.ssl_port}" for b in live), "group.id": "tls",
                      "enable.auto.commit": False, **librdkafka_settings(pki, client)})
        try:
            c.assign([TopicPartition(TOPIC, 0, OFFSET_BEGINNING)])
            got, idle = [], 0
            while len(got) < N and idle < 30:
                batch = c.consume(1000, timeout=1.0)
                idle = 0 if batch else idle + 1
                got += [m.value() for m in batch if m.error() is None]
        finally:
            c.close()
        assert got == expected("confluent"), f"new leader {new.leader} served {len(got)} of {N}"
        assert handshake_refusals("\n".join(b.output() for b in brokers)) == []
    finally:
        zk.stop()
        zk.close()
        stop_all(brokers)
