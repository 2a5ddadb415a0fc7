"""A forged follower fetch: a plain client claims to be the followers of a Kafka topic's partition.

Real ZooKeeper, three real brokers, a Kafka topic of replication factor 3 with ``min.insync.replicas=2``.
Both followers are paused (SIGSTOP); an acks=-1 produce to the leader waits for them. A client from
another address then sends Fetch requests with ``replica_id`` = each follower's id at the leader's new
log end: without an authorizer the leader believes them (that is the attack: it moves the high watermark
and acknowledges a write that only the leader has). With an authorizer whose ACLs allow ClusterAction
only to the brokers (ANONYMOUS from the brokers' address), the forged fetches are answered
CLUSTER_AUTHORIZATION_FAILED, the high watermark does not move, and the write is not acknowledged (the
real followers, allowed by the ACL, had replicated the topic into the in-sync set before).
"""
from __future__ import annotations

import time

import pytest

from ingest import znodes
from ingest.records.builder import SimpleRecord, build_batch
from ingest.wire.errors import KafkaErrorCode as K
from ingest.wire.kafka.list_offsets import (ListOffsetsPartition, ListOffsetsRequest, ListOffsetsResponse,
                                            ListOffsetsTopic)
from ingest.wire.kafka.fetch import FetchPartition, FetchRequest, FetchResponse, FetchTopic
from ingest.wire.kafka.offset_for_leader_epoch import (OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse,
                                                       OffsetForLeaderPartition, OffsetForLeaderTopic)
from ingest.wire.kafka.produce import PartitionProduceData, ProduceRequest, ProduceResponse, TopicProduceData
from tests.harness import replicated as r
from tests.harness.brokers import broker_factory  # noqa: F401  (fixture)
from tests.kafka import authz

pytestmark = pytest.mark.processes

TOPIC = "orders"
PRODUCE_V = 9
FETCH_V = 11
ATTACK_S = 5


def _cluster(broker_factory, zk_connect, zk, **extra):
    # the followers stay alive and in the isr while paused: the test ZooKeeper's session cap is 10 s, the attack
    # lasts 5 s
    overrides = r.replication_overrides(min_isr=2, lag_ms=30_000, session_ms=10_000, **extra)
    brokers = broker_factory(3, zk_connect, overrides=overrides)
    zk.retry(zk.create, znodes.topic_dir(TOPIC), znodes.assignment_value({0: [0, 1, 2]}, znodes.KAFKA_FORMAT),
             makepath=True)
    ids = {b.broker_id for b in brokers}
    state = r.wait_for_state(zk, TOPIC, 0, lambda s: s.leader in ids and set(s.isr) == ids, 120,
                             "all three in the isr")
    return brokers, state


def _forge(leader, followers, epoch: int, offset: int) -> list[int]:
    """One forged fetch per follower id at ``offset``; the partition's error code of each answer."""
    codes = []
    for f in followers:
        req = FetchRequest(replica_id=f.broker_id, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20,
                           topics=(FetchTopic(TOPIC, (FetchPartition(0, current_leader_epoch=epoch, fetch_offset=offset,
                                                                     log_start_offset=0,
                                                                     partition_max_bytes=1 << 20),)),))
        resp = authz.call(leader.kafka_port, req, FETCH_V, FetchResponse)
        codes.append(resp.responses[0].partitions[0].error_code)
    return codes


def _attack(brokers, state):
    """Pause the followers, send an acks=-1 write, forge their fetches until the write is answered or
    ATTACK_S pass. Returns (the produce's error code or None if unanswered, the forged fetches' codes, the
    leader's high watermark then)."""
    leader = r.by_id(brokers, state.leader)
    followers = [b for b in brokers if b.broker_id != state.leader]
    batch = bytes(build_batch([SimpleRecord(b"the only copy", b"k", (), int(time.time() * 1000))]))
    for f in followers:
        r.sigstop(f)
    try:
        with authz.connect(leader.kafka_port, authz.BROKER_HOST) as producer:
            producer.settimeout(30)
            authz.send(producer, ProduceRequest(None, -1, 20_000, (TopicProduceData(TOPIC, (
                PartitionProduceData(0, batch),)),)), PRODUCE_V)
            codes: list[int] = []
            producer.settimeout(0.5)
            answered = None
            deadline = time.monotonic() + ATTACK_S
            while answered is None and time.monotonic() < deadline:
                codes.extend(_forge(leader, followers, state.leader_epoch, 1))
                try:
                    resp = authz.answer(producer, ProduceResponse, PRODUCE_V)
                    answered = resp.responses[0].partition_responses[0].error_code
                except TimeoutError:
                    pass
            # measured while the followers are still paused: only a forged fetch could have moved it
            return answered, codes, _high_watermark(leader)
    finally:
        for f in followers:
            r.sigcont(f)


def test_without_an_authorizer_a_forged_follower_fetch_is_believed(broker_factory, zk_connect, zk):
    """The attack as it stands on an open cluster (the default: no authorizer): documents why an
    inter-broker identity check is needed."""
    brokers, state = _cluster(broker_factory, zk_connect, zk)
    answered, codes, hw = _attack(brokers, state)
    assert hw == 1
    assert answered == 0 and 0 in codes, (answered, codes)   # (a fetch before the append: out of range)


def test_with_an_authorizer_a_forged_follower_fetch_is_refused_and_acknowledges_nothing(broker_factory, zk_connect,
                                                                                         zk):
    authz.brokers_acl(zk)
    authz.allow(zk, "User:ANONYMOUS", "Write", "Topic", TOPIC, host=authz.BROKER_HOST)
    brokers, state = _cluster(broker_factory, zk_connect, zk, **{"authorizer.class.name": authz.AUTHORIZER})
    answered, codes, hw = _attack(brokers, state)
    assert codes and set(codes) == {K.CLUSTER_AUTHORIZATION_FAILED}, codes
    # unanswered (or, on a machine so loaded that the paused followers' sessions expired, refused)
    assert answered != 0, "the write was acknowledged while only the leader had it"
    assert hw == 0
    leader = r.by_id(brokers, state.leader)
    for f in (b for b in brokers if b.broker_id != state.leader):       # the truncation step is refused too
        req = OffsetForLeaderEpochRequest(f.broker_id, (OffsetForLeaderTopic(TOPIC, (
            OffsetForLeaderPartition(0, state.leader_epoch, state.leader_epoch),)),))
        answer = authz.call(leader.kafka_port, req, 3, OffsetForLeaderEpochResponse)
        assert answer.topics[0].partitions[0].error_code == K.CLUSTER_AUTHORIZATION_FAILED


def _high_watermark(broker) -> int:
    req = ListOffsetsRequest(-1, 0, (ListOffsetsTopic(TOPIC, (ListOffsetsPartition(0, -1, -1),)),))
    part = authz.call(broker.kafka_port, req, 7, ListOffsetsResponse, authz.BROKER_HOST).topics[0].partitions[0]
    assert part.error_code == 0, part
    return part.offset
