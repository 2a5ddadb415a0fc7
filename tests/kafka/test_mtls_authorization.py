"""Mutual TLS between brokers with the ACL authorizer: a broker is known by its certificate's subject.

Three real brokers, a real ZooKeeper, certificates made by the test, each broker with its own (subject
``CN=broker<i>,O=ingest-test``). The inter-broker listener is SSL with ``ssl.client.auth=required``; each
broker registers the subject of its own keystore certificate as its principal (``User:CN=broker<i>,...``,
the principal the other brokers give its follower's TLS connection), so the replica identity check lets
each follower fetch as itself: with ClusterAction granted to the three DNs, all three replicas get in
sync and an acks=all produce is acknowledged and read back. A client with a certificate the brokers
trust and ClusterAction, but another subject than the broker's, forging a follower fetch, is refused
(CLUSTER_AUTHORIZATION_FAILED), and so is a broker's own certificate claiming to be another broker.
"""
from __future__ import annotations

import pytest

from ingest import znodes
from ingest.wire.errors import KafkaErrorCode as K
from ingest.wire.kafka.fetch import FetchPartition, FetchRequest, FetchResponse, FetchTopic
from ingest.wire.tls import client_context
from tests.harness import replicated as r
from tests.harness.brokers import BrokerProcess, stop_all
from tests.harness.net import free_port
from tests.harness.tls import handshake_refusals, make_pki
from tests.harness.zookeeper import fresh_chroot
from tests.kafka import authz
from tests.kafka.test_tls import confluent_roundtrip, expected, librdkafka_settings

pytestmark = pytest.mark.processes

TOPIC = "mtls-replicated"


def _forged_fetch(port: int, cert: tuple, claimed: int, epoch: int) -> int:
    """A Fetch as replica ``claimed`` over TLS with client certificate ``cert``: the partition's error code."""
    ctx = client_context(ca_location=str(cert[2]), certificate_location=str(cert[0]),
                         key_location=None if cert[1] is None else str(cert[1]))
    req = FetchRequest(replica_id=claimed, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20,
                       topics=(FetchTopic(TOPIC, (FetchPartition(0, current_leader_epoch=epoch, fetch_offset=0,
                                                                 log_start_offset=0, partition_max_bytes=1 << 20),)),))
    with authz.connect(port) as raw, ctx.wrap_socket(raw, server_hostname="127.0.0.1") as sock:
        authz.send(sock, req, 11)
        return authz.answer(sock, FetchResponse, 11).responses[0].partitions[0].error_code


def test_brokers_known_by_their_certificates_replicate_and_a_forged_replica_fetch_is_refused(zookeeper,
                                                                                              tmp_path_factory):
    from kazoo.client import KazooClient

    pki = make_pki(tmp_path_factory.mktemp("pki"))
    zk_connect = fresh_chroot(zookeeper, "/mtls-acl")
    brokers = []
    zk = KazooClient(hosts=zk_connect)
    zk.start(timeout=15)
    try:
        # the brokers' DNs may replicate, and so may mallory's (a cluster tool, say: but no broker); the
        # producer's may write and read the topic
        for name in ("broker0", "broker1", "broker2", "mallory"):
            authz.allow(zk, pki.principal(name), "ClusterAction", "Cluster", "kafka-cluster")
        producer = pki.client("producer")
        for op, rtype, name in (("Write", "Topic", TOPIC), ("Describe", "Topic", TOPIC), ("Read", "Topic", TOPIC),
                                ("Read", "Group", "tls")):
            authz.allow(zk, pki.principal("producer"), op, rtype, name)
        keystores = {}
        for i in range(3):
            b = BrokerProcess(i, tmp_path_factory.mktemp(f"mtls-broker{i}"), zk_connect=zk_connect)
            b.ssl_port = free_port()
            keystores[i] = pki.broker(f"broker{i}")
            b.overrides = r.replication_overrides(min_isr=2, **{
                "listeners": f"PLAINTEXT://127.0.0.1:{b.kafka_port},SSL://127.0.0.1:{b.ssl_port}",
                "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL",
                "inter.broker.listener.name": "SSL",
                "ssl.keystore.location": str(keystores[i]), "ssl.truststore.location": str(pki.ca),
                "ssl.client.auth": "required", "authorizer.class.name": authz.AUTHORIZER})
            brokers.append(b.start())
        for b in brokers:
            registered = znodes.parse_broker_principal(zk.retry(zk.get, znodes.broker_endpoints_path(b.broker_id))[0])
            assert registered == pki.principal(f"broker{b.broker_id}")
        zk.retry(zk.create, znodes.topic_dir(TOPIC), znodes.assignment_value({0: [0, 1, 2]}, znodes.KAFKA_FORMAT),
                 makepath=True)
        state = r.wait_for_state(zk, TOPIC, 0, lambda s: s.leader in (0, 1, 2) and set(s.isr) == {0, 1, 2}, 120,
                                 "all three replicas in the isr (the followers' fetches authorized)")
        bootstrap = ",".join(f"127.0.0.1:{b.ssl_port}" for b in brokers)
        assert confluent_roundtrip(bootstrap, TOPIC, librdkafka_settings(pki, producer)) == expected("confluent")

        leader = r.by_id(brokers, state.leader)
        follower, other = (b.broker_id for b in brokers if b.broker_id != state.leader)
        mallory = (*pki.client("mallory"), pki.ca)       # trusted, allowed ClusterAction, but no broker
        assert _forged_fetch(leader.ssl_port, mallory, follower, state.leader_epoch) == K.CLUSTER_AUTHORIZATION_FAILED
        as_other = (keystores[other], None, pki.ca)      # a real broker's certificate, claiming another broker's id
        assert _forged_fetch(leader.ssl_port, as_other, follower, state.leader_epoch) == K.CLUSTER_AUTHORIZATION_FAILED
        assert handshake_refusals("\n".join(b.output() for b in brokers)) == []
    finally:
        zk.stop()
        zk.close()
        stop_all(brokers)


def test_the_subject_of_a_keystore_is_the_principal_a_tls_peer_gets(tmp_path):
    """The principal a broker registers for itself is the one its TLS peers compute from its certificate."""
    from ingest.broker.authorizer.config import inter_broker_principal
    from ingest.broker.server_config import SERVER_CONFIG

    pki = make_pki(tmp_path)
    keystore = pki.broker("broker7")

    def principal(**keys) -> str:
        cfg = SERVER_CONFIG.parse({"brokerid": 7, "log.dir": str(tmp_path / "logs"),
                                   "ssl.keystore.location": str(keystore), **keys})
        return inter_broker_principal(cfg, "SSL")

    assert principal(**{"ssl.client.auth": "required"}) == pki.principal("broker7") == "User:CN=broker7,O=ingest-test"
    assert principal(**{"ssl.client.auth": "requested"}) == pki.principal("broker7")
    assert principal() == "User:ANONYMOUS"   # ssl.client.auth=none: the leader asks for no certificate
