"""Replication under faults: a network partition of a leader, and a leader's ZooKeeper session expiry.

Real ZooKeeper, real broker processes. The partition test puts each broker in a
network namespace of its own (tests/harness/netns.py); where the machine cannot
make namespaces it is skipped and says so. The session-expiry test pauses the
leader (SIGSTOP) until ZooKeeper expires its session (tests/harness/zk_session.py)
and needs no namespaces.

Writers never re-send a number: each request carries one new message (``r`` +
number from the producer in the root namespace, ``s`` + number from the writer on
the partitioned leader's side), so afterwards every acknowledged message must be
in the log exactly once at the offset it was acknowledged with, every refused one
(nothing appended, by the protocol) not at all, and every unanswered or timed-out
one at most once.
"""
from __future__ import annotations

import logging
import socket
import time
import uuid
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from ingest import znodes
from ingest.wire import protocol as p
from ingest.broker.segment import SUFFIX, segment_name
from ingest.broker.topics import partition_dir_name
from ingest.client.discovery import BrokerAddress
from ingest.errors import IngestError
from ingest.wire.errors import ErrorCode
from ingest.records.message_batch import iter_messages
from ingest.records.message_set import encode_message_set
from tests.harness.acked_writes import Attempt, FixedTarget, LeaderTarget, Writer, check_no_loss, errors_of
from tests.harness.brokers import BrokerProcess, broker_factory  # noqa: F401  (fixture)
from tests.harness.netns import netns_lab  # noqa: F401  (fixture)
from tests.harness.wait import wait_until
from tests.harness.zk_session import (expire_by_cut, expire_by_pause, registration_owner, wait_reregistered,
                                      wait_vanished)
from tests.harness.zookeeper import ZooKeeperServer, zookeeper_available

log = logging.getLogger(__name__)

TOPIC = "part"
SESSION_S = 3.0  # the harness's zk.sessiontimeout.ms
REPLICATED = dict(min_insync_replicas=2, replica_lag_time_max_ms=3000, replica_socket_timeout_ms=3000,
                  replica_fetch_wait_max_ms=200, num_partitions=1)


# --- fixtures -------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def lab_zookeeper(netns_lab):
    """A ZooKeeper listening on the lab's bridge, so brokers in the namespaces reach it."""
    if not zookeeper_available():
        pytest.skip("Debian package zookeeper is not installed (scripts/bootstrap.sh installs it)")
    server = ZooKeeperServer(client_address=netns_lab.gateway).start()
    yield server
    server.stop()


def _chroot(server: ZooKeeperServer) -> str:
    chroot = f"/t-{uuid.uuid4().hex[:10]}"
    c = KazooClient(hosts=server.connect)
    c.start(timeout=15)
    c.retry(c.ensure_path, chroot)
    c.stop()
    c.close()
    return server.connect + chroot


@pytest.fixture
def lab_cluster(netns_lab, lab_zookeeper, tmp_path_factory):
    """``make(n, **overrides)`` -> (brokers, namespaces, kazoo client on their chroot); all stopped after."""
    started: list[BrokerProcess] = []
    clients: list[KazooClient] = []

    def make(n: int, **kw):
        connect = _chroot(lab_zookeeper)
        overrides = {k.replace("_", "."): v for k, v in kw.items()}
        spaces = [netns_lab.add(f"b{len(netns_lab.namespaces)}") for _ in range(n)]  # the lab outlives a test
        brokers = []
        for ns in spaces:
            b = BrokerProcess(len(started), tmp_path_factory.mktemp(f"nsbroker{len(started)}"), zk_connect=connect,
                              overrides=overrides, host=ns.address, command_prefix=netns_lab.exec_prefix(ns))
            started.append(b)
            brokers.append(b.start())
        zk = KazooClient(hosts=connect)
        zk.start(timeout=15)
        clients.append(zk)
        return brokers, spaces, zk

    yield make
    for ns in netns_lab.namespaces:
        if netns_lab.is_cut(ns):
            netns_lab.heal(ns)
    for b in started:
        try:
            b.stop(timeout=15)
        except Exception:  # noqa: BLE001 - SIGKILLed by stop(); keep stopping the others
            log.exception("broker %d did not stop cleanly", b.broker_id)
    for zk in clients:
        zk.stop()
        zk.close()


# --- reading the partition back -------------------------------------------------------------

def partition_state(zk) -> znodes.PartitionState | None:
    data, stat = zk.retry(zk.get, znodes.partition_state_path(TOPIC, 0))
    return znodes.PartitionState.parse(data, stat.version) if data else None


def create_topic(zk, brokers: list[BrokerProcess]) -> znodes.PartitionState:
    """TOPIC, one partition replicated on every broker (the first is the preferred leader)."""
    ids = [b.broker_id for b in brokers]
    zk.retry(zk.create, znodes.topic_dir(TOPIC), znodes.assignment_value({0: ids}), makepath=True)
    return wait_until(lambda: _full_state(zk, len(ids)), 60, "a leader and a full in-sync set of the new topic")


def _full_state(zk, n: int) -> znodes.PartitionState | None:
    if not zk.retry(zk.exists, znodes.partition_state_path(TOPIC, 0)):
        return None
    s = partition_state(zk)
    return s if s and s.leader >= 0 and len(s.isr) == n else None


def disk_log(b: BrokerProcess) -> bytes:
    """The partition's log bytes on ``b``'s disk from offset 0 (segments back to back)."""
    d = Path(b.log_dir) / partition_dir_name(TOPIC, 0)
    segs = sorted(d.glob("*" + SUFFIX))
    assert segs and segs[0].name == segment_name(0), f"{d}: expected a log from offset 0, found {segs}"
    return b"".join(s.read_bytes() for s in segs)


def payloads(data: bytes) -> list[tuple[int, bytes]]:
    return [(m.offset, m.payload) for m in iter_messages(data, 0)]


def committed(addr: BrokerAddress) -> tuple[int, list[tuple[int, bytes]]]:
    """(high watermark, [(offset, payload)]) read from the leader with OFFSETS and FETCH."""
    with socket.create_connection((addr.host, addr.port), timeout=10) as s:
        s.sendall(p.OffsetsRequest(TOPIC, 0, -1, 1).encode())
        hw = p.OffsetsResponse.decode(p.recv_response(s)).offsets[0]
        out, offset = [], 0
        while offset < hw:
            s.sendall(p.FetchRequest(TOPIC, 0, offset, 1 << 20).encode())
            resp = p.FetchResponse.decode(p.recv_response(s))
            assert resp.error == ErrorCode.NONE, f"fetch at {offset}: {ErrorCode(resp.error).name}"
            msgs = list(iter_messages(resp.message_set, offset))
            assert msgs, f"empty fetch at {offset} below the high watermark {hw}"
            out += [(m.offset, m.payload) for m in msgs]
            offset = msgs[-1].next_offset
    return hw, out


def settle(zk, brokers: list[BrokerProcess]) -> tuple[int, list[tuple[int, bytes]]]:
    """After the writers stopped: until every replica is in sync and holds exactly the committed log."""
    def done():
        s = partition_state(zk)
        if not s or len(s.isr) != len(brokers):
            return None
        addr = next(BrokerAddress(b.broker_id, b.host, b.port) for b in brokers if b.broker_id == s.leader)
        try:
            hw, msgs = committed(addr)
        except (OSError, IngestError, AssertionError) as exc:  # a leader change in between: ask again
            log.info("reading the committed log from %s: %s", addr, exc)
            return None
        return (hw, msgs) if all(len(disk_log(b)) == hw for b in brokers) else None
    return wait_until(done, 90, "all replicas in sync with equal logs up to the high watermark", interval=0.5)


def check_replicas_identical(brokers: list[BrokerProcess], hw: int, msgs) -> None:
    logs = {b.broker_id: disk_log(b)[:hw] for b in brokers}
    first = next(iter(logs.values()))
    for bid, data in logs.items():
        assert data == first, f"replica {bid} differs from replica {brokers[0].broker_id} below the high watermark {hw}"
    assert payloads(first) == msgs, "the replicas' bytes are not what the leader serves"


def new_leader(zk, old: znodes.PartitionState) -> znodes.PartitionState | None:
    s = partition_state(zk)
    return s if s and s.leader not in (-1, old.leader) else None


def _with_member(zk, broker_id: int) -> znodes.PartitionState | None:
    s = partition_state(zk)
    return s if s and broker_id in s.isr else None


def acked_on(w: Writer, broker: int, after: float) -> Attempt | None:
    return next((a for a in list(w.attempts) if a.acked and a.broker == broker and a.sent > after), None)


def assert_follower(b: BrokerProcess) -> None:
    """``b`` refuses a write as NOT_LEADER_FOR_PARTITION (it follows now; nothing is appended)."""
    with socket.create_connection((b.host, b.port), timeout=10) as s:
        req = p.ProduceAcksRequest(-1, 1000, p.ProduceRequest(TOPIC, 0, encode_message_set([b"probe"])))
        s.sendall(req.encode())
        error = p.ProduceAckResponse.decode(p.recv_response(s)).error
    assert error == ErrorCode.NOT_LEADER_FOR_PARTITION, \
        f"broker {b.broker_id} back in the in-sync set answered a write with {ErrorCode(error).name}"


def report(title: str, facts: dict) -> None:
    text = f"{title}: " + ", ".join(f"{k}={v:.2f}" if isinstance(v, float) else f"{k}={v}" for k, v in facts.items())
    log.warning("%s", text)
    print(text)


# --- the harness itself (runs with any broker that registers in ZooKeeper) ------------------

def test_netns_cut_really_expires_a_brokers_session(lab_cluster, netns_lab):
    [b], [ns], zk = lab_cluster(1)
    expiry = expire_by_cut(zk, netns_lab, ns, b, session_timeout_s=SESSION_S)
    assert b.running, "the cut broker must keep running; only its session expires"
    assert not b.ping(timeout=0.5), "the root namespace still reaches a cut namespace"
    netns_lab.heal(ns)
    new_session = wait_reregistered(zk, b.broker_id, expiry.session_id, 60)
    assert new_session != expiry.session_id
    wait_until(b.ping, 30, f"broker {b.broker_id} serving again after the heal")
    report("netns cut", {"cut_to_registration_gone_s": expiry.time_to_expiry})


def test_pause_really_expires_a_brokers_session(broker_factory, zk_connect, zk):
    [b] = broker_factory(1, zk_connect)
    expiry = expire_by_pause(zk, b, session_timeout_s=SESSION_S)
    assert b.running
    new_session = wait_reregistered(zk, b.broker_id, expiry.session_id, 60)
    assert new_session != expiry.session_id
    assert registration_owner(zk, b.broker_id) == new_session
    wait_until(b.ping, 30, f"broker {b.broker_id} serving again after SIGCONT")
    report("SIGSTOP", {"stop_to_registration_gone_s": expiry.time_to_expiry})


# --- the proofs -----------------------------------------------------------------------------

@pytest.mark.slow
def test_partitioned_leader_stops_acknowledging_and_loses_nothing(lab_cluster, netns_lab):
    brokers, spaces, zk = lab_cluster(3, **REPLICATED)
    by_id = {b.broker_id: (b, ns) for b, ns in zip(brokers, spaces)}
    before = create_topic(zk, brokers)
    old_b, old_ns = by_id[before.leader]
    leader_target = LeaderTarget(TOPIC, brokers)
    root = Writer(TOPIC, "r", leader_target, leader_target.lost)
    side_target = FixedTarget(before.leader, lambda: netns_lab.connect_from(old_ns, old_b.host, old_b.port, 30))
    side = Writer(TOPIC, "s", side_target, side_target.lost, timeout_ms=1000)  # a client on the leader's side of the cut
    # acks=1 on the same side: measured only (acks=1 promises nothing once the leader is cut off)
    one_target = FixedTarget(before.leader, lambda: netns_lab.connect_from(old_ns, old_b.host, old_b.port, 30))
    one = Writer(TOPIC, "o", one_target, one_target.lost, acks=1, interval_s=0.1)
    root.start()
    side.start()
    one.start()
    try:
        wait_until(lambda: len(root.acked()) >= 30 and side.acked(), 60, "acknowledged writes before the cut")
        session = registration_owner(zk, before.leader)
        t_cut = netns_lab.cut(old_ns)
        t_gone = wait_vanished(zk, before.leader, SESSION_S * 4 + 10)
        assert old_b.running, "the partitioned leader must keep running"
        after = wait_until(lambda: new_leader(zk, before), 60, "the controller electing a new leader")
        t_elected = time.monotonic()
        assert after.leader_epoch > before.leader_epoch
        assert after.leader in after.isr and before.leader not in after.isr
        first = wait_until(lambda: acked_on(root, after.leader, t_cut), 60, "an acknowledged write on the new leader")
        # the old leader keeps getting writes from its side of the cut for at least two session timeouts
        wait_until(lambda: time.monotonic() - t_cut > 2 * SESSION_S
                   and sum(1 for a in side.attempts if a.sent > t_cut and a.done) >= 3, 60,
                   "writes answered (or given up) by the partitioned leader")
        side.stop()
        one.stop()
        tail = {pl for _, pl in payloads(disk_log(old_b))} & {a.payload for w in (side, one) for a in w.attempts
                                                                if a.sent >= t_cut}  # appended, never replicated
        t_heal = netns_lab.heal(old_ns)
        wait_reregistered(zk, before.leader, session, 60)
        rejoined = wait_until(lambda: _with_member(zk, before.leader), 90, "the old leader back in the in-sync set")
        t_rejoined = time.monotonic()
        assert rejoined.leader != before.leader, "the old leader came back as leader, not as follower"
        assert_follower(old_b)
        n = len(root.acked())
        wait_until(lambda: len(root.acked()) >= n + 20, 60, "writes acknowledged with all three replicas in sync")
    finally:
        root.stop()
        for w in (side, one):
            if w.is_alive():
                w.stop()
    hw, msgs = settle(zk, brokers)
    stats = check_no_loss([root, side], msgs)
    after_cut = [a for a in side.attempts if a.sent >= t_cut]
    assert after_cut, "the writer on the leader's side sent nothing after the cut"
    assert not [a for a in after_cut if a.acked], \
        f"the partitioned leader acknowledged acks=-1 writes sent after the cut: {errors_of(after_cut)}"
    present = {pl for _, pl in msgs}
    assert not [a.payload for a in after_cut if a.payload in present], "a write the old leader took after the cut survived"
    assert not tail & {pl for _, pl in payloads(disk_log(old_b))}, "the old leader kept its unreplicated tail"
    assert not tail & present, "messages only the partitioned leader ever had are in the committed log"
    check_replicas_identical(brokers, hw, msgs)
    one_after = [a for a in one.attempts if a.sent >= t_cut and a.acked]
    late = [a for a in side.attempts if a.sent < t_cut and a.acked and a.done > t_cut]
    report("partition", {
        "cut_to_registration_gone_s": t_gone - t_cut, "cut_to_new_leader_s": t_elected - t_cut,
        "cut_to_first_ack_on_new_leader_s": first.done - t_cut,
        "elected_to_first_ack_s": first.done - t_elected, "heal_to_back_in_sync_s": t_rejoined - t_heal,
        "old_leader_writes_after_cut": len(after_cut), "their_answers": errors_of(after_cut),
        "old_leader_tail_truncated": len(tail), "acked_after_cut_but_sent_before": len(late),
        "acks1_acked_by_partitioned_leader": len(one_after),
        "of_which_lost": sum(1 for a in one_after if a.payload not in present),
        "high_watermark": hw, **stats})


@pytest.mark.slow
def test_leader_session_expiry_fails_over_and_loses_nothing(broker_factory, zk_connect, zk):
    brokers = broker_factory(3, zk_connect, **REPLICATED)
    by_id = {b.broker_id: b for b in brokers}
    before = create_topic(zk, brokers)
    old_b = by_id[before.leader]
    leader_target = LeaderTarget(TOPIC, brokers)
    root = Writer(TOPIC, "r", leader_target, leader_target.lost)
    stale_target = FixedTarget(before.leader, lambda: socket.create_connection((old_b.host, old_b.port), timeout=30))
    stale = Writer(TOPIC, "s", stale_target, stale_target.lost, timeout_ms=1000)  # keeps writing to the old leader
    seen: dict[str, float] = {}

    def while_paused(expiry) -> None:
        after = wait_until(lambda: new_leader(zk, before), 60, "the controller electing a new leader")
        seen["elected"] = time.monotonic()
        seen["leader"] = after.leader
        assert after.leader_epoch > before.leader_epoch and before.leader not in after.isr
        seen["first_ack"] = wait_until(lambda: acked_on(root, after.leader, expiry.started), 60,
                                       "an acknowledged write on the new leader").done

    root.start()
    stale.start()
    try:
        wait_until(lambda: len(root.acked()) >= 30 and stale.acked(), 60, "acknowledged writes before the pause")
        expiry = expire_by_pause(zk, old_b, session_timeout_s=SESSION_S, while_paused=while_paused)
        wait_reregistered(zk, before.leader, expiry.session_id, 60)
        rejoined = wait_until(lambda: _with_member(zk, before.leader), 90, "the old leader back in the in-sync set")
        t_rejoined = time.monotonic()
        assert rejoined.leader != before.leader, "the old leader came back as leader, not as follower"
        assert_follower(old_b)
        wait_until(lambda: sum(1 for a in stale.attempts if a.sent > expiry.resumed and a.done) >= 3, 60,
                   "writes answered by the old leader after it woke up")
        n = len(root.acked())
        wait_until(lambda: len(root.acked()) >= n + 20, 60, "writes acknowledged with all three replicas in sync")
    finally:
        root.stop()
        stale.stop()
    hw, msgs = settle(zk, brokers)
    stats = check_no_loss([root, stale], msgs)
    after_pause = [a for a in stale.attempts if a.sent >= expiry.started]
    assert not [a for a in after_pause if a.acked], \
        f"the expired leader acknowledged acks=-1 writes sent after its pause: {errors_of(after_pause)}"
    check_replicas_identical(brokers, hw, msgs)
    report("session expiry (SIGSTOP)", {
        "stop_to_registration_gone_s": expiry.time_to_expiry, "stop_to_new_leader_s": seen["elected"] - expiry.started,
        "stop_to_first_ack_on_new_leader_s": seen["first_ack"] - expiry.started,
        "paused_s": expiry.resumed - expiry.started, "resume_to_back_in_sync_s": t_rejoined - expiry.resumed,
        "old_leader_writes_after_pause": len(after_pause), "their_answers": errors_of(after_pause),
        "high_watermark": hw, **stats})
