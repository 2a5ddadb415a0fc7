"""Leader SIGKILLs on a secured cluster: TLS + SASL + the ACL authorizer + acks=all, nothing acknowledged lost.

Real ZooKeeper, three real broker processes whose one Kafka listener speaks SASL_SSL to clients and to
the other brokers (followers log in over TLS as the SCRAM user ``broker``), certificates made by the test,
the authorizer on with deny by default, ``min.insync.replicas=2``. Nobody is a super user: every right
comes from an ACL in ZooKeeper (``broker``: ClusterAction on the cluster, so its replica fetches pass the
replica identity check; ``producer``: Write and Describe on the topic, IdempotentWrite on the cluster;
``reader``: Read and Describe on the topic, Read on its groups).

A confluent-kafka producer logged in as ``producer`` (SCRAM-SHA-512 over TLS, acks=all, retries) sends
distinct values while the partition's leader is SIGKILLed and restarted (the helpers of
tests/replication/test_kafka_topics.py); afterwards ``reader`` reads every acknowledged value back:

- idempotence on: each acknowledged value exactly once, ``INGEST_SECURE_KILLS`` kills (5 in the suite,
  20 or more for the proof run, docs/testing.md; counts in docs/security.md);
- idempotence off: every acknowledged value at least once (retries may store a value twice), one kill.
"""
from __future__ import annotations

import os

import pytest

from tests.harness import sasl as s
from tests.harness.brokers import broker_factory  # noqa: F401  (fixture)
from tests.harness.tls import make_pki
from tests.kafka.authz import allow
from tests.replication.test_kafka_idempotence import _exactly_once
from tests.replication.test_kafka_topics import TOPIC, AckedProducer, _bootstrap, _check, _cluster, \
    _through_leader_kills

pytestmark = pytest.mark.processes

KILLS = int(os.environ.get("INGEST_SECURE_KILLS", "5"))
PRODUCER, PRODUCER_PW = "producer", "producer-secret"
READER, READER_PW = "reader", "reader-secret"
MECHANISM = "SCRAM-SHA-512"


def _secured_cluster(broker_factory, zk_connect, zk, tmp_path):
    """Users and ACLs first (the brokers' followers need theirs to get in sync), then the brokers."""
    pki = make_pki(tmp_path / "pki")
    for user, pw in ((s.BROKER_USER, s.BROKER_PASSWORD), (PRODUCER, PRODUCER_PW), (READER, READER_PW)):
        s.add_user(zk_connect, user, pw, MECHANISM)
    allow(zk, f"User:{s.BROKER_USER}", "ClusterAction", "Cluster", "kafka-cluster")
    for op in ("Write", "Describe"):
        allow(zk, f"User:{PRODUCER}", op, "Topic", TOPIC)
    allow(zk, f"User:{PRODUCER}", "IdempotentWrite", "Cluster", "kafka-cluster")
    for op in ("Read", "Describe"):
        allow(zk, f"User:{READER}", op, "Topic", TOPIC)
    for group in ("proof", "hw"):   # the groups of the helpers' consumers
        allow(zk, f"User:{READER}", "Read", "Group", group)
    overrides = s.sasl_broker_overrides(**{
        "listener.security.protocol.map": "PLAINTEXT:SASL_SSL", "ssl.keystore.location": str(pki.server),
        "ssl.truststore.location": str(pki.ca), "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "sasl.mechanism.inter.broker.protocol": MECHANISM})
    brokers, _state = _cluster(broker_factory, zk_connect, zk, overrides)
    tls = {"security.protocol": "SASL_SSL", "ssl.ca.location": str(pki.ca), "sasl.mechanism": MECHANISM}
    return brokers, {**tls, "sasl.username": PRODUCER, "sasl.password": PRODUCER_PW}, \
        {**tls, "sasl.username": READER, "sasl.password": READER_PW}


def test_leader_kills_under_tls_sasl_and_acls_with_idempotence_store_each_acknowledged_message_once(
        broker_factory, zk_connect, zk, tmp_path):
    brokers, producing, reading = _secured_cluster(broker_factory, zk_connect, zk, tmp_path)
    bootstrap = _bootstrap(brokers)
    producer = AckedProducer(bootstrap, **producing, **{"enable.idempotence": True,
                                                        "max.in.flight.requests.per.connection": 5,
                                                        "message.timeout.ms": 300_000})
    _through_leader_kills(zk, brokers, producer, KILLS)
    _exactly_once(bootstrap, producer, reading)


def test_a_leader_kill_under_tls_sasl_and_acls_without_idempotence_loses_no_acknowledged_message(
        broker_factory, zk_connect, zk, tmp_path):
    brokers, producing, reading = _secured_cluster(broker_factory, zk_connect, zk, tmp_path)
    bootstrap = _bootstrap(brokers)
    producer = AckedProducer(bootstrap, **producing)
    _through_leader_kills(zk, brokers, producer, 1)
    _check(bootstrap, producer, reading)
