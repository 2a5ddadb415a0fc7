"""The replication throttle: a replica catching up on a large partition, unthrottled against throttled, side by side.

Its own ZooKeeper and two broker processes; Kafka topics ``moving`` and ``steady`` (one partition each, on
brokers 0 and 1, broker 0 leading; ``steady`` has ``min.insync.replicas=2``). Each round, for each mode in
turn (unthrottled, then throttled at ``--rate``): broker 1 is stopped, ``moving`` gets ``--mb`` MB, the
throttle is set (ingest.broker.replication_throttle.apply, as a reassignment adding broker 1) or cleared,
broker 1 starts again; while it catches up on ``moving``, one producer writes to ``steady`` with acks=all,
one message at a time (each waits for broker 1 to have it). Printed per mode: the catch-up time and copy
rate (throttled: its ratio to the rate), and the latency of those acks=all writes; then the ratios of the
throttled mode to the unthrottled one. Nothing is asserted.

    .venv/bin/python bench/bench_throttle.py --quick       # 2 MB at 250,000 bytes/s, one round
    .venv/bin/python bench/bench_throttle.py               # 16 MB at 2,000,000 bytes/s, three rounds

The brokers measure the rate over ``replication.quota.window.num`` = ``--window-num`` (default 3) samples of
1 s. With Kafka's default of 11, the rate is divided by at least 10 s, so the first ``10 * rate`` bytes of a
catch-up pass at full speed (Kafka's ``Rate``); 3 keeps that burst to ``2 * rate`` so that the copy rate
printed is the throttle's steady one.
"""
from __future__ import annotations

import argparse
import shutil
import signal
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kazoo.client import KazooClient  # noqa: E402
from kazoo.exceptions import NoNodeError  # noqa: E402

from ingest import znodes  # noqa: E402
from ingest.broker import replication_throttle  # noqa: E402
from tests.harness.brokers import BrokerProcess, stop_all  # noqa: E402
from tests.harness.zookeeper import ZooKeeperServer  # noqa: E402

FETCH = 64 * 1024
VALUE = 1000


def state(zk, topic: str) -> znodes.PartitionState | None:
    try:
        data, stat = zk.retry(zk.get, znodes.partition_state_path(topic, 0))
    except NoNodeError:
        return None
    return znodes.PartitionState.parse(data, stat.version)


def wait(pred, timeout: float, what: str, interval: float = 0.02):
    deadline = time.monotonic() + timeout
    while True:
        value = pred()
        if value:
            return value
        if time.monotonic() > deadline:
            raise RuntimeError(f"no {what} after {timeout:.0f} s")
        time.sleep(interval)


def in_sync(zk, topic: str) -> bool:
    st = state(zk, topic)
    return st is not None and set(st.isr) == {0, 1}


def log_bytes(broker, topic: str) -> int:
    d = broker.log_dir / f"{topic}-0"
    return sum(f.stat().st_size for f in d.glob("*.log")) if d.exists() else 0


def fill(bootstrap: str, mb: float) -> None:
    from confluent_kafka import Producer   # heavy third-party import, only once the cluster runs

    p = Producer({"bootstrap.servers": bootstrap, "acks": 1, "linger.ms": 5, "batch.size": FETCH // 2})
    for i in range(int(mb * 1_000_000 / VALUE)):
        while True:
            try:
                p.produce("moving", value=b"m" * VALUE, partition=0)
                break
            except BufferError:
                p.poll(0.05)
        p.poll(0)
    if p.flush(120):
        raise RuntimeError("moving: messages unacknowledged after 120 s")


class AckedWrites(threading.Thread):
    """acks=all writes to ``steady``, one at a time, until stopped; their latencies in seconds."""

    def __init__(self, bootstrap: str) -> None:
        super().__init__(name="steady-writer", daemon=True)
        from confluent_kafka import Producer   # heavy third-party import

        self.p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0,
                           "message.timeout.ms": 60_000})
        self.latencies: list[float] = []
        self.failed = 0
        self._halt = threading.Event()

    def run(self) -> None:
        while not self._halt.is_set():
            t = time.monotonic()
            self.p.produce("steady", value=b"s" * 200, partition=0)
            if self.p.flush(60):
                self.failed += 1
            else:
                self.latencies.append(time.monotonic() - t)

    def stop(self) -> None:
        self._halt.set()
        self.join(90)


def one(brokers, zk, bootstrap: str, mode: str, args) -> dict:
    """Broker 1 catches up on ``--mb`` MB of ``moving``; ``mode``: "none" or "throttled"."""
    brokers[1].stop()
    wait(lambda: (st := state(zk, "moving")) is not None and st.isr == (0,), 60, "broker 1 out of the isr")
    fill(bootstrap, args.mb)
    if mode == "throttled":
        replication_throttle.apply(zk, {("moving", 0): [0, 1]}, args.rate, current={("moving", 0): [0]})
    else:
        replication_throttle.clear(zk, ["moving"], [0, 1])
    time.sleep(1.0)   # the brokers' watches apply the change (a bench, not a test: no condition to wait for)
    before = log_bytes(brokers[1], "moving")
    target = log_bytes(brokers[0], "moving")
    brokers[1].start(timeout=60)
    wait(lambda: in_sync(zk, "steady"), 60, "steady in sync")
    writer = AckedWrites(bootstrap)
    writer.start()
    b0 = wait(lambda: (b := log_bytes(brokers[1], "moving")) > before and b, 60, "the first bytes copied")
    t0 = time.monotonic()
    wait(lambda: in_sync(zk, "moving"), 600, "moving in sync")
    took = time.monotonic() - t0
    writer.stop()
    replication_throttle.clear(zk, ["moving"], [0, 1])
    lat = sorted(writer.latencies)
    return {"took": took, "bytes": target - b0, "rate": (target - b0) / took if took > 0 else 0.0,
            "writes": len(lat), "failed": writer.failed,
            "p50": statistics.median(lat) * 1000 if lat else None,
            "p99": lat[min(len(lat) - 1, int(len(lat) * 0.99))] * 1000 if lat else None}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="2 MB at 250,000 bytes/s, one round")
    ap.add_argument("--mb", type=float, default=None, help="MB written to the moving partition each time")
    ap.add_argument("--rate", type=int, default=None, help="the throttle, bytes/s")
    ap.add_argument("--rounds", type=int, default=None)
    ap.add_argument("--window-num", type=int, default=3, help="replication.quota.window.num of the brokers")
    args = ap.parse_args()
    args.mb = args.mb or (2.0 if args.quick else 16.0)
    args.rate = args.rate or (250_000 if args.quick else 2_000_000)
    args.rounds = args.rounds or (1 if args.quick else 3)
    signal.signal(signal.SIGTERM, lambda _s, _f: sys.exit(143))   # the finally below stops every process
    print(f"load average before: {open('/proc/loadavg').read().strip()}", flush=True)
    work = Path(tempfile.mkdtemp(prefix="bench-throttle-"))
    zk_server = ZooKeeperServer()
    brokers: list[BrokerProcess] = []
    zk = None
    try:
        zk_server.start()
        zk = KazooClient(hosts=zk_server.connect, timeout=10.0)
        zk.start(timeout=30)
        overrides = {"min.insync.replicas": 1, "replica.lag.time.max.ms": 1500, "zk.sessiontimeout.ms": 2000,
                     "replica.fetch.wait.max.ms": 100, "replica.fetch.max.bytes": FETCH,
                     "replication.quota.window.num": args.window_num}
        for i in range(2):
            brokers.append(BrokerProcess(i, work / f"broker{i}", zk_connect=zk_server.connect, overrides=overrides))
        for b in brokers:
            b.start(timeout=60)
            print(f"broker {b.broker_id} (pid {b.pid})", flush=True)
        zk.retry(zk.create, znodes.topic_config_path("steady"),
                 znodes.topic_config_value({"min.insync.replicas": "2"}), makepath=True)
        for topic in ("moving", "steady"):
            zk.retry(zk.create, znodes.topic_dir(topic), znodes.assignment_value({0: [0, 1]}, znodes.KAFKA_FORMAT),
                     makepath=True)
            wait(lambda: in_sync(zk, topic), 60, f"{topic} in sync")
        bootstrap = f"127.0.0.1:{brokers[0].kafka_port}"
        results: dict[str, list[dict]] = {"none": [], "throttled": []}
        for r in range(args.rounds):
            for mode in ("none", "throttled"):
                res = one(brokers, zk, bootstrap, mode, args)
                results[mode].append(res)
                print(f"round {r + 1} {mode:9}: {res['bytes']:>10} bytes in {res['took']:6.2f} s = "
                      f"{res['rate']:>12,.0f} bytes/s; steady acks=all: {res['writes']} writes, p50 "
                      f"{res['p50'] or 0:.1f} ms, p99 {res['p99'] or 0:.1f} ms, {res['failed']} failed", flush=True)
        med = {m: {k: statistics.median([x[k] or 0 for x in v]) for k in ("took", "rate", "p50", "p99")}
               for m, v in results.items()}
        print(f"throttled copy rate / --rate {args.rate:,}: {med['throttled']['rate'] / args.rate:.2f}")
        print(f"catch-up time throttled / unthrottled: {med['throttled']['took'] / max(med['none']['took'], 1e-9):.1f}")
        for k in ("p50", "p99"):
            print(f"steady acks=all {k} throttled / unthrottled: "
                  f"{med['throttled'][k] / max(med['none'][k], 1e-9):.2f}")
    finally:
        stop_all(brokers)
        for b in brokers:
            b.kill()
        if zk is not None:
            zk.stop()
            zk.close()
        zk_server.stop()
        shutil.rmtree(work, ignore_errors=True)
        print(f"load average after: {open('/proc/loadavg').read().strip()}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
