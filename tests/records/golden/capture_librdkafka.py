"""Regenerates the librdkafka golden batches of tests/records/golden/ (not a test, not run by the suite).

A listener that answers just enough of the Kafka protocol for confluent-kafka's producer to send its
record batches (ApiVersions v3, Metadata v1, Produce v3-v7: a broker that advertises Produce v7 and Fetch
v11 so that librdkafka uses zstd and lz4), saves each codec's batches as produced, and stops. The
batches are what librdkafka writes; nothing here checks them (tests/records/test_librdkafka_golden.py does).

Usage: .venv/bin/python tests/records/golden/capture_librdkafka.py 19092 tests/records/golden
"""
import os
import socket
import struct
import sys
import threading

captured = []
PORT = int(sys.argv[1]) if len(sys.argv) > 1 else 19092

def uvarint(n):
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80); n >>= 7
    out.append(n); return bytes(out)

def read_uvarint(b, p):
    v = s = 0
    while True:
        x = b[p]; p += 1; v |= (x & 0x7F) << s
        if x < 0x80: return v, p
        s += 7

def string(s):
    b = s.encode(); return struct.pack(">h", len(b)) + b

def recv_exact(c, n):
    buf = b""
    while len(buf) < n:
        d = c.recv(n - len(buf))
        if not d: raise EOFError
        buf += d
    return buf

def handle(c):
    try:
        while True:
            size = struct.unpack(">i", recv_exact(c, 4))[0]
            req = recv_exact(c, size)
            key, ver, corr = struct.unpack_from(">hhi", req, 0)
            p = 8
            n = struct.unpack_from(">h", req, p)[0]; p += 2 + max(n, 0)
            if key == 18:  # ApiVersions v3 (flexible): header has tagged fields; answer v3 body, header v0
                apis = [(0, 3, 7), (1, 0, 11), (3, 1, 1), (10, 0, 0), (18, 0, 3)]
                body = struct.pack(">h", 0) + uvarint(len(apis) + 1)
                for k, lo, hi in apis:
                    body += struct.pack(">hhh", k, lo, hi) + b"\x00"
                body += struct.pack(">i", 0) + b"\x00"
                if ver < 3:
                    body = struct.pack(">h", 0) + struct.pack(">i", len(apis)) + b"".join(struct.pack(">hhh", *a) for a in apis)
                    if ver >= 1: body += struct.pack(">i", 0)
            elif key == 3:  # Metadata v1
                cnt = struct.unpack_from(">i", req, p)[0]; p += 4
                topics = []
                for _ in range(max(cnt, 0)):
                    n = struct.unpack_from(">h", req, p)[0]; p += 2
                    topics.append(req[p:p + n].decode()); p += n
                body = struct.pack(">i", 1) + struct.pack(">i", 0) + string("127.0.0.1") + struct.pack(">i", PORT) + struct.pack(">h", -1)
                body += struct.pack(">i", 0)
                body += struct.pack(">i", len(topics))
                for t in topics:
                    body += struct.pack(">h", 0) + string(t) + b"\x00" + struct.pack(">i", 1)
                    body += struct.pack(">hii", 0, 0, 0) + struct.pack(">ii", 1, 0) + struct.pack(">ii", 1, 0)
            elif key == 0:  # Produce v3
                n = struct.unpack_from(">h", req, p)[0]; p += 2 + max(n, 0)
                acks, timeout = struct.unpack_from(">hi", req, p); p += 6
                nt = struct.unpack_from(">i", req, p)[0]; p += 4
                resp_topics = b""
                for _ in range(nt):
                    n = struct.unpack_from(">h", req, p)[0]; p += 2; name = req[p:p + n].decode(); p += n
                    npart = struct.unpack_from(">i", req, p)[0]; p += 4
                    parts = b""
                    for _ in range(npart):
                        idx, rlen = struct.unpack_from(">ii", req, p); p += 8
                        captured.append(req[p:p + rlen]); p += rlen
                        parts += struct.pack(">ihqq", idx, 0, len(captured) * 1000, -1)
                        if ver >= 5:
                            parts += struct.pack(">q", 0)
                    resp_topics += string(name) + struct.pack(">i", npart) + parts
                body = struct.pack(">i", nt) + resp_topics + struct.pack(">i", 0)
                if acks == 0:
                    continue
            else:
                print("unexpected api key", key, ver, file=sys.stderr); return
            resp = struct.pack(">i", corr) + body
            c.sendall(struct.pack(">i", len(resp)) + resp)
    except EOFError:
        pass

def serve(srv):
    while True:
        try:
            c, _ = srv.accept()
        except OSError:
            return
        threading.Thread(target=handle, args=(c,), daemon=True).start()

srv = socket.socket(); srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind(("127.0.0.1", PORT)); srv.listen(8)
threading.Thread(target=serve, args=(srv,), daemon=True).start()

from confluent_kafka import Producer
outdir = sys.argv[2]
os.makedirs(outdir, exist_ok=True)
for codec in ("none", "gzip", "snappy", "lz4", "zstd"):
    start = len(captured)
    p = Producer({"bootstrap.servers": f"127.0.0.1:{PORT}", "compression.type": codec, "linger.ms": 50,
                  "batch.num.messages": 1000, "acks": 1})
    for i in range(300):
        p.produce("golden", value=(b"librdkafka value %d " % i) * (1 + i % 7), key=None if i % 3 == 0 else b"key-%d" % i,
                  headers=[("h", b"v%d" % i)] if i % 2 else None, timestamp=1_700_000_000_000 + i)
    left = p.flush(20)
    print(codec, "left", left, "batches", len(captured) - start, [len(x) for x in captured[start:]])
    with open(os.path.join(outdir, f"librdkafka-{codec}.bin"), "wb") as f:
        f.write(b"".join(captured[start:]))
srv.close()
