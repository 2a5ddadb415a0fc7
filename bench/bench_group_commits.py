"""Committed offsets: the write rate of ``__consumer_offsets`` against ZooKeeper's, and the load time of a new coordinator.

One process tree: a real ZooKeeper and 3 real brokers (tests/harness/), stopped at exit. In the same run:

1. **__consumer_offsets** (replication factor 3, ``min.insync.replicas=2``): ``--threads`` clients, each
   committing one partition's offset for groups of its own (OffsetCommit v8, generation -1, as an
   ``assign`` consumer commits) in a loop for ``--seconds``; each commit is answered once the in-sync
   replicas have it.
2. **ZooKeeper** (the Kafka 0.8.1 layout ``/consumers/[group]/offsets/[topic]/[partition]``): the same
   number of threads, each with its own kazoo client, ``set`` in a loop for ``--seconds``.
3. **Load**: the leader of the busiest ``__consumer_offsets`` partition is SIGKILLed; the new leader's log
   line "loaded __consumer_offsets-P ... in S s" gives how long it took to read the partition back.

Prints commits/s of both and their ratio. Usage::

    .venv/bin/python bench/bench_group_commits.py [--seconds 10] [--threads 8]
"""
from __future__ import annotations

import argparse
import re
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ingest.broker.groups.offsets_topic import OFFSETS_TOPIC, partition_for  # noqa: E402
from ingest.wire.kafka.connection import KafkaConnection  # noqa: E402
from ingest.wire.kafka.find_coordinator import FindCoordinatorRequest  # noqa: E402
from ingest.wire.kafka.offset_commit import (OffsetCommitRequest, OffsetCommitRequestPartition,  # noqa: E402
                                             OffsetCommitRequestTopic)
from tests.harness.brokers import BrokerProcess, stop_all  # noqa: E402
from tests.harness.replicated import replication_overrides  # noqa: E402
from tests.harness.zookeeper import ZooKeeperServer  # noqa: E402

PARTITIONS = 6


def _coordinator(brokers, group: str):
    for _ in range(600):
        b = brokers[0] if brokers[0].running else brokers[1]
        conn = KafkaConnection("127.0.0.1", b.kafka_port)
        try:
            resp = conn.call(FindCoordinatorRequest(group), 2)
        finally:
            conn.close()
        found = next((x for x in brokers if x.broker_id == resp.node_id and x.running), None)
        if resp.error_code == 0 and found is not None:
            return found
        time.sleep(0.1)
    raise SystemExit(f"no coordinator for {group}")


def bench_topic(brokers, threads: int, seconds: float) -> tuple[int, dict[int, int]]:
    counts = [0] * threads
    per_partition: dict[int, int] = {}
    stop = time.monotonic() + seconds

    def run(i: int) -> None:
        group = f"bench-{i}"
        b = _coordinator(brokers, group)
        conn = KafkaConnection("127.0.0.1", b.kafka_port)
        n = 0
        while time.monotonic() < stop:
            req = OffsetCommitRequest(group, -1, "", None, -1, (OffsetCommitRequestTopic(
                "t", (OffsetCommitRequestPartition(0, n, -1, -1, ""),)),))
            resp = conn.call(req, 8)
            if resp.topics[0].partitions[0].error_code == 0:
                n += 1
        counts[i] = n
        conn.close()

    ts = [threading.Thread(target=run, args=(i,)) for i in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    for i, n in enumerate(counts):
        p = partition_for(f"bench-{i}", PARTITIONS)
        per_partition[p] = per_partition.get(p, 0) + n
    return sum(counts), per_partition


def bench_zookeeper(connect: str, threads: int, seconds: float) -> int:
    from kazoo.client import KazooClient

    counts = [0] * threads
    stop = time.monotonic() + seconds

    def run(i: int) -> None:
        zk = KazooClient(hosts=connect)
        zk.start()
        path = f"/consumers/bench-{i}/offsets/t/0"
        zk.ensure_path(path)
        n = 0
        while time.monotonic() < stop:
            zk.set(path, str(n).encode())
            n += 1
        counts[i] = n
        zk.stop()
        zk.close()

    ts = [threading.Thread(target=run, args=(i,)) for i in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return sum(counts)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--threads", type=int, default=8)
    args = ap.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="bench-groups-"))
    zk = ZooKeeperServer().start()
    brokers = []
    try:
        overrides = replication_overrides(min_isr=2, **{"offsets.topic.num.partitions": PARTITIONS,
                                                        "offsets.topic.replication.factor": 3})
        for i in range(3):
            brokers.append(BrokerProcess(i, work / f"b{i}", zk_connect=zk.connect, overrides=overrides).start())
        topic_n, per_partition = bench_topic(brokers, args.threads, args.seconds)
        zk_n = bench_zookeeper(zk.connect, args.threads, args.seconds)
        print(f"{args.threads} committing threads, {args.seconds:.0f} s each, 3 brokers and ZooKeeper on one machine")
        print(f"  __consumer_offsets (RF 3, acks=all): {topic_n / args.seconds:8.0f} commits/s")
        print(f"  ZooKeeper set:                       {zk_n / args.seconds:8.0f} writes/s")
        print(f"  ratio topic / ZooKeeper:             {topic_n / max(zk_n, 1):8.2f}")
        busiest = max(per_partition, key=per_partition.get)
        victim = _coordinator(brokers, next(f"bench-{i}" for i in range(args.threads)
                                            if partition_for(f"bench-{i}", PARTITIONS) == busiest))
        victim.kill()
        survivors = [b for b in brokers if b is not victim]
        group = next(f"bench-{i}" for i in range(args.threads) if partition_for(f"bench-{i}", PARTITIONS) == busiest)
        for _ in range(600):
            new = _coordinator(survivors, group)
            conn = KafkaConnection("127.0.0.1", new.kafka_port)
            resp = conn.call(OffsetCommitRequest(group, -1, "", None, -1, (OffsetCommitRequestTopic(
                "t", (OffsetCommitRequestPartition(1, 0, -1, -1, ""),)),)), 8)
            conn.close()
            m = re.search(rf"loaded {OFFSETS_TOPIC}-{busiest} \(leader epoch \d+\): (\d+) records, \d+ groups, "
                          r"in ([0-9.]+) s", new.output())
            if m:
                print(f"  load of {OFFSETS_TOPIC}-{busiest} by the new leader: {m.group(1)} records in {m.group(2)} s")
                break
            time.sleep(0.2)
    finally:
        stop_all(brokers)
        zk.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
