"""The in-sync set under faults: a lagging follower leaves and rejoins, min.insync refusal, unclean election.

Real ZooKeeper, real broker processes; followers are frozen with SIGSTOP (a
process that is alive but does not fetch) or SIGKILLed. What is proven:

- a follower frozen longer than ``replica.lag.time.max.ms`` (but shorter than its
  ZooKeeper session, so only the leader's lag check can notice) leaves the isr
  while acks=-1 writes go on, and rejoins by itself after SIGCONT;
- with ``min.insync.replicas=2`` and the leader alone in the isr, acks=-1 writes
  are refused with NOT_ENOUGH_REPLICAS and append nothing, acks=1 writes work;
- unclean election off: when the whole isr is dead and only an out-of-sync replica
  lives, the partition has no leader (clients get LEADER_NOT_AVAILABLE) until a
  former isr member returns, and nothing acknowledged is lost; unclean election on:
  the out-of-sync replica is elected, writes go on, and the writes acknowledged
  while it was out of sync are lost (the documented cost);
- a leader frozen past its ZooKeeper session (really expired by the server) is
  replaced; the acks=-1 requests queued on its sockets are not acknowledged after
  the thaw unless they are in the final log (acks=1 ones may be, and are lost).
"""
from __future__ import annotations

import logging
import socket
import time

import pytest

from ingest import znodes
from ingest.wire import protocol as p
from ingest.errors import LeaderNotAvailableError
from ingest.wire.errors import ErrorCode
from ingest.records.message_set import encode_message_set
from tests.harness import replicated as r
from tests.harness.brokers import broker_factory  # noqa: F401  (fixture)
from tests.harness.replicated_load import ProducerThread

log = logging.getLogger(__name__)
pytestmark = pytest.mark.slow

TOPIC = "isr"


def _three(broker_factory, zk_connect, zk, **overrides):
    brokers = broker_factory(n=3, zk_connect=zk_connect, overrides=r.replication_overrides(**overrides))
    r.create_topic(zk, TOPIC, {0: [0, 1, 2]})
    state = r.wait_for_state(zk, TOPIC, 0, lambda s: s.leader >= 0 and len(s.isr) == 3, 60, "a leader, full isr")
    return brokers, state


def _send(client: r.AcksClient, ids: range, acks: int = -1) -> r.ProduceResult:
    return client.send(TOPIC, 0, [r.payload(i) for i in ids], acks=acks)


def _final(leader) -> dict[int, int]:
    return {off: r.payload_id(data) for off, _, data in r.read_committed(leader, TOPIC, 0)}


def _follower(zk, brokers, state) -> object:
    """A follower, preferably not the controller (its SIGSTOP then only stops a replica)."""
    ctl = r.controller(zk)
    followers = [b for b in brokers if b.broker_id != state.leader]
    return next((b for b in followers if b.broker_id != ctl), followers[0])


def test_a_frozen_follower_leaves_the_isr_and_rejoins_by_itself(broker_factory, zk_connect, zk):
    # sessions (10 s) outlive the freeze: only the leader's lag check (1 s) can drop the follower
    brokers, state = _three(broker_factory, zk_connect, zk, min_isr=1, lag_ms=1000, session_ms=10000)
    follower = _follower(zk, brokers, state)
    fid = follower.broker_id
    owner = zk.retry(zk.get, znodes.broker_path(fid))[1].ephemeralOwner
    producer = ProducerThread(r.AcksClient(brokers, timeout_ms=3000), TOPIC, 0)
    producer.start()
    try:
        r.wait_for(lambda: producer.counts()[r.ACKED] >= 5, 30, "acks=-1 writes before the freeze")
        r.sigstop(follower)
        t_stop = time.monotonic()
        try:
            shrunk = r.wait_for_state(zk, TOPIC, 0, lambda s: fid not in s.isr, 8,
                                      f"the leader to drop frozen follower {fid} from the isr")
            t_shrunk = time.monotonic()
            acked_before = producer.counts()[r.ACKED]
            r.wait_for(lambda: producer.counts()[r.ACKED] >= acked_before + 5, 30,
                       "acks=-1 writes acknowledged without the frozen follower")
        finally:
            r.sigcont(follower)
        t_cont = time.monotonic()
        grown = r.wait_for_state(zk, TOPIC, 0, lambda s: fid in s.isr, 60, f"follower {fid} back in the isr")
        t_back = time.monotonic()
        r.wait_for(lambda: producer.first_ack_after(t_back) is not None, 30, "acks=-1 writes after the rejoin")
    finally:
        producer.stop()
    assert zk.retry(zk.get, znodes.broker_path(fid))[1].ephemeralOwner == owner, \
        "the follower's ZooKeeper session expired: the isr change was not the leader's lag check"
    assert shrunk.leader == grown.leader == state.leader
    log.info("follower %d frozen: out of the isr after %.2fs (lag limit 1s), back %.2fs after SIGCONT; "
             "producer %s", fid, t_shrunk - t_stop, t_back - t_cont, dict(producer.counts()))
    leader = r.by_id(brokers, grown.leader)
    final = _final(leader)
    problems = producer.check(final)
    assert not problems, "\n".join(problems)
    r.assert_replicas_identical(brokers, TOPIC, 0, r.high_watermark(leader, TOPIC, 0))


def test_min_insync_refuses_acks_all_writes_when_the_leader_is_alone(broker_factory, zk_connect, zk):
    brokers, state = _three(broker_factory, zk_connect, zk, min_isr=2)
    client = r.AcksClient(brokers)
    assert _send(client, range(1, 11)).status == r.ACKED
    leader = r.by_id(brokers, state.leader)
    for b in brokers:
        if b is not leader:
            b.kill()
    r.wait_for_state(zk, TOPIC, 0, lambda s: s.isr == (leader.broker_id,) and s.leader == leader.broker_id, 60,
                     "the leader alone in the isr")
    end, hw = r.log_end(leader, TOPIC, 0), r.high_watermark(leader, TOPIC, 0)
    refused = [_send(client, range(100 + 10 * k, 110 + 10 * k)) for k in range(3)]
    assert [x.error for x in refused] == [ErrorCode.NOT_ENOUGH_REPLICAS] * 3, refused
    assert r.log_end(leader, TOPIC, 0) == end and r.high_watermark(leader, TOPIC, 0) == hw, \
        "a refused acks=-1 write changed the leader's log"
    one = _send(client, range(200, 210), acks=1)
    assert one.status == r.ACKED and one.offset == end, one
    assert sorted(_final(leader).values()) == [*range(1, 11), *range(200, 210)]
    for b in brokers:
        if not b.running:
            b.start(timeout=60)
    r.wait_for_state(zk, TOPIC, 0, lambda s: len(s.isr) >= 2, 60, "a follower back in the isr")
    assert _send(client, range(300, 310)).status == r.ACKED
    final_leader = r.by_id(brokers, r.wait_for_leader_state(zk, TOPIC, 0).leader)
    assert sorted(_final(final_leader).values()) == [*range(1, 11), *range(200, 210), *range(300, 310)]


def _isr_dies_but_a_stale_follower(broker_factory, zk_connect, zk, unclean: bool):
    """Freeze follower F until it leaves the isr, write more, SIGKILL the isr, thaw F.

    Returns (brokers, F, the killed isr members, ids acked with F in sync, ids acked without F).
    """
    brokers, state = _three(broker_factory, zk_connect, zk, min_isr=1, lag_ms=1000, unclean=unclean)
    client = r.AcksClient(brokers)
    assert _send(client, range(1, 11)).status == r.ACKED
    stale = _follower(zk, brokers, state)
    r.sigstop(stale)
    try:
        r.wait_for_state(zk, TOPIC, 0, lambda s: stale.broker_id not in s.isr and s.leader >= 0, 30,
                         f"frozen broker {stale.broker_id} out of the isr")
        late = [_send(client, range(k, k + 10)) for k in range(101, 131, 10)]
        assert all(x.status == r.ACKED for x in late), late
        isr = [b for b in brokers if b is not stale]
        for b in isr:
            b.kill()
    finally:
        r.sigcont(stale)
    return brokers, stale, isr, list(range(1, 11)), list(range(101, 131))


def test_unclean_election_off_leaves_the_partition_leaderless_until_an_isr_member_returns(
        broker_factory, zk_connect, zk):
    brokers, stale, dead_isr, early, late = _isr_dies_but_a_stale_follower(broker_factory, zk_connect, zk, False)
    sid = stale.broker_id
    r.wait_for(lambda: r.live_broker_ids(zk) == {sid} and r.controller(zk) == sid, 60,
               f"broker {sid} alone and controller")
    epochs = set()
    deadline = time.monotonic() + 8          # several elections' worth of time: none may pick the stale replica
    while time.monotonic() < deadline:
        s = r.partition_state(zk, TOPIC, 0)
        epochs.add(s.leader_epoch)
        assert s.leader != sid, f"unclean election with unclean.leader.election.enable=false: {s}"
        time.sleep(0.1)
    assert s.leader == -1, f"a partition whose isr is dead should have leader -1: {s}"
    meta = r.metadata(brokers)
    with pytest.raises(LeaderNotAvailableError):
        meta.leader(TOPIC, 0, refresh=True)
    resp = r.request(stale.host, stale.port, p.ProduceAcksRequest(-1, 2000, p.ProduceRequest(
        TOPIC, 0, encode_message_set([r.payload(999)]))), p.ProduceAckResponse)
    assert resp.error in (ErrorCode.LEADER_NOT_AVAILABLE, ErrorCode.NOT_LEADER_FOR_PARTITION), resp
    assert s.isr and set(s.isr) <= {b.broker_id for b in dead_isr}, f"the isr should keep a dead member: {s}"
    returning = r.by_id(brokers, s.isr[-1])
    others = [b for b in dead_isr if b is not returning]
    returning.start(timeout=60)
    state = r.wait_for_state(zk, TOPIC, 0, lambda s: s.leader == returning.broker_id, 60,
                             f"former isr member {returning.broker_id} elected")
    r.wait_until_leading(returning, TOPIC, 0)   # _send makes one attempt: not before the broker took the lead
    assert _send(r.AcksClient(brokers), range(201, 211)).status == r.ACKED
    for b in others:
        b.start(timeout=60)
    state = r.wait_for_state(zk, TOPIC, 0, lambda s: len(s.isr) == 3, 60, "every replica back in the isr")
    leader = r.by_id(brokers, state.leader)
    assert sorted(_final(leader).values()) == early + late + list(range(201, 211)), "acknowledged writes lost"
    r.assert_replicas_identical(brokers, TOPIC, 0, r.high_watermark(leader, TOPIC, 0))


def test_unclean_election_on_elects_the_stale_replica_and_loses_what_it_missed(broker_factory, zk_connect, zk):
    brokers, stale, dead_isr, early, late = _isr_dies_but_a_stale_follower(broker_factory, zk_connect, zk, True)
    t0 = time.monotonic()
    r.wait_for_state(zk, TOPIC, 0, lambda s: s.leader == stale.broker_id, 60,
                     f"unclean election of out-of-sync broker {stale.broker_id}")
    r.wait_until_leading(stale, TOPIC, 0)   # _send makes one attempt: not before the broker took the lead
    after = _send(r.AcksClient(brokers), range(201, 211))
    assert after.status == r.ACKED, after
    log.info("unclean election of broker %d %.1fs after the isr died", stale.broker_id, time.monotonic() - t0)
    for b in dead_isr:
        b.start(timeout=60)
    state = r.wait_for_state(zk, TOPIC, 0, lambda s: len(s.isr) == 3, 60, "the old isr back, following")
    leader = r.by_id(brokers, state.leader)
    got = sorted(_final(leader).values())
    # the expected cost: everything acknowledged while the new leader was out of sync is gone
    assert got == early + list(range(201, 211)), f"final log ids {got}"
    assert not set(got) & set(late)
    r.assert_replicas_identical(brokers, TOPIC, 0, r.high_watermark(leader, TOPIC, 0))


def test_a_frozen_leader_whose_session_expires_never_acknowledges_acks_all_writes(broker_factory, zk_connect, zk):
    """The zombie: requests reach a leader frozen past its ZooKeeper session; once thawed it must
    not acknowledge acks=-1 writes (the others elected a new leader meanwhile)."""
    brokers, state = _three(broker_factory, zk_connect, zk, min_isr=1, lag_ms=1000)
    old = r.by_id(brokers, state.leader)
    producer = ProducerThread(r.AcksClient(brokers, timeout_ms=3000), TOPIC, 0)
    producer.start()
    queued = []
    try:
        r.wait_for(lambda: producer.counts()[r.ACKED] >= 5, 30, "acks=-1 writes before the freeze")
        r.sigstop(old)
        try:
            for k, acks in enumerate([-1, -1, -1, 1, 1]):       # land in the frozen leader's socket queue
                ids = range(900_000 + 10 * k, 900_010 + 10 * k)
                s = socket.create_connection((old.host, old.port), timeout=30)
                s.sendall(p.ProduceAcksRequest(acks, 3000, p.ProduceRequest(
                    TOPIC, 0, encode_message_set([r.payload(i) for i in ids]))).encode())
                queued.append((acks, ids, s))
            new = r.wait_for_state(zk, TOPIC, 0, lambda s: s.leader not in (-1, old.broker_id), 30,
                                   f"a new leader while broker {old.broker_id} is frozen")
            acked_before = producer.counts()[r.ACKED]
            r.wait_for(lambda: producer.counts()[r.ACKED] > acked_before, 30, "writes acknowledged by the new leader")
        finally:
            r.sigcont(old)
        answers = []
        for acks, ids, s in queued:
            with s:
                try:
                    answers.append((acks, ids, p.ProduceAckResponse.decode(p.recv_response(s))))
                except (OSError, ConnectionError) as exc:
                    answers.append((acks, ids, exc))
        r.wait_for_state(zk, TOPIC, 0, lambda s: len(s.isr) == 3, 60, f"broker {old.broker_id} back in the isr")
    finally:
        producer.stop()
    state = r.wait_for_leader_state(zk, TOPIC, 0)
    leader = r.by_id(brokers, state.leader)
    final = _final(leader)
    zombie_acks = [(ids[0], a) for acks, ids, a in answers
                   if acks == -1 and isinstance(a, p.ProduceAckResponse) and a.error == 0]
    in_log = {i for i in final.values()}
    lost_acks_1 = [ids[0] for acks, ids, a in answers if acks == 1 and isinstance(a, p.ProduceAckResponse)
                   and a.error == 0 and ids[0] not in in_log]
    log.info("frozen leader %d replaced by %d (epoch %d); its answers after the thaw: %s; acks=1 writes it "
             "acknowledged and lost: %d", old.broker_id, new.leader, new.leader_epoch,
             [(acks, a if isinstance(a, Exception) else a.error) for acks, _, a in answers], len(lost_acks_1))
    assert not [z for z in zombie_acks if z[0] not in in_log], \
        f"the replaced leader acknowledged acks=-1 writes that are not in the final log: {zombie_acks}"
    problems = producer.check(final)
    assert not problems, "\n".join(problems)
    r.assert_replicas_identical(brokers, TOPIC, 0, r.high_watermark(leader, TOPIC, 0))
