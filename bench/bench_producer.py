"""Producer batch 50 against a real broker process: this code beside the previous code, in one run.

The producer's aim: batch 50 (one PRODUCE request = one set of 50 messages
to one partition), 200-byte messages, a real broker process over loopback,
>= 1,000,000 msg/s. Every experiment runs in a worker subprocess that starts
its own broker (``ingest broker start``, 1 network thread, flush every 10,000
messages or 1 s, as bench/bench_clients.py) and publishes through
``ingest.client.Producer`` (sync, ``batch.size`` 50, one partition):

* batch 50, no ack (PRODUCE), 200-byte payloads;
* batch 50, acked (``request.required.acks=1``: PRODUCE_ACK, one round trip per set);
* batch 50, no ack, payloads of mixed sizes (100-300 bytes, mean 200): sets
  whose messages differ in length take the general paths, not the
  equal-length ones.

The reference is the previous code: ``--reference COMMIT`` (default
``77fcce0``, the code before the produce fast paths) is extracted with ``git archive`` into a
temporary directory and the same worker runs with that tree first on
``PYTHONPATH`` (client AND broker from it); rounds alternate the order. Each
worker checks that the broker's log holds exactly the bytes it sent. Printed
per experiment and code: wall msg/s, the client's CPU µs per message
(``time.process_time``) and the broker's (``/proc/<pid>/stat``), and the
ratios current / reference; also the machine, the load average at start and
end, and the physical limit (raw loopback TCP for the same bytes).

Usage::

    .venv/bin/python bench/bench_producer.py [--count 1000000] [--rounds 2] [--reference 77fcce0|none] [--json]
"""
from __future__ import annotations

import argparse
import json
import os
import random
import socket
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PAYLOAD_SIZE = 200
BATCH = 50
EXPERIMENTS = (
    ("batch 50, no ack, 200 B", 0, "fixed"),
    ("batch 50, acked (acks=1), 200 B", 1, "fixed"),
    ("batch 50, no ack, 100-300 B", 0, "mixed"),
)
AIM = 1_000_000


# --- worker (runs with the tree under test first on sys.path) ------------------------------

def _cpu_of(pid: int) -> tuple[float, float]:
    """(user, system) CPU seconds of process ``pid`` so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


def _payloads(count: int, shape: str) -> list[bytes]:
    rng = random.Random(16)
    base = rng.randbytes(400 * 64)
    if shape == "fixed":
        return [base[(i % 64) * PAYLOAD_SIZE:(i % 64 + 1) * PAYLOAD_SIZE] for i in range(count)]
    return [base[(i % 64) * 400:(i % 64) * 400 + rng.randrange(100, 301)] for i in range(count)]


def worker(count: int) -> dict:
    from ingest.client.producer import Producer
    from ingest.client.simple_consumer import SimpleConsumer
    from tests.harness.brokers import BrokerProcess

    out = {"tree": str(Path(sys.modules["ingest"].__file__).resolve().parents[1]), "rows": []}
    with tempfile.TemporaryDirectory(prefix="bench-producer-") as work:
        broker = BrokerProcess(0, work, overrides={
            "num.partitions": 1, "log.flush.interval": 10_000, "log.default.flush.interval.ms": 1000,
            "log.default.flush.scheduler.interval.ms": 200, "num.threads": 1, "log.file.size": 1 << 30,
            "socket.send.buffer": 1 << 20, "socket.receive.buffer": 1 << 20}).start()
        try:
            for i, (name, acks, shape) in enumerate(EXPERIMENTS):
                msgs = _payloads(count, shape)
                topic = f"t{i}"
                cfg = {"broker.list": broker.address, "request.required.acks": acks, "producer.type": "sync",
                       "batch.size": BATCH}
                with Producer(cfg) as p:
                    p.send(topic, [b"warm-up"])     # connection and topic set up outside the timing
                    c0, b0, t0 = time.process_time(), _cpu_of(broker.pid), time.perf_counter()
                    for j in range(0, count, BATCH):
                        p.send(topic, msgs[j:j + BATCH])
                    wall = time.perf_counter() - t0
                    client = time.process_time() - c0
                    assert p.stats["failed"] == 0, p.stats
                # the broker has every byte once its log end says so (no ack: wait for it)
                expected = len(b"warm-up") + 10 + sum(map(len, msgs)) + 10 * count
                with SimpleConsumer(broker.host, broker.port) as c:
                    deadline = time.monotonic() + 120
                    while (end := c.latest_offset(topic, 0)) < expected and time.monotonic() < deadline:
                        time.sleep(0.02)
                b1 = _cpu_of(broker.pid)
                broker_user, broker_sys = b1[0] - b0[0], b1[1] - b0[1]
                out["rows"].append({"name": name, "count": count, "seconds": wall, "msg_s": count / wall,
                                    "client_us": client / count * 1e6,
                                    "broker_us": (broker_user + broker_sys) / count * 1e6,
                                    "broker_sys_us": broker_sys / count * 1e6,
                                    "log_bytes": end, "expected_bytes": expected})
        finally:
            broker.stop()
    return out


# --- parent ---------------------------------------------------------------------------------

def machine() -> str:
    model = next((ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines()
                  if ln.startswith("model name")), "?")
    mem_kb = int(next(ln.split()[1] for ln in Path("/proc/meminfo").read_text().splitlines()
                      if ln.startswith("MemTotal")))
    return f"nproc {os.cpu_count()}, CPU {model}, RAM {mem_kb / 1024 ** 2:.1f} GiB, Python {sys.version.split()[0]}"


def extract(commit: str, into: Path) -> Path:
    """The tree of ``commit`` (git archive) under ``into``, with the current tests/harness for the broker."""
    archive = subprocess.run(["git", "-C", str(REPO), "archive", "--format=tar", commit],
                             check=True, capture_output=True).stdout
    tree = into / f"ref-{commit}"
    tree.mkdir()
    with tarfile.open(fileobj=__import__("io").BytesIO(archive)) as tar:
        tar.extractall(tree, filter="data")
    return tree


def run_worker(tree: Path, count: int) -> dict:
    env = dict(os.environ, PYTHONPATH=str(tree))
    proc = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--worker", "--count", str(count)],
                          cwd=str(tree), env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"worker for {tree} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def loopback_limit(nbytes: int) -> float:
    """Bytes/s through a raw loopback TCP connection (sendall 256 KB / recv_into 1 MB)."""
    srv = socket.create_server(("127.0.0.1", 0))

    def sink() -> None:
        conn, _ = srv.accept()
        buf = bytearray(1 << 20)
        got = 0
        while got < nbytes:
            k = conn.recv_into(buf)
            if not k:
                break
            got += k
        conn.close()

    t = threading.Thread(target=sink)
    t.start()
    chunk = os.urandom(256 * 1024)
    with socket.create_connection(srv.getsockname()) as s:
        t0 = time.perf_counter()
        sent = 0
        while sent < nbytes:
            n = min(len(chunk), nbytes - sent)
            s.sendall(chunk if n == len(chunk) else chunk[:n])
            sent += n
        t.join()
        elapsed = time.perf_counter() - t0
    srv.close()
    return nbytes / elapsed


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--count", type=int, default=1_000_000, help="messages per experiment")
    ap.add_argument("--rounds", type=int, default=2, help="runs of each code, alternating the order")
    ap.add_argument("--reference", default="77fcce0", help="git commit of the previous code, or 'none'")
    ap.add_argument("--json", action="store_true", help="also print the results as one JSON line")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(args.count)))
        return 0
    load0 = os.getloadavg()
    print(f"machine: {machine()}")
    print(f"load average at start: {load0[0]:.2f} {load0[1]:.2f} {load0[2]:.2f}; "
          f"{args.count:,} messages per experiment, {args.rounds} round(s)", flush=True)
    results: dict[str, list[dict]] = {"current": [], "reference": []}
    with tempfile.TemporaryDirectory(prefix="bench-producer-ref-") as tmp:
        trees = {"current": REPO}
        if args.reference != "none":
            trees["reference"] = extract(args.reference, Path(tmp))
        for r in range(args.rounds):
            order = list(trees) if r % 2 else list(reversed(list(trees)))
            for which in order:
                res = run_worker(trees[which], args.count)
                results[which].append(res)
                print(f"  round {r + 1}, {which}: " + ", ".join(
                    f"{row['msg_s']:,.0f}" for row in res["rows"]) + " msg/s", flush=True)
    limit = loopback_limit(args.count * (PAYLOAD_SIZE + 10))
    load1 = os.getloadavg()
    for which, runs in results.items():
        for res in runs:
            for row in res["rows"]:
                assert row["log_bytes"] == row["expected_bytes"], (which, row)

    def best(which: str, i: int) -> dict | None:
        runs = results[which]
        return max((run["rows"][i] for run in runs), key=lambda row: row["msg_s"]) if runs else None

    print()
    print(f"load average at end: {load1[0]:.2f} {load1[1]:.2f} {load1[2]:.2f}; physical limit (raw loopback "
          f"TCP, same bytes): {limit / 1e6:,.0f} MB/s = {limit / (PAYLOAD_SIZE + 10):,.0f} msg/s")
    print("(best of the rounds by wall rate; CPU µs/msg of that run)")
    print()
    print("| experiment | code | msg/s | client CPU µs/msg | broker CPU µs/msg (of it system) "
          "| msg/s vs reference | client CPU vs reference | broker CPU vs reference |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    summary = []
    for i, (name, _acks, _shape) in enumerate(EXPERIMENTS):
        cur, ref = best("current", i), best("reference", i)
        for which, row in (("reference", ref), ("current", cur)):
            if row is None:
                continue
            ratios = " | | "
            if which == "current" and ref is not None:
                ratios = (f"{row['msg_s'] / ref['msg_s']:.2f}x | {row['client_us'] / ref['client_us']:.2f} "
                          f"| {row['broker_us'] / ref['broker_us']:.2f}")
            print(f"| {name} | {which} | {row['msg_s']:,.0f} | {row['client_us']:.2f} "
                  f"| {row['broker_us']:.2f} ({row['broker_sys_us']:.2f}) "
                  f"| {ratios} |")
        summary.append({"name": name, "current": cur, "reference": ref})
    first = summary[0]["current"]
    print()
    print(f"aim: producer batch 50 >= {AIM:,} msg/s: {first['msg_s']:,.0f} msg/s -> "
          f"{'met' if first['msg_s'] >= AIM else 'not met'} in this run (load {load0[0]:.2f} -> {load1[0]:.2f}); "
          f"CPU per message: client {first['client_us']:.2f} µs, broker {first['broker_us']:.2f} µs "
          f"(both under 1.0 µs is what 1M msg/s needs on two idle cores: "
          f"{'yes' if max(first['client_us'], first['broker_us']) < 1.0 else 'no'})")
    if args.json:
        print(json.dumps({"machine": machine(), "load_start": load0, "load_end": load1, "limit_bytes_s": limit,
                          "results": summary}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
