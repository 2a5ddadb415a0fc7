"""Replica fetcher threads: threads per broker, catch-up, idle CPU and acks=all throughput with many partitions.

One process tree, two clusters per topic format one after the other, each ZooKeeper + 3 real broker
processes (bench/replication_cluster.py), stopped at exit (also on Ctrl-C or SIGTERM):

- **reference**: the brokers run a reference checkout (``--reference REV``, extracted with ``git archive``
  into the temporary directory; default: the last commit whose Kafka-topic followers ran one thread per
  followed partition; its 0.7-topic followers ran one too, as every commit before REPLICA_FETCHES);
- **this checkout**: fetcher threads per source broker (``num.replica.fetchers``, ``--fetchers``).

``--formats`` picks the topic formats (``kafka,07`` by default: four clusters). For each: a topic of that
format with ``--partitions`` partitions, replication factor 3 (Kafka's placement, leaders spread over the
brokers); then

1. *catch-up*: seconds from writing the assignment until every partition's in-sync set is full;
2. *threads*: threads of each broker process (``/proc/PID/task``), and its fetcher threads by OS name;
3. *idle CPU*: CPU seconds the three brokers use over ``--idle`` seconds with nothing produced (what
   the followers' waiting fetches cost);
4. *throughput*: ``acks=all`` writes of 200-byte values to every partition in turn, for ``--seconds``;
   acknowledged messages per second and the brokers' CPU seconds per 10,000 messages. A Kafka topic: a
   confluent-kafka producer (``linger.ms`` 5). A 0.7 topic: PRODUCE_ACKS (acks -1) of
   :data:`SET_MESSAGES` values each, one connection per leader, :data:`WINDOW` requests in flight on it.

Threads of a 0.7 topic's followers are counted by name (``fetcher07-*``) in this checkout; the reference's
per-partition threads have no OS name, so the *threads per broker* row is what compares the two.

The ratios (this checkout / reference) are printed at the end.

Usage::

    .venv/bin/python bench/bench_fetchers.py [--partitions 300] [--seconds 10] [--idle 5] [--fetchers 1] [--formats 07]
    .venv/bin/python bench/bench_fetchers.py --quick      # seconds-long smoke run
"""
from __future__ import annotations

import argparse
import collections
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from ingest import znodes  # noqa: E402
from ingest.broker.assignment import assign  # noqa: E402
from ingest.records.message_set import encode_message_set  # noqa: E402
from ingest.wire import protocol as p  # noqa: E402
from replication_cluster import Cluster, brokers_cpu, busy_processes, machine  # noqa: E402

REFERENCE = "18c4b17"
"""The last commit whose Kafka-topic followers ran one fetcher thread per followed partition."""
TOPIC = "fetchers"
VALUE = b"x" * 200
SET_MESSAGES = 10
"""Values per PRODUCE_ACKS request of the 0.7 rows (the Kafka producer batches by ``linger.ms``)."""
WINDOW = 32
"""PRODUCE_ACKS requests in flight on each leader's connection (the 0.7 port answers in order)."""


def extract(rev: str, into: Path) -> Path:
    """The tree of ``rev`` of this repository, written under ``into`` (no git metadata)."""
    into.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(REPO), "archive", rev], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


def threads(pid: int) -> tuple[int, collections.Counter]:
    """(threads of process ``pid``, its fetcher threads by OS name)."""
    names: collections.Counter = collections.Counter()
    tasks = list(Path(f"/proc/{pid}/task").iterdir())
    for task in tasks:
        try:
            comm = (task / "comm").read_text().strip()
        except OSError:
            continue
        if comm.startswith(("fetcher-", "fetcher07-")):
            names[comm] += 1
    return len(tasks), names


def produce(bootstrap: str, partitions: int, seconds: float) -> tuple[int, float, int]:
    """(acknowledged, wall seconds, failed): acks=all to every partition in turn for ``seconds``."""
    from confluent_kafka import Producer

    acked, failed = [0], [0]

    def done(err, _msg) -> None:
        if err is None:
            acked[0] += 1
        else:
            failed[0] += 1

    prod = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5, "enable.idempotence": False,
                     "message.timeout.ms": 120_000, "queue.buffering.max.messages": 200_000})
    t0 = time.perf_counter()
    n = 0
    while time.perf_counter() - t0 < seconds:
        try:
            prod.produce(TOPIC, VALUE, partition=n % partitions, on_delivery=done)
            n += 1
        except BufferError:
            prod.poll(0.01)
        if n % 1000 == 0:
            prod.poll(0)
    prod.flush(180)
    return acked[0], time.perf_counter() - t0, failed[0]


def produce07(cluster: Cluster, partitions: int, seconds: float) -> tuple[int, float, int]:
    """(acknowledged messages, wall seconds, failed requests): acks=-1 PRODUCE_ACKS to every partition in
    turn for ``seconds``, one connection per leader with :data:`WINDOW` requests in flight."""
    meta = cluster.metadata()
    led: dict[int, list[int]] = collections.defaultdict(list)
    addrs = {}
    for q in range(partitions):
        a = meta.wait_for_leader(TOPIC, q, time.monotonic() + 30)
        led[a.broker_id].append(q)
        addrs[a.broker_id] = a
    mset = encode_message_set([VALUE] * SET_MESSAGES)
    frames = {q: p.ProduceAcksRequest(-1, 30_000, p.ProduceRequest(TOPIC, q, mset)).encode() for q in range(partitions)}
    results: dict[int, tuple[int, int]] = {}
    t0 = time.perf_counter()
    deadline = t0 + seconds

    def drive(broker_id: int) -> None:
        qs, ok, bad, i = led[broker_id], 0, 0, 0
        with socket.create_connection((addrs[broker_id].host, addrs[broker_id].port), timeout=60) as s:
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            while time.perf_counter() < deadline:
                s.sendall(b"".join(frames[qs[(i + k) % len(qs)]] for k in range(WINDOW)))
                i += WINDOW
                for _ in range(WINDOW):
                    if p.ProduceAckResponse.decode(p.recv_response(s)).error == 0:
                        ok += 1
                    else:
                        bad += 1
        results[broker_id] = (ok, bad)

    workers = [threading.Thread(target=drive, args=(b,), daemon=True) for b in led]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    wall = time.perf_counter() - t0
    return (sum(ok for ok, _ in results.values()) * SET_MESSAGES, wall,
            sum(bad for _, bad in results.values()) + len(led) - len(results))


def run_cluster(label: str, work: Path, root: Path | None, args, log, fmt: str = "kafka") -> dict:
    overrides = {"min.insync.replicas": 2, "zk.sessiontimeout.ms": 6000, "replica.lag.time.max.ms": 10_000,
                 "num.replica.fetchers": args.fetchers}
    if root is not None:   # the reference knows no num.replica.fetchers
        overrides.pop("num.replica.fetchers")
    cluster = Cluster(work, overrides, root=root)
    out: dict = {"label": label}
    try:
        cluster.start()
        log(f"  {label}: ZooKeeper (pid {cluster.zk_server.proc.pid}), brokers "
            + ", ".join(f"{b.broker_id} (pid {b.pid})" for b in cluster.brokers))
        ids = [b.broker_id for b in cluster.brokers]
        assignment = assign(ids, args.partitions, 3)
        t0 = time.monotonic()
        value = znodes.assignment_value(assignment, znodes.KAFKA_FORMAT) if fmt == "kafka" else \
            znodes.assignment_value(assignment)
        cluster.zk.retry(cluster.zk.create, znodes.topic_dir(TOPIC), value, makepath=True)
        for q in range(args.partitions):
            cluster.wait_state(TOPIC, q, lambda s: len(s.isr) == 3, 600, "full in-sync set")
        out["catch_up_s"] = time.monotonic() - t0
        time.sleep(1.0)   # settle: threads that end after the last join
        per = {b.broker_id: threads(b.pid) for b in cluster.brokers}
        out["threads"] = {i: n for i, (n, _f) in per.items()}
        out["fetchers"] = {i: sum(f.values()) for i, (_n, f) in per.items()}
        cpu0 = brokers_cpu(cluster)
        time.sleep(args.idle)
        out["idle_cpu"] = (brokers_cpu(cluster) - cpu0) / args.idle
        bootstrap = ",".join(f"127.0.0.1:{b.kafka_port}" for b in cluster.brokers)
        cpu0 = brokers_cpu(cluster)
        acked, wall, failed = produce(bootstrap, args.partitions, args.seconds) if fmt == "kafka" else \
            produce07(cluster, args.partitions, args.seconds)
        out["cpu_per_10k"] = (brokers_cpu(cluster) - cpu0) / max(1, acked) * 10_000
        out["rate"], out["failed"] = acked / wall, failed
        log(f"  {label}: catch-up {out['catch_up_s']:.1f} s, threads per broker {out['threads']}, fetcher "
            f"threads {out['fetchers']}, idle CPU {out['idle_cpu']:.2f} s/s, acks=all {out['rate']:,.0f} msg/s "
            f"({failed} failed), broker CPU {out['cpu_per_10k']:.2f} s per 10k msgs")
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        cluster.close()
        signal.signal(signal.SIGINT, signal.default_int_handler)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--partitions", type=int, default=300)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--idle", type=float, default=5.0)
    ap.add_argument("--fetchers", type=int, default=1, help="num.replica.fetchers of this checkout's brokers")
    ap.add_argument("--reference", default=REFERENCE, help="git revision the reference brokers run")
    ap.add_argument("--formats", default="kafka,07", help="topic formats to compare, comma-separated: kafka, 07")
    ap.add_argument("--quick", action="store_true", help="30 partitions, 2 s rows")
    args = ap.parse_args()
    if args.quick:
        args.partitions, args.seconds, args.idle = 30, 2.0, 1.0

    def on_term(signum, _frame):
        raise KeyboardInterrupt(f"signal {signum}")
    signal.signal(signal.SIGTERM, on_term)

    def log(msg: str) -> None:
        print(msg, flush=True)

    for line in machine():
        log(line)
    log(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    log("other processes using CPU (1 s sample): " + ("; ".join(busy_processes()) or "none above 5%"))
    log(f"{args.partitions} partitions, replication factor 3, 3 brokers; reference {args.reference}, this checkout "
        f"with num.replica.fetchers={args.fetchers}")
    formats = [f.strip() for f in args.formats.split(",") if f.strip()]
    bad = [f for f in formats if f not in ("kafka", "07")]
    if bad or not formats:
        ap.error(f"--formats {args.formats!r}: each of {bad or formats} must be kafka or 07")
    results = []
    with tempfile.TemporaryDirectory(prefix="bench-fetchers-") as work:
        ref_root = extract(args.reference, Path(work) / "reference")
        for fmt in formats:
            log(f"{fmt} topic:")
            ref = run_cluster(f"reference {args.reference} (a thread per partition)", Path(work) / f"ref-{fmt}",
                              ref_root, args, log, fmt)
            new = run_cluster(f"this checkout ({args.fetchers} fetcher thread(s) per leader)", Path(work) / f"new-{fmt}",
                              None, args, log, fmt)
            log(f"  load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
            results.append((fmt, ref, new))
    log(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    for fmt, ref, new in results:
        print()
        print(f"{fmt} topic, ratio this checkout / reference:")
        print(f"  threads per broker (max): {max(new['threads'].values()) / max(ref['threads'].values()):.2f} "
              f"({max(new['threads'].values())} vs {max(ref['threads'].values())})")
        print(f"  catch-up time: {new['catch_up_s'] / ref['catch_up_s']:.2f}")
        print(f"  idle broker CPU: {new['idle_cpu'] / max(ref['idle_cpu'], 1e-3):.2f}")
        print(f"  acks=all throughput: {new['rate'] / ref['rate']:.2f}")
        print(f"  broker CPU per message: {new['cpu_per_10k'] / ref['cpu_per_10k']:.2f}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(130)
