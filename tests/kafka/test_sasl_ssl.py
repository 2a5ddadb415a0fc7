"""SASL_SSL: the TLS of an SSL listener with the SASL login on top, on the client listener and between
brokers, with real clients, three real brokers, a real ZooKeeper and certificates made by the test.

Each client logs in with another mechanism over TLS and produces (acks=all, three in-sync replicas whose
followers log in over TLS too) and consumes; a wrong password is refused over TLS as over SASL_PLAINTEXT,
and a client that does not speak TLS to the SASL_SSL port gets nowhere.
"""
from __future__ import annotations

import pytest

from ingest.client.kafka.fetcher import KafkaFetcher
from ingest.errors import BrokerUnavailableError, MalformedResponseError, SaslAuthenticationError
from tests.harness import sasl as s
from tests.harness.tls import make_pki
from tests.kafka.test_sasl import (ALICE, ALICE_PW, GENERIC, _aiokafka_roundtrip, _confluent_roundtrip,
                                   _kafka_python_roundtrip, _own_client_roundtrip)

pytestmark = pytest.mark.processes


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def cluster(zookeeper, tmp_path_factory, pki):
    with s.sasl_cluster(zookeeper, tmp_path_factory, "/sasl-ssl", **{
            "listener.security.protocol.map": "PLAINTEXT:SASL_SSL", "ssl.keystore.location": str(pki.server),
            "ssl.truststore.location": str(pki.ca)}) as c:
        yield c


def test_each_client_logs_in_over_tls_and_the_followers_too(cluster, pki):
    from aiokafka.helpers import create_ssl_context

    values = [f"v{i}".encode() for i in range(4)]
    topic = cluster.topic("sasl-ssl-confluent")   # in sync: the followers logged in over TLS
    tls = {"security.protocol": "SASL_SSL", "ssl.ca.location": str(pki.ca)}
    assert _confluent_roundtrip(cluster.bootstrap, topic, values, "SCRAM-SHA-512", ALICE, ALICE_PW, tls) == values
    topic = cluster.topic("sasl-ssl-kafka-python")
    tls = {"security_protocol": "SASL_SSL", "ssl_cafile": str(pki.ca)}
    assert _kafka_python_roundtrip(cluster.bootstrap, topic, values, "PLAIN", ALICE, ALICE_PW, tls) == values
    topic = cluster.topic("sasl-ssl-aiokafka")
    tls = {"security_protocol": "SASL_SSL", "ssl_context": create_ssl_context(cafile=str(pki.ca))}
    assert _aiokafka_roundtrip(cluster.bootstrap, topic, values, "SCRAM-SHA-256", ALICE, ALICE_PW, tls) == values
    tls = {"security.protocol": "SASL_SSL", "ssl.ca.location": str(pki.ca)}
    assert _own_client_roundtrip(cluster, "SCRAM-SHA-512", ALICE, ALICE_PW, "ssl", tls)


def test_a_wrong_password_over_tls_and_a_client_without_tls_are_refused(cluster, pki):
    login = {"security.protocol": "SASL_SSL", "ssl.ca.location": str(pki.ca), "sasl.mechanism": "SCRAM-SHA-256",
             "sasl.username": ALICE, "sasl.password": "wrong"}
    with pytest.raises(SaslAuthenticationError) as info:
        with KafkaFetcher({"bootstrap.servers": cluster.bootstrap, **login}) as f:
            f.partitions_for("anything")
    assert f"{GENERIC} SCRAM-SHA-256" in str(info.value)
    plain = {**login, "security.protocol": "SASL_PLAINTEXT", "sasl.password": ALICE_PW}
    with pytest.raises((BrokerUnavailableError, MalformedResponseError)):
        with KafkaFetcher({"bootstrap.servers": cluster.bootstrap, "request.timeout.ms": 5000, **plain}) as f:
            f.partitions_for("anything")
