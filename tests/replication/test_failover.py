"""Failover by agreement, deterministically: a leader that appended messages its followers never
copied is killed, a follower takes over and writes different messages at the same offsets, and the
old leader, restarted, truncates its tail to agree with the new leader before following it."""
from __future__ import annotations

import glob
import pytest

from ingest import znodes
from ingest.wire import protocol as p
from ingest.records.message_batch import iter_messages
from ingest.records.message_set import encode_message_set
from tests.harness.brokers import RawClient, broker_factory  # noqa: F401
from tests.harness.wait import wait_until

pytestmark = pytest.mark.slow

TOPIC = "agree"


def state(zk) -> znodes.PartitionState:
    return znodes.PartitionState.parse(zk.get(znodes.partition_state_path(TOPIC, 0))[0])


def produce(b, payloads, acks: int) -> p.ProduceAckResponse:
    with RawClient(b.host, b.port) as c:
        req = p.ProduceAcksRequest(acks, 5000, p.ProduceRequest(TOPIC, 0, encode_message_set(payloads)))
        return p.ProduceAckResponse.decode(c.request(req))


def log_bytes(b) -> bytes:
    return b"".join(open(f, "rb").read() for f in sorted(glob.glob(f"{b.log_dir}/{TOPIC}-0/*.kafka")))


def test_a_restarted_leader_truncates_what_it_alone_had_and_then_follows(broker_factory, zk_connect, zk):
    brokers = broker_factory(n=3, zk_connect=zk_connect, overrides={
        "zk.sessiontimeout.ms": 2000, "replica.lag.time.max.ms": 30000, "min.insync.replicas": 1})
    zk.create(znodes.topic_dir(TOPIC), znodes.assignment_value({0: [0, 1, 2]}), makepath=True)
    wait_until(lambda: zk.exists(znodes.partition_state_path(TOPIC, 0)) and state(zk).leader == 0, what="leader 0")
    old = brokers[0]
    committed = [b"committed-%02d" % i for i in range(20)]
    assert produce(old, committed, -1).error == 0

    followers = brokers[1:]
    wait_until(lambda: all(len(log_bytes(f)) == len(log_bytes(old)) for f in followers), what="followers caught up")
    for f in followers:      # (SIGSTOP would not do: a held fetch answer would still reach their sockets)
        f.kill()
    alone = [b"only-on-the-old-leader-%02d" % i for i in range(10)]
    r = produce(old, alone, 1)                              # acks=1: the leader alone has it
    assert r.error == 0
    old.kill()
    for f in followers:
        f.start()

    wait_until(lambda: state(zk).leader in (1, 2), timeout=30, what="a follower elected")
    new = brokers[state(zk).leader]
    after = [b"after-failover-%02d" % i for i in range(5)]
    r = produce(new, after, -1)
    assert r.error == 0 and r.offset == len(log_bytes(new)) - len(encode_message_set(after))
    assert r.offset < len(log_bytes(old))                  # the new messages sit where the old tail was

    old.start()
    wait_until(lambda: log_bytes(old) == log_bytes(new) and 0 in state(zk).isr, timeout=30,
               what="the old leader agreeing with the new one and back in the ISR")
    payloads = [m.payload for m in iter_messages(log_bytes(old))]
    assert payloads == committed + after                  # its unreplicated tail is gone, nothing else
    assert "truncated to" in old.output()
    with RawClient(new.host, new.port) as c:
        hw = p.OffsetsResponse.decode(c.request(p.OffsetsRequest(TOPIC, 0, -1, 1))).offsets[0]
    assert hw == len(log_bytes(new))
