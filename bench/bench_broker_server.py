"""What the broker itself costs per request, measured apart from any client.

A real broker process (tests/harness/brokers.py) is driven with pre-encoded
frames written by a plain socket, so the client side costs almost nothing:
PRODUCE of 200-byte messages in batches of 1 and 50 (pipelined, no
acknowledgement, as the paper's producer; batch 50 also with messages of
150-248 bytes, which take the broker's general validation loop), PRODUCE_ACK batch 1 (one round trip
each), and FETCH of ~200 KB pulls (sendfile). For each it prints the wall
throughput and the broker process's own CPU time per message (user + sys from
/proc), which stays meaningful on a loaded machine where wall numbers do not.
The physical limit of the same run: raw loopback TCP for the same bytes.

Usage::

    .venv/bin/python bench/bench_broker_server.py [--count 200000]
"""
from __future__ import annotations

import argparse
import os
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from ingest.wire import protocol as p  # noqa: E402
from ingest.records.message_set import encode_message_set  # noqa: E402
from tests.harness.brokers import BrokerProcess  # noqa: E402

PAYLOAD = b"x" * 200
PULL = 200 * 1024


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def raw_loopback(total: int) -> float:
    """Seconds to push ``total`` bytes through a loopback socket (sendall 256 KB / recv_into 1 MB)."""
    srv = socket.create_server(("127.0.0.1", 0))
    port = srv.getsockname()[1]

    def sink() -> None:
        conn, _ = srv.accept()
        buf = bytearray(1 << 20)
        got = 0
        while got < total:
            n = conn.recv_into(buf)
            if not n:
                break
            got += n
        conn.sendall(b"k")
        conn.close()

    t = threading.Thread(target=sink)
    t.start()
    chunk = b"x" * (256 * 1024)
    with socket.create_connection(("127.0.0.1", port)) as s:
        start = time.perf_counter()
        sent = 0
        while sent < total:
            s.sendall(chunk[: min(len(chunk), total - sent)])
            sent += min(len(chunk), total - sent)
        s.recv(1)
        elapsed = time.perf_counter() - start
    t.join()
    srv.close()
    return elapsed


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--count", type=int, default=200_000, help="messages per scenario")
    args = ap.parse_args()
    n = args.count
    work = Path(tempfile.mkdtemp(prefix="bench-broker-"))
    broker = BrokerProcess(0, work, overrides={"log.flush.interval": 500, "log.default.flush.interval.ms": 1000,
                                               "log.default.flush.scheduler.interval.ms": 200}).start()
    rows = []
    try:
        s = socket.create_connection((broker.host, broker.port))
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

        def barrier() -> None:
            s.sendall(p.MetadataRequest(("bench",)).encode())
            p.recv_response(s)

        mixed = [b"m" * (150 + 2 * i) for i in range(50)]   # 150-248 bytes: sets of unequal lengths
        for batch, payloads, label in ((1, [PAYLOAD], ""), (50, [PAYLOAD] * 50, ""),
                                       (50, mixed, ", 150-248 B")):
            topic = "bench" if not label else "bench-mixed"
            frame = p.ProduceRequest(topic, 0, encode_message_set(payloads)).encode()
            chunk = frame * max(1, 5000 // batch)
            per_chunk = max(1, 5000 // batch) * batch
            c0, t0 = cpu_seconds(broker.pid), time.perf_counter()
            for _ in range(n // per_chunk):
                s.sendall(chunk)
            barrier()
            wall, cpu = time.perf_counter() - t0, cpu_seconds(broker.pid) - c0
            done = (n // per_chunk) * per_chunk
            rows.append((f"PRODUCE batch {batch}{label}", done / wall, cpu * 1e6 / done,
                         len(chunk) * (n // per_chunk) / wall))
        ack = p.ProduceAckRequest("bench", 1, encode_message_set([PAYLOAD])).encode()
        k = min(n, 20_000)
        c0, t0 = cpu_seconds(broker.pid), time.perf_counter()
        for _ in range(k):
            s.sendall(ack)
            p.recv_response(s)
        wall, cpu = time.perf_counter() - t0, cpu_seconds(broker.pid) - c0
        rows.append(("PRODUCE_ACK batch 1 (round trips)", k / wall, cpu * 1e6 / k, len(ack) * k / wall))
        time.sleep(1.5)   # let the flusher expose the tail
        s.sendall(p.OffsetsRequest("bench", 0, p.LATEST_TIME, 1).encode())
        end = p.OffsetsResponse.decode(p.recv_response(s)).offsets[0]
        msg_size = len(encode_message_set([PAYLOAD]))
        c0, t0 = cpu_seconds(broker.pid), time.perf_counter()
        offset = 0
        from ingest.records.message_set import valid_prefix
        while offset < end:
            s.sendall(p.FetchRequest("bench", 0, offset, PULL).encode())
            data = p.recv_response(s)
            offset += valid_prefix(memoryview(data)[2:])
        wall, cpu = time.perf_counter() - t0, cpu_seconds(broker.pid) - c0
        msgs = end // msg_size
        rows.append((f"FETCH {PULL // 1024} KB pulls", msgs / wall, cpu * 1e6 / msgs, end / wall))
        s.close()
        limit_bytes = end
        limit = limit_bytes / raw_loopback(limit_bytes)
    finally:
        broker.stop()
    print(f"broker server, {n:,} messages of {len(PAYLOAD)} bytes, loopback, one connection")
    print(f"{'scenario':36} {'wall msg/s':>12} {'broker CPU us/msg':>18} {'msg/s per broker core':>22} {'MB/s':>8} {'of limit':>9}")
    for name, rate, us, bps in rows:
        print(f"{name:36} {rate:12,.0f} {us:18.2f} {1e6 / us:22,.0f} {bps / 1e6:8.1f} {bps / limit:9.1%}")
    print(f"physical limit (raw loopback socket, same bytes): {limit / 1e6:,.0f} MB/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
