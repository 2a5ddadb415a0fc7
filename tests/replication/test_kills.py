"""Replication survives SIGKILL: leaders killed and restarted under acks=-1 load, controllers killed mid-election.

Real ZooKeeper, real broker processes (tests/harness/brokers.py), the topic created
by writing its assignment znode. What is proven:

- the leader of a 3-replica partition (``min.insync.replicas=2``) SIGKILLed and
  restarted at random moments, 12 times in the suite (``INGEST_REPLICATION_KILLS=50`` for the proof run,
  docs/testing.md),
  under a producer sending distinct ids with acks=-1: every acknowledged id is in
  the final log exactly once (at the offset it was acknowledged with), no
  unacknowledged id twice, no refused id at all; a reader fetching from the leader
  all along never got bytes that fail the CRC, never got a message above the high
  watermark (the same broker's OFFSETS right after, and every message it read is
  still at its offset at the end); all replicas hold the same bytes up to the
  high watermark;
- the controller SIGKILLed right after a leader (while it elects a new one), or a
  broker that is both: a new controller (``/controller`` moves,
  ``/controller_epoch`` grows), every partition led by a live in-sync broker,
  acks=-1 writes go on;
- a replica stopped with bytes flipped in a sealed segment repairs the damaged range
  from the leader once it follows again, and serves it as leader afterwards;
- a leader SIGKILLed, its newest segment cut back by the last acknowledged batch
  (a machine that lost its unflushed tail) and restarted at once does not lead
  again with that log: a follower that has the batch is elected, nothing
  acknowledged is lost (a bounce faster than the session once went unnoticed).

Measurements (leader kills, acked/maybe/refused counts, kill -> next acknowledged
write, controller failover times) are logged at INFO (``-o log_cli=true``).
"""
from __future__ import annotations

import logging
import os
import random
import statistics
import time

import pytest

from tests.harness import replicated as r
from tests.harness.brokers import broker_factory  # noqa: F401  (fixture)
from tests.harness.replicated_load import ProducerThread, ReaderThread

log = logging.getLogger(__name__)
pytestmark = pytest.mark.slow

KILLS = int(os.environ.get("INGEST_REPLICATION_KILLS", "12"))
MISSED_ELECTION_S = 20.0   # an election normally follows a kill within ~3 s (the 2 s session + a pass)


def _final_log(leader, topic: str, partition: int) -> dict[int, int]:
    return {off: r.payload_id(data) for off, _, data in r.read_committed(leader, topic, partition)}


def _wait_all_in_sync(zk, brokers, topic: str, partition: int, timeout: float = 120.0):
    """The state once every replica is in the isr and the leader's high watermark is its log end."""
    ids = {b.broker_id for b in brokers}
    state = r.wait_for_state(zk, topic, partition, lambda s: s.leader in ids and set(s.isr) == ids,
                             timeout, f"all of {sorted(ids)} in the isr")
    leader = r.by_id(brokers, state.leader)
    r.wait_for(lambda: r.high_watermark(leader, topic, partition) == r.log_end(leader, topic, partition),
               timeout, "the leader's high watermark to reach its log end")
    return state, leader


def test_leader_sigkilled_and_restarted_many_times_under_acks_all_load(broker_factory, zk_connect, zk):
    topic, rng = "kills", random.Random(int(os.environ.get("INGEST_REPLICATION_SEED", "12")))
    brokers = broker_factory(n=3, zk_connect=zk_connect, overrides=r.replication_overrides(min_isr=2))
    r.create_topic(zk, topic, {0: [0, 1, 2]})
    r.wait_for_state(zk, topic, 0, lambda s: s.leader >= 0 and len(s.isr) == 3, 60, "a leader and a full isr")
    producer = ProducerThread(r.AcksClient(brokers, timeout_ms=3000), topic, 0)
    reader = ReaderThread(brokers, topic, 0)
    producer.start()
    reader.start()
    kills, failovers, no_new_leader, missed = [], [], 0, []
    started = time.monotonic()
    try:
        for k in range(KILLS):
            time.sleep(rng.uniform(0.1, 2.0))                  # a random moment, writes flowing
            state = r.wait_for_leader_state(zk, topic, 0, timeout=90)
            victim = r.by_id(brokers, state.leader)
            t_kill = time.monotonic()
            victim.kill()
            kills.append((t_kill, victim.broker_id, state.leader_epoch, sorted(state.isr)))
            if rng.random() < 0.5:                             # let the election run first, or not
                try:
                    r.wait_for_state(zk, topic, 0, lambda s: s.leader_epoch > state.leader_epoch
                                     and s.leader not in (-1, victim.broker_id), 15, "a new leader")
                except AssertionError:
                    no_new_leader += 1                          # e.g. the victim was the whole isr
            victim.start(timeout=60)
            try:
                r.wait_for_state(zk, topic, 0, lambda s: s.leader_epoch > state.leader_epoch and s.leader >= 0,
                                 MISSED_ELECTION_S, f"an election after kill {k + 1} of broker {victim.broker_id}")
            except AssertionError as exc:       # the controller never noticed: carry on, report at the end
                missed.append(str(exc))
    finally:
        producer.stop()
        reader.stop()
    elapsed = time.monotonic() - started
    state, leader = _wait_all_in_sync(zk, brokers, topic, 0)
    final = _final_log(leader, topic, 0)
    hw = r.high_watermark(leader, topic, 0)
    for t_kill, *_ in kills:
        t_ack = producer.first_ack_after(t_kill)
        if t_ack is not None:
            failovers.append(t_ack - t_kill)
    counts = producer.counts()
    log.info("kills %d in %.0fs (%d without an election before the restart, %d never followed by one); "
             "batches %s, errors %s; "
             "ids acked %d, maybe %d (%d of them in the log), refused %d; reader: %d fetches, %d messages, "
             "errors %s; final log %d messages, high watermark %d, leader %d epoch %d; kill -> next ack "
             "median %.2fs max %.2fs", len(kills), elapsed, no_new_leader, len(missed), dict(counts),
             dict(producer.error_counts()), len(producer.ids(r.ACKED)), len(producer.ids(r.MAYBE)),
             len(producer.ids(r.MAYBE) & set(final.values())), len(producer.ids(r.REFUSED)), reader.fetches,
             len(reader.seen), dict(reader.errors), len(final), hw, state.leader, state.leader_epoch,
             statistics.median(failovers) if failovers else -1, max(failovers, default=-1))
    problems = producer.check(final) + reader.check(final)
    assert not problems, "\n".join(problems)
    assert len(kills) == KILLS and counts[r.ACKED] > 0 and reader.seen
    r.assert_replicas_identical(brokers, topic, 0, hw)
    assert not missed, (f"{len(missed)} of {len(kills)} leader kills were never followed by an election "
                        "(the restarted broker resumed leading at the old leader epoch):\n" + "\n".join(missed))


def _controller_change(zk, old: int, old_epoch: int, timeout: float = 60.0) -> tuple[int, int]:
    r.wait_for(lambda: (r.controller(zk) not in (None, old)) and r.controller_epoch(zk) > old_epoch,
               timeout, f"a controller other than broker {old} with an epoch above {old_epoch}")
    return r.controller(zk), r.controller_epoch(zk)


def _assert_all_led_and_writable(zk, brokers, topic: str, acked: dict[int, list[int]]) -> None:
    """Every partition has a live in-sync leader that acknowledges an acks=-1 write (its id joins ``acked``)."""
    live = {b.broker_id for b in brokers if b.running}
    client = r.AcksClient(brokers)
    for part, ids in acked.items():
        s = r.wait_for_state(zk, topic, part, lambda s: s.leader in live and s.leader in s.isr, 60,
                             f"a live in-sync leader among {sorted(live)}")
        msg_id = 1000 * part + len(ids) + 1
        res = client.send(topic, part, [r.payload(msg_id)])
        assert res.status == r.ACKED, f"acks=-1 write to {topic}-{part} (state {s}) after the failover: {res}"
        ids.append(msg_id)


@pytest.mark.parametrize("moment", ["controller_is_leader", "after_leader_deregistered", "at_once"])
def test_controller_sigkilled_during_a_leader_election(broker_factory, zk_connect, zk, moment):
    topic = f"ctl-{moment}".replace("_", "-")
    brokers = broker_factory(n=3, zk_connect=zk_connect, overrides=r.replication_overrides(min_isr=1))
    r.create_topic(zk, topic, {0: [0, 1, 2], 1: [1, 2, 0], 2: [2, 0, 1]})
    for part in range(3):
        r.wait_for_state(zk, topic, part, lambda s: s.leader >= 0 and len(s.isr) == 3, 60, "a full isr")
    acked: dict[int, list[int]] = {0: [], 1: [], 2: []}
    _assert_all_led_and_writable(zk, brokers, topic, acked)
    ctl, epoch = r.controller(zk), r.controller_epoch(zk)
    assert ctl is not None and epoch >= 1
    if moment == "controller_is_leader":
        part = next(q for q in range(3) if r.partition_state(zk, topic, q).leader == ctl)
        victims = [r.by_id(brokers, ctl)]
        victims[0].kill()
    else:
        part = next(q for q in range(3) if r.partition_state(zk, topic, q).leader != ctl)
        leader = r.by_id(brokers, r.partition_state(zk, topic, part).leader)
        victims = [leader, r.by_id(brokers, ctl)]
        leader.kill()
        if moment == "after_leader_deregistered":   # the controller now starts electing
            r.wait_for(lambda: leader.broker_id not in r.live_broker_ids(zk), 30, "the leader's znode to vanish")
        victims[1].kill()
    t0 = time.monotonic()
    new_ctl, new_epoch = _controller_change(zk, ctl, epoch)
    assert new_ctl in {b.broker_id for b in brokers if b.running}
    _assert_all_led_and_writable(zk, brokers, topic, acked)
    log.info("%s: controller %d (epoch %d) -> %d (epoch %d); partitions led and writable %.1fs after the kill",
             moment, ctl, epoch, new_ctl, new_epoch, time.monotonic() - t0)
    for v in victims:
        v.start(timeout=60)
    for q in range(3):
        r.wait_for_state(zk, topic, q, lambda s: len(s.isr) == 3, 60, "the restarted brokers back in the isr")
    _assert_all_led_and_writable(zk, brokers, topic, acked)
    assert r.controller_epoch(zk) >= new_epoch
    for q in range(3):
        leader = r.by_id(brokers, r.partition_state(zk, topic, q).leader)
        final = _final_log(leader, topic, q)
        assert sorted(final.values()) == acked[q], f"{topic}-{q}: final log {final}, acknowledged {acked[q]}"
        r.assert_replicas_identical(brokers, topic, q, r.high_watermark(leader, topic, q))


REPAIR_IMPLEMENTED = True    # the broker repairs a replica's damaged range from the leader


@pytest.mark.skipif(not REPAIR_IMPLEMENTED, reason="repair of a replica's damaged range from the leader is "
                                                   "not implemented in the broker yet")
def test_a_replica_with_a_damaged_sealed_segment_repairs_it_from_the_leader(broker_factory, zk_connect, zk):
    topic = "repair"
    brokers = broker_factory(n=3, zk_connect=zk_connect,
                             overrides=r.replication_overrides(min_isr=2, **{"log.file.size": 4096}))
    r.create_topic(zk, topic, {0: [0, 1, 2]})
    state = r.wait_for_state(zk, topic, 0, lambda s: s.leader >= 0 and len(s.isr) == 3, 60, "a full isr")
    client = r.AcksClient(brokers)
    for k in range(20):                                       # ~21 KB: several sealed 4 KB segments
        assert client.send(topic, 0, [r.payload(i) for i in range(10 * k, 10 * k + 10)]).status == r.ACKED
    victim = next(b for b in brokers if b.broker_id != state.leader)
    assert victim.stop() == 0
    base, path = r.segments(victim, topic, 0)[1]              # a sealed segment
    data = bytearray(path.read_bytes())
    for pos in (300, 301, 1500):                              # inside messages' payloads or CRCs
        data[pos] ^= 0x5A
    path.write_bytes(bytes(data))
    victim.start(timeout=60)
    leader = r.by_id(brokers, r.wait_for_leader_state(zk, topic, 0).leader)
    hw = r.high_watermark(leader, topic, 0)
    r.wait_for(lambda: r.replica_bytes_differ(brokers, topic, 0, hw) is None, 60,
               f"replica {victim.broker_id}'s damaged segment {base} repaired from the leader")
    assert not path.with_suffix(".damaged").exists()
    # and the repaired replica serves it as leader once the others are gone (once it is back in the
    # in-sync set: an out-of-sync replica is never elected with unclean election off)
    r.wait_for_state(zk, topic, 0, lambda s: victim.broker_id in s.isr, 60, "the repaired replica in sync")
    for b in brokers:
        if b is not victim:
            b.kill()
    r.wait_for_state(zk, topic, 0, lambda s: s.leader == victim.broker_id, 60, "the repaired replica elected")
    assert [r.payload_id(m[2]) for m in r.read_committed(victim, topic, 0)] == list(range(200))


def test_a_leader_restarted_at_once_with_a_lost_tail_does_not_lose_acknowledged_writes(broker_factory, zk_connect,
                                                                                        zk):
    """A leader whose machine lost its unflushed tail (modelled: SIGKILL, then its newest segment cut
    back by the last acknowledged batch) and that restarts at once: the in-sync followers have the
    batch, so a new leader must be elected from them and the returning broker must follow it."""
    topic = "tail"
    brokers = broker_factory(n=3, zk_connect=zk_connect, overrides=r.replication_overrides(min_isr=2))
    r.create_topic(zk, topic, {0: [0, 1, 2]})
    state = r.wait_for_state(zk, topic, 0, lambda s: s.leader >= 0 and len(s.isr) == 3, 60, "a full isr")
    client = r.AcksClient(brokers)
    results = [client.send(topic, 0, [r.payload(i) for i in range(k, k + 10)]) for k in (1, 11, 21)]
    assert all(x.status == r.ACKED for x in results), results
    victim = r.by_id(brokers, state.leader)
    victim.kill()
    base, path = r.segments(victim, topic, 0)[-1]
    with open(path, "r+b") as f:
        f.truncate(results[-1].offset - base)             # the last acknowledged batch is gone from this disk
    victim.start(timeout=60)
    old = state
    state = r.wait_for_state(zk, topic, 0, lambda s: s.leader_epoch > old.leader_epoch and s.leader >= 0
                             and len(s.isr) == 3, 60, f"an election after broker {victim.broker_id}'s death and a "
                             "full isr again")
    leader = r.by_id(brokers, state.leader)
    r.wait_for(lambda: r.high_watermark(leader, topic, 0) >= r.log_end(leader, topic, 0), 30, "the HW at the log end")
    got = [i for _, _, data in r.read_committed(leader, topic, 0) for i in [r.payload_id(data)]]
    assert got == list(range(1, 31)), f"leader {state.leader} (epoch {state.leader_epoch}) serves ids {got}"
    assert client.send(topic, 0, [r.payload(31)]).status == r.ACKED
    r.assert_replicas_identical(brokers, topic, 0, r.high_watermark(leader, topic, 0))


def test_leader_and_controller_killed_and_restarted_at_once(broker_factory, zk_connect, zk):
    """Both victims come back before their sessions expire (a supervisor's instant restart): the
    bounce must still count as a death - a new controller epoch, new leader epochs for every
    partition they led, nothing acknowledged lost."""
    topic = "bounce"
    brokers = broker_factory(n=3, zk_connect=zk_connect, overrides=r.replication_overrides(min_isr=2))
    r.create_topic(zk, topic, {0: [0, 1, 2], 1: [1, 2, 0], 2: [2, 0, 1]})
    for part in range(3):
        r.wait_for_state(zk, topic, part, lambda s: s.leader >= 0 and len(s.isr) == 3, 60, "a full isr")
    acked: dict[int, list[int]] = {0: [], 1: [], 2: []}
    _assert_all_led_and_writable(zk, brokers, topic, acked)
    ctl, epoch = r.controller(zk), r.controller_epoch(zk)
    before = {q: r.partition_state(zk, topic, q) for q in range(3)}
    part = next(q for q in range(3) if before[q].leader != ctl)
    victims = [r.by_id(brokers, before[part].leader), r.by_id(brokers, ctl)]
    for v in victims:
        v.kill()
    for v in victims:
        v.start(timeout=60)                      # waits only for its own stale registration to expire
    dead = {v.broker_id for v in victims}
    r.wait_for(lambda: r.controller(zk) is not None and r.controller_epoch(zk) > epoch, 60,
               f"a controller epoch above {epoch}")
    for q in range(3):
        if before[q].leader in dead:
            r.wait_for_state(zk, topic, q, lambda s, q=q: s.leader_epoch > before[q].leader_epoch and s.leader >= 0,
                             60, f"a new leader epoch for {topic}-{q} (its leader {before[q].leader} bounced)")
        r.wait_for_state(zk, topic, q, lambda s: len(s.isr) == 3, 60, "every replica back in the isr")
    _assert_all_led_and_writable(zk, brokers, topic, acked)
    for q in range(3):
        leader = r.by_id(brokers, r.partition_state(zk, topic, q).leader)
        assert sorted(_final_log(leader, topic, q).values()) == acked[q], f"{topic}-{q} lost acknowledged writes"
        r.assert_replicas_identical(brokers, topic, q, r.high_watermark(leader, topic, q))
