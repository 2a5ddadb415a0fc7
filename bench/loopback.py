"""The physical limit of the client benchmarks: raw loopback TCP throughput for the same bytes.

One sender thread pushes ``nbytes`` with ``sendall`` of 256 KB chunks; a receiver thread
takes them with ``recv_into`` of 1 MB. Used by bench_clients.py and bench_consumer.py as
the reference measured in the same run.
"""
from __future__ import annotations

import os
import socket
import threading
import time


def loopback_seconds(nbytes: int) -> float:
    """Seconds to push ``nbytes`` through a loopback TCP connection (sendall 256 KB / recv_into 1 MB)."""
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
    return elapsed
