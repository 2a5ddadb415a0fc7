"""SASL principals meet the ACL authorizer: three brokers whose SASL_PLAINTEXT inter-broker listener
authenticates their followers as ``User:broker`` (a super user), and a client user whose rights come only
from ACLs. Real brokers, a real ZooKeeper, confluent-kafka.

The followers' replica fetches are authorized by the principal their SASL login proved (all three replicas
in sync); ``alice`` cannot write a topic until an ACL names ``User:alice``, and then can.
"""
from __future__ import annotations

import time
import uuid

import pytest

from tests.harness import sasl as s
from tests.kafka.authz import allow
from tests.kafka.test_sasl import ALICE, ALICE_PW

pytestmark = pytest.mark.processes


@pytest.fixture(scope="module")
def cluster(zookeeper, tmp_path_factory):
    with s.sasl_cluster(zookeeper, tmp_path_factory, "/sasl-acl", **{
            "authorizer.class.name": "ingest.acls", "super.users": f"User:{s.BROKER_USER}"}) as c:
        yield c


def _produce(bootstrap: str, topic: str, mechanism: str) -> list:
    from confluent_kafka import Producer

    results = []
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "message.timeout.ms": 10_000,
                  **s.confluent_settings(mechanism, ALICE, ALICE_PW)})
    p.produce(topic, b"v", partition=0, on_delivery=lambda err, _m: results.append(err))
    p.flush(30)
    return results


def test_replica_fetches_pass_as_the_sasl_broker_user_and_client_rights_come_from_acls(cluster):
    topic = cluster.topic(f"acl-{uuid.uuid4().hex[:6]}")   # in sync: the followers' fetches were authorized
    refused = _produce(cluster.bootstrap, topic, "SCRAM-SHA-256")
    assert len(refused) == 1 and refused[0] is not None and refused[0].name() == "TOPIC_AUTHORIZATION_FAILED", refused
    allow(cluster.zk, f"User:{ALICE}", "Write", "Topic", topic)
    allow(cluster.zk, f"User:{ALICE}", "Describe", "Topic", topic)
    deadline = time.monotonic() + 30
    while True:   # every broker applies the new ACL from its watch
        written = _produce(cluster.bootstrap, topic, "PLAIN")
        if written == [None]:
            break
        assert time.monotonic() < deadline, f"alice still refused 30 s after the ACL: {written}"
        time.sleep(0.5)
