"""Replica fetcher threads: threads per broker, catch-up, idle CPU and acks=all throughput with many partitions.

One process tree, two clusters one after the other, each ZooKeeper + 3 real broker processes
(bench/replication_cluster.py), stopped at exit (also on Ctrl-C or SIGTERM):

- **reference**: the brokers run a reference checkout (``--reference REV``, extracted with ``git archive``
  into the temporary directory; default: the last commit whose Kafka-topic followers ran one thread per
  followed partition);
- **this checkout**: fetcher threads per source broker (``num.replica.fetchers``, ``--fetchers``).

For each: a Kafka-format topic of ``--partitions`` partitions, replication factor 3 (Kafka's placement,
leaders spread over the brokers); then

1. *catch-up*: seconds from writing the assignment until every partition's in-sync set is full;
2. *threads*: threads of each broker process (``/proc/PID/task``), and its fetcher threads by OS name;
3. *idle CPU*: CPU seconds the three brokers use over ``--idle`` seconds with nothing produced (what
   the followers' waiting fetches cost);
4. *throughput*: a confluent-kafka producer, ``acks=all``, 200-byte values to every partition in turn,
   for ``--seconds``; acknowledged messages per second and the brokers' CPU seconds per 10,000 messages.

The ratios (this checkout / reference) are printed at the end.

Usage::

    .venv/bin/python bench/bench_fetchers.py [--partitions 300] [--seconds 10] [--idle 5] [--fetchers 1]
    .venv/bin/python bench/bench_fetchers.py --quick      # seconds-long smoke run
"""
from __future__ import annotations

import argparse
import collections
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from ingest import znodes  # noqa: E402
from ingest.broker.assignment import assign  # noqa: E402
from replication_cluster import Cluster, brokers_cpu, busy_processes, machine  # noqa: E402

REFERENCE = "18c4b17"
"""The last commit whose Kafka-topic followers ran one fetcher thread per followed partition."""
TOPIC = "fetchers"
VALUE = b"x" * 200


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
        if comm.startswith("fetcher-"):
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


def run_cluster(label: str, work: Path, root: Path | None, args, log) -> dict:
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
        cluster.zk.retry(cluster.zk.create, znodes.topic_dir(TOPIC),
                         znodes.assignment_value(assignment, znodes.KAFKA_FORMAT), makepath=True)
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
        acked, wall, failed = produce(bootstrap, args.partitions, args.seconds)
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
    with tempfile.TemporaryDirectory(prefix="bench-fetchers-") as work:
        ref_root = extract(args.reference, Path(work) / "reference")
        ref = run_cluster(f"reference {args.reference} (a thread per partition)", Path(work) / "ref", ref_root,
                          args, log)
        new = run_cluster(f"this checkout ({args.fetchers} fetcher thread(s) per leader)", Path(work) / "new", None,
                          args, log)
    log(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print()
    print("ratio this checkout / reference:")
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
