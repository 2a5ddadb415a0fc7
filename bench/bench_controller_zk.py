"""ZooKeeper's side of the controller at 10,000 partitions: state writes one by one against fenced batches,
pipelined reads, and what the state nodes and their watches cost the server.

One process tree: the bench starts a real ZooKeeper (tests/harness/zookeeper.py) in a temporary directory,
creates ``--partitions`` partition state nodes (``/brokers/partition_states/[topic]/[p]``, 10 partitions a
topic, the controller's JSON) and stops it at exit. Then, on one kazoo session:

- *one by one*: each state rewritten by its own fenced transaction (``check`` of ``/controller_epoch``, then
  ``set_data`` at the version read), one after the other: the controller with ``controller.batch.partitions=1``
  (the reads are not counted);
- *batched B*: the same writes, B per fenced transaction (ingest.broker.controller_batches), B from ``--batches``;
- *reads one by one* and *pipelined reads* (``get_async`` of every node before the first answer is awaited,
  as ``ReplicationView.read_states``);
- *watches*: ``--watchers`` further sessions each set a data watch on every state node (what each broker does),
  with the time that took, ZooKeeper's watch count (``wchs``) and the JVM's RSS before and after.

The ratios against *one by one* are the figures; the machine's two cores are shared by ZooKeeper and the
Python client, as they are by a broker and its ZooKeeper in the scale run (bench/bench_scale.py).

Usage::

    .venv/bin/python bench/bench_controller_zk.py [--partitions 10000] [--batches 100,1000] [--watchers 3]
    .venv/bin/python bench/bench_controller_zk.py --quick
"""
from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from ingest import znodes  # noqa: E402
from ingest.broker.controller_fence import failed_operation  # noqa: E402
from bench_scale import proc_status, zk_stats  # noqa: E402
from replication_cluster import machine  # noqa: E402
from tests.harness.zookeeper import ZooKeeperServer  # noqa: E402

PER_TOPIC = 10


def keys(n: int) -> list[tuple[str, int]]:
    return [(f"t{i // PER_TOPIC:05d}", i % PER_TOPIC) for i in range(n)]


def state(leader: int, epoch: int) -> bytes:
    return znodes.PartitionState(leader, epoch, (leader, (leader + 1) % 3, (leader + 2) % 3), 1).encode()


def fenced(c, ops: list[tuple[str, bytes, int]], epoch_version: int) -> None:
    tx = c.transaction()
    tx.check(znodes.CONTROLLER_EPOCH, epoch_version)
    for path, data, version in ops:
        tx.set_data(path, data, version=version)
    failed = failed_operation(tx.commit())
    if failed is not None:
        raise RuntimeError(f"transaction refused at operation {failed}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--partitions", type=int, default=10_000, help="partition state nodes")
    ap.add_argument("--batches", default="100,1000", help="comma-separated partitions per fenced transaction")
    ap.add_argument("--watchers", type=int, default=3, help="sessions that each watch every state node")
    ap.add_argument("--quick", action="store_true", help="smoke run: 500 partitions, 1 watcher")
    args = ap.parse_args(argv)
    if args.quick:
        args.partitions, args.watchers = 500, 1
    try:
        batches = [int(x) for x in args.batches.split(",") if x.strip()]
    except ValueError:
        batches = []
    if not batches or min(batches) < 1 or max(batches) > 1000:
        ap.error(f"--batches {args.batches!r}: allowed is a comma-separated list of integers from 1 to 1000")
    if args.partitions < 1 or args.watchers < 0:
        ap.error(f"--partitions {args.partitions} --watchers {args.watchers}: allowed are >= 1 and >= 0")

    def on_term(signum, _frame):
        raise KeyboardInterrupt(f"signal {signum}")
    signal.signal(signal.SIGTERM, on_term)
    logging.getLogger("kazoo").setLevel(logging.ERROR)
    from kazoo.client import KazooClient

    for line in machine():
        print(line)
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
    server = ZooKeeperServer().start()
    clients = []
    rows: list[tuple[str, float, int]] = []
    try:
        print(f"ZooKeeper {server.connect} (pid {server.proc.pid})", flush=True)
        c = KazooClient(hosts=server.connect, timeout=10.0)
        c.start(timeout=30)
        clients.append(c)
        c.create(znodes.CONTROLLER_EPOCH, b"1", makepath=True)
        ks = keys(args.partitions)
        paths = [znodes.partition_state_path(*k) for k in ks]
        for t in sorted({k[0] for k in ks}):
            c.ensure_path(znodes.partition_states_dir(t))
        for i in range(0, len(paths), 1000):   # created pipelined: the set-up is not measured
            for a in [c.create_async(p, state(0, 0)) for p in paths[i:i + 1000]]:
                a.get()
        versions = {p: 0 for p in paths}
        z = zk_stats(server.connect)
        rss0 = proc_status(server.proc.pid)[1]
        print(f"{len(paths)} state nodes; ZooKeeper node count {z['nodes']}, JVM RSS {rss0:.0f} MB", flush=True)
        epoch = [0]

        def write_all(batch: int) -> float:
            epoch[0] += 1
            data = state(epoch[0] % 3, epoch[0])
            t0 = time.perf_counter()
            for i in range(0, len(paths), batch):
                group = paths[i:i + batch]
                fenced(c, [(p, data, versions[p]) for p in group], 0)
                for p in group:
                    versions[p] += 1
            return time.perf_counter() - t0

        secs = write_all(1)
        rows.append(("state writes, one fenced transaction each (batch 1)", secs, len(paths)))
        print(f"  one by one: {secs:.2f} s", flush=True)
        for b in batches:
            secs = write_all(b)
            rows.append((f"state writes, {b} per fenced transaction", secs, len(paths)))
            print(f"  batch {b}: {secs:.2f} s", flush=True)
        t0 = time.perf_counter()
        for p in paths:
            c.get(p)
        rows.append(("state reads, one by one", time.perf_counter() - t0, len(paths)))
        t0 = time.perf_counter()
        for i in range(0, len(paths), 1000):
            for a in [c.get_async(p) for p in paths[i:i + 1000]]:
                a.get()
        rows.append(("state reads, pipelined (1,000 in flight)", time.perf_counter() - t0, len(paths)))
        watch_rows = []
        for w in range(args.watchers):
            wc = KazooClient(hosts=server.connect, timeout=10.0)
            wc.start(timeout=30)
            clients.append(wc)
            t0 = time.perf_counter()
            for p in paths:
                wc.DataWatch(p, lambda _d, _s: None)
            secs = time.perf_counter() - t0
            z = zk_stats(server.connect)
            watch_rows.append((w + 1, secs, z["watches"], proc_status(server.proc.pid)[1]))
            print(f"  watcher {w + 1}: {secs:.1f} s to watch every node; ZooKeeper watches {z['watches']}", flush=True)
    except KeyboardInterrupt:
        print("interrupted: stopping ZooKeeper")
        raise
    finally:
        for cl in clients:
            try:
                cl.stop()
                cl.close()
            except Exception:  # noqa: BLE001 - best effort at exit
                pass
        server.stop()
        print(f"ZooKeeper stopped; load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"\n{args.partitions} partition states on one ZooKeeper (its JVM: -Xmx256m, tickTime 500 ms)")
    print("| operation | seconds | per second | ratio to one by one |")
    print("| --- | ---: | ---: | ---: |")
    base_w, base_r = rows[0][1], rows[len(batches) + 1][1]
    for i, (name, secs, n) in enumerate(rows):
        base = base_w if i <= len(batches) else base_r
        print(f"| {name} | {secs:.2f} | {n / secs:,.0f} | {base / secs:.1f}x |")
    if watch_rows:
        print("| sessions watching every state node | seconds to set the watches | ZooKeeper watches | "
              "ZooKeeper RSS (MB) |")
        print("| ---: | ---: | ---: | ---: |")
        print(f"| 0 | - | - | {rss0:.0f} |")
        for w, secs, watches, rss in watch_rows:
            print(f"| {w} | {secs:.1f} | {watches:,} | {rss:.0f} |")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(130)
