"""PartitionCopier against real brokers: a source cluster and a target cluster (two ZooKeeper chroots).

Byte-identical verbatim copies (0.7 and replicated sources, gzip wrappers kept), resume after a stop
and after a checkpoint that lags the target, a second concurrent owner, a source leader move, and the
fallback (repartitioned) mode.
"""
from __future__ import annotations

import threading
from collections import Counter

import pytest

from ingest.client.simple_consumer import SimpleConsumer
from ingest.mirror.checkpoint import Checkpoint, CheckpointStore
from ingest.mirror.mapping import EXACT_STATUS, FALLBACK_STATUS, ensure_mapping
from ingest.records.message_batch import iter_messages
from tests.harness.brokers import broker_factory  # noqa: F401  (fixture)
from tests.harness.replicated import create_topic as create_replicated_topic
from tests.harness.replication_topics import metadata_of, wait_for_leaders
from tests.harness.wait import wait_until
from tests.mirror.copier_support import (Mirror, acked, payload, produce_07, produce_replicated, read_all,
                                         target_zk_connect)  # noqa: F401  (fixture)


@pytest.fixture
def mirror(zk_connect, target_zk_connect):
    m = Mirror(zk_connect, target_zk_connect)
    yield m
    m.close()


def run_until(copier, done, timeout=60.0):
    """Run ``copier`` in a thread until ``done()`` holds, then stop it (final checkpoint) and return it."""
    stop = threading.Event()
    t = threading.Thread(target=copier.run, args=(stop,), daemon=True)
    t.start()
    try:
        wait_until(lambda: done() or not t.is_alive(), timeout, f"{copier.unit} to finish")
    finally:
        stop.set()
        t.join(30)
    assert not t.is_alive()
    return copier


def caught_up(copier, end):
    return lambda: copier.position == end and copier.state == "caught up"


def source_bytes(broker, topic, partition):
    with SimpleConsumer(broker.host, broker.port) as c:
        return read_all(lambda o, m: c.fetch_raw(topic, partition, o, m))


def target_bytes(mirror, topic, partition):
    addr = mirror.target_md.leader(topic, partition, refresh=True)
    with SimpleConsumer(addr.host, addr.port) as c:
        return read_all(lambda o, m: c.fetch_raw(topic, partition, o, m))


def produce_mix(broker, topic, partition, session, start, n_sets):
    """``n_sets`` sets of 1..5 messages, every third one gzip-compressed; returns the messages sent."""
    seq, sent = start, 0
    for i in range(n_sets):
        k = 1 + i % 5
        produce_07(broker, topic, partition, [payload(session, seq + j) for j in range(k)], codec=1 if i % 3 == 0 else 0)
        seq += k
        sent += k
    return sent


def test_a_07_topic_is_copied_verbatim_and_resumes_after_a_stop(broker_factory, zk_connect, target_zk_connect, mirror):
    (src,) = broker_factory(n=1, zk_connect=zk_connect, num_partitions=2, log_file_size=4096)
    broker_factory(n=1, zk_connect=target_zk_connect)
    sent = {p: produce_mix(src, "clicks", p, f"s{p}", 0, 30 + 10 * p) for p in (0, 1)}
    m = ensure_mapping(mirror.zk, "g", "clicks", ["dc1"], {"dc1": [(0, 0), (0, 1)]})
    assert [u.target_partition for u in m.units] == [0, 1]
    for unit in m.units:
        end = len(source_bytes(src, "clicks", unit.partition))
        c = mirror.copier(unit)
        assert c.mode == EXACT_STATUS
        run_until(c, caught_up(c, end))
        assert c.stats["messages"] == sent[unit.partition] and c.stats["bytes"] == end
        assert c.lag() == (0, 0.0)
        assert target_bytes(mirror, "clicks", unit.target_partition) == source_bytes(src, "clicks", unit.partition)
        cp = CheckpointStore(mirror.zk, "g", unit).read()
        assert (cp.source_offset, cp.target_offset, cp.target_partition) == (end, end, unit.target_partition)
        assert acked(cp) == sent[unit.partition]
    # more data; fresh copiers resume from the checkpoints: only the new messages are copied
    more = produce_mix(src, "clicks", 0, "s0b", 0, 12)
    unit = m.units[0]
    end = len(source_bytes(src, "clicks", 0))
    c = mirror.copier(unit)
    run_until(c, caught_up(c, end))
    assert (c.stats["messages"], c.stats["recounted_messages"]) == (more, 0)
    assert target_bytes(mirror, "clicks", 0) == source_bytes(src, "clicks", 0)
    assert acked(CheckpointStore(mirror.zk, "g", unit).read()) == sent[0] + more
    assert len(list(iter_messages(target_bytes(mirror, "clicks", 0)))) == sent[0] + more


def test_a_checkpoint_behind_the_target_resumes_by_the_rule_without_duplicates(broker_factory, zk_connect,
                                                                               target_zk_connect, mirror):
    (src,) = broker_factory(n=1, zk_connect=zk_connect, num_partitions=1)
    broker_factory(n=1, zk_connect=target_zk_connect)
    first = produce_mix(src, "t", 0, "a", 0, 20)
    (unit,) = ensure_mapping(mirror.zk, "g", "t", ["dc1"], {"dc1": [(0, 0)]}).units
    end1 = len(source_bytes(src, "t", 0))
    c = mirror.copier(unit)
    run_until(c, caught_up(c, end1))
    # as if the copier died after appending everything but before any checkpoint: the checkpoint says (0, 0)
    store = CheckpointStore(mirror.zk, "g", unit)
    store.read()
    store.write(Checkpoint(0, 0, unit.target_partition, counts=None))
    second = produce_mix(src, "t", 0, "b", 0, 10)
    end2 = len(source_bytes(src, "t", 0))
    c = mirror.copier(unit)
    run_until(c, caught_up(c, end2))
    assert (c.stats["recounted_messages"], c.stats["messages"]) == (first, second)  # re-read for counting only
    assert target_bytes(mirror, "t", 0) == source_bytes(src, "t", 0)
    assert acked(store.read()) == first + second


def test_a_second_concurrent_owner_causes_no_duplicate(broker_factory, zk_connect, target_zk_connect, mirror):
    (src,) = broker_factory(n=1, zk_connect=zk_connect, num_partitions=1)
    broker_factory(n=1, zk_connect=target_zk_connect)
    produce_mix(src, "t", 0, "a", 0, 60)
    (unit,) = ensure_mapping(mirror.zk, "g", "t", ["dc1"], {"dc1": [(0, 0)]}).units
    end = len(source_bytes(src, "t", 0))
    a, b = mirror.copier(unit, fetch_size=512), mirror.copier(unit, fetch_size=512)
    stop = threading.Event()
    threads = [threading.Thread(target=c.run, args=(stop,), daemon=True) for c in (a, b)]
    for t in threads:
        t.start()
    wait_until(lambda: any(c.position == end and c.state == "caught up" for c in (a, b))
               and all(c.state in ("caught up", "lost ownership") for c in (a, b)), 60, "both owners to settle")
    stop.set()
    for t in threads:
        t.join(30)
    assert target_bytes(mirror, "t", 0) == source_bytes(src, "t", 0)
    assert a.stats["bytes"] + b.stats["bytes"] == end          # every byte appended by exactly one of them


def test_a_replicated_source_is_copied_through_a_leader_move(broker_factory, zk_connect, target_zk_connect, zk, mirror):
    srcs = broker_factory(n=2, zk_connect=zk_connect)
    broker_factory(n=2, zk_connect=target_zk_connect)
    create_replicated_topic(zk, "r", {0: [0, 1]})
    md = metadata_of(srcs)
    wait_for_leaders(md, "r", 1, isr=2)
    n = 0
    for i in range(20):
        produce_replicated(md, "r", 0, [payload("a", n + j) for j in range(3)], codec=1 if i % 4 == 0 else 0)
        n += 3
    (unit,) = ensure_mapping(mirror.zk, "g", "r", ["dc1"], {"dc1": [(0, 0)]}, replication_factor=2).units
    leader = md.leader("r", 0, refresh=True)
    with SimpleConsumer(leader.host, leader.port) as sc:
        end = md_end = sc.latest_offset("r", 0)
    c = mirror.copier(unit)
    run_until(c, caught_up(c, end))
    next(b for b in srcs if b.broker_id == leader.broker_id).kill()
    wait_for_leaders(md, "r", 1, exclude=(leader.broker_id,))
    for i in range(10):
        produce_replicated(md, "r", 0, [payload("b", i)])
        n += 1
    new = md.leader("r", 0, refresh=True)
    with SimpleConsumer(new.host, new.port) as sc:
        end = sc.latest_offset("r", 0)
        src = read_all(lambda o, m: sc.fetch_raw("r", 0, o, m))
    assert end > md_end
    c = mirror.copier(unit)
    run_until(c, caught_up(c, end))
    assert target_bytes(mirror, "r", 0) == src
    assert acked(CheckpointStore(mirror.zk, "g", unit).read()) == n


def test_too_few_target_partitions_fall_back_to_repartitioning_at_least_once(broker_factory, zk_connect,
                                                                             target_zk_connect, mirror):
    from ingest.client.topics_admin import create_topic

    (src,) = broker_factory(n=1, zk_connect=zk_connect, num_partitions=2)
    broker_factory(n=1, zk_connect=target_zk_connect)
    create_topic(mirror.zk, "f", partitions=1, replication_factor=1, manual=None)
    sent = Counter()
    for p in (0, 1):
        produce_mix(src, "f", p, f"s{p}", 0, 8)
        sent.update(m.payload for m in iter_messages(source_bytes(src, "f", p)))
    m = ensure_mapping(mirror.zk, "g", "f", ["dc1"], {"dc1": [(0, 0), (0, 1)]})
    assert all(u.fallback for u in m.units) and "fewer than the 2" in m.fallback_reason
    for unit in m.units:
        c = mirror.copier(unit)
        assert c.mode == FALLBACK_STATUS
        run_until(c, caught_up(c, len(source_bytes(src, "f", unit.partition))))
        cp = CheckpointStore(mirror.zk, "g", unit).read()
        assert cp.target_offset is None and cp.source_offset == len(source_bytes(src, "f", unit.partition))
        assert acked(cp) == sum(1 for _ in iter_messages(source_bytes(src, "f", unit.partition)))
    got = Counter(m.payload for m in iter_messages(target_bytes(mirror, "f", 0)))
    assert got == sent                                  # every message once (no restart happened)


def test_the_target_leader_killed_during_the_copy_costs_no_byte(broker_factory, zk_connect, target_zk_connect, mirror):
    (src,) = broker_factory(n=1, zk_connect=zk_connect, num_partitions=1)
    targets = broker_factory(n=2, zk_connect=target_zk_connect)
    sent = produce_mix(src, "tk", 0, "a", 0, 150)
    (unit,) = ensure_mapping(mirror.zk, "g", "tk", ["dc1"], {"dc1": [(0, 0)]}, replication_factor=2).units
    wait_for_leaders(metadata_of(targets), "tk", 1, isr=2)
    end = len(source_bytes(src, "tk", 0))
    c = mirror.copier(unit, fetch_size=256)
    stop = threading.Event()
    t = threading.Thread(target=c.run, args=(stop,), daemon=True)
    t.start()
    try:
        wait_until(lambda: c.position is not None and c.position > end // 4, 60, "a quarter copied")
        leader = mirror.target_md.leader("tk", 0, refresh=True).broker_id
        next(b for b in targets if b.broker_id == leader).kill()
        wait_until(lambda: c.position == end and c.state == "caught up", 90, "the copy to finish on the new leader")
    finally:
        stop.set()
        t.join(30)
    assert mirror.target_md.leader("tk", 0, refresh=True).broker_id != leader
    assert target_bytes(mirror, "tk", 0) == source_bytes(src, "tk", 0)
    assert acked(CheckpointStore(mirror.zk, "g", unit).read()) == sent


def test_a_target_outage_stops_the_copy_without_buffering_and_it_resumes_after(broker_factory, zk_connect,
                                                                               target_zk_connect, mirror):
    (src,) = broker_factory(n=1, zk_connect=zk_connect, num_partitions=1)
    (tgt,) = broker_factory(n=1, zk_connect=target_zk_connect)
    n1 = produce_mix(src, "o", 0, "a", 0, 10)
    (unit,) = ensure_mapping(mirror.zk, "g", "o", ["dc1"], {"dc1": [(0, 0)]}).units
    first = len(source_bytes(src, "o", 0))
    c = mirror.copier(unit)
    stop = threading.Event()
    t = threading.Thread(target=c.run, args=(stop,), daemon=True)
    t.start()
    try:
        wait_until(caught_up(c, first), 60, "the first part copied")
        tgt.kill()
        sent = produce_mix(src, "o", 0, "b", 0, 40)
        end = len(source_bytes(src, "o", 0))
        wait_until(lambda: c.state.startswith("waiting") and c.lag().bytes == end - first, 60,
                   "the copier to wait for the target, lag known")
        sets = c.stats["sets"]
        assert (c.position, len(c._uncounted)) == (first, 0)   # nothing read ahead, nothing buffered
        tgt.restart()
        wait_until(caught_up(c, end), 90, "the copy to resume")
        assert c.stats["sets"] > sets and c.lag() == (0, 0.0)
    finally:
        stop.set()
        t.join(30)
    assert target_bytes(mirror, "o", 0) == source_bytes(src, "o", 0)
    assert acked(CheckpointStore(mirror.zk, "g", unit).read()) == n1 + sent
