"""Consumer throughput with CRC validation over loopback: fetch_batch against fetch, the previous code and the limit.

One real broker process (``ingest broker start``, as bench_clients.py) holds
COUNT messages of 200 bytes (published by ``Producer``, batch 50). Each
consumer then reads all of them with pulls of 200 KB, every message CRC-checked,
in its own process (so its CPU time is its own, read with ``time.process_time``;
the broker's from ``/proc/<pid>/stat``):

* ``fetch_batch``: ``SimpleConsumer.fetch_batch``, one ``MessageBatch`` per pull
  (the application reads the byte count of the payloads from the batch);
* ``fetch_batch + arrow``: the same, plus ``payloads_arrow()`` per pull (one column);
* ``fetch_batch + payloads()``: the same, plus the list of payload memoryviews per pull;
* ``fetch_batch + payload(i)``: the same, plus one ``payload(i)`` call per message;
* ``fetch``: ``SimpleConsumer.fetch``, one ``MessageAndOffset`` per message (the old API);
* ``previous fetch``: the same loop run on the previous code (``--previous``, a
  commit extracted with ``git archive`` into a temporary directory; 77fcce0 by default).

The reference in the same run is the physical limit: the same bytes through a
raw loopback TCP connection (``sendall`` 256 KB / ``recv_into`` 1 MB). Modes run
in interleaved rounds (``--rounds``); the best wall time of each is reported with
its CPU. Prints the machine, load average at start and end, and ratios.

    .venv/bin/python bench/bench_consumer.py [--count 1000000] [--rounds 3] [--previous 77fcce0] [--json FILE]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CODE = os.environ.get("BENCH_CONSUMER_CODE")  # a worker of the previous code imports ingest from there
sys.path.insert(0, CODE or str(REPO))

PAYLOAD_SIZE = 200
PULL_BYTES = 200 * 1024
MSG_BYTES = 10 + PAYLOAD_SIZE
MODES = ("fetch_batch", "fetch_batch + arrow", "fetch_batch + payloads()", "fetch_batch + payload(i)", "fetch",
         "previous fetch")


# --- the consumers (run as subprocesses: `bench_consumer.py --worker MODE ...`) -------------------------

def consume(mode: str, host: str, port: int, topic: str, count: int) -> dict:
    import ingest
    from ingest.client.simple_consumer import SimpleConsumer

    if mode == "fetch_batch + arrow":
        import pyarrow.compute as pc
    with SimpleConsumer(host, port, fetch_size=PULL_BYTES) as c:
        c.latest_offset(topic, 0)  # connected before the clock starts
        n = total = offset = 0
        c0, t0 = time.process_time(), time.perf_counter()
        if mode in ("fetch", "previous fetch"):
            while n < count:
                r = c.fetch(topic, 0, offset)
                for m in r.messages:
                    total += len(m.payload)  # touch every message, as an application would
                n += len(r.messages)
                offset = r.next_offset
        elif mode == "fetch_batch":
            while n < count:
                b = c.fetch_batch(topic, 0, offset)
                k = len(b)
                total += b.bounds[k] - b.bounds[0] - b.header_size * k
                n += k
                offset = b.next_offset
        elif mode == "fetch_batch + arrow":
            while n < count:
                b = c.fetch_batch(topic, 0, offset)
                arr = b.payloads_arrow()
                total += pc.sum(pc.binary_length(arr)).as_py() or 0
                n += len(b)
                offset = b.next_offset
        elif mode == "fetch_batch + payloads()":
            while n < count:
                b = c.fetch_batch(topic, 0, offset)
                for p in b.payloads():
                    total += len(p)
                n += len(b)
                offset = b.next_offset
        elif mode == "fetch_batch + payload(i)":
            while n < count:
                b = c.fetch_batch(topic, 0, offset)
                payload = b.payload
                for i in range(len(b)):
                    total += len(payload(i))
                n += len(b)
                offset = b.next_offset
        else:
            raise SystemExit(f"unknown mode {mode!r}; one of {MODES}")
        seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    return {"mode": mode, "code": str(Path(ingest.__file__).parents[1]), "messages": n, "payload_bytes": total, "seconds": seconds, "cpu": cpu}


# --- the orchestrator ------------------------------------------------------------------------------

def machine() -> str:
    model = next((ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines()
                  if ln.startswith("model name")), platform.processor())
    mem = next(int(ln.split()[1]) for ln in Path("/proc/meminfo").read_text().splitlines()
               if ln.startswith("MemTotal"))
    try:
        from ingest.records.crc import CRC32_IMPLEMENTATION as IMPLEMENTATION
    except ImportError:   # a reference tree from before the 0.7 formats moved to ingest/records
        from ingest.broker.crc import IMPLEMENTATION

    return (f"{os.cpu_count()} CPUs ({model}), {mem / 1e6:.1f} GB RAM, Linux {platform.release()}, "
            f"Python {platform.python_version()}, CRC-32 by {IMPLEMENTATION}")


def proc_cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def loopback_limit(nbytes: int) -> float:
    """Seconds for the same bytes through raw loopback TCP (bench/limits.py)."""
    # imported here: a worker of the previous code runs this file with that tree, not REPO, on sys.path
    from bench.limits import loopback_seconds
    return loopback_seconds(nbytes)


def extract(commit: str, into: str) -> str | None:
    """The ``ingest`` package of ``commit`` under ``into`` (git archive), or None when git cannot."""
    archive = subprocess.run(["git", "-C", str(REPO), "archive", "--format=tar", commit, "ingest"],
                             capture_output=True)
    if archive.returncode:
        print(f"previous code {commit}: git archive failed ({archive.stderr.decode().strip()}); row skipped")
        return None
    subprocess.run(["tar", "-x", "-C", into], input=archive.stdout, check=True)
    return into


def run_worker(mode: str, broker, topic: str, count: int, code: str | None) -> dict:
    env = dict(os.environ)
    if code:
        env["BENCH_CONSUMER_CODE"] = code
        env["PYTHONPATH"] = code
    before = proc_cpu(broker.pid)
    out = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--worker", mode, "--port",
                          str(broker.port), "--topic", topic, "--count", str(count)],
                         env=env, capture_output=True, text=True, timeout=600)
    if out.returncode:
        raise RuntimeError(f"worker {mode} failed: {out.stderr[-2000:]}")
    res = json.loads(out.stdout.strip().splitlines()[-1])
    res["broker_cpu"] = proc_cpu(broker.pid) - before
    return res


def publish(broker, topic: str, count: int) -> None:
    from ingest.client.producer import Producer
    from ingest.client.simple_consumer import SimpleConsumer

    base = os.urandom(PAYLOAD_SIZE * 64)
    msgs = [base[(i % 64) * PAYLOAD_SIZE:(i % 64 + 1) * PAYLOAD_SIZE] for i in range(50)]
    with Producer({"broker.list": broker.address, "request.required.acks": 1, "batch.size": 50}) as p:
        for i in range(0, count, 50):
            p.send(topic, msgs[:min(50, count - i)])
        assert p.stats["failed"] == 0, p.stats
    with SimpleConsumer(broker.host, broker.port) as c:
        deadline = time.monotonic() + 120
        while c.latest_offset(topic, 0) < count * MSG_BYTES:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{topic}: not all {count} messages became visible")
            time.sleep(0.05)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--count", type=int, default=1_000_000, help="messages read by each consumer")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds; the best of each mode is kept")
    ap.add_argument("--previous", default="77fcce0", help="commit of the previous code ('' to skip that row)")
    ap.add_argument("--modes", default=",".join(MODES), help="comma-separated subset of: " + ", ".join(MODES))
    ap.add_argument("--json", help="also write the results to this file")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--port", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--topic", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        print(json.dumps(consume(args.worker, "127.0.0.1", args.port, args.topic, args.count)))
        return 0

    from tests.harness.brokers import BrokerProcess

    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    unknown = [m for m in modes if m not in MODES]
    if unknown:
        ap.error(f"unknown mode(s) {unknown}; allowed: {', '.join(MODES)}")
    load_start = os.getloadavg()
    print(f"machine: {machine()}")
    print(f"load average at start: {load_start[0]:.2f} {load_start[1]:.2f} {load_start[2]:.2f}; "
          f"{args.count:,} messages of {PAYLOAD_SIZE} bytes, pulls of {PULL_BYTES // 1024} KB, "
          f"{args.rounds} interleaved rounds", flush=True)
    best: dict[str, dict] = {}
    limit_s = float("inf")
    with tempfile.TemporaryDirectory(prefix="bench-consumer-") as work:
        previous = None
        if "previous fetch" in modes:
            previous = extract(args.previous, tempfile.mkdtemp(dir=work)) if args.previous else None
            if previous is None:
                modes.remove("previous fetch")
        broker = BrokerProcess(0, os.path.join(work, "broker"), overrides={
            "num.partitions": 1, "log.flush.interval": 10_000, "log.default.flush.interval.ms": 1000,
            "num.threads": 1, "log.file.size": 1 << 30,
            "socket.send.buffer": 1 << 20, "socket.receive.buffer": 1 << 20}).start()
        try:
            publish(broker, "bench", args.count)
            for _ in range(args.rounds):
                limit_s = min(limit_s, loopback_limit(args.count * MSG_BYTES))
                for mode in modes:
                    res = run_worker(mode, broker, "bench", args.count,
                                     previous if mode == "previous fetch" else None)
                    if res["messages"] != args.count or res["payload_bytes"] != args.count * PAYLOAD_SIZE:
                        raise RuntimeError(f"{mode}: read {res['messages']} messages / {res['payload_bytes']} "
                                           f"bytes, expected {args.count} / {args.count * PAYLOAD_SIZE}")
                    if mode not in best or res["seconds"] < best[mode]["seconds"]:
                        best[mode] = res
        finally:
            broker.stop()
    load_end = os.getloadavg()
    limit_rate = args.count / limit_s
    ref = best.get("fetch") or next(iter(best.values()))
    print()
    print("| consumer | messages | seconds | msg/s | MB/s | vs limit | vs `fetch` | client CPU µs/msg "
          "| broker CPU µs/msg |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for mode in modes:
        r = best[mode]
        rate = r["messages"] / r["seconds"]
        print(f"| {mode} | {r['messages']:,} | {r['seconds']:.2f} | {rate:,.0f} | "
              f"{rate * MSG_BYTES / 1e6:,.1f} | {rate / limit_rate:.3f} | "
              f"{ref['seconds'] / r['seconds']:.2f}x | {r['cpu'] / r['messages'] * 1e6:.2f} | "
              f"{r['broker_cpu'] / r['messages'] * 1e6:.2f} |")
    print(f"| physical limit: raw loopback TCP, same bytes | {args.count:,} | {limit_s:.3f} | {limit_rate:,.0f} | "
          f"{limit_rate * MSG_BYTES / 1e6:,.1f} | 1.000 | | | |")
    print()
    print(f"load average at end: {load_end[0]:.2f} {load_end[1]:.2f} {load_end[2]:.2f}")
    if "fetch_batch" in best:
        rate = args.count / best["fetch_batch"]["seconds"]
        print(f"aim: consumer >= 1,000,000 msg/s with CRC validation: fetch_batch {rate:,.0f} msg/s -> "
              f"{'met' if rate >= 1_000_000 else 'NOT met'} in this run")
    if args.json:
        Path(args.json).write_text(json.dumps({
            "machine": machine(), "load_start": load_start, "load_end": load_end, "count": args.count,
            "limit_seconds": limit_s, "results": best}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
