"""What the broker's metrics cost: the same traffic against a broker with ``metrics.port=-1`` and one with it on.

Two real broker processes (tests/harness/brokers.py), identical but for
``metrics.port`` (-1 vs 0), are driven in turns with pre-encoded frames on one
plain socket each (the client costs almost nothing), in the scenarios of
bench/bench_broker_server.py: PRODUCE of 200-byte messages in batches of 1 and 50
(pipelined, no acknowledgement), PRODUCE_ACK batch 1 (round trips) and FETCH of
~200 KB pulls (sendfile). Each scenario runs ``--rounds`` times per broker,
alternating off/on (and which of the two goes first) so that machine load hits
both alike; the best round counts.
It prints wall msg/s and the broker process's CPU microseconds per message
(user + sys from /proc, meaningful on a loaded machine) for both, and the ratio
on/off. Then the time of one scrape of the metrics broker while it holds
``--partitions`` partition logs. Last, in this process (no noise from the network
or other processes' scheduling): the CPU cost of dispatching one one-message
PRODUCE through the real handlers and log with metrics off and on, and the cost
of its metric updates alone (request count and latency, messages and bytes in)
with the broker's per-thread tallies and with prometheus_client's own Counter
and Histogram for comparison.

Usage::

    .venv/bin/python bench/bench_metrics.py [--count 100000] [--rounds 3] [--partitions 200]
"""
from __future__ import annotations

import argparse
import os
import socket
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from ingest.wire import protocol as p  # noqa: E402
from ingest.records.message_set import encode_message_set, valid_prefix  # noqa: E402
from tests.harness.brokers import BrokerProcess  # noqa: E402

PAYLOAD = b"x" * 200
PULL = 200 * 1024
OVERRIDES = {"log.flush.interval": 500, "log.default.flush.interval.ms": 1000,
             "log.default.flush.scheduler.interval.ms": 200, "num.partitions": 8}


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Driver:
    """One connection to one broker, and the scenarios (each returns (messages, wall s, broker CPU s))."""

    def __init__(self, broker: BrokerProcess) -> None:
        self.broker = broker
        self.s = socket.create_connection((broker.host, broker.port))
        self.s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def _barrier(self) -> None:
        self.s.sendall(p.MetadataRequest(("bench",)).encode())
        p.recv_response(self.s)

    def _measure(self, fn) -> tuple[int, float, float]:
        c0, t0 = cpu_seconds(self.broker.pid), time.perf_counter()
        n = fn()
        return n, time.perf_counter() - t0, cpu_seconds(self.broker.pid) - c0

    def produce(self, batch: int, count: int) -> tuple[int, float, float]:
        per = max(1, 5000 // batch)
        chunk = p.ProduceRequest("bench", 0, encode_message_set([PAYLOAD] * batch)).encode() * per

        def run() -> int:
            for _ in range(count // (per * batch)):
                self.s.sendall(chunk)
            self._barrier()
            return (count // (per * batch)) * per * batch
        return self._measure(run)

    def produce_ack(self, count: int) -> tuple[int, float, float]:
        frame = p.ProduceAckRequest("bench", 1, encode_message_set([PAYLOAD])).encode()

        def run() -> int:
            for _ in range(count):
                self.s.sendall(frame)
                p.recv_response(self.s)
            return count
        return self._measure(run)

    def fetch_all(self) -> tuple[int, float, float]:
        time.sleep(1.5)   # the flusher makes the tail visible
        self.s.sendall(p.OffsetsRequest("bench", 0, p.LATEST_TIME, 1).encode())
        end = p.OffsetsResponse.decode(p.recv_response(self.s)).offsets[0]
        msg_size = len(encode_message_set([PAYLOAD]))

        def run() -> int:
            offset = 0
            while offset < end:
                self.s.sendall(p.FetchRequest("bench", 0, offset, PULL).encode())
                offset += valid_prefix(memoryview(p.recv_response(self.s))[2:])
            return end // msg_size
        return self._measure(run)

    def close(self) -> None:
        self.s.close()


def scrape_seconds(broker: BrokerProcess, partitions: int) -> tuple[float, int]:
    """Create ``partitions`` logs on the metrics broker, then time one scrape (seconds, page bytes)."""
    import re

    url = re.search(r"metrics on (http://\S+/metrics)", broker.output()).group(1)
    with socket.create_connection((broker.host, broker.port)) as s:
        frame = encode_message_set([PAYLOAD])
        for i in range(partitions):
            s.sendall(p.ProduceAckRequest(f"scrape-{i // 8}", i % 8, frame).encode())
            p.recv_response(s)
    best, size = float("inf"), 0
    for _ in range(3):
        t0 = time.perf_counter()
        with urllib.request.urlopen(url, timeout=30) as resp:
            size = len(resp.read())
        best = min(best, time.perf_counter() - t0)
    return best, size


def update_cost(n: int = 200_000) -> tuple[float, float]:
    """CPU microseconds of one PRODUCE's metric updates: (the broker's tallies, prometheus_client's metrics)."""
    from prometheus_client import CollectorRegistry, Counter, Histogram

    from ingest.metrics.broker import LATENCY_BUCKETS, BrokerMetrics

    class Set:
        count, size = 1, 210

    tallies, vs = BrokerMetrics(), Set()
    reg = CollectorRegistry()
    msgs, byts = Counter("m", "m", ["topic"], registry=reg), Counter("b", "b", ["topic"], registry=reg)
    reqs, lat = Counter("r", "r", ["type"], registry=reg), Histogram("l", "l", ["type"], buckets=LATENCY_BUCKETS,
                                                                      registry=reg)
    children = (msgs.labels("bench"), byts.labels("bench"), reqs.labels("PRODUCE"), lat.labels("PRODUCE"))

    def ours() -> None:
        tallies.produced("bench", vs)
        tallies.request(0, 0.00003)

    def library() -> None:
        children[0].inc(vs.count)
        children[1].inc(vs.size)
        children[2].inc()
        children[3].observe(0.00003)

    out = []
    for fn in (ours, library):
        best = float("inf")
        for _ in range(3):
            t0 = time.process_time()
            for _ in range(n):
                fn()
            best = min(best, (time.process_time() - t0) / n * 1e6)
        out.append(best)
    return out[0], out[1]


def dispatch_cost(rounds: int = 20, n: int = 5000) -> dict[str, tuple[float, float]]:
    """CPU microseconds of dispatching one one-message PRODUCE in process (real handlers and log, no socket),
    metrics off and on: ``{"off": (min, median), "on": (min, median)}`` over ``rounds`` alternating rounds."""
    import statistics

    from ingest.broker.handlers import BrokerHandlers
    from ingest.broker.log_manager import LogManager
    from ingest.broker.server_config import SERVER_CONFIG
    from ingest.metrics.broker import BrokerMetrics, MeteredDispatcher

    frame = p.ProduceRequest("bench", 0, encode_message_set([PAYLOAD])).encode()
    body, kind = memoryview(frame)[6:], p.RequestType.PRODUCE
    setups = {}
    for key in ("off", "on"):
        config = SERVER_CONFIG.parse({"brokerid": 0, "port": 0, "listeners": "PLAINTEXT://127.0.0.1:0", "log.flush.interval": 500,
                                      "log.dir": tempfile.mkdtemp(prefix="bench-dispatch-")})
        logs = LogManager(config)
        logs.startup()
        handlers = BrokerHandlers(logs, config, broker_id=0, host="127.0.0.1", port=0)
        dispatcher = handlers
        if key == "on":
            handlers.metrics = BrokerMetrics()
            logs.on_flush = handlers.metrics.flushed
            dispatcher = MeteredDispatcher(handlers, handlers.metrics)
        dispatcher.dispatch(kind, body, "bench")          # creates the log
        setups[key] = (logs, dispatcher)
    times: dict[str, list[float]] = {"off": [], "on": []}
    try:
        for r in range(rounds):
            for key in (("off", "on") if r % 2 == 0 else ("on", "off")):
                dispatcher = setups[key][1]
                t0 = time.process_time()
                for _ in range(n):
                    dispatcher.dispatch(kind, body, "bench")
                times[key].append((time.process_time() - t0) / n * 1e6)
    finally:
        for logs, _ in setups.values():
            logs.shutdown()
    return {k: (min(v), statistics.median(v)) for k, v in times.items()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--count", type=int, default=100_000, help="messages per produce scenario")
    ap.add_argument("--rounds", type=int, default=3, help="rounds per scenario and broker (best counts)")
    ap.add_argument("--partitions", type=int, default=200, help="partition logs for the scrape timing")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-metrics-"))
    brokers = {"off": BrokerProcess(0, work / "off", overrides=OVERRIDES).start(),
               "on": BrokerProcess(1, work / "on", overrides={**OVERRIDES, "metrics.port": 0}).start()}
    drivers = {k: Driver(b) for k, b in brokers.items()}
    scenarios = {
        "PRODUCE batch 1": lambda d: d.produce(1, args.count),
        "PRODUCE batch 50": lambda d: d.produce(50, args.count),
        "PRODUCE_ACK batch 1 (round trips)": lambda d: d.produce_ack(min(args.count, 10_000)),
        f"FETCH {PULL // 1024} KB pulls": lambda d: d.fetch_all(),
    }
    best: dict[tuple[str, str], tuple[float, float]] = {}   # (scenario, off|on) -> (msg/s, CPU us/msg)
    try:
        for name, run in scenarios.items():
            for round_ in range(args.rounds):
                for key in (("off", "on") if round_ % 2 == 0 else ("on", "off")):   # neither always goes first
                    n, wall, cpu = run(drivers[key])
                    rate, us = n / wall, cpu * 1e6 / n
                    old = best.get((name, key))
                    best[(name, key)] = (max(rate, old[0]), min(us, old[1])) if old else (rate, us)
        scrape_s, page = scrape_seconds(brokers["on"], args.partitions)
    finally:
        for d in drivers.values():
            d.close()
        for b in brokers.values():
            b.stop()
    load = os.getloadavg()
    print(f"broker metrics off vs on: {args.count:,} messages of {len(PAYLOAD)} bytes per produce scenario, "
          f"best of {args.rounds} alternating rounds, loopback, one connection; {os.cpu_count()} cores, "
          f"load average {load[0]:.2f}")
    print(f"{'scenario':36} {'off msg/s':>11} {'on msg/s':>11} {'on/off':>7} {'off CPU us/msg':>15} "
          f"{'on CPU us/msg':>14} {'on/off':>7}")
    for name in scenarios:
        (r0, u0), (r1, u1) = best[(name, "off")], best[(name, "on")]
        print(f"{name:36} {r0:11,.0f} {r1:11,.0f} {r1 / r0:7.3f} {u0:15.2f} {u1:14.2f} {u1 / u0:7.3f}")
    print(f"one scrape with {args.partitions + 2} partition logs: {scrape_s * 1000:.1f} ms, {page:,} bytes")
    d = dispatch_cost()
    print(f"dispatch of one one-message PRODUCE in process (handlers + log, no socket), CPU us min/median: "
          f"off {d['off'][0]:.2f}/{d['off'][1]:.2f}, on {d['on'][0]:.2f}/{d['on'][1]:.2f}, "
          f"ratio {d['on'][0] / d['off'][0]:.3f}/{d['on'][1] / d['off'][1]:.3f}")
    ours, library = update_cost()
    print(f"metric updates of one PRODUCE, CPU in process: {ours:.2f} us with the per-thread tallies, "
          f"{library:.2f} us with prometheus_client's Counter/Histogram")
    return 0


if __name__ == "__main__":
    sys.exit(main())
