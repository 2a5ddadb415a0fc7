"""Source retention before mirroring: a lost range with the exact message count and the session bounds.

Real retention on the source broker (log.retention.size, checked every 100 ms) deletes segments the
mirror has not copied: partition 0 after the mirror copied part of its first segment (the gap starts
inside a deleted segment: the copied part is counted by reading it back from the target), partition 1
before the mirror ever ran. The records reach ZooKeeper, the checkpoint and the ``audit-mirror-lost``
topic (real registry, real HeaderReader/PartitionCounter/TierEventPublisher), and copying goes on from
the source's earliest offset: the target holds exactly the surviving source bytes.
"""
from __future__ import annotations

import threading
from dataclasses import replace

from ingest.client.simple_consumer import SimpleConsumer
from ingest.clock import SYSTEM_CLOCK
from ingest.events.header_reader import HeaderReader
from ingest.events.loadgen import EventGenerator
from ingest.events.registry_client import RegistryClient
from ingest.events.schemas import CLICK, load_schema
from ingest.events.serde import EventSerializer
from ingest.mirror import gaps as lr
from ingest.mirror.checkpoint import CheckpointStore
from ingest.mirror.config import MIRROR_FETCH
from ingest.mirror.copier_factory import make_copier
from ingest.mirror.mapping import ensure_mapping
from ingest.mirror.tier_counts import PartitionCounter
from ingest.mirror.tier_events import TierEventPublisher
from ingest.records.message_batch import iter_messages
from tests.events.readback import read_topic
from tests.harness.brokers import broker_factory  # noqa: F401  (fixture)
from tests.harness.wait import wait_until
from tests.mirror.copier_support import produce_07, read_all
from tests.mirror.copier_support import Mirror, target_zk_connect  # noqa: F401  (fixture)

T0 = 1_700_000_000_000


class Source:
    """Events of one producer session per partition, sent as sets (every fourth gzip-compressed)."""

    def __init__(self, broker, registry):
        self.broker = broker
        self.ser = EventSerializer(registry, "lr-value", load_schema(CLICK))
        self.gen = EventGenerator(CLICK, seed=7)
        self.seq = {0: 0, 1: 0}
        self.sets = 0

    def send(self, partition, n_sets, per_set=4):
        for _ in range(n_sets):
            payloads = []
            for _ in range(per_set):
                s = self.seq[partition]
                payloads.append(self.ser.serialize({**self.gen.make(), "header": {
                    "time": T0 + s, "server": "web", "service": "fe", "session": f"s{partition}", "seq": s}}))
                self.seq[partition] += 1
            produce_07(self.broker, "lr", partition, payloads, codec=1 if self.sets % 4 == 0 else 0)
            self.sets += 1

    def log(self, partition):
        with SimpleConsumer(self.broker.host, self.broker.port) as c:
            return c.earliest_offset("lr", partition), read_all(lambda o, m: c.fetch_raw("lr", partition, o, m),
                                                                c.earliest_offset("lr", partition))


def copy_until(copier, end):
    stop = threading.Event()
    t = threading.Thread(target=copier.run, args=(stop,), daemon=True)
    t.start()
    try:
        wait_until(lambda: (copier.position == end and copier.state == "caught up") or not t.is_alive(), 60,
                   f"{copier.unit} to reach {end}")
    finally:
        stop.set()
        t.join(30)
    return copier


def test_source_retention_gives_lost_ranges_with_exact_counts_and_bounds(broker_factory, zk_connect,
                                                                        target_zk_connect, registry_url):
    (src,) = broker_factory(n=1, zk_connect=zk_connect, num_partitions=2, log_file_size=4096,
                            log_retention_size=9000, log_retention_check_interval_ms=100)
    targets = broker_factory(n=1, zk_connect=target_zk_connect)
    registry = RegistryClient(registry_url)
    reader = HeaderReader(registry)
    source = Source(src, registry)
    m = Mirror(zk_connect, target_zk_connect)
    publisher = TierEventPublisher({"zk.connect": target_zk_connect, "request.required.acks": 1}, registry)
    try:
        units = ensure_mapping(m.zk, "g", "lr", ["dc1"], {"dc1": [(0, 0), (0, 1)]}).units

        def copier(unit):
            return make_copier(unit, group="g", zk=m.zk, source_discovery=m.source, target_metadata=m.target_md,
                               counter_factory=lambda state: PartitionCounter(
                                   session=unit.session("g"), topic="lr", source="dc1", mirror_server="mx",
                                   window_ms=60_000, interval_ms=1000, header_reader=reader, clock=SYSTEM_CLOCK,
                                   state=state),
                               publisher=publisher, header_reader=reader, fetch=replace(MIRROR_FETCH, fetch_size=1024),
                               checkpoint_interval_ms=100, mirror_server="mx")

        source.send(0, 3)                                   # 12 messages, well inside the first segment
        _, first = source.log(0)
        copy_until(copier(units[0]), len(first))
        copied_before = source.seq[0]
        source.send(0, 60)
        source.send(1, 60)
        wait_until(lambda: source.log(0)[0] > len(first) and source.log(1)[0] > 0, 30, "retention to delete")
        # partition 1: as if a copier had recorded the gap and died before its checkpoint moved past it
        e1, rest1 = source.log(1)
        seq1 = min(reader.read(x.payload).seq for x in iter_messages(rest1))
        prior = lr.lost_range_record(group="g", unit=units[1], mirror_server="crashed", start=0, end=e1,
                                     messages=seq1, exact=True, after=lr.HeaderScan(),
                                     before=lr.HeaderScan(min_seq={"s1": seq1}), target_offset=0, detected_at_ms=12345)
        assert lr.record_lost_range(m.zk, "g", prior)
        for unit in units:
            earliest, rest = source.log(unit.partition)
            c = copy_until(copier(unit), earliest + len(rest))
            assert c.stats["lost_ranges"] == 1
        records = lr.recorded_lost_ranges(m.zk, "g")
        lost = {r["partition"]: r for r in records}
        assert sorted(r["partition"] for r in records) == [0, 1]          # the prior record was not doubled
        assert lost[1]["detected_at_ms"] == 12345 and lost[1]["event_id"] == prior["event_id"]
        for p, r in lost.items():
            earliest, rest = source.log(p)
            first_after = min(h.seq for h in map(reader.read, (x.payload for x in iter_messages(rest))))
            start = len(first) if p == 0 else 0
            assert (r["start_offset"], r["end_offset"], r["bytes"]) == (start, earliest, earliest - start)
            after = copied_before - 1 if p == 0 else None
            assert r["messages_exact"] is True
            assert r["messages"] == first_after - (after + 1 if after is not None else 0)
            assert r["session_bounds"] == [{"session": f"s{p}", "after_seq": after, "before_seq": first_after}]
            assert r["target_partition"] == p and r["target_offset"] == (len(first) if p == 0 else 0)
            addr = m.target_md.leader("lr", p, refresh=True)
            with SimpleConsumer(addr.host, addr.port) as tc:
                target = read_all(lambda o, mx: tc.fetch_raw("lr", p, o, mx))
            assert target == (first if p == 0 else b"") + rest
            cp = CheckpointStore(m.zk, "g", units[p]).read()
            assert (cp.source_offset, cp.target_offset, cp.pending_lost) == (earliest + len(rest), len(target), ())
        published, failures = read_topic(targets, "audit-mirror-lost", registry)
        assert not failures
        assert sorted((r["partition"], r["messages"], r["event_id"]) for r in published) == sorted(
            (p, r["messages"], r["event_id"]) for p, r in lost.items())
    finally:
        publisher.close()
        m.close()


def test_source_segments_deleted_by_hand_are_a_missing_segments_range_not_retention(
        broker_factory, zk_connect, target_zk_connect, registry_url):
    """The source broker is stopped, its oldest segment files are deleted by hand (no deletion record), and it
    is started again: the mirror records the gap with cause ``missing_segments``, estimated from sizes, and
    publishes it so; the audit then reports it as DATA_LOSS (``source_missing_segments``)."""
    (src,) = broker_factory(n=1, zk_connect=zk_connect, num_partitions=1, log_file_size=4096)
    targets = broker_factory(n=1, zk_connect=target_zk_connect)
    registry = RegistryClient(registry_url)
    reader = HeaderReader(registry)
    source = Source(src, registry)
    m = Mirror(zk_connect, target_zk_connect)
    publisher = TierEventPublisher({"zk.connect": target_zk_connect, "request.required.acks": 1}, registry)
    try:
        (unit,) = ensure_mapping(m.zk, "g", "lr", ["dc1"], {"dc1": [(0, 0)]}).units

        def copier():
            return make_copier(unit, group="g", zk=m.zk, source_discovery=m.source, target_metadata=m.target_md,
                               counter_factory=lambda state: PartitionCounter(
                                   session=unit.session("g"), topic="lr", source="dc1", mirror_server="mx",
                                   window_ms=60_000, interval_ms=1000, header_reader=reader, clock=SYSTEM_CLOCK,
                                   state=state),
                               publisher=publisher, header_reader=reader, fetch=replace(MIRROR_FETCH, fetch_size=1024),
                               checkpoint_interval_ms=100, mirror_server="mx")

        source.send(0, 3)
        _, first = source.log(0)
        copy_until(copier(), len(first))
        source.send(0, 40)
        src.stop()
        files = sorted((src.log_dir / "lr-0").glob("*.kafka"))
        gone = b"".join(p.read_bytes() for p in files[:-2])[len(first):]
        for path in files[:-2]:        # an operator (or a disk fault) removes the oldest segments
            path.unlink()
        src.start()
        earliest, rest = source.log(0)
        assert earliest == int(files[-2].stem) > len(first)
        c = copy_until(copier(), earliest + len(rest))
        (r,) = lr.recorded_lost_ranges(m.zk, "g")
        assert c.stats["lost_ranges"] == 1
        assert (r["start_offset"], r["end_offset"], r["cause"], r["messages_exact"]) == \
            (len(first), earliest, "missing_segments", False)
        held = sum(1 for _ in iter_messages(gone))
        assert held // 2 <= r["messages"] <= 2 * held    # bytes / the unit's average size (gzip sets skew it)
        published, failures = read_topic(targets, "audit-mirror-lost", registry)
        assert not failures and [(x["cause"], x["event_id"]) for x in published] == [("missing_segments",
                                                                                      r["event_id"])]
    finally:
        publisher.close()
        m.close()
