"""A forged follower fetch on the 0.7 port: a plain client claims to be the followers of a 0.7 replicated topic.

Real ZooKeeper, three real brokers, a 0.7-format topic of replication factor 3 with ``min.insync.replicas=2``.
Both followers are paused (SIGSTOP); an acks=-1 PRODUCE_ACKS to the leader's 0.7 port waits for them. A
client from another address then sends REPLICA_FETCH (13) as each follower's id at the leader's new log
end (the followers themselves send REPLICA_FETCHES, 17: the same checks). Without security the leader believes it (the attack: the high watermark moves and a write only the
leader has is acknowledged). With an authorizer, the 0.7 port answers CLUSTER_AUTHORIZATION_FAILED (32)
to every broker-only request, the same fetch carried by the Kafka listener's private key (10001) from a
client not allowed ClusterAction is refused too, and nothing is acknowledged; the real followers, allowed
by the ACL, replicate over the Kafka listener (before the attack, and after a leader SIGKILL).
"""
from __future__ import annotations

import socket
import time

import pytest
from kazoo.client import KazooClient

from ingest import znodes
from ingest.broker.kafka.versions import PORT07_KEYS
from ingest.records.message_set import encode_message_set
from ingest.wire import protocol as p
from ingest.wire.errors import ErrorCode
from ingest.wire.kafka.port07 import (ReplicaFetch07Request, ReplicaFetch07Response, ReplicaFetches07Request,
                                      ReplicaFetches07Response)
from tests.harness import replicated as r
from tests.harness import sasl
from tests.harness.brokers import BrokerProcess, broker_cluster, stop_all
from tests.harness.brokers import broker_factory  # noqa: F401  (fixture)
from tests.harness.metrics import metrics_url, scrape, value
from tests.harness.net import free_port
from tests.harness.tls import handshake_refusals, make_pki
from tests.harness.zookeeper import fresh_chroot
from tests.kafka import authz

pytestmark = pytest.mark.processes

TOPIC = "orders07"
ATTACK_S = 5


def _cluster(broker_factory, zk_connect, zk, **extra):
    # the followers stay alive and in the isr while paused: the test ZooKeeper's session cap is 10 s, the attack
    # lasts 5 s
    overrides = r.replication_overrides(min_isr=2, lag_ms=30_000, session_ms=10_000, **extra)
    brokers = broker_factory(3, zk_connect, overrides=overrides)
    r.create_topic(zk, TOPIC, {0: [0, 1, 2]})
    ids = {b.broker_id for b in brokers}
    state = r.wait_for_state(zk, TOPIC, 0, lambda s: s.leader in ids and set(s.isr) == ids, 120,
                             "all three in the isr")
    return brokers, state


def _produce_acks(leader, data: bytes) -> socket.socket:
    s = authz.connect(leader.port, authz.BROKER_HOST, timeout=30)
    s.sendall(p.ProduceAcksRequest(-1, 20_000, p.ProduceRequest(TOPIC, 0, encode_message_set([data]))).encode())
    return s


def _forge(leader, followers, epoch: int, offset: int) -> list[int]:
    """One forged REPLICA_FETCH per follower id at ``offset`` on the 0.7 port, from another host; the codes."""
    codes = []
    for f in followers:
        req = p.ReplicaFetchRequest(f.broker_id, epoch, 0, p.FetchRequest(TOPIC, 0, offset, 1 << 20))
        with authz.connect(leader.port) as s:
            s.sendall(req.encode())
            codes.append(p.ReplicaFetchResponse.decode(p.recv_response(s)).error)
    return codes


def _attack(brokers, state):
    """Pause the followers, send an acks=-1 write, forge their fetches until it is answered or ATTACK_S pass.
    Returns (the produce's error or None if unanswered, the forged fetches' codes, the leader's hw then)."""
    leader = r.by_id(brokers, state.leader)
    followers = [b for b in brokers if b.broker_id != state.leader]
    end = r.log_end(leader, TOPIC, 0)
    for f in followers:
        r.sigstop(f)
    try:
        with _produce_acks(leader, r.payload(1)) as producer:
            producer.settimeout(0.5)
            codes: list[int] = []
            answered = None
            deadline = time.monotonic() + ATTACK_S
            while answered is None and time.monotonic() < deadline:
                new_end = r.log_end(leader, TOPIC, 0)
                codes.extend(_forge(leader, followers, state.leader_epoch, new_end if new_end > end else end))
                try:
                    answered = p.ProduceAckResponse.decode(p.recv_response(producer)).error
                except TimeoutError:
                    pass
            return answered, codes, r.high_watermark(leader, TOPIC, 0)
    finally:
        for f in followers:
            r.sigcont(f)


def _caught_up(leader) -> bool:
    """The new leader's high watermark at its log end (False while it has not yet taken the leadership that
    ZooKeeper already shows: it answers NOT_LEADER until then)."""
    try:
        return r.high_watermark(leader, TOPIC, 0) == r.log_end(leader, TOPIC, 0) > 0
    except AssertionError:
        return False


def test_without_security_a_forged_replica_fetch_on_the_07_port_is_believed(broker_factory, zk_connect, zk):
    """The attack on an open cluster (the default): why the 0.7 port must refuse broker-only requests.

    On a machine so loaded that the paused followers' sessions expire during the attack, the partition
    changes state under it (the write is refused); the attack is then made again on the new state, a few
    times at most."""
    brokers, state = _cluster(broker_factory, zk_connect, zk)
    ids = {b.broker_id for b in brokers}
    for _attempt in range(3):
        answered, codes, hw = _attack(brokers, state)
        if answered == 0:
            break
        state = r.wait_for_state(zk, TOPIC, 0, lambda s: s.leader in ids and set(s.isr) == ids, 120,
                                 "all three in the isr again")
    assert answered == 0 and ErrorCode.NONE in codes, (answered, codes)
    assert hw > 0


def test_without_security_a_07_topic_replicates_over_the_07_port_as_before(broker_factory, zk_connect, zk):
    """An unsecured cluster keeps its followers on the leader's 0.7 port: no broker registers the private keys
    (the 0.7 port takes the requests they carry), and the leader's 0.7 port counts the followers' fetches."""
    overrides = {**r.replication_overrides(min_isr=2), "metrics.port": 0}
    brokers = broker_factory(2, zk_connect, overrides=overrides)
    r.create_topic(zk, TOPIC, {0: [0, 1]})
    state = r.wait_for_state(zk, TOPIC, 0, lambda s: s.leader in (0, 1) and set(s.isr) == {0, 1}, 120,
                             "both in the isr")
    for b in brokers:
        data, _ = zk.get(znodes.broker_endpoints_path(b.broker_id))
        assert not znodes.parse_private_apis(data) & PORT07_KEYS, data
    assert r.AcksClient(brokers, timeout_ms=10_000).send(TOPIC, 0, [r.payload(1)]).status == r.ACKED
    leader = r.by_id(brokers, state.leader)
    fetches = value(scrape(metrics_url(leader.output)), "ingest_broker_requests_total", type="REPLICA_FETCHES")
    assert fetches, "the follower's fetches (REPLICA_FETCHES) did not reach the leader's 0.7 port"


def test_with_an_authorizer_the_07_port_refuses_a_forged_replica_fetch_and_acknowledges_nothing(
        broker_factory, zk_connect, zk):
    authz.brokers_acl(zk)
    brokers, state = _cluster(broker_factory, zk_connect, zk, **{"authorizer.class.name": authz.AUTHORIZER})
    leader = r.by_id(brokers, state.leader)
    answered, codes, hw = _attack(brokers, state)
    assert codes and set(codes) == {ErrorCode.CLUSTER_AUTHORIZATION_FAILED}, codes
    # unanswered (or, on a machine so loaded that the paused followers' sessions expired, refused)
    assert answered != 0, "the write was acknowledged while only the leader had it"
    assert hw == 0
    # the same fetch carried by the Kafka listener's private key, from a host not allowed ClusterAction
    for f in (b for b in brokers if b.broker_id != state.leader):
        req = p.ReplicaFetchRequest(f.broker_id, state.leader_epoch, 0, p.FetchRequest(TOPIC, 0, 0, 1 << 20))
        with authz.connect(leader.kafka_port) as s:
            authz.send(s, ReplicaFetch07Request(req.encode()[6:]), 0)   # the body after size and type
            resp = authz.answer(s, ReplicaFetch07Response, 0)
        assert p.ReplicaFetchResponse.decode(resp.response).error == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        many = p.ReplicaFetchesRequest(f.broker_id, 0, 1, 1 << 20, (
            p.ReplicaPartitionFetch(TOPIC, 0, state.leader_epoch, 0, 1 << 20),))
        with authz.connect(leader.kafka_port) as s:
            authz.send(s, ReplicaFetches07Request(many.encode()[6:]), 0)
            resp = authz.answer(s, ReplicaFetches07Response, 0)
        assert p.ReplicaFetchesResponse.decode(resp.response).error == ErrorCode.CLUSTER_AUTHORIZATION_FAILED


def test_with_an_authorizer_a_07_topic_replicates_over_the_kafka_listener_and_fails_over(
        broker_factory, zk_connect, zk):
    """acks=-1 writes are acknowledged only once both followers copied them (over the Kafka listener: the
    0.7 port refuses their fetches); after the leader's SIGKILL the new leader has every one of them."""
    authz.brokers_acl(zk)
    overrides = r.replication_overrides(min_isr=2, **{"authorizer.class.name": authz.AUTHORIZER})
    brokers = broker_factory(3, zk_connect, overrides=overrides)
    r.create_topic(zk, TOPIC, {0: [0, 1, 2]})
    ids = {b.broker_id for b in brokers}
    state = r.wait_for_state(zk, TOPIC, 0, lambda s: s.leader in ids and set(s.isr) == ids, 120,
                             "all three in the isr")
    client = r.AcksClient(brokers, timeout_ms=10_000)
    acked = []
    for i in range(20):
        result = client.send(TOPIC, 0, [r.payload(i)])
        assert result.status == r.ACKED, result
        acked.append(i)
    leader = r.by_id(brokers, state.leader)
    assert r.high_watermark(leader, TOPIC, 0) == r.log_end(leader, TOPIC, 0)
    leader.kill()
    new = r.wait_for_state(zk, TOPIC, 0, lambda s: s.leader in ids - {state.leader}, 120, "a new leader")
    survivor = r.by_id(brokers, new.leader)
    r.wait_for(lambda: _caught_up(survivor), 60,
               "the new leader's high watermark at its log end (the other follower caught up)")
    got = [r.payload_id(m[2]) for m in r.read_committed(survivor, TOPIC, 0)]
    assert got == acked
    assert r.AcksClient(brokers, timeout_ms=10_000).send(TOPIC, 0, [r.payload(99)]).status == r.ACKED


def test_a_07_topic_replicates_over_an_ssl_inter_broker_listener(zookeeper, tmp_path_factory):
    """An SSL listener is security configured: the 0.7 port refuses REPLICA_FETCH, so acks=-1 writes of a 0.7
    topic are acknowledged only because the followers fetch over TLS (``ssl.client.auth=required``: each
    presents the broker certificate)."""
    pki = make_pki(tmp_path_factory.mktemp("pki"))
    zk_connect = fresh_chroot(zookeeper, "/tls07")
    brokers = []
    zk = KazooClient(hosts=zk_connect)
    zk.start(timeout=15)
    try:
        for i in range(3):
            b = BrokerProcess(i, tmp_path_factory.mktemp(f"tls07-broker{i}"), zk_connect=zk_connect)
            ssl_port = free_port()
            b.overrides = r.replication_overrides(min_isr=2, **{
                "listeners": f"PLAINTEXT://127.0.0.1:{b.kafka_port},SSL://127.0.0.1:{ssl_port}",
                "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL",
                "inter.broker.listener.name": "SSL",
                "ssl.keystore.location": str(pki.server), "ssl.truststore.location": str(pki.ca),
                "ssl.client.auth": "required"})
            brokers.append(b.start())
        r.create_topic(zk, TOPIC, {0: [0, 1, 2]})
        state = r.wait_for_state(zk, TOPIC, 0, lambda s: s.leader in (0, 1, 2) and set(s.isr) == {0, 1, 2}, 120,
                                 "all three in the isr")
        client = r.AcksClient(brokers, timeout_ms=10_000)
        for i in range(10):
            assert client.send(TOPIC, 0, [r.payload(i)]).status == r.ACKED
        assert set(_forge(r.by_id(brokers, state.leader), [b for b in brokers if b.broker_id != state.leader],
                          state.leader_epoch, 0)) == {ErrorCode.CLUSTER_AUTHORIZATION_FAILED}
        r.by_id(brokers, state.leader).kill()
        new = r.wait_for_state(zk, TOPIC, 0, lambda s: s.leader not in (-1, state.leader), 60, "a new leader")
        survivor = r.by_id(brokers, new.leader)
        r.wait_for(lambda: _caught_up(survivor), 60,
                   "the new leader's high watermark at its log end (the other follower caught up)")
        assert [r.payload_id(m[2]) for m in r.read_committed(survivor, TOPIC, 0)] == list(range(10))
        assert handshake_refusals("\n".join(b.output() for b in brokers)) == []
    finally:
        zk.stop()
        zk.close()
        stop_all(brokers)


def test_a_07_topic_replicates_with_followers_logged_in_on_a_sasl_inter_broker_listener(zookeeper,
                                                                                         tmp_path_factory):
    """SASL_PLAINTEXT inter-broker listener, the authorizer on, no ACL for anyone but the super user
    ``User:broker``: acks=-1 writes of a 0.7 topic are acknowledged, so the followers' ReplicaFetch07 were
    authorized as the broker user their SCRAM login proved, and the topic fails over."""
    zk_connect = fresh_chroot(zookeeper, "/sasl07")
    sasl.add_user(zk_connect, sasl.BROKER_USER, sasl.BROKER_PASSWORD, "SCRAM-SHA-512")
    overrides = sasl.sasl_broker_overrides(**r.replication_overrides(min_isr=2))
    overrides.update({"authorizer.class.name": "ingest.acls", "super.users": f"User:{sasl.BROKER_USER}"})
    brokers = broker_cluster(tmp_path_factory, n=3, zk_connect=zk_connect, overrides=overrides)
    zk = KazooClient(hosts=zk_connect)
    zk.start(timeout=15)
    try:
        r.create_topic(zk, TOPIC, {0: [0, 1, 2]})
        state = r.wait_for_state(zk, TOPIC, 0, lambda s: s.leader in (0, 1, 2) and set(s.isr) == {0, 1, 2}, 120,
                                 "all three in the isr")
        client = r.AcksClient(brokers, timeout_ms=10_000)
        for i in range(10):
            assert client.send(TOPIC, 0, [r.payload(i)]).status == r.ACKED
        r.by_id(brokers, state.leader).kill()
        new = r.wait_for_state(zk, TOPIC, 0, lambda s: s.leader not in (-1, state.leader), 60, "a new leader")
        survivor = r.by_id(brokers, new.leader)
        r.wait_for(lambda: _caught_up(survivor), 60,
                   "the new leader's high watermark at its log end (the other follower caught up)")
        assert [r.payload_id(m[2]) for m in r.read_committed(survivor, TOPIC, 0)] == list(range(10))
    finally:
        zk.stop()
        zk.close()
        stop_all(brokers)
