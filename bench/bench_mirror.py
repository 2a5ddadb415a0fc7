"""Mirror throughput against the plain producer and consumer of the same run.

One process tree: a real ZooKeeper (tests/harness/zookeeper.py) with two chroots, a *source*
broker and a *target* broker (tests/harness/brokers.py, ``ingest broker start``), both registered
in ZooKeeper, in a temporary directory; all stopped at exit (Ctrl-C and SIGTERM included).

1. **producer**: the product's ``Producer`` (sync, batch of 50 messages per send, acks=1) writes
   ``--count`` messages of 200 bytes to topic ``bench`` (``--partitions`` partitions, 0.7 topic)
   on the source broker; msg/s over the sends.
2. **consumer**: ``SimpleConsumer`` reads them back with 200 KB pulls, touching every message
   (as bench/bench_clients.py); msg/s.
3. **mirror**: ``MirrorMaker`` (the Python API of ``ingest mirror``, in this process; one copier
   thread per partition) copies topic ``bench`` to the target (created replicated, one partition
   per source partition, ``target.acks=-1``, replication factor 1, ``fetch.size`` 1 MiB, checkpoint
   every second). Timed from ``start()`` until the target's ends equal the source's ("total",
   with group join, topic creation and leader election), and from the first byte on the target
   until the end ("copy", the steady rate). The target partitions are then compared byte for byte
   with the source's.

Prints msg/s, MB/s, CPU per message (this process = client or mirror; the brokers from /proc), and
the ratios mirror / producer, mirror / consumer, mirror / slower of the two (aim >= 0.5).

Usage::

    .venv/bin/python bench/bench_mirror.py [--count 500000] [--partitions 1]
"""
from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from ingest.client.discovery import start_kazoo  # noqa: E402
from ingest.client.producer import Producer  # noqa: E402
from ingest.client.simple_consumer import SimpleConsumer  # noqa: E402
from ingest.mirror.mirror_maker import MirrorMaker  # noqa: E402
from ingest.records.message import HEADER_SIZE  # noqa: E402
from replication_cluster import busy_processes, machine  # noqa: E402
from tests.harness.brokers import BrokerProcess  # noqa: E402
from tests.harness.zookeeper import ZooKeeperServer  # noqa: E402
from tests.mirror.mirror_setup import TargetCluster, read_partition  # noqa: E402

PAYLOAD_SIZE = 200
BATCH = 50
PULL_BYTES = 200 * 1024
TOPIC = "bench"
BROKER_OVERRIDES = {"log.flush.interval": 10_000, "log.default.flush.interval.ms": 1000,
                    "log.default.flush.scheduler.interval.ms": 200, "num.threads": 2,
                    "log.file.size": 1 << 30, "socket.send.buffer": 1 << 20, "socket.receive.buffer": 1 << 20}


def proc_cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def payloads(count: int) -> list[bytes]:
    base = os.urandom(PAYLOAD_SIZE * 64)
    return [base[(i % 64) * PAYLOAD_SIZE:(i % 64 + 1) * PAYLOAD_SIZE] for i in range(count)]


def chroot(server: ZooKeeperServer, name: str) -> str:
    c = start_kazoo(server.connect, connection_timeout_ms=60_000)
    c.ensure_path(f"/{name}")
    c.stop()
    c.close()
    return f"{server.connect}/{name}"


def produce(broker: BrokerProcess, msgs: list[bytes], partitions: int) -> float:
    cfg = {"broker.list": broker.address, "request.required.acks": 1, "producer.type": "sync", "batch.size": BATCH}
    with Producer(cfg) as p:
        t0 = time.perf_counter()
        for i in range(0, len(msgs), BATCH):
            p.send(TOPIC, msgs[i:i + BATCH], key=str((i // BATCH) % partitions) if partitions > 1 else None)
        elapsed = time.perf_counter() - t0
        assert p.stats["failed"] == 0, p.stats
    return elapsed


def ends(broker: BrokerProcess, partitions: int) -> list[int]:
    with SimpleConsumer(broker.host, broker.port) as c:
        return [c.latest_offset(TOPIC, p) for p in range(partitions)]


def consume(broker: BrokerProcess, partition_ends: list[int]) -> tuple[float, int]:
    n = total = 0
    with SimpleConsumer(broker.host, broker.port, fetch_size=PULL_BYTES) as c:
        t0 = time.perf_counter()
        for p, end in enumerate(partition_ends):
            offset = 0
            while offset < end:
                r = c.fetch(TOPIC, p, offset)
                for m in r.messages:
                    total += len(m.payload)  # touch every message, as an application would
                n += len(r.messages)
                offset = r.next_offset
        elapsed = time.perf_counter() - t0
    assert total == n * PAYLOAD_SIZE
    return elapsed, n


def mirror(zk_src: str, zk_dst: str, partition_ends: list[int], acks: int = -1,
           fetch_size: int = 1 << 20) -> tuple[float, float, MirrorMaker]:
    """(total s from start, copy s from the first target byte, the stopped mirror)."""
    target = TargetCluster(zk_dst)
    mm = MirrorMaker({"sources": "src", "source.src.zk.connect": zk_src, "target.zk.connect": zk_dst,
                      "whitelist": TOPIC, "mirror.id": "bench", "fetch.size": fetch_size, "target.acks": acks,
                      "checkpoint.interval.ms": 1000, "topic.refresh.ms": 5000, "status.log.interval.ms": 600_000})
    try:
        t0 = time.perf_counter()
        mm.start()
        first = None
        want = sum(partition_ends)
        consumers: list[SimpleConsumer] = []
        while True:   # cheap polling: one OFFSETS request per partition on a kept connection
            now = time.perf_counter()
            if not consumers and (target.partitions(TOPIC) or 0) >= len(partition_ends):  # + spares
                try:
                    consumers = [SimpleConsumer(a.host, a.port) for a in
                                 (target.leader(TOPIC, p) for p in range(len(partition_ends)))]
                except Exception:  # no leader elected yet
                    consumers = []
            got = [c.latest_offset(TOPIC, p) for p, c in enumerate(consumers)] or [0]
            if first is None and sum(got) > 0:
                first = now
            if got == partition_ends:
                break
            if now - t0 > 300:
                raise RuntimeError(f"mirror stuck at {got} of {partition_ends}")
            time.sleep(0.005 if first is None else 0.05)
        for c in consumers:
            c.close()
        done = time.perf_counter()
        copied = sum(got)
        assert copied == want
    finally:
        mm.stop()
    for p in range(len(partition_ends)):
        a = target.leader(TOPIC, p)
        assert read_partition(a.host, a.port, TOPIC, p) == SOURCE_BYTES[p], f"target partition {p} differs"
    target.close()
    # `first` is seen up to one poll after the first append: the copy time is a slight underestimate
    return done - t0, done - first, mm


SOURCE_BYTES: dict[int, bytes] = {}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--count", type=int, default=500_000, help="messages")
    ap.add_argument("--partitions", type=int, default=1, help="partitions of the source topic")
    ap.add_argument("--acks", type=int, default=-1, choices=(-1, 1), help="the mirror's target.acks")
    ap.add_argument("--fetch-size", type=int, default=1 << 20, help="the mirror's fetch.size")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")

    def on_term(signum, _frame):
        raise KeyboardInterrupt(f"signal {signum}")
    signal.signal(signal.SIGTERM, on_term)
    msg_bytes = HEADER_SIZE + PAYLOAD_SIZE
    msgs = payloads(args.count)
    for line in machine():
        print(line)
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}; "
          f"busy elsewhere: {'; '.join(busy_processes()) or 'nothing'}", flush=True)
    zk = ZooKeeperServer().start()
    brokers: list[BrokerProcess] = []
    rows = []
    try:
        with tempfile.TemporaryDirectory(prefix="bench-mirror-") as work:
            zk_src, zk_dst = chroot(zk, "src"), chroot(zk, "dst")
            src = BrokerProcess(0, Path(work) / "src", zk_connect=zk_src,
                                overrides={**BROKER_OVERRIDES, "num.partitions": args.partitions}).start()
            brokers.append(src)
            dst = BrokerProcess(1, Path(work) / "dst", zk_connect=zk_dst, overrides=BROKER_OVERRIDES).start()
            brokers.append(dst)

            def cpu():
                return time.process_time(), proc_cpu(src.pid) + proc_cpu(dst.pid)

            def row(name, seconds, n, mark):
                me, br = cpu()
                rows.append((name, n, seconds, n / seconds, n * msg_bytes / seconds / 1e6,
                             (me - mark[0]) / n * 1e6, (br - mark[1]) / n * 1e6))

            mark = cpu()
            row("producer (sync, batch 50, acks=1)", produce(src, msgs, args.partitions), args.count, mark)
            deadline = time.monotonic() + 120
            while sum(e := ends(src, args.partitions)) < args.count * msg_bytes:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"only {e} bytes visible")
                time.sleep(0.05)
            for p in range(args.partitions):
                SOURCE_BYTES[p] = read_partition(src.host, src.port, TOPIC, p)
            mark = cpu()
            seconds, n = consume(src, e)
            assert n == args.count
            row("consumer (SimpleConsumer, 200 KB pulls)", seconds, n, mark)
            mark = cpu()
            total, copy, _ = mirror(zk_src, zk_dst, e, args.acks, args.fetch_size)
            me, br = cpu()
            rows.append(("mirror, from start (join, create topic, elect)", args.count, total, args.count / total,
                         args.count * msg_bytes / total / 1e6, (me - mark[0]) / args.count * 1e6,
                         (br - mark[1]) / args.count * 1e6))
            rows.append(("mirror, copy (first target byte to end)", args.count, copy, args.count / copy,
                         args.count * msg_bytes / copy / 1e6, None, None))
    finally:
        for b in brokers:
            b.stop()
        zk.stop()
    print(f"\n{args.count:,} messages of {PAYLOAD_SIZE} bytes, {args.partitions} partition(s), mirror target.acks="
          f"{args.acks} fetch.size={args.fetch_size}; "
          f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}\n")
    print(f"| {'row':<50} | {'seconds':>8} | {'msg/s':>10} | {'MB/s':>6} | {'this process µs/msg':>19} | "
          f"{'brokers µs/msg':>14} |")
    print(f"| {'-' * 50} | {'-' * 8}: | {'-' * 10}: | {'-' * 6}: | {'-' * 19}: | {'-' * 14}: |")
    for name, _n, seconds, rate, mbs, me, br in rows:
        cpu_me = "-" if me is None else f"{me:.1f}"
        cpu_br = "-" if br is None else f"{br:.1f}"
        print(f"| {name:<50} | {seconds:>8.2f} | {rate:>10,.0f} | {mbs:>6.1f} | {cpu_me:>19} | {cpu_br:>14} |")
    producer, consumer, total_rate, copy_rate = rows[0][3], rows[1][3], rows[2][3], rows[3][3]
    slower = min(producer, consumer)
    print(f"\nmirror (from start) / producer = {total_rate / producer:.2f}, / consumer = {total_rate / consumer:.2f}, "
          f"/ slower of the two = {total_rate / slower:.2f} (aim >= 0.5)")
    print(f"mirror (copy)       / producer = {copy_rate / producer:.2f}, / consumer = {copy_rate / consumer:.2f}, "
          f"/ slower of the two = {copy_rate / slower:.2f}")
    print("target partitions byte-identical to the source: yes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
